//! Upgrade in place, and back: the previous release (the chart and images of the commit tagged
//! v0.1.0, built once by `images/previous-release.sh`) is installed and leads two live groups, a
//! Readiness group of the web app and a Heartbeat group whose pods run the previous release's
//! agent; `helm upgrade` to the working tree's chart and images, then `helm rollback` to the
//! previous release. Across each: no epoch changes, no pod gains or loses the leader label or its
//! epoch (a watch of every pod state), the Heartbeat leader's agent keeps renewing, and the first
//! handover right after the new operator is active takes no longer than the one under the
//! previous release (a deletion of the web leader, to the next leader settled).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::{EPOCH_ANNOTATION, lease_name_for};
use leadergroup_testenv::pods::is_leader;
use leadergroup_testenv::{Settled, run_ok, run_tool, settled, wait_until};

use crate::agents::heartbeat_group;
use crate::chart::uninstall;
use crate::cluster::{
    APP, App, CONVERGE, Cluster, PODS, PodLog, RELEASE, RELEASE_NS, is_ready, repo_root,
};

/// The previous release's version: its chart's, its images' tag.
const PREVIOUS: &str = "0.1.0";
const BEAT: &str = "beat";
const BEAT_LEASE_SECONDS: i32 = 6;
/// The web group's Lease (`App::start`'s leaseDurationSeconds).
const WEB_LEASE: Duration = Duration::from_secs(15);
/// How long the groups are watched after the first handover: past a Lease of the web group, so
/// that an operator that would take a group over once its Lease ran out has.
const WATCHED: Duration = Duration::from_secs(20);

