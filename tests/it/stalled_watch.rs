//! A stalled watch: the operator's connections to the API server go half-open (they stay open and
//! carry nothing, as when a middlebox or the peer vanishes without a FIN) while new connections get
//! through. The operator's watches then deliver nothing; the leader turns NotReady; the handover
//! must not wait for kube's default watch timeout (290 s, plus 5) to notice.

use std::time::{Duration, Instant};

use kube::api::PostParams;
use leadergroup_testenv::{InvariantWatcher, Proxy, api_server_addr, control_plane, wait_until};

use crate::common::{Operator, World, group};

/// Far below the ~295 s an unbounded watch stays silent, far above the operator's bound (its
/// watches last 10 s, and 5 s more of silence ends one), for a loaded 2-core machine.
const HANDOVER_WITHIN: Duration = Duration::from_secs(60);

/// An operator whose every connection to the API server goes through a proxy, the invariants
/// watched (directly), and the group `name` of the pods labeled `app=<name>` created.
async fn proxied_operator(
    w: &World,
    identity: &str,
    name: &str,
) -> (Proxy, Operator, InvariantWatcher) {
    let proxy = Proxy::start(api_server_addr().await.unwrap())
        .await
        .unwrap();
    let kubeconfig = control_plane()
        .await
        .unwrap()
        .kubeconfig_via(proxy.addr)
        .unwrap();
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let op = Operator::start_with_kubeconfig(&kubeconfig, &w.ns.name, identity, &[]).await;
    w.groups
        .create(&PostParams::default(), &group(name, name))
        .await
        .unwrap();
    (proxy, op, watch)
}

#[tokio::test]
async fn a_stalled_watch_does_not_hold_up_a_handover() {
    let w = World::new("stalled").await;
    w.ordered_ready_pods("app", 2, "pay").await;
    let (proxy, op, watch) = proxied_operator(&w, "op-stall", "pay").await;
    let first = w
        .wait_settled("pay", "the first leader", |s| s.leader == "app-0")
        .await;

    // Every connection the operator holds now, its watches among them, goes silent.
    proxy.stall();
    let stalled = Instant::now();
    w.kubelet.set_ready(&first.leader, false).await.unwrap();
    let second = wait_until(
        "a handover past the stalled watch",
        HANDOVER_WITHIN,
        || async { Ok::<_, String>(w.settled("pay").await?.filter(|s| s.leader == "app-1")) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    eprintln!(
        "stalled watch: app-1 leads at epoch {} {:.1} s after the stall",
        second.epoch,
        stalled.elapsed().as_secs_f64()
    );
    assert!(second.epoch > first.epoch);
    watch.assert_held().await;
}

/// How many pods the group has: the operator writes their marks at once, which leaves as many
/// connections idle in its client's pool.
const POOLED: usize = 8;

/// A watch the API server ended (every 10 s) is opened again on a connection from the client's
/// pool, which may have gone half-open with the others while it sat idle there. Neither opening a
/// watch nor its initial list is bounded by kube-runtime's idle timeout (that bounds only the
/// stream once open), so such a request waited for good: the replica's caches froze while new
/// connections got through, and it decided on pods long gone (in the chaos run, 70 s of 409s on
/// promotions of deleted pods, until the replica was replaced). Every request of the operator's
/// client is bounded now.
#[tokio::test]
async fn a_watch_reopened_on_a_dead_pooled_connection_does_not_freeze_the_cache() {
    let w = World::new("stalledpool").await;
    for i in 0..POOLED {
        w.kubelet
            .create_ready_pod(&format!("app-{i}"), &[("app", "pool")])
            .await
            .unwrap();
    }
    let (proxy, op, watch) = proxied_operator(&w, "op-pool", "pool").await;
    let first = w.wait_settled("pool", "the first leader", |_| true).await;
    w.wait_status("pool", "every follower marked", |s| {
        s.eligibility.len() == POOLED
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Every connection the operator holds, the idle ones in its pool among them, goes silent; the
    // watches notice their silence and are opened again, on pooled connections first.
    proxy.stall();
    tokio::time::sleep(Duration::from_secs(20)).await;
    w.kubelet.set_ready(&first.leader, false).await.unwrap();
    let not_ready = Instant::now();
    let second = wait_until(
        "a handover after the watches were opened again",
        HANDOVER_WITHIN,
        || async {
            Ok::<_, String>(
                w.settled("pool")
                    .await?
                    .filter(|s| s.leader != first.leader),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()));
    eprintln!(
        "stalled pool: {} leads at epoch {} {:.1} s after the old leader turned NotReady",
        second.leader,
        second.epoch,
        not_ready.elapsed().as_secs_f64()
    );
    assert!(second.epoch > first.epoch);
    watch.assert_held().await;
}
