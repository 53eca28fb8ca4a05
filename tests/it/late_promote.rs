//! A promotion that lands late cannot make a second leader. The operator that
//! sent it is paused (SIGSTOP) the moment testenv's admission webhook holds it inside the API
//! server, so the request stays alive there, as one sent just before a process pause or held in a
//! stuck connection would. Another operator takes the group over once its Lease runs out, and
//! leadership moves to another pod; then the held request is let through, late: it finds its pod
//! written since it was decided on (the new operator's barrier, before it promoted), and the API
//! server refuses it.

use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};

use crate::common::{InvariantWatcher, Operator, World, group, proxied_admin, role};
use leadergroup_operator::crd::BARRIER_ANNOTATION;
use leadergroup_testenv::{HeldRequests, control_plane};

/// How long the promoted pod is watched once its held promotions are let through: the API server
/// writes or refuses each within milliseconds of the webhook's answer.
const LANDING: u32 = 2;

/// Lets the held promotions of `promoted` go on, late, and checks that none landed: the group's
/// leader label is on `leader` alone, at its epoch. Before they go, the pod must carry a barrier
/// the operator wrote after each was decided on: that write, which changed the version each is
/// conditional on, is what the API server refuses them for, and nothing of the test's own
/// touches the pod. `what` names them; `op` is the operator whose log tells.
async fn release_held(
    w: &World,
    hold: &HeldRequests,
    promoted: &str,
    (leader, epoch): (&str, i64),
    what: &str,
    op: &Operator,
) {
    let barrier = |pod: &Pod| pod.annotations().get(BARRIER_ANNOTATION).cloned();
    let now = w.pods.get(promoted).await.unwrap();
    // Each is recorded before it is counted.
    let held = hold.held();
    let found = hold.found();
    assert!(found.len() >= held, "{what}: a held request's pod unread");
    for decided_on in &found {
        assert_ne!(
            barrier(decided_on),
            barrier(&now),
            "{what}: no barrier on {promoted} since a held promotion was decided on (at version \
             {:?}, now {:?}): let through, it lands\n{}",
            decided_on.resource_version(),
            now.resource_version(),
            op.logs()
        );
    }
    // Every version of the pod from here on, to see a promotion that lands, however briefly.
    let since = now.resource_version().unwrap();
    let params = WatchParams::default()
        .fields(&format!("metadata.name={promoted}"))
        .timeout(LANDING);
    let versions = w.pods.watch(&params, &since).await.unwrap();
    hold.release();
    hold.all_answered(Duration::from_secs(20)).await.unwrap();
    let mut versions = std::pin::pin!(versions);
    while let Some(event) = versions.try_next().await.unwrap() {
        match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => assert_ne!(
                role(&pod),
                Some("leader"),
                "{what}: one landed on {promoted}\n{}",
                op.logs()
            ),
            WatchEvent::Error(e) => panic!("{what}: watching {promoted}: {e}"),
            WatchEvent::Deleted(_) | WatchEvent::Bookmark(_) => {}
        }
    }
    assert_eq!(
        w.labeled_leaders("late").await,
        vec![(leader.to_string(), Some(epoch))],
        "{what}: one landed\n{}",
        op.logs()
    );
    eprintln!("{what}: {} held, none landed", hold.held());
}

#[tokio::test]
async fn a_promotion_held_past_the_lease_cannot_land() {
    let cp = control_plane().await.unwrap();
    let w = World::new("late-promote").await;
    let pods = w.ordered_ready_pods("app", 3, "late").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let mut first_op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    let mut g = group("late", "late");
    // Short: the group's Lease is what the second operator waits out.
    g.spec.lease_duration_seconds = 3;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    let first = w.wait_settled("late", "app-0 leads", |_| true).await;
    assert_eq!(first.leader, pods[0]);

    // The next promotion of app-1 is held inside the API server, and its sender paused at once.
    let hold = w.hold_promotions_of(cp, &pods[1]).await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    hold.first_hold(Duration::from_secs(20)).await.unwrap();
    first_op.signal("-STOP");

    // Another operator takes over once the paused one's Lease runs out, and leadership moves to
    // app-2 (preferred), leaving app-1 as it was.
    w.patch_spec("late", serde_json::json!({"preferredLeader": pods[2]}))
        .await;
    let second_op = Operator::start(cp, &w.ns.name, "op-2", &[]).await;
    let moved = w
        .wait_settled("late", "app-2 leads under the second operator", |s| {
            s.leader == pods[2]
        })
        .await;

    // The held promotion goes on now, late, from its paused sender's open connection.
    let what = "late promote: promotions of app-1 held past the Lease";
    release_held(
        &w,
        &hold,
        &pods[1],
        (&pods[2], moved.epoch),
        what,
        &second_op,
    )
    .await;
    first_op.signal("-CONT");
    first_op.kill().await;
    drop(hold);
    watch.assert_held().await;
}