/// The previous release's folder (chart package, operator.tar, agent.tar); `make e2e` builds it.
fn previous_release() -> PathBuf {
    let out = std::process::Command::new(repo_root().join("images/previous-release.sh"))
        .env("LEADERGROUP_NO_BUILD", "1")
        .output()
        .expect("images/previous-release.sh runs");
    assert!(
        out.status.success(),
        "the previous release is not built (images/previous-release.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Imports the previous release's images into every node's containerd.
async fn import_images(c: &Cluster, release: &std::path::Path) {
    let nodes = Api::<Node>::all(c.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    for node in nodes.items {
        let socket = c.containerd_socket(&node.name_any());
        for archive in ["operator.tar", "agent.tar"] {
            let mut import = std::process::Command::new("ctr");
            import
                .arg("--address")
                .arg(&socket)
                .args(["--namespace", "k8s.io", "images", "import"])
                .arg(release.join(archive));
            run_ok(import).await;
        }
    }
}

/// Waits until every operator pod runs the image of `version`, two are Ready and one is active.
async fn wait_operator_at(c: &Cluster, version: &str) {
    let image = format!("leadergroup-operator:{version}");
    wait_until(&format!("the operator at {version}"), PODS, || async {
        let pods = c.operator_pods().await;
        let at = |p: &Pod| {
            p.spec
                .as_ref()
                .is_some_and(|s| s.containers[0].image.as_deref() == Some(&image))
                && p.metadata.deletion_timestamp.is_none()
        };
        let done = pods.len() == 2 && pods.iter().all(|p| at(p) && is_ready(p));
        Ok::<_, String>(done.then_some(()))
    })
    .await
    .unwrap();
    c.wait_operator_active(None).await;
}

/// The leaders of both groups, settled.
async fn leaders(c: &Cluster, ns: &str) -> [Settled; 2] {
    let mut out = Vec::new();
    for group in [APP, BEAT] {
        out.push(
            wait_until(&format!("{group} settled"), CONVERGE, || async {
                Ok::<_, String>(
                    settled(&c.client, ns, group)
                        .await
                        .ok()
                        .and_then(Result::ok),
                )
            })
            .await
            .unwrap(),
        );
    }
    [out.remove(0), out.remove(0)]
}

/// Whether the Heartbeat group's Lease is renewed (by the leader's agent: the operator does not
/// renew a Heartbeat Lease) within two Lease durations, still naming `leader`.
async fn renewed(leases: &Api<Lease>, leader: &str) {
    let renew_time = |l: &Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.renew_time.clone())
            .map(|t| t.0)
    };
    let first = leases.get(&lease_name_for(BEAT)).await.unwrap();
    let since = renew_time(&first);
    wait_until(
        &format!("{leader}'s agent renewing"),
        Duration::from_secs(2 * BEAT_LEASE_SECONDS as u64),
        || async {
            let l = leases
                .get(&lease_name_for(BEAT))
                .await
                .map_err(|e| e.to_string())?;
            let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
            assert_eq!(holder.as_deref(), Some(leader), "the Lease's holder moved");
            Ok::<_, String>((renew_time(&l) > since).then_some(()))
        },
    )
    .await
    .unwrap();
}

/// Checks that nothing moved since `before` while `log` watched: the same leaders and epochs,
/// and no pod's leader label or epoch annotation changed in any state the watch delivered.
async fn assert_steady(c: &Cluster, app: &App, log: &PodLog, before: &[Settled; 2], what: &str) {
    let now = leaders(c, &app.ns.name).await;
    assert_eq!(&now, before, "{what}: leaders or epochs changed");
    log.caught_up().await;
    for pod in app.list().await {
        let marks: std::collections::BTreeSet<_> = log
            .states_of(&pod.name_any())
            .iter()
            .map(|(_, p)| (is_leader(p), p.annotations().get(EPOCH_ANNOTATION).cloned()))
            .collect();
        assert_eq!(
            marks.len(),
            1,
            "{what}: {}'s leader label or epoch changed: {marks:?}",
            pod.name_any()
        );
    }
    let leases: Api<Lease> = app.ns.api();
    renewed(&leases, &before[1].leader).await;
}

/// Deletes the web group's leader and returns the next leader and how long it took to settle.
async fn handover(app: &App, from: &Settled) -> (Settled, Duration) {
    let started = Instant::now();
    app.pods
        .delete(&from.leader, &DeleteParams::default())
        .await
        .unwrap();
    let next = app
        .wait_handover(
            from,
            &["LeaderTerminating", "LeaderDeleted", "LeaderNotReady"],
            CONVERGE,
        )
        .await;
    (next, started.elapsed())
}

/// `helm upgrade` or `helm rollback` to `version`, watched: nothing moves until the new operator
/// is active; then the first handover, timed, and nothing else moves for [`WATCHED`]. Returns
/// the handover's time.
async fn change_release(
    c: &Cluster,
    app: &App,
    command: std::process::Command,
    version: &str,
    what: &str,
) -> Duration {
    let before = leaders(c, &app.ns.name).await;
    let log = PodLog::start(app.pods.clone()).await;
    let started = Instant::now();
    run_ok(command).await;
    wait_operator_at(c, version).await;
    println!(
        "{what}: operator {version} active after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_steady(c, app, &log, &before, what).await;

    let (next, took) = handover(app, &before[0]).await;
    println!(
        "{what}: first handover {:.2} s ({} -> {}, epoch {})",
        took.as_secs_f64(),
        before[0].leader,
        next.leader,
        next.epoch
    );
    let after = [next, before[1].clone()];
    let log = PodLog::start(app.pods.clone()).await;
    tokio::time::sleep(WATCHED).await;
    assert_steady(c, app, &log, &after, &format!("{what}, after the handover")).await;
    took
}

#[tokio::test]
async fn upgrade_from_the_previous_release_and_roll_back_keeps_leaders_and_epochs() {
    let c = Cluster::get().await;
    let release = previous_release();
    import_images(&c, &release).await;
    let mut status = c.cp.helm();
    status.args(["status", RELEASE, "--namespace", RELEASE_NS]);
    if run_tool(status).await.0 {
        uninstall(&c).await;
    }

    let mut install = c.cp.helm();
    install
        .args(["install", RELEASE])
        .arg(release.join(format!("leadergroup-operator-{PREVIOUS}.tgz")))
        .args(["--namespace", RELEASE_NS, "--create-namespace"]);
    run_ok(install).await;
    wait_operator_at(&c, PREVIOUS).await;

    let app = App::start(&c, "e2e-upgrade", 2, 0).await;
    let _ns_guard = c.namespace_guard(&app.ns.name);
    heartbeat_group(
        &app.ns,
        BEAT,
        &["beat-0", "beat-1"],
        &format!("leadergroup-agent:{PREVIOUS}"),
        BEAT_LEASE_SECONDS,
        &[],
    )
    .await;
    let first = leaders(&c, &app.ns.name).await;
    let (_, usual) = handover(&app, &first[0]).await;
    println!("previous release: handover {:.2} s", usual.as_secs_f64());

    let mut upgrade = c.cp.helm();
    upgrade
        .args(["upgrade", RELEASE])
        .arg(repo_root().join("charts/leadergroup-operator"))
        .args(["--namespace", RELEASE_NS]);
    let upgraded =
        change_release(&c, &app, upgrade, env!("CARGO_PKG_VERSION"), "helm upgrade").await;

    let mut rollback = c.cp.helm();
    rollback.args(["rollback", RELEASE, "1", "--namespace", RELEASE_NS]);
    let rolled_back = change_release(&c, &app, rollback, PREVIOUS, "helm rollback").await;

    // "Usual" on two shared cores: the handover under the previous release, twice, for the load
    // of a rollout that has just ended. Plus one Lease of the web group: a 0.1.0 replica stopped
    // by the rollout does not name itself when it releases the operator Lease (0.2.0's
    // leadergroup.io/released-by), so the new active replica leaves the groups that replica
    // arbitrated alone until their Leases run out (CHANGELOG.md, "Upgrading"); a handover needed
    // in that window waits for it, in both directions. The figures are printed above.
    let bound = usual * 2 + WEB_LEASE;
    for (what, took) in [("upgrade", upgraded), ("rollback", rolled_back)] {
        assert!(
            took <= bound,
            "the first handover after the {what} took {:.2} s, the usual {:.2} s",
            took.as_secs_f64(),
            usual.as_secs_f64()
        );
    }
    uninstall(&c).await;
}
