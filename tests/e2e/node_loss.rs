//! A lost node: node 1 cut like a machine that fell off the network
//! (`realcluster.sh cut-node`: its kubelet and containerd stop, and its pods lose every packet to
//! and from the API server and the other node while their containers run on), and three
//! failovers measured in that one cut, each from a leader on node 1 to its peer on node 2:
//!
//! - (a) a LeaderGroup in Readiness mode (the default) of two web app pods: the operator hands
//!   over once the node controller has marked the leader NotReady, after its
//!   `--node-monitor-grace-period`;
//! - (b) a LeaderGroup in Heartbeat mode, `leaseDurationSeconds: 5`, of two pods with the
//!   leadergroup-agent sidecar of `examples/ledger/manifests/sidecar` (the example's pod template,
//!   RBAC and group as a user applies them, the ledger container replaced by the web app): the
//!   leader's agent renews the Lease, and the operator hands over once the renewals stop for
//!   5 s; asserted within 5 + 1 s of the cut, and the cut-off agent's `role` file read `unknown`
//!   before the new leader's read `leader`;
//! - (c) two client-go `tools/leaderelection` candidates (`bench/peers/client-go`'s image) on one
//!   Lease: lease duration 5 s as in (b), renew deadline 3.3 s (two thirds, as client-go's 10 of
//!   15 s), retry period 1 s.
//!
//! The pods are bound to their node (`nodeName`), node 1's created first: the succession is
//! oldest first, and the first client-go candidate takes the free Lease. Every time is taken from
//! the wall clock of the cut (printed by `cut-node`), on the one clock of this machine: to the
//! watch event that shows the new leader's label (a, b), to the Lease naming the node-2 candidate
//! (c), and to the `role` files' mtimes (b). The active operator replica is moved off node 1 first:
//! what is measured is the groups' failover; `operator_node_loss.rs` loses the node with the
//! active replica on it.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::{LIVENESS_ANNOTATION, LeaderGroup, Liveness, lease_name_for};
use leadergroup_operator::election::LATE_STEP_DOWN;
use leadergroup_testenv::histories::{Group, Histories, Member, Report, Span, unix_ms};
use leadergroup_testenv::{
    FileHistory, InvariantWatcher, RealCluster, TestNamespace, run_ok, wait_for_object, wait_until,
};
use serde_json::json;

use crate::cluster::{
    APP, CONVERGE, Cluster, PODS, PodLog, WatchLog, create, is_ready, pod_summary, repo_root,
    webapp_container,
};

/// The node lost, where every leader sits, and the one its peers run on.
pub(crate) const CUT: &str = "lg-node-1";
pub(crate) const PEER: &str = "lg-node-2";

/// The Heartbeat group: the example's (`leadergroup.yaml`), whose RBAC names its Lease.
pub(crate) const HEARTBEAT: &str = "ledger";
pub(crate) const HEARTBEAT_LEASE_SECONDS: u64 = 5;

/// The client-go candidates, their Lease (`<prefix>-0`) and their timing.
const CLIENT_GO: &str = "client-go";
const CLIENT_GO_IMAGE: &str = "localhost/leadergroup/client-go-peer:1";
const CLIENT_GO_TIMING: &str = "lease 5 s, renew deadline 3.3 s, retry period 1 s";
const CLIENT_GO_ARGS: [&str; 8] = [
    "--lease-prefix",
    CLIENT_GO,
    "--lease-duration",
    "5s",
    "--renew-deadline",
    "3300ms",
    "--retry-period",
    "1s",
];

/// `<group>-<node number>`: the pod of `group` bound to `node`.
pub(crate) fn pod_name(group: &str, node: &str) -> String {
    format!("{group}-{}", Cluster::node_number(node))
}

pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// `t - from` in seconds, negative when `t` is earlier.
fn signed_secs(t: Instant, from: Instant) -> String {
    match t.checked_duration_since(from) {
        Some(d) => format!("+{}", secs(d)),
        None => format!("-{}", secs(from - t)),
    }
}

