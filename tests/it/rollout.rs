//! A rolling update of the operator: with `--leader-elect`, a new replica
//! starts, the active one gets SIGTERM, the standby turns active at once (the Lease is released)
//! and must hand over the groups at once too, not after waiting out the group Leases that name the
//! stopped replica as their arbiter (15 s here).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;

use crate::common::{InvariantWatcher, Operator, World, group};
use leadergroup_operator::ha::DEFAULT_LEASE_NAME;
use leadergroup_operator::lease_record::LeaseRecord;
use leadergroup_testenv::{control_plane, wait_until};

/// Far below the group Lease (15 s): only a takeover that does not wait it out passes.
const BOUND: Duration = Duration::from_secs(5);

#[tokio::test]
async fn an_operator_rollout_delays_no_handover() {
    // LEADERGROUP_ROLLOUTS=20 for the figure in the note; 3 in make test.
    let rounds: usize = std::env::var("LEADERGROUP_ROLLOUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let cp = control_plane().await.unwrap();
    let w = World::new("rollout").await;
    let pods = w.ordered_ready_pods("app", 3, "roll").await;
    let invariants = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let args = ["--leader-elect", "--leader-elect-namespace", &w.ns.name];
    let mut active = Operator::start(cp, &w.ns.name, "op-0", &args).await;
    active.wait_role("active").await;
    w.groups
        .create(&PostParams::default(), &group("roll", "roll"))
        .await
        .unwrap();
    let mut settled = w.wait_settled("roll", "the first leader", |_| true).await;
    assert_eq!(settled.leader, pods[0]);

    let mut took = Vec::new();
    for round in 1..=rounds {
        // maxSurge: the new replica first, standing by; then the old one is terminated.
        let standby = Operator::start(cp, &w.ns.name, &format!("op-{round}"), &args).await;
        standby.wait_role("standby").await;
        assert!(active.terminate().await, "{}", active.logs());
        wait_until(
            "the standby turns active",
            Duration::from_secs(10),
            || async {
                Ok::<_, String>((standby.role().await.as_deref() == Some("active")).then_some(()))
            },
        )
        .await
        .unwrap();
        let active_at = Instant::now();
        let old = settled.clone();
        w.kubelet.set_ready(&old.leader, false).await.unwrap();
        settled = w
            .wait_settled("roll", "a handover under the new replica", |s| {
                s.leader != old.leader
            })
            .await;
        let after = active_at.elapsed();
        assert_eq!(settled.epoch, old.epoch + 1);
        w.kubelet.set_ready(&old.leader, true).await.unwrap();
        eprintln!("rollout {round}: handover {after:?} after the new replica turned active");
        assert!(
            after < BOUND,
            "rollout {round}: the handover waited {after:?} (group Lease 15 s)\n{}",
            standby.logs()
        );
        took.push(after);
        active = standby;
    }
    took.sort();
    eprintln!(
        "rollout: median handover after the new replica turned active {:?} over {rounds} rollouts (max {:?})",
        took[took.len() / 2],
        took.last().unwrap()
    );
    invariants.assert_held().await;
}

/// A replica stopped while a reconcile is still in flight (its promotion held inside the API
/// server) keeps the operator Lease until that reconcile has ended: a standby that took over
/// earlier would act on the group beside it.
#[tokio::test]
async fn a_stopping_replica_releases_the_operator_lease_after_its_last_reconcile() {
    let cp = control_plane().await.unwrap();
    let w = World::new("drain").await;
    let pods = w.ordered_ready_pods("app", 2, "drain").await;
    let args = ["--leader-elect", "--leader-elect-namespace", &w.ns.name];
    let mut op = Operator::start(cp, &w.ns.name, "op-0", &args).await;
    op.wait_role("active").await;
    w.groups
        .create(&PostParams::default(), &group("drain", "drain"))
        .await
        .unwrap();
    w.wait_settled("drain", "app-0 leads", |s| s.leader == pods[0])
        .await;

    // The handover's promotion of app-1 is held: the reconcile waits on it.
    let hold = w.hold_promotions_of(cp, &pods[1]).await;
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    hold.first_hold(Duration::from_secs(20)).await.unwrap();
    op.signal("-TERM");
    let holder = || async {
        Api::<Lease>::namespaced(w.ns.client.clone(), &w.ns.name)
            .get(DEFAULT_LEASE_NAME)
            .await
            .map(|l| LeaseRecord::from_lease(&l).holder)
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        assert_eq!(
            holder().await.as_deref(),
            Some("op-0"),
            "the operator Lease was released while a reconcile still ran\n{}",
            op.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    hold.release();
    assert!(op.terminate().await, "{}", op.logs());
    assert_eq!(holder().await, None, "released on the way out");
}
