//! Election and handover, observed the way a user would: pod labels and annotations, the Lease,
//! the status, the Events.

use crate::common::{
    CONVERGE, InvariantWatcher, Operator, Settled, World, epoch, group, install_crd, lease, role,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::{EPOCH_ANNOTATION, GROUP_ANNOTATION, LeaderGroup, ROLE_LABEL};
use leadergroup_operator::election::LEADER_ELECTED;
use leadergroup_testenv::{Kubelet, control_plane, namespace, wait_for_object};

#[tokio::test]
async fn three_ready_pods_elect_one_leader_at_epoch_one() {
    let cp = control_plane().await.unwrap();
    let ns = namespace("elect").await.unwrap();
    install_crd(&ns.client).await;
    let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
    for i in 0..3 {
        kubelet
            .create_ready_pod(&format!("app-{i}"), &[("app", "pay")])
            .await
            .unwrap();
    }
    let watch = InvariantWatcher::start(&ns.client, &ns.name).await;
    let operator = Operator::start(cp, &ns.name, "op-1", &[]).await;
    let groups: Api<LeaderGroup> = Api::namespaced(ns.client.clone(), &ns.name);
    groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();

    let g = wait_for_object(
        &groups,
        "pay",
        "a leader at epoch 1",
        CONVERGE,
        |g: Option<&LeaderGroup>| {
            g.and_then(|g| g.status.as_ref())
                .is_some_and(|s| s.leader.is_some() && s.epoch == 1)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", operator.logs()));
    let status = g.unwrap().status.unwrap();
    let leader = status.leader.clone().unwrap();
    assert_eq!(status.ready.as_deref(), Some("3/3"));
    assert_eq!(status.succession.len(), 2);

    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    leadergroup_testenv::wait_until("roles converge", CONVERGE, || async {
        let list = pods.list(&Default::default()).await?;
        let leaders: Vec<_> = list
            .items
            .iter()
            .filter(|p| role(p) == Some("leader"))
            .map(|p| p.name_any())
            .collect();
        let followers = list
            .items
            .iter()
            .filter(|p| role(p) == Some("follower"))
            .count();
        Ok::<_, kube::Error>((leaders == vec![leader.clone()] && followers == 2).then_some(()))
    })
    .await
    .unwrap();
    let leader_pod = pods.get(&leader).await.unwrap();
    assert_eq!(epoch(&leader_pod), Some(1));
    let lease = lease(&ns.client, &ns.name, "pay")
        .await
        .expect("Lease exists");
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some(leader.as_str())
    );
    assert_eq!(watch.assert_held().await, vec![(leader, 1)]);
}

/// Three Ready pods created a second apart (`app-0` oldest), the invariant watcher, an operator,
/// and group `pay` settled on `app-0` at epoch 1.
async fn three_pods_settled(prefix: &str) -> (World, Operator, InvariantWatcher, Vec<String>) {
    let w = World::new(prefix).await;
    let pods = w.ordered_ready_pods("app", 3, "pay").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let cp = control_plane().await.unwrap();
    let operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    let first = w
        .wait_settled("pay", "app-0 leads at epoch 1", |s| s.epoch == 1)
        .await;
    assert_eq!(first.leader, pods[0], "the oldest Ready pod leads first");
    (w, operator, watch, pods)
}

/// Waits for the handover to `to` at `epoch` for `reason`: settled, recorded in the status, and
/// told in an Event.
async fn expect_handover(w: &World, to: &str, epoch: i64, reason: &str) {
    let settled = w
        .wait_settled("pay", &format!("{to} leads at epoch {epoch}"), |s| {
            s.epoch >= epoch
        })
        .await;
    assert_eq!(
        settled,
        Settled {
            leader: to.to_string(),
            epoch
        },
        "the next in succession, at the next epoch"
    );
    let status = w.groups.get("pay").await.unwrap().status.unwrap();
    assert_eq!(status.last_transition_reason.as_deref(), Some(reason));
    let note = w.wait_event("pay", reason, to).await;
    assert!(note.contains(&format!("epoch {epoch}")), "{note}");
}

#[tokio::test]
async fn terminating_leader_hands_over_before_it_is_gone() {
    let (w, _op, watch, pods) = three_pods_settled("terminating").await;
    let terminating = w
        .kubelet
        .begin_termination(&pods[0])
        .await
        .unwrap()
        .expect("a pod on a node terminates gracefully");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    expect_handover(&w, &pods[1], 2, "LeaderTerminating").await;
    // The handover happened while the old leader still exists (its containers still run).
    let old = w.pods.get(&pods[0]).await.unwrap();
    assert!(old.metadata.deletion_timestamp.is_some());
    assert_ne!(role(&old), Some("leader"));
    assert_eq!(epoch(&old), None, "a demoted pod keeps no fencing token");

    // The kubelet finishes: nothing moves any more.
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    w.kubelet.finish_termination(&pods[0]).await.unwrap();
    w.wait_status("pay", "the deleted pod is no candidate any more", |s| {
        s.candidates == 2
    })
    .await;
    let settled = w.wait_settled("pay", "still app-1 at 2", |_| true).await;
    assert_eq!(
        settled,
        Settled {
            leader: pods[1].clone(),
            epoch: 2
        }
    );
    assert_eq!(
        watch.assert_held().await,
        vec![(pods[0].clone(), 1), (pods[1].clone(), 2)]
    );
}

#[tokio::test]
async fn deleted_leaders_hand_over_in_succession() {
    let (w, mut op, watch, pods) = three_pods_settled("deleted").await;
    // A force delete of a pod bound to a node still passes through one watch event with a
    // deletionTimestamp (and a grace period of 0) before the DELETED event: a deletion all the same.
    w.kubelet.delete_now(&pods[0]).await.unwrap();
    expect_handover(&w, &pods[1], 2, "LeaderDeleted").await;

    // Deleted while no operator looks: on restart the leader is simply gone.
    assert!(op.terminate().await, "clean exit on SIGTERM");
    w.kubelet.delete_now(&pods[1]).await.unwrap();
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    expect_handover(&w, &pods[2], 3, "LeaderDeleted").await;
    let status = w.groups.get("pay").await.unwrap().status.unwrap();
    assert_eq!(status.ready.as_deref(), Some("1/1"));
    assert!(status.succession.is_empty());
    assert_eq!(
        watch.assert_held().await,
        vec![
            (pods[0].clone(), 1),
            (pods[1].clone(), 2),
            (pods[2].clone(), 3)
        ]
    );
}

#[tokio::test]
async fn not_ready_leader_hands_over_and_becomes_follower() {
    let (w, _op, watch, pods) = three_pods_settled("notready").await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    expect_handover(&w, &pods[1], 2, "LeaderNotReady").await;
    let old = w.pods.get(&pods[0]).await.unwrap();
    assert_eq!(
        role(&old),
        Some("follower"),
        "a NotReady pod is still a candidate"
    );
    assert_eq!(epoch(&old), None);
    let status = w.groups.get("pay").await.unwrap().status.unwrap();
    assert_eq!(status.ready.as_deref(), Some("2/3"));
    assert_eq!(status.succession, vec![pods[2].clone()]);
    assert_eq!(
        watch.assert_held().await,
        vec![(pods[0].clone(), 1), (pods[1].clone(), 2)]
    );
}

#[tokio::test]
async fn leader_that_leaves_the_group_hands_over_and_loses_its_marks() {
    let (w, _op, watch, pods) = three_pods_settled("leftgroup").await;
    let relabel = serde_json::json!({"metadata": {"labels": {"app": "elsewhere"}}});
    w.pods
        .patch(&pods[0], &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    expect_handover(&w, &pods[1], 2, "LeaderLeftGroup").await;
    leadergroup_testenv::wait_until("the pod that left carries no marks", CONVERGE, || async {
        let p = w.pods.get(&pods[0]).await?;
        let clean = !p.labels().contains_key(ROLE_LABEL)
            && !p.annotations().contains_key(GROUP_ANNOTATION)
            && !p.annotations().contains_key(EPOCH_ANNOTATION);
        Ok::<_, kube::Error>(clean.then_some(()))
    })
    .await
    .unwrap();
    let status = w.groups.get("pay").await.unwrap().status.unwrap();
    assert_eq!(status.ready.as_deref(), Some("2/2"));
    assert_eq!(
        watch.assert_held().await,
        vec![(pods[0].clone(), 1), (pods[1].clone(), 2)]
    );
}

#[tokio::test]
async fn no_ready_pod_means_no_leader_until_one_turns_ready() {
    let w = World::new("nocandidates").await;
    for name in ["app-0", "app-1"] {
        w.kubelet.create_pod(name, &[("app", "pay")]).await.unwrap();
        w.kubelet.set_ready(name, false).await.unwrap();
    }
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();

    let no_candidates = |s: &leadergroup_operator::crd::LeaderGroupStatus| {
        s.conditions
            .iter()
            .any(|c| c.type_ == LEADER_ELECTED && c.status == "False" && c.reason == "NoCandidates")
    };
    let status = w
        .wait_status(
            "pay",
            "condition LeaderElected False NoCandidates",
            no_candidates,
        )
        .await;
    assert_eq!(
        (
            status.leader.as_deref(),
            status.epoch,
            status.ready.as_deref()
        ),
        (None, 0, Some("0/2"))
    );
    w.wait_leaderless("pay", "nobody labeled leader").await;
    // Follower marks are written off the critical path, after the status: wait for them.
    leadergroup_testenv::wait_until(
        "both NotReady candidates marked follower",
        CONVERGE,
        || async {
            let pods = w.pods.list(&Default::default()).await?.items;
            let followers = pods.iter().filter(|p| role(p) == Some("follower")).count();
            Ok::<_, kube::Error>((followers == 2).then_some(()))
        },
    )
    .await
    .unwrap();

    w.kubelet.set_ready("app-1", true).await.unwrap();
    let s = w
        .wait_settled("pay", "app-1 leads at epoch 1", |_| true)
        .await;
    assert_eq!(
        s,
        Settled {
            leader: "app-1".into(),
            epoch: 1
        }
    );

    // The only Ready pod goes: nobody leads, the epoch stays, the Lease has no holder.
    w.kubelet.set_ready("app-1", false).await.unwrap();
    let status = w
        .wait_leaderless("pay", "nobody leads after app-1 went NotReady")
        .await;
    assert_eq!(status.epoch, 1, "the epoch stays until the next leader");
    assert!(no_candidates(&status), "{status:?}");
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("NoCandidates")
    );
    w.wait_event("pay", "NoCandidates", "no eligible pod").await;

    // The next Ready pod takes the next epoch.
    w.kubelet.set_ready("app-0", true).await.unwrap();
    let s = w
        .wait_settled("pay", "app-0 leads at epoch 2", |_| true)
        .await;
    assert_eq!(
        s,
        Settled {
            leader: "app-0".into(),
            epoch: 2
        }
    );
    assert_eq!(
        watch.assert_held().await,
        vec![("app-1".into(), 1), ("app-0".into(), 2)]
    );
}

#[tokio::test]
async fn old_leader_back_stays_follower_until_preferred() {
    let (w, _op, watch, pods) = three_pods_settled("sticky").await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    expect_handover(&w, &pods[1], 2, "LeaderNotReady").await;
    w.kubelet.set_ready(&pods[0], true).await.unwrap();
    // Once the operator has seen app-0 Ready again, it still follows.
    let status = w
        .wait_status("pay", "app-0 counted Ready again", |s| {
            s.ready_candidates == 3
        })
        .await;
    assert_eq!(
        (status.leader.as_deref(), status.epoch),
        (Some(pods[1].as_str()), 2),
        "sticky: {status:?}"
    );
    assert_eq!(
        status.succession,
        vec![pods[0].clone(), pods[2].clone()],
        "oldest first"
    );
    assert_eq!(role(&w.pods.get(&pods[0]).await.unwrap()), Some("follower"));

    w.patch_spec("pay", serde_json::json!({"preferredLeader": pods[0]}))
        .await;
    expect_handover(&w, &pods[0], 3, "Preferred").await;
    assert_eq!(
        watch.assert_held().await,
        vec![
            (pods[0].clone(), 1),
            (pods[1].clone(), 2),
            (pods[0].clone(), 3)
        ]
    );
}

#[tokio::test]
async fn paused_group_makes_no_transition_until_unpaused() {
    let (w, _op, watch, pods) = three_pods_settled("paused").await;
    let pause = |paused: bool| serde_json::json!({"paused": paused});
    w.patch_spec("pay", pause(true)).await;
    w.wait_status("pay", "condition Paused", |s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == LEADER_ELECTED && c.reason == "Paused")
    })
    .await;

    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    // The operator has seen the leader NotReady, and still nothing moves.
    let status = w
        .wait_status("pay", "app-0 counted NotReady", |s| s.ready_candidates == 2)
        .await;
    assert_eq!(
        (status.leader.as_deref(), status.epoch),
        (Some(pods[0].as_str()), 1),
        "{status:?}"
    );
    assert_eq!(
        w.settled("pay").await.unwrap(),
        Some(Settled {
            leader: pods[0].clone(),
            epoch: 1
        })
    );

    w.patch_spec("pay", pause(false)).await;
    expect_handover(&w, &pods[1], 2, "LeaderNotReady").await;
    let status = w.groups.get("pay").await.unwrap().status.unwrap();
    let elected = status
        .conditions
        .iter()
        .find(|c| c.type_ == LEADER_ELECTED)
        .unwrap();
    assert_eq!(
        (elected.status.as_str(), elected.reason.as_str()),
        ("True", "Elected")
    );
    assert_eq!(
        watch.assert_held().await,
        vec![(pods[0].clone(), 1), (pods[1].clone(), 2)]
    );
}
