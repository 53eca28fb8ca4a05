//! The Lease as the source of truth, under interference: deleted by hand, rewritten by a foreign
//! writer while the operator hands over, and a Lease of the group's name that the group does not
//! own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{InvariantWatcher, Operator, Settled, World, group, lease};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::{
    EPOCH_ANNOTATION, LeaderGroupStatus, ROLE_FOLLOWER, lease_name_for,
};
use leadergroup_operator::election::LEADER_ELECTED;
use leadergroup_testenv::control_plane;
use serde_json::json;

async fn started(prefix: &str, pods: usize) -> (World, Operator, InvariantWatcher, Vec<String>) {
    let w = World::new(prefix).await;
    let names = w.ordered_ready_pods("app", pods, "pay").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    let s = w
        .wait_settled("pay", "app-0 leads at epoch 1", |s| s.epoch == 1)
        .await;
    assert_eq!(s.leader, names[0]);
    (w, op, watch, names)
}

#[tokio::test]
async fn lease_deleted_by_hand_is_recreated_without_reusing_an_epoch() {
    let (w, _op, watch, pods) = started("lease-deleted", 3).await;
    let leases: Api<Lease> = w.ns.api();
    let first = lease(&w.ns.client, &w.ns.name, "pay").await.unwrap();
    leases
        .delete(&lease_name_for("pay"), &DeleteParams::default())
        .await
        .unwrap();

    // Recreated, owned by the group, with the same leader at the same token: nothing changed hands.
    let s = w.wait_settled("pay", "the Lease recreated", |_| true).await;
    assert_eq!(
        s,
        Settled {
            leader: pods[0].clone(),
            epoch: 1
        }
    );
    let again = lease(&w.ns.client, &w.ns.name, "pay").await.unwrap();
    assert_ne!(again.uid(), first.uid(), "a new Lease");
    let group_uid = w.groups.get("pay").await.unwrap().uid();
    assert!(
        again
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == group_uid.as_ref())
    );

    // Deleted again together with a handover: the new leader takes a new token, not one the
    // missing Lease would have suggested.
    leases
        .delete(&lease_name_for("pay"), &DeleteParams::default())
        .await
        .unwrap();
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    let s = w
        .wait_settled("pay", "app-1 leads at epoch 2", |s| s.epoch >= 2)
        .await;
    assert_eq!(
        s,
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

/// Rewrites the group's Lease (its holder and its epoch annotation, each time a different one)
/// with its own compare-and-swap, as fast as it can, until `stop`. Returns how many of its writes
/// the API server accepted.
fn foreign_writer(leases: Api<Lease>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut accepted = 0;
        let mut i: i64 = 0;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            if let Ok(Some(mut l)) = leases.get_opt(&lease_name_for("pay")).await {
                let current: i64 = l
                    .annotations()
                    .get(EPOCH_ANNOTATION)
                    .and_then(|e| e.parse().ok())
                    .unwrap_or(0);
                // Sometimes lower, sometimes higher than what the operator wrote.
                let forged = (current + (i % 7) - 3).max(0);
                l.annotations_mut()
                    .insert(EPOCH_ANNOTATION.into(), forged.to_string());
                l.spec.get_or_insert_with(Default::default).holder_identity =
                    Some(format!("intruder-{i}"));
                // replace() sends the resourceVersion read: a CAS, as the operator's own.
                if leases
                    .replace(&l.name_any(), &PostParams::default(), &l)
                    .await
                    .is_ok()
                {
                    accepted += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        accepted
    })
}

#[tokio::test]
async fn foreign_lease_writer_during_handovers_never_makes_an_epoch_reused() {
    let (w, _op, watch, pods) = started("lease-foreign", 4).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = foreign_writer(w.ns.api(), stop.clone());
    let mut not_ready: Option<String> = None;
    for _ in 0..4 {
        let leader = w.groups.get("pay").await.unwrap().status.unwrap().leader;
        if let Some(leader) = leader {
            w.kubelet.set_ready(&leader, false).await.unwrap();
            if let Some(back) = not_ready.replace(leader) {
                w.kubelet.set_ready(&back, true).await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let accepted = writer.await.unwrap();
    assert!(
        accepted > 0,
        "the foreign writer never got a write in: the test proves nothing"
    );

    // Converges (I2) on the newest token handed out, held by a Ready pod.
    let s = w
        .wait_settled("pay", "settled after the foreign writer stopped", |_| true)
        .await;
    let leaders = watch.assert_held().await;
    let max_handed = leaders.iter().map(|(_, e)| *e).max().unwrap();
    assert_eq!(
        s.epoch, max_handed,
        "the settled leader holds the newest token; leaders: {leaders:?}"
    );
    assert!(
        not_ready.as_deref() != Some(s.leader.as_str()),
        "{s:?} is NotReady"
    );
    assert!(pods.contains(&s.leader));
    assert!(leaders.len() >= 3, "handovers happened: {leaders:?}");
}

/// A Lease of group "pay"'s name that someone else wrote: no owner reference to the group.
pub fn foreign_lease() -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name_for("pay")),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("someone-else".into()),
            lease_duration_seconds: Some(30),
            ..Default::default()
        }),
    }
}

