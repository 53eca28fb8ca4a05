//! A group deleted and created again under the same name continues its epochs: a fence that
//! accepted the old group's tokens must accept the new group's, and no token may be handed out
//! twice under one name. Deleted through its finalizer, the group leaves its Lease released
//! (no holder, no owner) with the highest epoch; deleted behind the operator's back (its
//! finalizer removed by hand), it leaves its Lease and its pods' marks as they were. Either way
//! the group created again takes the Lease over and its first token is above every old one.

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::control_plane;
use serde_json::json;

use crate::common::{Operator, World, group, lease};

/// Two pods and a group `pay` led up to epoch 3 (two handovers by readiness).
async fn led_to_epoch_three(w: &World) -> Vec<String> {
    let pods = w.ordered_ready_pods("app", 2, "pay").await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    w.wait_settled("pay", "epoch 1", |s| s.epoch == 1).await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    w.wait_settled("pay", "epoch 2", |s| s.epoch == 2).await;
    w.kubelet.set_ready(&pods[0], true).await.unwrap();
    w.kubelet.set_ready(&pods[1], false).await.unwrap();
    w.wait_settled("pay", "epoch 3", |s| s.epoch == 3).await;
    w.kubelet.set_ready(&pods[1], true).await.unwrap();
    pods
}

/// Creates `pay` again and waits for its first leader: its epoch.
async fn created_again(w: &World) -> i64 {
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    w.wait_settled("pay", "the group created again elects", |_| true)
        .await
        .epoch
}

#[tokio::test]
async fn a_group_deleted_and_created_again_continues_its_epochs() {
    let w = World::new("recreation").await;
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    led_to_epoch_three(&w).await;

    w.groups
        .delete("pay", &DeleteParams::default())
        .await
        .unwrap();
    w.wait_group_gone("pay").await;
    let kept = lease(&w.ns.client, &w.ns.name, "pay").await;

    let epoch = created_again(&w).await;
    assert_eq!(
        epoch, 4,
        "the group created again took epoch {epoch}, not 4"
    );
    let kept = kept.expect("the deleted group's Lease, kept for its epoch");
    assert!(
        kept.owner_references().is_empty()
            && kept
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_ref())
                .is_none(),
        "the kept Lease is released (no owner, no holder): {kept:?}"
    );
    let uid = w.groups.get("pay").await.unwrap().uid();
    let adopted = lease(&w.ns.client, &w.ns.name, "pay").await.unwrap();
    assert!(
        adopted
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == uid.as_ref()),
        "the Lease is owned by the new group: {:?}",
        adopted.owner_references()
    );
}

#[tokio::test]
async fn a_group_deleted_behind_the_operators_back_and_created_again_continues_its_epochs() {
    let w = World::new("recreation-orphan").await;
    let cp = control_plane().await.unwrap();
    let mut op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    led_to_epoch_three(&w).await;

    // The operator is away, and someone removes the finalizer by hand: the pods keep their marks
    // and the Lease stays, owned by a group that is gone (no garbage collector on this cluster).
    op.kill().await;
    w.groups
        .patch(
            "pay",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    w.groups
        .delete("pay", &DeleteParams::default())
        .await
        .unwrap();
    w.wait_group_gone("pay").await;

    let _op = Operator::start(cp, &w.ns.name, "op-2", &[]).await;
    let epoch = created_again(&w).await;
    assert!(
        epoch > 3,
        "the group created again handed out epoch {epoch} again"
    );
    let group: LeaderGroup = w.groups.get("pay").await.unwrap();
    assert_eq!(group.status.unwrap_or_default().epoch, epoch);
}