/// `b - a`, zero when b is earlier.
pub(crate) fn since(a: SystemTime, b: SystemTime) -> Duration {
    b.duration_since(a).unwrap_or_default()
}

/// The instant of wall-clock time `t` (in the past), for comparing it with the watches' instants.
pub(crate) fn instant_of(t: SystemTime) -> Instant {
    Instant::now() - since(t, SystemTime::now())
}

/// When the test's own watch saw each renewal of `lease` by `holder` (a moved `renewTime` while it
/// names `holder`): no later than the operator's watch saw it, give or take the two watches' lag.
fn renewals_seen(log: &WatchLog<Lease>, lease: &str, holder: &str) -> Vec<Instant> {
    let mut seen = Vec::new();
    let mut last_renew_time = None;
    for (at, l) in log.states_of(lease) {
        let Some(spec) = l.spec else { continue };
        if spec.holder_identity.as_deref() != Some(holder) {
            continue;
        }
        let renew_time = spec.renew_time.map(|t| t.0);
        if last_renew_time.is_some() && renew_time != last_renew_time {
            seen.push(at);
        }
        last_renew_time = renew_time;
    }
    seen
}

/// The example's Deployment's pod template (`examples/ledger/manifests/sidecar`).
pub(crate) fn example_pod_template() -> serde_json::Value {
    let path = repo_root().join("examples/ledger/manifests/sidecar/deployment.yaml");
    let deployment: Deployment =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::to_value(deployment.spec.template).unwrap()
}

/// The name of the volume the example's agent writes its files to.
pub(crate) fn agent_volume(template: &serde_json::Value) -> String {
    template["spec"]["initContainers"][0]["volumeMounts"][0]["name"]
        .as_str()
        .expect("the agent's volume")
        .to_owned()
}

/// The Heartbeat group's pod bound to `node`: the example's pod template, the web app as its
/// application.
pub(crate) fn heartbeat_pod(template: &serde_json::Value, node: &str) -> serde_json::Value {
    let mut pod = template.clone();
    pod["metadata"]["name"] = json!(pod_name(HEARTBEAT, node));
    pod["spec"]["nodeName"] = json!(node);
    pod["spec"]["containers"] = json!([webapp_container(0)]);
    pod
}

