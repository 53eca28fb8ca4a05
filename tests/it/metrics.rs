//! `/metrics` as Prometheus scrapes it: the transitions this test causes are counted by reason,
//! each handover to a new leader lands in the latency histogram, and the error and conflict
//! families are exposed before anything failed (so alerts on them can be written up front).

use crate::common::{Operator, World, group, metric};
use kube::api::PostParams;
use leadergroup_testenv::control_plane;

#[tokio::test]
async fn metrics_count_the_transitions_the_test_caused() {
    let cp = control_plane().await.unwrap();
    let w = World::new("metrics").await;
    let pods = w.ordered_ready_pods("m", 3, "metrics").await;
    let operator = Operator::start(cp, &w.ns.name, "op-metrics", &[]).await;
    operator.wait_ready().await;

    // Before any group: every family is there, with nothing counted.
    let text = operator.metrics().await;
    for family in [
        "# TYPE leadergroup_transitions counter",
        "# TYPE leadergroup_handover_seconds histogram",
        "# TYPE leadergroup_reconcile_seconds histogram",
        "# TYPE leadergroup_reconcile_errors counter",
        "# TYPE leadergroup_conflicts counter",
        "# TYPE leadergroup_groups_with_leader gauge",
        "# TYPE leadergroup_groups_without_leader gauge",
    ] {
        assert!(
            text.contains(family),
            "{family} missing from /metrics:\n{text}"
        );
    }
    assert_eq!(
        metric(&text, "leadergroup_handover_seconds_count"),
        Some(0.0),
        "{text}"
    );
    // The error and conflict series exist at zero before anything failed, so a `rate()` alert
    // sees the first increment.
    for sample in [
        r#"leadergroup_transitions_total{reason="LeaderDeleted"}"#,
        r#"leadergroup_reconcile_errors_total{class="permanent",kind="Forbidden"}"#,
        r#"leadergroup_reconcile_errors_total{class="transient",kind="Conflict"}"#,
        r#"leadergroup_conflicts_total{object="Lease"}"#,
    ] {
        assert_eq!(metric(&text, sample), Some(0.0), "{sample}:\n{text}");
    }

    w.groups
        .create(&PostParams::default(), &group("g", "metrics"))
        .await
        .unwrap();
    // The oldest Ready pod leads first (m-0), then the next in succession.
    let first = w.wait_settled("g", "first leader", |s| s.epoch == 1).await;
    assert_eq!(first.leader, pods[0]);
    w.kubelet.delete_now(&first.leader).await.unwrap();
    let second = w
        .wait_settled("g", "leader after the deletion", |s| s.epoch == 2)
        .await;
    w.kubelet.set_ready(&second.leader, false).await.unwrap();
    let third = w
        .wait_settled("g", "leader after not-ready", |s| s.epoch == 3)
        .await;
    assert_ne!(third.leader, second.leader);

    // The counters are updated right after the leader's label: wait for the last one to show.
    let text = leadergroup_testenv::wait_until(
        "/metrics shows 3 handovers",
        crate::common::CONVERGE,
        || async {
            let text = operator.metrics().await;
            Ok::<_, String>(
                (metric(&text, "leadergroup_handover_seconds_count") == Some(3.0)).then_some(text),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", operator.logs()));
    for (reason, count) in [
        ("Initial", 1.0),
        ("LeaderDeleted", 1.0),
        ("LeaderNotReady", 1.0),
    ] {
        let sample = format!(r#"leadergroup_transitions_total{{reason="{reason}"}}"#);
        assert_eq!(metric(&text, &sample), Some(count), "{sample}:\n{text}");
    }
    let total: f64 = text
        .lines()
        .filter(|l| l.starts_with("leadergroup_transitions_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        total, 3.0,
        "only the three transitions the test caused:\n{text}"
    );
    let sum = metric(&text, "leadergroup_handover_seconds_sum").unwrap();
    assert!(
        sum > 0.0,
        "handover latencies were observed, not zeros:\n{text}"
    );
    assert_eq!(
        metric(&text, r#"leadergroup_handover_seconds_bucket{le="+Inf"}"#),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "leadergroup_groups_with_leader"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "leadergroup_groups_without_leader"),
        Some(0.0),
        "{text}"
    );
    assert!(
        metric(&text, "leadergroup_reconcile_seconds_count").unwrap() >= 3.0,
        "{text}"
    );
}
