//! Faults below the API: the leader's container killed (the kubelet restarts it), the leader's
//! container frozen so its readiness probe fails, and a whole node stopped. Each time the pod or
//! the node goes NotReady in the API, and leadership moves with the epoch one higher.

use std::time::{Duration, Instant};

use leadergroup_testenv::wait_until;

use crate::cluster::{APP, CONVERGE, PODS, Scene, is_ready, node_of, restarts, role};

#[tokio::test]
async fn the_leaders_container_killed_hands_over_and_the_kubelet_restarts_it() {
    let w = Scene::start("e2e-kill", 0).await;
    let pod = w.app.pod(&w.first.leader).await;
    let restarts_before = restarts(&pod);

    let killed = Instant::now();
    w.c.kill_container(&pod).await;
    let second = w
        .app
        .wait_handover(&w.first, &["LeaderNotReady"], CONVERGE)
        .await;
    let handover = killed.elapsed();

    // The kubelet restarts the container; the pod comes back Ready as a follower (sticky).
    let back = wait_until("the killed container restarted and Ready", PODS, || async {
        let p = w.app.pod(&w.first.leader).await;
        Ok::<_, String>((restarts(&p) > restarts_before && is_ready(&p)).then_some(p))
    })
    .await
    .unwrap();
    assert_eq!(role(&back), Some("follower"));
    let still = w
        .app
        .wait_settled("still settled", CONVERGE, |_| true)
        .await;
    assert_eq!(
        still, second,
        "the restarted pod did not take leadership back"
    );
    println!(
        "leader's container killed: handover in {:.0} ms (kill -> new leader settled); restarted {} time(s)",
        handover.as_secs_f64() * 1e3,
        restarts(&back) - restarts_before
    );
    w.finish().await;
}

#[tokio::test]
async fn the_leaders_container_frozen_hands_over_and_thawed_it_stays_follower() {
    let w = Scene::start("e2e-freeze", 0).await;
    let pod = w.app.pod(&w.first.leader).await;

    let frozen_at = Instant::now();
    let frozen = w.c.freeze_container(&pod);
    let second = w
        .app
        .wait_handover(&w.first, &["LeaderNotReady"], CONVERGE)
        .await;
    let handover = frozen_at.elapsed();
    assert!(
        !is_ready(&w.app.pod(&w.first.leader).await),
        "the frozen pod is NotReady"
    );

    frozen.thaw().unwrap();
    wait_until("the thawed pod Ready again", PODS, || async {
        Ok::<_, String>(is_ready(&w.app.pod(&w.first.leader).await).then_some(()))
    })
    .await
    .unwrap();
    // Sticky: the leader that came back stays a follower; nothing moves.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = w
        .app
        .wait_settled("still settled", CONVERGE, |_| true)
        .await;
    assert_eq!(after, second, "the thawed pod did not take leadership back");
    assert_eq!(role(&w.app.pod(&w.first.leader).await), Some("follower"));
    println!(
        "leader's container frozen: handover in {:.0} ms (freeze -> new leader settled; readiness probe every 1 s, timeout 1 s)",
        handover.as_secs_f64() * 1e3
    );
    drop(frozen);
    w.finish().await;
}

/// The node hosting the leader loses its kubelet and containerd (its containers keep running).
/// The cluster runs with `--node-monitor-grace-period=10s` (Kubernetes' default is 50 s; `make e2e`
/// starts it with `realcluster.sh up --node-monitor-grace-period 10`, and the kubelets then renew
/// their node Lease every 2 s): after that long without a heartbeat the node controller marks the
/// node and its pods NotReady, and leadership moves to a pod on the other node.
#[tokio::test]
async fn a_stopped_node_hands_leadership_to_a_pod_on_the_other_node() {
    let w = Scene::start("e2e-node", 0).await;
    let node = node_of(&w.app.pod(&w.first.leader).await).to_string();

    let stopped_at = Instant::now();
    let stopped = w.c.stop_node(&node).await;
    let not_ready = wait_until(&format!("{node} NotReady"), CONVERGE, || async {
        Ok::<_, String>((w.c.node_ready(&node).await != "True").then(Instant::now))
    })
    .await
    .unwrap();
    // The node controller marks the node's pods NotReady one by one: leadership may pass through
    // the other pod of this node first (one epoch per move either way, checked at the end).
    let (second, new_node) = wait_until("a leader on the other node", CONVERGE, || async {
        let Some(s) = w.app.settled().await else {
            return Ok::<_, String>(None);
        };
        let on = node_of(&w.app.pod(&s.leader).await).to_string();
        Ok((on != node).then_some((s, on)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let status = w.app.groups.get(APP).await.unwrap().status.unwrap();
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("LeaderNotReady")
    );
    w.log.caught_up().await;
    let labeled = w
        .log
        .leader_seen(&second.leader, stopped_at)
        .expect("the watch showed the new leader's label");
    println!(
        "node {node} stopped (node-monitor-grace-period {} s): node NotReady after {:.1} s, new leader {} on {new_node} after {:.1} s",
        w.c.node_monitor_grace_period().as_secs(),
        (not_ready - stopped_at).as_secs_f64(),
        second.leader,
        (labeled - stopped_at).as_secs_f64()
    );

    // The node comes back; its pods are Ready again and stay followers.
    drop(stopped);
    w.c.wait_node_ready(&node, PODS).await;
    w.app.wait_pods_ready(3).await;
    let after = w
        .app
        .wait_settled("still settled", CONVERGE, |_| true)
        .await;
    assert_eq!(after, second, "the old leader did not take leadership back");
    w.finish().await;
}