/// A first election's promotion is held in flight and its sender paused; the user then edits the
/// selector so that it no longer selects that pod, which carries no marks yet. The second
/// operator's barrier must still cover it: the Lease and the status name it, and a decision
/// that moves leadership away from a named pod bars that pod, whatever the selector selects.
#[tokio::test]
async fn a_promotion_held_across_a_selector_edit_cannot_land() {
    let cp = control_plane().await.unwrap();
    let w = World::new("late-selector").await;
    let pods = w.ordered_ready_pods("app", 3, "late").await;
    // app-1 and app-2 also carry slot=b: the edited selector keeps them and drops app-0.
    let slot = serde_json::json!({"metadata": {"labels": {"slot": "b"}}});
    for pod in &pods[1..] {
        w.pods
            .patch(pod, &PatchParams::default(), &Patch::Merge(&slot))
            .await
            .unwrap();
    }
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    // The group's first promotion (app-0, unmarked until then) is held inside the API server.
    let hold = w.hold_promotions_of(cp, &pods[0]).await;
    let mut first_op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    let mut g = group("late", "late");
    g.spec.lease_duration_seconds = 3;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    hold.first_hold(Duration::from_secs(20)).await.unwrap();
    first_op.signal("-STOP");

    let narrowed = serde_json::json!({"selector": {"matchLabels": {"slot": "b"}}});
    w.patch_spec("late", narrowed).await;
    let second_op = Operator::start(cp, &w.ns.name, "op-2", &[]).await;
    let moved = w
        .wait_settled("late", "app-1 leads under the second operator", |s| {
            s.leader == pods[1]
        })
        .await;

    let what = "late selector: promotions of app-0 held across a selector edit";
    release_held(
        &w,
        &hold,
        &pods[0],
        (&pods[1], moved.epoch),
        what,
        &second_op,
    )
    .await;
    first_op.signal("-CONT");
    first_op.kill().await;
    drop(hold);
    watch.assert_held().await;
}

/// A promotion whose outcome the operator cannot know: the API server holds it (admission) while
/// the operator's connection is reset, so the operator sees an error and the request lives on.
/// The user then moves leadership to another pod (`preferredLeader`). The group's barrier was up
/// from its first election, yet the decision that moves the Lease away from the pod it names
/// must bar that pod with a write that changes it: its demotion alone changes nothing (it carries
/// no leader label yet), and the held promotion would land beside the new leader.
#[tokio::test]
async fn a_promotion_of_unknown_outcome_cannot_land_after_a_move() {
    let cp = control_plane().await.unwrap();
    let w = World::new("late-unknown").await;
    let pods = w.ordered_ready_pods("app", 3, "late").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let (proxy, kubeconfig) = proxied_admin(cp).await;
    let op = Operator::start_with_kubeconfig(&kubeconfig, &w.ns.name, "op-1", &[]).await;
    let mut g = group("late", "late");
    // Long enough that the reconcile's deadline (half of it) does not abandon the held request
    // before the reset ends it: the error must be the reset's.
    g.spec.lease_duration_seconds = 20;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    let first = w.wait_settled("late", "app-0 leads", |_| true).await;
    assert_eq!(first.leader, pods[0]);

    // app-0 fails: the Lease moves to app-1, whose promotion is held inside the API server.
    let hold = w.hold_promotions_of(cp, &pods[1]).await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    hold.first_hold(Duration::from_secs(20)).await.unwrap();
    // The move to app-2 is asked before the operator learns anything of app-1's promotion, then
    // its connection is reset: its request fails, the API server still holds it.
    w.patch_spec("late", serde_json::json!({"preferredLeader": pods[2]}))
        .await;
    // Time for the operator's group watch to deliver the edit before the reset cuts it too:
    // otherwise its next pass, on the old spec, promotes app-1 again (held again), misses its
    // deadline, and the abandoned request alone drops the group's barrier flag.
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.reset_clients();
    let moved = w
        .wait_settled("late", "app-2 leads", |s| s.leader == pods[2])
        .await;

    // The held promotion goes on now, late.
    let what = "unknown outcome: promotions of app-1 held across a reset and a move";
    release_held(&w, &hold, &pods[1], (&pods[2], moved.epoch), what, &op).await;
    drop(hold);
    watch.assert_held().await;
}
