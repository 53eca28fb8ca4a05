//! What the status tells the tools that judge a group: `kubectl wait --for=condition=Ready`
//! returns once a pod leads and waits while none does, the history keeps the changes with how
//! long the group had no leader, each pod says why it may or may not lead, and every condition
//! names the generation it was set for.

use std::time::Duration;

use kube::api::PostParams;
use kube::api::{Patch, PatchParams};
use leadergroup_testenv::{ControlPlane, control_plane};

use crate::common::{Operator, World, group, run_ok, run_tool};

/// `kubectl wait --for=condition=Ready leadergroup/NAME` as a user types it.
fn kubectl_wait(cp: &ControlPlane, ns: &str, name: &str, timeout: &str) -> std::process::Command {
    let mut cmd = cp.kubectl();
    cmd.args([
        "wait",
        "--for=condition=Ready",
        &format!("leadergroup/{name}"),
        "-n",
        ns,
        &format!("--timeout={timeout}"),
    ]);
    cmd
}

#[tokio::test]
async fn kubectl_wait_for_ready_follows_the_leader_and_the_status_tells_why() {
    let cp = control_plane().await.unwrap();
    let w = World::new("status").await;
    let pods = w.ordered_ready_pods("s", 2, "status").await;
    let operator = Operator::start(cp, &w.ns.name, "op-status", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "status"))
        .await
        .unwrap();

    let out = run_ok(kubectl_wait(cp, &w.ns.name, "pay", "60s")).await;
    assert!(
        out.contains("leadergroup.leadergroup.io/pay condition met"),
        "{out}"
    );
    let s = w
        .wait_status("pay", "a leader", |s| s.leader.is_some())
        .await;
    assert_eq!(s.leader.as_deref(), Some(pods[0].as_str()));

    // Leadership moves, then nobody is eligible: Ready turns False and kubectl waits.
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    w.wait_status("pay", "s-1 leads", |s| {
        s.leader.as_deref() == Some(&pods[1])
    })
    .await;
    w.kubelet.set_ready(&pods[1], false).await.unwrap();
    let s = w
        .wait_status("pay", "nobody leads", |s| s.leader.is_none())
        .await;
    let ready = s.condition("Ready").expect("a Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NoCandidates")
    );
    let (met, stdout, stderr) = run_tool(kubectl_wait(cp, &w.ns.name, "pay", "3s")).await;
    assert!(
        !met,
        "kubectl wait returned while nobody leads:\n{stdout}{stderr}"
    );
    assert!(stderr.contains("timed out"), "{stderr}");

    // A pod comes back: kubectl wait, started before, returns once it leads.
    let waiting = tokio::spawn(run_tool(kubectl_wait(cp, &w.ns.name, "pay", "60s")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.kubelet.set_ready(&pods[0], true).await.unwrap();
    let (met, stdout, stderr) = waiting.await.unwrap();
    assert!(
        met,
        "kubectl wait did not see Ready:\n{stdout}{stderr}\n{}",
        operator.logs()
    );

    let s = w
        .wait_status("pay", "epoch 3 led by s-0", |s| {
            s.epoch == 3 && s.leader.as_deref() == Some(&pods[0])
        })
        .await;
    let history: Vec<(i64, Option<&str>, Option<&str>, &str)> = s
        .history
        .iter()
        .map(|h| {
            (
                h.epoch,
                h.from.as_deref(),
                h.to.as_deref(),
                h.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        history,
        vec![
            (3, None, Some(pods[0].as_str()), "Initial"),
            (2, Some(pods[1].as_str()), None, "NoCandidates"),
            (
                2,
                Some(pods[0].as_str()),
                Some(pods[1].as_str()),
                "LeaderNotReady"
            ),
            (1, None, Some(pods[0].as_str()), "Initial"),
        ],
        "newest first"
    );
    let leaderless = s.history[0]
        .leaderless_seconds
        .expect("a time without a leader");
    assert!(
        (3..60).contains(&leaderless),
        "{leaderless} s without a leader"
    );
    assert_eq!(s.history[1].leaderless_seconds, None);
    let eligibility: Vec<(&str, bool, &str)> = s
        .eligibility
        .iter()
        .map(|e| (e.pod.as_str(), e.eligible, e.reason.as_str()))
        .collect();
    assert_eq!(
        eligibility,
        vec![
            (pods[0].as_str(), true, "Leader"),
            (pods[1].as_str(), false, "NotReady")
        ]
    );

    // A new spec: every condition says it was set for it, and the history keeps the new limit.
    let patch = serde_json::json!({ "spec": { "historyLimit": 2 } });
    w.groups
        .patch("pay", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let s = w
        .wait_status("pay", "conditions of generation 2", |s| {
            s.observed_generation == Some(2)
                && s.conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(2))
        })
        .await;
    assert_eq!(s.history.len(), 2, "{:?}", s.history);
    run_ok(kubectl_wait(cp, &w.ns.name, "pay", "30s")).await;
}
