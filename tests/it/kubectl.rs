//! What a user sees with kubectl: `kubectl get leadergroups` (and `lg`, and `-o wide`) prints the
//! printer columns with the operator's values, and `kubectl describe` shows the transition Events.

use crate::common::{Operator, World, group, run_ok};
use kube::api::PostParams;
use leadergroup_testenv::{ControlPlane, control_plane};

/// `kubectl get <what> -n <ns> [extra]`: the header's columns and the one row's cells.
async fn get(
    cp: &ControlPlane,
    ns: &str,
    what: &str,
    extra: &[&str],
) -> (Vec<String>, Vec<String>) {
    let mut cmd = cp.kubectl();
    cmd.args(["get", what, "-n", ns]).args(extra);
    let out = run_ok(cmd).await;
    let mut lines = out
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>());
    let header = lines.next().unwrap_or_default();
    let rows: Vec<_> = lines.collect();
    assert_eq!(rows.len(), 1, "one group:\n{out}");
    (header, rows.into_iter().next().unwrap())
}

/// AGE as kubectl prints it for something just created: seconds, or minutes and seconds.
fn is_age(cell: &str) -> bool {
    let digits = cell.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    !digits.is_empty()
        && cell.ends_with('s')
        && cell
            .chars()
            .all(|c| c.is_ascii_digit() || c == 'm' || c == 's')
}

#[tokio::test]
async fn get_and_describe_show_leader_epoch_ready_lease_reason_and_events() {
    let cp = control_plane().await.unwrap();
    let w = World::new("kubectl").await;
    let pods = w.ordered_ready_pods("app", 3, "pay").await;
    let operator = Operator::start(cp, &w.ns.name, "op-kubectl", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    let first = w
        .wait_settled("pay", "a leader at epoch 1", |s| s.epoch == 1)
        .await;
    assert_eq!(first.leader, pods[0]);
    w.wait_status("pay", "3/3 ready", |s| s.ready.as_deref() == Some("3/3"))
        .await;

    let columns = ["NAME", "LEADER", "EPOCH", "READY", "AGE"];
    for what in ["leadergroups", "lg", "leadergroup.leadergroup.io"] {
        let (header, row) = get(cp, &w.ns.name, what, &[]).await;
        assert_eq!(header, columns, "kubectl get {what}");
        assert_eq!(
            row[..4],
            ["pay", pods[0].as_str(), "1", "3/3"],
            "kubectl get {what}: {row:?}"
        );
        assert!(is_age(&row[4]), "AGE {:?}", row[4]);
    }
    let (header, row) = get(cp, &w.ns.name, "lg", &["-o", "wide"]).await;
    assert_eq!(
        header,
        [
            "NAME", "LEADER", "EPOCH", "READY", "AGE", "LEASE", "LIVENESS", "REASON"
        ]
    );
    assert_eq!(row[..4], ["pay", pods[0].as_str(), "1", "3/3"], "{row:?}");
    assert_eq!(
        row[5..],
        ["leadergroup-pay", "Readiness", "Initial"],
        "the API server's default for spec.liveness: {row:?}"
    );

    // A handover: the columns follow.
    w.kubelet.delete_now(&pods[0]).await.unwrap();
    w.wait_settled("pay", "a leader at epoch 2", |s| {
        s.epoch == 2 && s.leader == pods[1]
    })
    .await;
    w.wait_status("pay", "2/2 ready", |s| s.ready.as_deref() == Some("2/2"))
        .await;
    let (_, row) = get(cp, &w.ns.name, "leadergroups", &["-o", "wide"]).await;
    assert_eq!(row[..4], ["pay", pods[1].as_str(), "2", "2/2"], "{row:?}");
    assert_eq!(
        row[5..],
        ["leadergroup-pay", "Readiness", "LeaderDeleted"],
        "{row:?}"
    );

    w.wait_event("pay", "LeaderDeleted", &pods[1]).await;
    let mut describe = cp.kubectl();
    describe.args(["describe", "leadergroup", "pay", "-n", &w.ns.name]);
    let out = run_ok(describe).await;
    let events = out
        .split_once("\nEvents:")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("no Events section:\n{out}"));
    let line = |reason: &str| {
        events
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(reason))
            .unwrap_or_else(|| panic!("no {reason} event in describe:\n{out}\n{}", operator.logs()))
            .to_string()
    };
    let initial = line("Initial");
    assert!(
        initial.trim_start().starts_with("Normal")
            && initial.contains(&format!("{} leads at epoch 1", pods[0])),
        "{initial}"
    );
    let deleted = line("LeaderDeleted");
    assert!(
        deleted.trim_start().starts_with("Normal")
            && deleted.contains(&format!("{} leads at epoch 2", pods[1])),
        "{deleted}"
    );
    // The status, as describe prints it.
    let field = |name: &str| {
        out.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.first() == Some(&name))
            .and_then(|w| w.get(1).map(|v| v.to_string()))
    };
    assert_eq!(field("Leader:").as_deref(), Some(pods[1].as_str()), "{out}");
    assert_eq!(field("Epoch:").as_deref(), Some("2"), "{out}");
}
