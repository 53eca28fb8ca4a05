//! Operator HA with `--leader-elect`: two replicas, one active and one standby (their /readyz says
//! which); the standby takes over when the active one dies (SIGKILL: once the operator Lease runs
//! out) or shuts down (SIGTERM: at once, it releases the Lease); the groups keep converging under
//! the new replica; never are two replicas active at once, and never are two pods leaders.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leadergroup_testenv::ActiveMonitor;

use crate::common::{CONVERGE, InvariantWatcher, Operator, World, group, lease, proxied_admin};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use leadergroup_operator::actions::lease::{compare_and_swap, read};
use leadergroup_operator::crd::ARBITER_ANNOTATION;
use leadergroup_operator::ha::DEFAULT_LEASE_NAME;
use leadergroup_operator::lease_record::LeaseRecord;
use leadergroup_testenv::{control_plane, wait_until};
use serde_json::json;

/// The groups' Lease duration.
const GROUP_LEASE_SECONDS: i32 = 3;
/// Scheduling and API latency on a small shared machine, on top of a Lease duration.
const SLACK: Duration = Duration::from_secs(7);

struct Pair {
    w: World,
    a: Operator,
    b: Operator,
    watch: InvariantWatcher,
    monitor: ActiveMonitor,
    first_leader: String,
}

/// Three Ready pods, replica a active, replica b standby, a group with a leader at epoch 1.
async fn pair(prefix: &str, operator_lease_seconds: &str) -> Pair {
    pair_with(prefix, operator_lease_seconds, None).await
}

/// As [`pair`], replica a talking to the API server through `a_kubeconfig` if given.
async fn pair_with(
    prefix: &str,
    operator_lease_seconds: &str,
    a_kubeconfig: Option<&std::path::Path>,
) -> Pair {
    let cp = control_plane().await.unwrap();
    let w = World::new(prefix).await;
    w.ordered_ready_pods("app", 3, "ha").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let args = [
        "--leader-elect",
        "--leader-elect-namespace",
        &w.ns.name,
        "--leader-elect-lease-duration",
        operator_lease_seconds,
    ];
    let a = match a_kubeconfig {
        Some(kubeconfig) => {
            Operator::start_with_kubeconfig(kubeconfig, &w.ns.name, "op-a", &args).await
        }
        None => Operator::start(cp, &w.ns.name, "op-a", &args).await,
    };
    a.wait_role("active").await;
    let b = Operator::start(cp, &w.ns.name, "op-b", &args).await;
    b.wait_role("standby").await;
    let addr = |op: &Operator| Arc::new(std::sync::Mutex::new(op.http));
    let monitor = ActiveMonitor::start(vec![
        (a.identity.clone(), addr(&a)),
        (b.identity.clone(), addr(&b)),
    ]);

    let mut g = group("g", "ha");
    g.spec.lease_duration_seconds = GROUP_LEASE_SECONDS;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    let first = w
        .wait_settled("g", "a leader at epoch 1", |s| s.epoch == 1)
        .await;
    assert_eq!(
        arbiter(&w).await.as_deref(),
        Some("op-a"),
        "the active replica elected"
    );
    // The standby stays standby while the active one renews (3 renewals at least).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(b.role().await.as_deref(), Some("standby"), "{}", b.logs());
    Pair {
        w,
        a,
        b,
        watch,
        monitor,
        first_leader: first.leader,
    }
}

async fn arbiter(w: &World) -> Option<String> {
    lease(&w.ns.client, &w.ns.name, "g")
        .await?
        .annotations()
        .get(ARBITER_ANNOTATION)
        .cloned()
}

async fn operator_lease(w: &World) -> LeaseRecord {
    let l = Api::<Lease>::namespaced(w.ns.client.clone(), &w.ns.name)
        .get(DEFAULT_LEASE_NAME)
        .await
        .unwrap();
    LeaseRecord::from_lease(&l)
}