/// The example's RBAC and group (`examples/ledger/manifests/sidecar`) applied in `ns` as a user
/// applies them, the group in Heartbeat mode with a Lease of [`HEARTBEAT_LEASE_SECONDS`].
pub(crate) async fn create_heartbeat_group(c: &Cluster, ns: &TestNamespace) {
    let manifests = repo_root().join("examples/ledger/manifests/sidecar");
    let mut apply = c.cp.kubectl();
    apply
        .args(["--namespace", &ns.name, "apply", "-f"])
        .arg(manifests.join("rbac.yaml"));
    run_ok(apply).await;
    let mut group: LeaderGroup = serde_yaml_ng::from_str(
        &std::fs::read_to_string(manifests.join("leadergroup.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(group.name_any(), HEARTBEAT);
    group.spec.lease_duration_seconds = HEARTBEAT_LEASE_SECONDS as i32;
    group.spec.liveness = Liveness::Heartbeat;
    let groups: Api<LeaderGroup> = ns.api();
    groups.create(&PostParams::default(), &group).await.unwrap();
}

/// File `file` of the agent of `pod` (in volume `volume`), as its node keeps it.
pub(crate) fn agent_file(c: &Cluster, pod: &Pod, volume: &str, file: &str) -> PathBuf {
    let (node, uid) = (crate::cluster::node_of(pod), pod.uid().unwrap());
    RealCluster::empty_dir(c.dir(), node, &uid, volume)
        .unwrap()
        .join(file)
}

/// Where `files` keeps the `valid-until` file of the agent whose `role` file it keeps under
/// `name`.
pub(crate) fn validity_key(name: &str) -> String {
    format!("{name}/valid-until")
}

/// Checks what the Heartbeat group's applications read, from a second before `from` to now (the
/// `role` file of each of `members` kept under its name in `files`, the `valid-until` file under
/// [`validity_key`]): at no instant did two of them lead. Returns the report.
pub(crate) fn assert_never_two_applications(
    files: &FileHistory,
    members: &[&str],
    from: SystemTime,
) -> Report {
    let member = |name: &&str| {
        Member::from_agent_files(
            name,
            &files.history(name),
            &files.history(&validity_key(name)),
        )
    };
    let histories = Histories {
        groups: vec![Group {
            name: HEARTBEAT.to_owned(),
            members: members.iter().map(member).collect(),
        }],
        fence: Vec::new(),
    };
    let report = histories.check(Span {
        from_ms: unix_ms(from) - 1_000.0,
        to_ms: Some(unix_ms(SystemTime::now())),
    });
    assert_eq!(
        report.app_overlap_ms, 0.0,
        "two applications led at once: {:?}\n{histories:?}",
        report.groups
    );
    report
}

/// The groups' status and the pods, for failure messages.
async fn summary(groups: &Api<LeaderGroup>, pods: &Api<Pod>) -> String {
    let groups: Vec<_> = groups
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|g| (g.name_any(), g.status))
        .collect();
    let pods = pods
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    format!("groups: {groups:?}\npods: {:#?}", pod_summary(&pods))
}

/// Creates node `node`'s three pods: the web app (group [`APP`]); the example's pod, its agent
/// sidecar with the web app in the ledger's place (group [`HEARTBEAT`]); a client-go candidate.
/// Returns them once Ready, in that order.
async fn create_node_pods(
    ns: &TestNamespace,
    groups: &Api<LeaderGroup>,
    template: &serde_json::Value,
    node: &str,
) -> Vec<Pod> {
    let _: Pod = create(
        ns,
        json!({
            "metadata": {"name": pod_name(APP, node), "labels": {"app": APP}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 5,
                     "containers": [webapp_container(0)]},
        }),
    )
    .await;
    let _: Pod = create(ns, heartbeat_pod(template, node)).await;
    let _: Pod = create(
        ns,
        json!({
            "metadata": {"name": pod_name(CLIENT_GO, node), "labels": {"app": CLIENT_GO}},
            "spec": {
                "nodeName": node,
                "serviceAccountName": CLIENT_GO,
                "terminationGracePeriodSeconds": 2,
                "containers": [{
                    "name": "candidate",
                    "image": CLIENT_GO_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": CLIENT_GO_ARGS,
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    ],
                }],
            },
        }),
    )
    .await;
    let pods: Api<Pod> = ns.api();
    let names = [APP, HEARTBEAT, CLIENT_GO].map(|g| pod_name(g, node));
    let ready = wait_until(&format!("the pods on {node} Ready"), PODS, || async {
        let mut ready = Vec::new();
        for name in &names {
            ready.push(pods.get(name).await.map_err(|e| e.to_string())?);
        }
        Ok::<_, String>(ready.iter().all(is_ready).then_some(ready))
    })
    .await;
    match ready {
        Ok(ready) => ready,
        Err(e) => panic!("{e}\n{}", summary(groups, &pods).await),
    }
}

#[tokio::test]
async fn a_lost_node_fails_over_by_readiness_by_heartbeat_and_in_client_go() {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let operator = c.operator_off(CUT).await;
    let grace = c.node_monitor_grace_period();
    let ns = leadergroup_testenv::namespace_in(c.client.clone(), "e2e-node-loss")
        .await
        .unwrap();
    let _ns_guard = c.namespace_guard(&ns.name);
    let pods: Api<Pod> = ns.api();
    let groups: Api<LeaderGroup> = ns.api();
    let leases: Api<Lease> = ns.api();
    let watch = InvariantWatcher::start(&c.client, &ns.name).await;
    let log = PodLog::start(pods.clone()).await;
    let lease_log = WatchLog::start(leases.clone()).await;
    // (a) The Readiness group: the default liveness.
    let _: LeaderGroup = create(
        &ns,
        json!({"metadata": {"name": APP}, "spec": {"selector": {"matchLabels": {"app": APP}}}}),
    )
    .await;
    // (b) The example's RBAC and group, in Heartbeat mode with a 5 s lease.
    create_heartbeat_group(&c, &ns).await;
    // (c) client-go's candidates may create their Lease, and get and update only it.
    let _: ServiceAccount = create(&ns, json!({"metadata": {"name": CLIENT_GO}})).await;
    let _: Role = create(
        &ns,
        json!({
            "metadata": {"name": CLIENT_GO},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": [format!("{CLIENT_GO}-0")], "verbs": ["get", "update"]},
            ],
        }),
    )
    .await;
    let _: RoleBinding = create(
        &ns,
        json!({
            "metadata": {"name": CLIENT_GO},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLIENT_GO},
            "subjects": [{"kind": "ServiceAccount", "name": CLIENT_GO}],
        }),
    )
    .await;

    let template = example_pod_template();
    let agent_volume = agent_volume(&template);
    // The group's leader once it has settled (I2).
    let leader_of = |group: &'static str| {
        let ns = &ns;
        async move {
            leadergroup_testenv::settled(&ns.client, &ns.name, group)
                .await
                .ok()?
                .ok()
                .map(|s| s.leader)
        }
    };
    let holder = |lease: Option<&Lease>| {
        lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone())
    };

    // Node 1's pods first, each the leader of its group.
    let old = create_node_pods(&ns, &groups, &template, CUT).await;
    let firsts = wait_until("node 1's pods leading", PODS, || async {
        let web = leader_of(APP).await;
        let heartbeat = leader_of(HEARTBEAT).await;
        let client_go = holder(
            leases
                .get_opt(&format!("{CLIENT_GO}-0"))
                .await
                .ok()
                .flatten()
                .as_ref(),
        );
        Ok::<_, String>(
            web.zip(heartbeat)
                .zip(client_go)
                .map(|((a, b), c)| [a, b, c]),
        )
    })
    .await;
    let firsts = match firsts {
        Ok(f) => f,
        Err(e) => panic!("{e}\n{}", summary(&groups, &pods).await),
    };
    let expected = [APP, HEARTBEAT, CLIENT_GO].map(|g| pod_name(g, CUT));
    assert_eq!(firsts, expected, "node 1's pods lead");
    // The chart was told the cluster's grace period, so the Readiness group's status says whether
    // two thirds of its Lease (the default 15 s) end before the node controller gives up on a node.
    let step_down_after = Duration::from_secs(15) * 2 / 3;
    let late = groups.get(APP).await.unwrap().status.and_then(|s| {
        s.condition(LATE_STEP_DOWN)
            .map(|c| (c.status.clone(), c.reason.clone()))
    });
    if step_down_after >= grace {
        assert_eq!(
            late,
            Some(("True".to_owned(), "LeaseOutlastsNodeGrace".to_owned())),
            "grace {grace:?}: a cut-off leader stops after the node controller gives up"
        );
    } else {
        assert_eq!(late, None, "grace {grace:?}: {LATE_STEP_DOWN} not set");
    }
    let new = create_node_pods(&ns, &groups, &template, PEER).await;
    let [new_web, new_heartbeat, new_client_go] =
        [APP, HEARTBEAT, CLIENT_GO].map(|g| pod_name(g, PEER));
    let [old_web, old_heartbeat, _] = expected;

    // The Heartbeat group's Lease says so, and both agents publish their role.
    let heartbeat_lease = wait_for_object(
        &leases,
        &lease_name_for(HEARTBEAT),
        "the Heartbeat group's Lease annotated",
        CONVERGE,
        |l| {
            l.and_then(|l| l.annotations().get(LIVENESS_ANNOTATION))
                .is_some_and(|v| v == "Heartbeat")
        },
    )
    .await;
    if let Err(e) = heartbeat_lease {
        panic!("{e}\n{}", summary(&groups, &pods).await);
    }
    let agent_file = |pod: &Pod, file: &str| agent_file(&c, pod, &agent_volume, file);
    let validity = validity_key;
    let files = FileHistory::start(vec![
        (old_heartbeat.clone(), agent_file(&old[1], "role")),
        (new_heartbeat.clone(), agent_file(&new[1], "role")),
        (validity(&old_heartbeat), agent_file(&old[1], "valid-until")),
        (validity(&new_heartbeat), agent_file(&new[1], "valid-until")),
    ]);
    let published = wait_until("both agents publishing their role", PODS, || async {
        let roles = (files.last(&old_heartbeat), files.last(&new_heartbeat));
        let expected = (Some("leader".to_owned()), Some("follower".to_owned()));
        Ok::<_, String>((roles == expected).then_some(()))
    })
    .await;
    if let Err(e) = published {
        panic!(
            "{e}\n{old_heartbeat}: {:?}\n{new_heartbeat}: {:?}",
            files.history(&old_heartbeat),
            files.history(&new_heartbeat)
        );
    }

    // The cut, and the three failovers.
    let (uncut, cut_at) = c.cut_node(CUT).await;
    let cut = instant_of(cut_at);
    let bound = grace + Duration::from_secs(30);
    let label_seen = |pod: &str| {
        let pod = pod.to_owned();
        let log = &log;
        async move {
            wait_until(&format!("{pod} labeled leader"), bound, || async {
                Ok::<_, String>(log.leader_seen(&pod, cut))
            })
            .await
        }
    };
    let client_go_lease = format!("{CLIENT_GO}-0");
    let client_go_moved = async {
        wait_for_object(
            &leases,
            &client_go_lease,
            &format!("{new_client_go} holding {client_go_lease}"),
            bound,
            |l| holder(l).as_deref() == Some(new_client_go.as_str()),
        )
        .await
        .map(|_| Instant::now())
    };
    let (web_moved, heartbeat_moved, client_go_moved) = tokio::join!(
        label_seen(&new_web),
        label_seen(&new_heartbeat),
        client_go_moved
    );
    let (web_moved, heartbeat_moved, client_go_moved) =
        match (web_moved, heartbeat_moved, client_go_moved) {
            (Ok(a), Ok(b), Ok(c)) => (a - cut, b - cut, c - cut),
            (a, b, c) => panic!(
                "(a) {:?}\n(b) {:?}\n(c) {:?}\n{}",
                a.map(|t| t - cut),
                b.map(|t| t - cut),
                c.map(|t| t - cut),
                summary(&groups, &pods).await
            ),
        };
    let reason = |group: &'static str| {
        let groups = &groups;
        async move {
            groups
                .get(group)
                .await
                .unwrap()
                .status
                .and_then(|s| s.last_transition_reason)
                .unwrap_or_default()
        }
    };
    let (web_reason, heartbeat_reason) = (reason(APP).await, reason(HEARTBEAT).await);

    // (b): within the lease and a second, and the cut-off leader stopped before the new one began.
    let lease = Duration::from_secs(HEARTBEAT_LEASE_SECONDS);
    assert!(
        heartbeat_moved <= lease + Duration::from_secs(1),
        "the Heartbeat group handed over {} after the cut, more than leaseDurationSeconds + 1 s",
        secs(heartbeat_moved)
    );
    let new_leader_file = wait_until("the new leader's agent publishing leader", PODS, || async {
        Ok::<_, String>(files.first(&new_heartbeat, "leader", cut_at))
    })
    .await;
    let histories = || {
        format!(
            "{old_heartbeat}: {:?}\n{new_heartbeat}: {:?}",
            files.history(&old_heartbeat),
            files.history(&new_heartbeat)
        )
    };
    let new_leader_file = new_leader_file.unwrap_or_else(|e| panic!("{e}\n{}", histories()));
    let old_unknown = files
        .first(&old_heartbeat, "unknown", cut_at)
        .unwrap_or_else(|| panic!("the cut-off leader never read unknown\n{}", histories()));
    // The agent stops two thirds of the Lease duration after its last renewal that landed was
    // sent; the operator hands over a whole duration after it saw that renewal. What the test's
    // watch saw says which side broke that margin, if one did.
    let renewals = renewals_seen(&lease_log, &lease_name_for(HEARTBEAT), &old_heartbeat);
    let last_renewal = renewals
        .iter()
        .copied()
        .filter(|r| *r <= instant_of(old_unknown))
        .max();
    let timeline = || {
        let after_renewal = |t: Instant| {
            last_renewal.map_or("no renewal seen".to_owned(), |r| {
                format!(
                    "{} after the last renewal seen",
                    secs(t.saturating_duration_since(r))
                )
            })
        };
        format!(
            "{} renewal(s) of {old_heartbeat} seen, the last at {} from the cut; {old_heartbeat}'s agent wrote \
             unknown {} (its rule: {} after it sent it); {new_heartbeat} labeled leader {}, its agent wrote \
             leader {} (the operator's rule: {} after it saw it)",
            renewals.len(),
            last_renewal.map_or("-".to_owned(), |r| signed_secs(r, cut)),
            after_renewal(instant_of(old_unknown)),
            secs(lease * 2 / 3),
            after_renewal(cut + heartbeat_moved),
            after_renewal(instant_of(new_leader_file)),
            secs(lease),
        )
    };
    assert!(
        old_unknown < new_leader_file,
        "the cut-off leader read unknown after the new leader read leader: {}\n{}",
        timeline(),
        histories()
    );
    assert_eq!(
        files.last(&old_heartbeat).as_deref(),
        Some("unknown"),
        "the cut-off leader stays unknown while cut\n{}",
        histories()
    );
    // What the two applications read, checked as every run's histories are.
    assert_never_two_applications(&files, &[&old_heartbeat, &new_heartbeat], cut_at);
    drop(files);

    println!(
        "node loss: {CUT} cut (kubelet, containerd, its pods' packets); each leader on {CUT}, its peer on {PEER}; \
         active operator {operator} on {PEER}; node-monitor-grace-period {} s",
        grace.as_secs()
    );
    println!(
        "node loss: Readiness: {new_web} labeled leader {} after the cut ({web_reason})",
        secs(web_moved)
    );
    println!(
        "node loss: Heartbeat (leaseDurationSeconds {HEARTBEAT_LEASE_SECONDS}): {new_heartbeat} labeled leader {} after the cut \
         ({heartbeat_reason}); {old_heartbeat}'s agent wrote unknown {} after the cut, {} before {new_heartbeat}'s wrote leader",
        secs(heartbeat_moved),
        secs(since(cut_at, old_unknown)),
        secs(since(old_unknown, new_leader_file))
    );
    println!("node loss: Heartbeat margins: {}", timeline());
    println!(
        "node loss: client-go ({CLIENT_GO_TIMING}): {client_go_lease} held by {new_client_go} {} after the cut",
        secs(client_go_moved)
    );
    println!(
        "node loss: Readiness / Heartbeat = {:.1}, client-go / Heartbeat = {:.1}",
        web_moved.as_secs_f64() / heartbeat_moved.as_secs_f64(),
        client_go_moved.as_secs_f64() / heartbeat_moved.as_secs_f64()
    );

    // The node back, for the tests after this one; I1 and I3 held throughout.
    drop(uncut);
    c.wait_node_ready(CUT, PODS).await;
    let leaders = watch.assert_held().await;
    for pod in [&old_web, &new_web, &old_heartbeat, &new_heartbeat] {
        assert!(
            leaders.iter().any(|(p, _)| p == pod),
            "{pod} not among the leaders the watch saw: {leaders:?}"
        );
    }
}
