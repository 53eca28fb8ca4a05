//! A member whose answers arrive late (a lagging watch, a slow link) must not stretch its belief
//! past what the operator waits for: a state the API server wrote before a handover, delivered
//! after it, confirms nothing later than its writing. The operator labels a successor two thirds
//! of the Lease after the handover when the deposed member does not step down; the member must
//! have stopped reporting `Leader` by then, however late its events come.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams};
use leadergroup_client::Role;
use tokio::time::Instant;

use crate::common::{ProxiedLeader, VALIDITY, world};

#[tokio::test]
async fn a_leader_whose_events_arrive_late_stops_within_two_thirds_of_the_lease_after_a_handover() {
    let w = world("client-lag").await;
    w.kubelet
        .create_ready_pod("app-1", &[("app", "a")])
        .await
        .unwrap();
    let ProxiedLeader {
        proxy,
        membership,
        roles,
        leader,
    } = ProxiedLeader::start(&w).await;

    // The operator renews the Lease every 300 ms, and something annotates the pod as often: a
    // steady stream of watch events on both, so that neither is ever quiet long enough for a
    // confirming GET under the old rule.
    let (leases, pods) = (w.leases.clone(), w.pods.clone());
    let mut renewals = tokio::spawn(async move {
        for n in 0u64.. {
            let now = MicroTime(jiff::Timestamp::now());
            let renewal = serde_json::json!({"spec": {"renewTime": now}});
            leases
                .patch(
                    "leadergroup-g",
                    &PatchParams::default(),
                    &Patch::Merge(&renewal),
                )
                .await
                .expect("renewing the Lease, an event the member's stream depends on");
            let note =
                serde_json::json!({"metadata": {"annotations": {"example.com/n": n.to_string()}}});
            pods.patch("app-0", &PatchParams::default(), &Patch::Merge(&note))
                .await
                .expect("annotating app-0, an event the member's stream depends on");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    still_writing(&mut renewals).await;
    assert_eq!(membership.role(), leader);

    // Its answers arrive later and later, up to 2.6 s late, more than two thirds of the 3 s
    // Lease: by 200 ms every 300 ms, so that no gap between two events reaches a third of the
    // Lease (a lag that builds up, as a watch falling behind, not a sudden silence).
    let step = Duration::from_millis(200);
    let mut lag = Duration::ZERO;
    while lag < Duration::from_millis(2600) {
        lag += step;
        proxy.lag(lag);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(lag).await;
    // The handover, while events written before it are still on their way.
    let lost = membership.leader_context();
    let handover = Instant::now();
    w.put_lease("g", Some("app-1"), 6).await.unwrap();
    w.mark_follower("app-0", "g").await.unwrap();
    w.mark_leader("app-1", "g", 6).await.unwrap();
    let role = tokio::time::timeout(lag * 3, lost)
        .await
        .expect("still leader long after the handover");
    let stopped = handover.elapsed();
    // Without the stream, what follows measures a member left in silence, not one lagging.
    still_writing(&mut renewals).await;
    renewals.abort();
    eprintln!(
        "lag: the deposed leader stopped {stopped:?} after the handover, as {role}; last error {:?}",
        membership.last_error()
    );
    assert!(
        stopped <= VALIDITY,
        "the deposed leader reported Leader {stopped:?} after the handover, past two thirds of \
         the Lease ({VALIDITY:?}), when the operator may label its successor"
    );

    // The lag gone, it follows the new leader.
    proxy.lag(Duration::ZERO);
    roles
        .wait_for(Role::Follower, Duration::from_secs(10))
        .await;
}

/// Fails the test once the writer has stopped (one of its patches failed): a panic in a spawned
/// task fails nothing by itself.
async fn still_writing(writer: &mut tokio::task::JoinHandle<()>) {
    if writer.is_finished() {
        let ended = writer.await;
        panic!("the writes the member's events come from stopped: {ended:?}");
    }
}
