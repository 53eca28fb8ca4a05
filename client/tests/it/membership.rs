//! The role follows the operator's marks, as a pod with exactly the documented RBAC sees them.

use std::time::Duration;

use leadergroup_client::{Epoch, Membership, Role};
use leadergroup_testenv::MemberRules;
use tokio::time::Instant;

use crate::common::{Recorder, VALIDITY, member_client, world};

fn leader(epoch: u32) -> Role {
    Role::Leader {
        epoch: Epoch::from(epoch),
    }
}

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_role_follows_the_pod_marks_and_the_lease() {
    let w = world("client-membership").await;
    w.kubelet
        .create_ready_pod("app-0", &[("app", "a")])
        .await
        .unwrap();
    w.kubelet
        .create_ready_pod("app-1", &[("app", "a")])
        .await
        .unwrap();
    let client = member_client(&w, "app", "g", MemberRules::DOCUMENTED, None).await;

    // No group given and none on the pod yet: confirmed, in no group, so a follower.
    let membership = Membership::start(client, &w.ns.name, "app-0", None);
    let roles = Recorder::new(membership.subscribe());
    roles.wait_for(Role::Follower, WAIT).await;

    // The operator elects app-0 at epoch 1: Lease first, then the pod's marks (which name the
    // group, so the Membership starts following the Lease).
    w.put_lease("g", Some("app-0"), 1).await.unwrap();
    w.mark_follower("app-1", "g").await.unwrap();
    w.mark_leader("app-0", "g", 1).await.unwrap();
    roles.wait_for(leader(1), WAIT).await;
    assert_eq!(membership.role(), leader(1));
    assert!(
        membership.last_error().is_none(),
        "{:?}",
        membership.last_error()
    );

    // Nothing changes for longer than the validity: the GETs every third keep it confirmed.
    let quiet = Instant::now();
    tokio::time::sleep(VALIDITY * 2).await;
    assert_eq!(
        roles
            .since(quiet)
            .iter()
            .map(|(_, r)| *r)
            .collect::<Vec<_>>(),
        Vec::<Role>::new(),
        "no change of role while nothing changes"
    );
    assert_eq!(membership.role(), leader(1));

    // Handover to app-1 at epoch 2: the Lease moves first; app-0 is no longer leader from that
    // moment, before its own label changes.
    let lost = membership.leader_context();
    w.put_lease("g", Some("app-1"), 2).await.unwrap();
    let role = tokio::time::timeout(WAIT, lost).await.unwrap();
    assert_eq!(role, Role::Follower);
    w.mark_follower("app-0", "g").await.unwrap();
    w.mark_leader("app-1", "g", 2).await.unwrap();

    // Not leader: leader_context resolves at once.
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), membership.leader_context())
            .await
            .unwrap(),
        Role::Follower
    );

    // Back to app-0 at epoch 3: the Lease names it, but its label still says follower...
    w.put_lease("g", Some("app-0"), 3).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(membership.role(), Role::Follower);
    // ...until the operator's last step.
    w.mark_follower("app-1", "g").await.unwrap();
    w.mark_leader("app-0", "g", 3).await.unwrap();
    assert_eq!(
        tokio::time::timeout(WAIT, membership.wait_leader())
            .await
            .unwrap(),
        Epoch::from(3u32)
    );

    // A pod whose epoch annotation disagrees with the Lease (a stale promotion landing late) is
    // not leader.
    w.mark_leader("app-0", "g", 2).await.unwrap();
    roles.wait_for(Role::Follower, WAIT).await;
    w.mark_leader("app-0", "g", 3).await.unwrap();
    roles.wait_for(leader(3), WAIT).await;

    // The pod is deleted: a follower (and never a leader again).
    w.kubelet.delete_now("app-0").await.unwrap();
    roles.wait_for(Role::Follower, WAIT).await;

    assert_eq!(
        roles.roles(),
        [
            Role::Unknown,
            Role::Follower,
            // The pod named its group: Unknown until the group's Lease is confirmed.
            Role::Unknown,
            leader(1),
            Role::Follower,
            // Labeled at 3: Unknown until its acknowledgement, written only once it carries
            // the leader's marks, has landed.
            Role::Unknown,
            leader(3),
            Role::Follower,
            leader(3),
            Role::Follower
        ]
    );

    // Stopping it turns every subscriber's role Unknown.
    let rx = membership.subscribe();
    membership.shutdown();
    assert_eq!(*rx.borrow(), Role::Unknown);
}

#[tokio::test]
async fn a_given_group_is_followed_before_the_pod_names_it() {
    let w = world("client-given-group").await;
    w.kubelet
        .create_ready_pod("app-0", &[("app", "a")])
        .await
        .unwrap();
    let client = member_client(&w, "app", "g", MemberRules::DOCUMENTED, None).await;
    let membership = Membership::start(client, &w.ns.name, "app-0", Some("g".to_owned()));
    let roles = Recorder::new(membership.subscribe());
    // The Lease does not exist yet: confirmed absent, so a follower.
    roles.wait_for(Role::Follower, WAIT).await;
    // The Lease appears (watched from "now" while absent), then the marks.
    w.put_lease("g", Some("app-0"), 7).await.unwrap();
    w.mark_leader("app-0", "g", 7).await.unwrap();
    roles.wait_for(leader(7), WAIT).await;
    // The Lease is deleted (the group was deleted): no longer leader.
    w.leases
        .delete("leadergroup-g", &Default::default())
        .await
        .unwrap();
    roles.wait_for(Role::Follower, WAIT).await;
}
