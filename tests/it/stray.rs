//! A pod outside the group's selector that carries the group's leader marks
//! (what a late promotion lands as after the pod left the selector) loses them before the next
//! leader is promoted, never after: at no instant are two pods labeled leader for the group.

use kube::api::{Patch, PatchParams, PostParams};

use crate::common::{InvariantWatcher, Operator, World, group};
use leadergroup_operator::crd::{EPOCH_ANNOTATION, GROUP_ANNOTATION, ROLE_LABEL, ROLE_LEADER};
use leadergroup_testenv::control_plane;

#[tokio::test]
async fn a_stray_leader_outside_the_selector_is_demoted_before_the_next_promotion() {
    let w = World::new("stray").await;
    let pods = w.ordered_ready_pods("app", 2, "pay").await;
    for pod in &pods {
        w.kubelet.set_ready(pod, false).await.unwrap();
    }
    w.kubelet
        .create_ready_pod("gone-0", &[("app", "elsewhere")])
        .await
        .unwrap();
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let cp = control_plane().await.unwrap();
    let mut op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    w.wait_status("pay", "no candidate yet", |s| {
        s.ready_candidates == 0 && s.candidates == 2
    })
    .await;
    // While the operator is down, a pod selected by nobody gets the leader marks of "pay" at
    // epoch 7 (a late promotion landing after the pod left the selector), and a candidate turns
    // Ready: the first decision after the restart both elects it and finds the stray, which must
    // lose its label before the promotion.
    assert!(op.terminate().await, "{}", op.logs());
    watch.forged_marks("gone-0", 7);
    let marks = serde_json::json!({"metadata": {
        "labels": {ROLE_LABEL: ROLE_LEADER},
        "annotations": {EPOCH_ANNOTATION: "7", GROUP_ANNOTATION: "pay"},
    }});
    w.pods
        .patch("gone-0", &PatchParams::default(), &Patch::Merge(&marks))
        .await
        .unwrap();
    w.kubelet.set_ready(&pods[0], true).await.unwrap();
    let _op = Operator::start(cp, &w.ns.name, "op-2", &[]).await;
    let settled = w.wait_settled("pay", "app-0 elected", |_| true).await;
    assert_eq!(settled.leader, pods[0]);
    assert!(settled.epoch > 7, "the next token is above the stray's");
    assert_eq!(
        w.labeled_leaders("pay").await,
        vec![(pods[0].clone(), Some(settled.epoch))]
    );
    watch.assert_held().await;
}