/// Replaces group "pay"'s Lease by a [`foreign_lease`] (while its operator is down).
pub async fn replace_with_foreign_lease(w: &World) {
    let leases: Api<Lease> = w.ns.api();
    leases
        .delete(&lease_name_for("pay"), &DeleteParams::default())
        .await
        .unwrap();
    leases
        .create(&PostParams::default(), &foreign_lease())
        .await
        .unwrap();
}

#[tokio::test]
async fn lease_not_owned_by_the_group_is_never_overwritten() {
    let w = World::new("lease-notowned").await;
    let leases: Api<Lease> = w.ns.api();
    let foreign = foreign_lease();
    let foreign = leases
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let pods = w.ordered_ready_pods("app", 2, "pay").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    // A short Lease: the operator looks again once per duration for the foreign Lease to go.
    let mut g = group("pay", "pay");
    g.spec.lease_duration_seconds = 3;
    w.groups.create(&PostParams::default(), &g).await.unwrap();

    let status = w
        .wait_status("pay", "condition LeaseNotOwned", |s| {
            s.conditions.iter().any(|c| {
                c.type_ == LEADER_ELECTED && c.status == "False" && c.reason == "LeaseNotOwned"
            })
        })
        .await;
    assert_eq!(status.leader, None);
    w.wait_event("pay", "LeaseNotOwned", &lease_name_for("pay"))
        .await;
    // Pod events make the operator decide again: still refused, still untouched. What proves
    // it decided is its reconcile count (this operator reconciles this group alone), not a time
    // slept.
    let before = op.reconciles().await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    w.kubelet.set_ready(&pods[0], true).await.unwrap();
    op.wait_reconciles(before, 2.0, "no decision after the pod events")
        .await;
    let now = leases.get(&lease_name_for("pay")).await.unwrap();
    assert_eq!(
        now.resource_version(),
        foreign.resource_version(),
        "the foreign Lease was written to"
    );
    assert_eq!(w.labeled_leaders("pay").await, vec![]);

    // Its owner removes it: the group takes over.
    leases
        .delete(&lease_name_for("pay"), &DeleteParams::default())
        .await
        .unwrap();
    let s = w
        .wait_settled("pay", "elected once the foreign Lease is gone", |_| true)
        .await;
    assert_eq!(
        s,
        Settled {
            leader: pods[0].clone(),
            epoch: 1
        }
    );
    assert_eq!(watch.assert_held().await, vec![(pods[0].clone(), 1)]);
}

/// A group whose Lease is replaced by one it does not own while it has a
/// leader (here while the operator was down) records no leader, and its leader loses the label:
/// a Service must not route to a pod the status says does not lead.
#[tokio::test]
async fn a_group_refused_for_a_foreign_lease_leaves_no_pod_labeled_leader() {
    let (w, mut op, watch, pods) = started("lease-refused-leader", 2).await;
    assert!(op.terminate().await, "{}", op.logs());
    replace_with_foreign_lease(&w).await;
    assert_eq!(
        w.labeled_leaders("pay").await,
        vec![(pods[0].clone(), Some(1))],
        "the leader is labeled while the operator is down"
    );

    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-2", &[]).await;
    let status = w
        .wait_status("pay", "condition LeaseNotOwned", |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == LEADER_ELECTED && c.reason == "LeaseNotOwned")
        })
        .await;
    assert_eq!(status.leader, None);
    leadergroup_testenv::wait_until("the leader label removed", Duration::from_secs(10), || {
        let w = &w;
        async move { Ok::<_, String>(w.labeled_leaders("pay").await.is_empty().then_some(())) }
    })
    .await
    .unwrap();
    // The pod keeps the group's follower marks, and its epoch annotation is gone.
    let pod = w.pods.get(&pods[0]).await.unwrap();
    assert_eq!(crate::common::role(&pod), Some(ROLE_FOLLOWER));
    assert!(!pod.annotations().contains_key(EPOCH_ANNOTATION));
    watch.assert_held().await;
}

