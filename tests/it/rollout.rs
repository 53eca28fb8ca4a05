//! A rolling update of the operator: with `--leader-elect`, a new replica
//! starts, the active one gets SIGTERM, the standby turns active at once (the Lease is released)
//! and must hand over the groups at once too, not after waiting out the group Leases that name the
//! stopped replica as their arbiter (15 s here).

use std::time::{Duration, Instant};

use kube::api::PostParams;

use crate::common::{InvariantWatcher, Operator, World, group};
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
