//! The operator killed with SIGKILL in the middle of handovers, at varied moments, and restarted
//! with the same identity (so it resumes at once instead of waiting out its own arbitration): it
//! converges every time, and I1 to I3 hold at every state the watch shows.

use std::time::Duration;

use crate::common::{InvariantWatcher, Operator, World, group};
use kube::api::PostParams;
use leadergroup_testenv::control_plane;

#[tokio::test]
async fn sigkill_during_handovers_then_restart_converges_and_invariants_hold() {
    let cp = control_plane().await.unwrap();
    let w = World::new("crash").await;
    let pods = w.ordered_ready_pods("app", 3, "pay").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let mut op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    let mut settled = w.wait_settled("pay", "first leader", |_| true).await;
    assert_eq!(settled.leader, pods[0]);

    // From "before the operator saw anything" to "well after the handover".
    for delay_ms in [0, 2, 5, 10, 20, 35, 50, 80, 120, 200] {
        let old = settled.clone();
        w.kubelet.set_ready(&old.leader, false).await.unwrap();
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        op.kill().await;
        op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
        settled = w
            .wait_settled(
                "pay",
                &format!("settled after a SIGKILL {delay_ms} ms into the handover"),
                |s| s.leader != old.leader,
            )
            .await;
        assert!(settled.epoch > old.epoch, "{old:?} then {settled:?}");
        // Back Ready: a follower again (sticky), a candidate for the next round.
        w.kubelet.set_ready(&old.leader, true).await.unwrap();
    }
    let leaders = watch.assert_held().await;
    assert!(leaders.len() >= 11, "every handover was seen: {leaders:?}");
    let status = w.groups.get("pay").await.unwrap().status.unwrap();
    assert_eq!(status.epoch, settled.epoch);
}