/// Forges the group Lease's epoch annotation to `epoch`, as an admin (no guard here).
async fn forge_lease_epoch(w: &World, epoch: i64) {
    let leases: Api<Lease> = w.ns.api();
    let mut forged = lease(&w.ns.client, &w.ns.name, "pay").await.unwrap();
    forged
        .annotations_mut()
        .insert(EPOCH_ANNOTATION.into(), epoch.to_string());
    leases
        .replace(&lease_name_for("pay"), &PostParams::default(), &forged)
        .await
        .unwrap();
}

/// Waits until condition `LeaderElected` says `reason`; returns the status.
async fn refused_for(w: &World, reason: &str) -> LeaderGroupStatus {
    w.wait_status("pay", reason, |s| {
        s.condition(LEADER_ELECTED)
            .is_some_and(|c| c.reason == reason)
    })
    .await
}

/// The group Lease's epoch forged to the largest there is, far above the token the group
/// recorded: neither adopted (the range would be exhausted) nor overwritten; the group holds its
/// leader at its recorded token and says so, naming the field and both values, until the Lease is
/// deleted, after which the next leader gets the next token.
#[tokio::test]
async fn a_forged_lease_epoch_far_above_the_records_is_reported_and_never_adopted() {
    let (w, op, watch, pods) = started("lease-forged", 2).await;
    forge_lease_epoch(&w, i64::MAX).await;
    let status = refused_for(&w, "ImplausibleEpoch").await;
    assert_eq!(
        (status.leader.as_deref(), status.epoch),
        (Some(pods[0].as_str()), 1),
        "the recorded token is kept"
    );
    let note = w
        .wait_event("pay", "ImplausibleEpoch", "9223372036854775807")
        .await;
    assert!(
        note.contains(&format!("metadata.annotations[{EPOCH_ANNOTATION}]"))
            && note.contains("is 1:"),
        "the Event names the field and both values: {note}"
    );

    // Held: the leader keeps its token, nobody new is elected, the Lease is left as it is, and
    // the operator has decided since (its reconcile count; it reconciles this group alone).
    let before = op.reconciles().await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    op.wait_reconciles(before, 1.0, "no decision after the pod event")
        .await;
    assert_eq!(
        w.labeled_leaders("pay").await,
        vec![(pods[0].clone(), Some(1))],
        "a pod was handed the forged token"
    );
    let held = lease(&w.ns.client, &w.ns.name, "pay").await.unwrap();
    assert_eq!(
        held.annotations().get(EPOCH_ANNOTATION).map(String::as_str),
        Some("9223372036854775807"),
        "the forged Lease was overwritten"
    );

    // The way out the condition gives for a forgery: delete the Lease.
    let leases: Api<Lease> = w.ns.api();
    leases
        .delete(&lease_name_for("pay"), &DeleteParams::default())
        .await
        .unwrap();
    let s = w
        .wait_settled("pay", "app-1 leads at epoch 2", |s| s.epoch == 2)
        .await;
    assert_eq!(s.leader, pods[1]);
    assert_eq!(
        watch.assert_held().await,
        vec![(pods[0].clone(), 1), (pods[1].clone(), 2)]
    );
}

/// The group Lease's epoch forged to the largest there is, and recorded as real (the way out the
/// condition gives when tokens up to it were handed out): its holder keeps it, and when the
/// holder turns NotReady nobody is handed the same token; the condition says why.
#[tokio::test]
async fn a_forged_epoch_at_the_top_of_the_range_is_never_handed_out_twice() {
    let (w, _op, _watch, pods) = started("lease-top", 2).await;
    forge_lease_epoch(&w, i64::MAX).await;
    refused_for(&w, "ImplausibleEpoch").await;
    w.groups
        .patch_status(
            "pay",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"epoch": i64::MAX}})),
        )
        .await
        .unwrap();
    w.wait_settled("pay", "app-0 keeps the recorded top epoch", |s| {
        s.leader == pods[0] && s.epoch == i64::MAX
    })
    .await;

    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    let status = refused_for(&w, "TokensExhausted").await;
    assert_eq!(status.leader.as_deref(), Some(pods[0].as_str()));
    assert_eq!(
        w.labeled_leaders("pay").await,
        vec![(pods[0].clone(), Some(i64::MAX))],
        "app-1 was handed app-0's token"
    );
    w.wait_event("pay", "TokensExhausted", "9223372036854775807")
        .await;
}