/// Waits (up to `bound`) until `op` says active; returns how long that took.
async fn wait_active(op: &Operator, bound: Duration) -> Duration {
    let started = Instant::now();
    wait_until(&format!("{} takes over", op.identity), bound, || async {
        Ok::<_, String>((op.role().await.as_deref() == Some("active")).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    started.elapsed()
}

/// After the takeover the group still hands over: the new replica becomes its arbiter once the
/// dead one's Lease ran out, and a deleted leader is replaced at epoch 2.
async fn handover_under(p: &Pair, identity: &str) {
    p.w.kubelet.delete_now(&p.first_leader).await.unwrap();
    let second =
        p.w.wait_settled("g", "a new leader at epoch 2 under the new replica", |s| {
            s.epoch == 2
        })
        .await;
    assert_ne!(second.leader, p.first_leader);
    assert_eq!(arbiter(&p.w).await.as_deref(), Some(identity));
}

#[tokio::test]
async fn sigkill_of_the_active_replica_the_standby_takes_over_within_the_groups_lease() {
    // The flag allows 15 s; the operator Lease lasts as long as the group's (3 s), so that the
    // active replica's loss costs no more than the leader's.
    let mut p = pair("ha-kill", "15").await;
    // From its next renewal (a third of 15 s) on.
    wait_until(
        "the operator Lease at the group's 3 s",
        CONVERGE,
        || async {
            let held = operator_lease(&p.w).await;
            Ok::<_, String>((held.duration_seconds == GROUP_LEASE_SECONDS).then_some(()))
        },
    )
    .await
    .unwrap();
    p.a.kill().await;
    let took = wait_active(&p.b, CONVERGE).await;
    assert!(
        took <= Duration::from_secs(3) + SLACK,
        "standby took {took:?} to take over an operator Lease of the group's 3 s\n{}",
        p.b.logs()
    );
    assert_eq!(operator_lease(&p.w).await.holder.as_deref(), Some("op-b"));
    handover_under(&p, "op-b").await;
    p.monitor.assert_never_two_active();
    let leaders = p.watch.assert_held().await;
    assert_eq!(
        leaders.iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        vec![1, 2],
        "{leaders:?}"
    );
}

#[tokio::test]
async fn a_standby_that_takes_over_a_run_out_hold_takes_over_the_groups_at_once() {
    // Groups whose Leases outlast the operator Lease many times over: had the new replica left
    // them to the dead one until they ran out, the handover below would wait for most of them.
    let group_lease = Duration::from_secs(30);
    let mut p = pair("ha-runout", "3").await;
    p.w.patch_spec("g", json!({"leaseDurationSeconds": group_lease.as_secs()}))
        .await;
    wait_until("the group's Lease at 30 s", CONVERGE, || async {
        let record = lease(&p.w.ns.client, &p.w.ns.name, "g")
            .await
            .map(|l| LeaseRecord::from_lease(&l));
        Ok::<_, String>(
            record
                .filter(|r| u64::try_from(r.duration_seconds) == Ok(group_lease.as_secs()))
                .map(|_| ()),
        )
    })
    .await
    .unwrap();

    let killed = Instant::now();
    p.a.kill().await;
    wait_active(&p.b, CONVERGE).await;
    handover_under(&p, "op-b").await;
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(3) + SLACK,
        "the handover after the takeover ended {took:?} after the kill: the new replica waited for the dead one's group Lease ({group_lease:?})\n{}",
        p.b.logs()
    );
    p.monitor.assert_never_two_active();
    p.watch.assert_held().await;
}

#[tokio::test]
async fn sigterm_of_the_active_replica_releases_the_lease_and_the_standby_takes_over_at_once() {
    // A long operator Lease: only the release can explain a takeover well before it runs out.
    let lease_seconds: i64 = 20;
    let mut p = pair("ha-term", &lease_seconds.to_string()).await;
    // And a longer group Lease, or the operator Lease would be as short as the group's.
    p.w.patch_spec("g", json!({"leaseDurationSeconds": 60}))
        .await;
    wait_until("the operator Lease at 20 s", CONVERGE, || async {
        let held = operator_lease(&p.w).await;
        Ok::<_, String>((i64::from(held.duration_seconds) == lease_seconds).then_some(()))
    })
    .await
    .unwrap();
    let held = operator_lease(&p.w).await;
    let would_expire = held.renew_time.unwrap() + jiff::SignedDuration::from_secs(lease_seconds);
    assert!(p.a.terminate().await, "SIGTERM: clean exit\n{}", p.a.logs());
    // Released: no longer op-a's (the standby may already have taken it).
    let released = operator_lease(&p.w).await;
    assert_ne!(
        released.holder.as_deref(),
        Some("op-a"),
        "released on shutdown\n{}",
        p.a.logs()
    );
    wait_active(&p.b, CONVERGE).await;
    let now = jiff::Timestamp::now();
    assert!(
        now < would_expire,
        "the standby took over at {now}, not before the unreleased Lease would have expired ({would_expire})"
    );
    assert_eq!(operator_lease(&p.w).await.holder.as_deref(), Some("op-b"));
    handover_under(&p, "op-b").await;
    p.monitor.assert_never_two_active();
    p.watch.assert_held().await;
}

#[tokio::test]
async fn an_active_replica_cut_off_from_the_api_server_stands_down_before_the_standby_takes_over() {
    let cp = control_plane().await.unwrap();
    let (partition, kubeconfig) = proxied_admin(cp).await;
    let p = pair_with("ha-cut", "3", Some(&kubeconfig)).await;

    // Its requests now hang (no error, no timeout): only its own renew deadline can stop it.
    partition.cut();
    p.a.wait_role("standby").await;
    wait_active(&p.b, CONVERGE).await;
    handover_under(&p, "op-b").await;
    p.monitor.assert_never_two_active();
    p.watch.assert_held().await;

    // Healed, it finds the Lease held by b and stays standby.
    partition.release();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        p.a.role().await.as_deref(),
        Some("standby"),
        "{}",
        p.a.logs()
    );
    p.monitor.assert_never_two_active();
    // Whatever it had in flight when cut off landed late and changed nothing (CAS on the Lease).
    p.watch.assert_held().await;
    assert_eq!(p.w.settled("g").await.unwrap().map(|s| s.epoch), Some(2));
}

#[tokio::test]
async fn readyz_is_503_until_the_watches_have_listed_while_healthz_is_200() {
    let cp = control_plane().await.unwrap();
    let w = World::new("readyz").await;
    let (partition, kubeconfig) = proxied_admin(cp).await;
    partition.cut();
    let args = [
        "--leader-elect",
        "--leader-elect-namespace",
        &w.ns.name,
        "--leader-elect-lease-duration",
        "3",
    ];
    let op = Operator::start_with_kubeconfig(&kubeconfig, &w.ns.name, "op-r", &args).await;

    // Alive, but its lists cannot complete: not ready, for as long as that lasts.
    wait_until("/healthz answers 200", CONVERGE, || async {
        Ok::<_, String>(
            op.get("/healthz")
                .await
                .filter(|(c, _)| *c == 200)
                .map(|_| ()),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    for _ in 0..10 {
        let (code, body) = op.get("/readyz").await.unwrap();
        assert_eq!(code, 503, "{body}");
        assert!(body.starts_with("not ready"), "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    partition.release();
    op.wait_role("active").await;
}

/// The operator's own Lease may not take a group Lease's name (`leadergroup-<group>`): the
/// operator refuses it at start, naming the flag, before it connects to anything.
#[test]
fn a_group_lease_name_is_refused_for_the_operator_lease() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leadergroup-operator"))
        .args([
            "--leader-elect",
            "--leader-elect-lease-name",
            "leadergroup-operator",
        ])
        .env_remove("LEADER_ELECT_LEASE_NAME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--leader-elect-lease-name"), "{stderr}");
}

/// The operator Lease is written by a replica "ghost" whose clock is an hour off this machine's:
/// a standby times the Lease from when it saw it change, on its own clock, never from the
/// `renewTime` the holder's clock wrote. While the ghost renews with its clock an hour behind, the
/// standby stays standby (its renewTime says long expired); once the ghost stops, its last
/// renewTime an hour ahead, the standby takes over a Lease duration later (not an hour).
#[tokio::test]
async fn the_operator_lease_is_timed_on_the_standbys_clock_not_the_holders_renew_time() {
    const SECONDS: i32 = 4;
    let cp = control_plane().await.unwrap();
    let w = World::new("ha-skew").await;
    let api = Api::<Lease>::namespaced(w.ns.client.clone(), &w.ns.name);
    let renew = |skew: jiff::SignedDuration| {
        let api = api.clone();
        async move {
            let now = jiff::Timestamp::now() + skew;
            let ghost = LeaseRecord {
                holder: Some("ghost".into()),
                holder_uid: None,
                epoch: 1,
                duration_seconds: SECONDS,
                longest_seconds: None,
                acquire_time: Some(now),
                renew_time: Some(now),
                arbiter: None,
                heartbeat: false,
                released_by: None,
                lapsed: None,
                acknowledged: false,
                acknowledged_by: Vec::new(),
                predecessor: None,
            };
            let current = read(&api, DEFAULT_LEASE_NAME).await.unwrap();
            compare_and_swap(
                &api,
                DEFAULT_LEASE_NAME,
                current.as_ref(),
                &ghost,
                None,
                None,
            )
            .await
            .unwrap();
        }
    };
    let behind = -jiff::SignedDuration::from_hours(1);
    renew(behind).await;
    let args = [
        "--leader-elect",
        "--leader-elect-namespace",
        &w.ns.name,
        "--leader-elect-lease-duration",
        "4",
    ];
    let op = Operator::start(cp, &w.ns.name, "op-a", &args).await;
    // Two Lease durations of the ghost's renewals, every second.
    for _ in 0..8 {
        renew(behind).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            op.role().await.as_deref(),
            Some("standby"),
            "took over a Lease the ghost renews\n{}",
            op.logs()
        );
    }
    // The ghost stops; its clock had jumped an hour ahead for its last renewal.
    renew(jiff::SignedDuration::from_hours(1)).await;
    let took = wait_active(&op, Duration::from_secs(4) + SLACK).await;
    eprintln!(
        "operator lease skew: taken over {took:?} after the ghost's last renewal (Lease 4 s)"
    );
    assert_eq!(operator_lease(&w).await.holder.as_deref(), Some("op-a"));
}
