//! Issue 13, item 2: a promotion that lands late (held inside the API server by testenv's
//! admission webhook past the group's Lease, as a request held in a stuck connection or sent
//! before a process pause would be) cannot make a second leader. The operator gives up on it at
//! its deadline, leadership moves on elsewhere, and when the held request is finally let through
//! it finds the pod changed since it was decided on, and the API server refuses it.

use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};

use crate::common::{InvariantWatcher, Operator, World, group};
use leadergroup_operator::crd::{ROLE_LABEL, ROLE_LEADER};
use leadergroup_testenv::{HeldRequests, HoldRule, control_plane, wait_until};

#[tokio::test]
async fn a_promotion_held_past_the_lease_cannot_land() {
    let cp = control_plane().await.unwrap();
    let w = World::new("late-promote").await;
    let pods = w.ordered_ready_pods("app", 3, "late").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    let mut g = group("late", "late");
    // Short: the operator's deadline for a decision's steps is half of it.
    g.spec.lease_duration_seconds = 3;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    let first = w.wait_settled("late", "app-0 leads", |_| true).await;
    assert_eq!(first.leader, pods[0]);

    // Every promotion of app-1 is held inside the API server.
    let hold = HeldRequests::start(
        cp,
        w.ns.client.clone(),
        &w.ns.name,
        HoldRule {
            pod: pods[1].clone(),
            label: ROLE_LABEL.into(),
            value: ROLE_LEADER.into(),
        },
    )
    .await
    .unwrap();
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    wait_until(
        "a promotion of app-1 held",
        Duration::from_secs(20),
        || async { Ok::<_, String>((hold.held() > 0).then_some(())) },
    )
    .await
    .unwrap();
    // Past the Lease: the operator has given up on it by now.
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Leadership moves on to app-2 while app-1's promotion is still held.
    let prefer = serde_json::json!({"spec": {"preferredLeader": pods[2]}});
    w.groups
        .patch("late", &PatchParams::default(), &Patch::Merge(&prefer))
        .await
        .unwrap();
    // Within a few Leases: a request held without end must not stall the group (and the API
    // server would give up on the webhook after 30 s, failing the held request instead).
    wait_until(
        "app-2 leads while app-1's promotion is held",
        Duration::from_secs(10),
        || async {
            Ok::<_, String>(
                w.settled("late")
                    .await?
                    .filter(|s| s.leader == pods[2])
                    .map(|_| ()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    let moved = w.settled("late").await.unwrap().unwrap();
    let held = hold.held();

    // The held promotions land now, late.
    hold.release();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        w.labeled_leaders("late").await,
        vec![(pods[2].clone(), Some(moved.epoch))],
        "a late promotion of app-1 landed ({held} held)\n{}",
        op.logs()
    );
    eprintln!("late promote: {held} promotions of app-1 held past the Lease, none landed");
    drop(hold);
    watch.assert_held();
}
