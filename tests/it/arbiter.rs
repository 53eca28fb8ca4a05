//! Two operator processes (different identities, no --leader-elect) on the same namespace and
//! groups: the group Lease's arbiter annotation makes one of them act and the other defer, so
//! there are never two leaders and no epoch is handed out twice; when the arbiter dies, the other
//! takes over once the Lease runs out.

use crate::common::{InvariantWatcher, Operator, World, group, lease};
use kube::ResourceExt;
use kube::api::PostParams;
use leadergroup_operator::crd::ARBITER_ANNOTATION;
use leadergroup_testenv::control_plane;

async fn arbiter(w: &World, group: &str) -> String {
    let l = lease(&w.ns.client, &w.ns.name, group).await.unwrap();
    l.annotations().get(ARBITER_ANNOTATION).cloned().unwrap()
}

#[tokio::test]
async fn two_operators_never_make_two_leaders_and_take_over_from_a_dead_arbiter() {
    let cp = control_plane().await.unwrap();
    let w = World::new("arbiter").await;
    let pods = w.ordered_ready_pods("app", 3, "pay").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let mut ops = [
        Operator::start(cp, &w.ns.name, "op-a", &[]).await,
        Operator::start(cp, &w.ns.name, "op-b", &[]).await,
    ];
    for name in ["pay", "pay2"] {
        let mut g = group(name, name);
        // Short, so that the takeover after the SIGKILL is quick.
        g.spec.lease_duration_seconds = 3;
        w.groups.create(&PostParams::default(), &g).await.unwrap();
    }
    // A second group, so that both operators have several groups to contend for.
    let second = w.ordered_ready_pods("pay2", 2, "pay2").await;
    let mut settled = w.wait_settled("pay", "first leader", |_| true).await;
    assert_eq!(settled.leader, pods[0]);
    w.wait_settled("pay2", "pay2 leader", |_| true).await;
    let first_arbiter = arbiter(&w, "pay").await;

    // Handovers with both running: one arbiter does them all.
    for _ in 0..4 {
        let old = settled.clone();
        w.kubelet.set_ready(&old.leader, false).await.unwrap();
        settled = w
            .wait_settled("pay", "handover with two operators", |s| {
                s.leader != old.leader
            })
            .await;
        assert_eq!(settled.epoch, old.epoch + 1, "one handover, one epoch");
        w.kubelet.set_ready(&old.leader, true).await.unwrap();
        assert_eq!(
            arbiter(&w, "pay").await,
            first_arbiter,
            "the arbiter is sticky while it renews"
        );
    }

    // The arbiter dies; a handover is needed; the other operator does it once the Lease runs out.
    let dead = ops
        .iter()
        .position(|o| o.identity == first_arbiter)
        .unwrap();
    ops[dead].kill().await;
    let old = settled.clone();
    w.kubelet.set_ready(&old.leader, false).await.unwrap();
    w.kubelet.set_ready(&second[0], false).await.unwrap();
    settled = w
        .wait_settled("pay", "the survivor takes over", |s| s.leader != old.leader)
        .await;
    assert_eq!(settled.epoch, old.epoch + 1);
    let survivor = &ops[1 - dead].identity;
    assert_eq!(&arbiter(&w, "pay").await, survivor);
    let pay2 = w
        .wait_settled("pay2", "pay2 handed over by the survivor", |s| {
            s.leader == second[1]
        })
        .await;
    assert_eq!(pay2.epoch, 2);
    assert_eq!(&arbiter(&w, "pay2").await, survivor);
    watch.assert_held().await;
}
