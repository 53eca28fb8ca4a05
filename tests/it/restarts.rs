//! What the operator depends on restarts during handovers, on a control plane
//! of this test alone (restarting the shared one would break every other test): kube-apiserver
//! restarted, etcd restarted, etcd compacted and kube-apiserver restarted (every watch, the
//! operator's included, resumes from a compacted revision: 410 Gone, then a fresh list; the test
//! checks that a watch from before does get 410), and the operator's connection cut, silently,
//! then healed. After each, the group settles (I2) on a new leader at a higher epoch, no epoch is
//! reused and I1 holds throughout.

use std::time::Duration;

use kube::api::PostParams;
use leadergroup_testenv::{InvariantWatcher, PrivateCluster, Proxy, namespace_in, wait_until};

use crate::common::{Operator, Settled, World, group};

/// Every fault's handover must settle within this (the API server's restart included).
const SETTLE: Duration = Duration::from_secs(60);

/// Waits until the group has settled (I2) on a leader other than `not`.
async fn wait_settled(w: &World, what: &str, not: Option<&str>, op: &Operator) -> Settled {
    wait_until(what, SETTLE, || async {
        Ok::<_, String>(
            w.settled("pay")
                .await?
                .filter(|s| Some(s.leader.as_str()) != not),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", op.logs()))
}

#[tokio::test]
async fn the_group_converges_through_restarts_and_a_cut_connection() {
    converges_through(&[
        "kube-apiserver restart",
        "etcd restart",
        "compaction and kube-apiserver restart",
        // Right after the restart: its watches' backoff had grown, and the Controller's, which
        // pauses every trigger, reached 43 s before it was capped.
        "connection cut",
        "connection cut",
    ])
    .await;
}

/// One private control plane, the operator behind a proxy, and `faults` in turn, each while the
/// operator hands over.
async fn converges_through(faults: &[&str]) {
    let pc = PrivateCluster::start(&format!("restarts-{}", faults.len()))
        .await
        .unwrap();
    let w = World::in_namespace(
        namespace_in(pc.client().await.unwrap(), "restarts")
            .await
            .unwrap(),
    )
    .await;
    w.ordered_ready_pods("app", 3, "pay").await;
    // The operator reaches the API server through a proxy the test can cut.
    let server = pc.server_url().trim_start_matches("https://");
    let proxy = Proxy::start(server.parse().unwrap()).await.unwrap();
    let operator_kubeconfig = pc.kubeconfig_via(proxy.addr).unwrap();
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let op = Operator::start_with_kubeconfig(&operator_kubeconfig, &w.ns.name, "op-1", &[]).await;
    let mut g = group("pay", "pay");
    g.spec.lease_duration_seconds = 3;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    let mut current = wait_settled(&w, "the first leader", None, &op).await;
    assert_eq!((current.leader.as_str(), current.epoch), ("app-0", 1));

    let pods = &w.pods;
    let before = pods
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    for &fault in faults {
        // The leader turns NotReady, and the fault strikes while the operator hands over.
        let old = current.clone();
        w.kubelet.set_ready(&old.leader, false).await.unwrap();
        match fault {
            "kube-apiserver restart" => pc.restart("kube-apiserver").await.unwrap(),
            "etcd restart" => pc.restart("etcd").await.unwrap(),
            "connection cut" => {
                proxy.cut();
                tokio::time::sleep(Duration::from_secs(5)).await;
                proxy.heal();
            }
            "compaction and kube-apiserver restart" => {
                pc.compact_etcd().await.unwrap();
                pc.restart("kube-apiserver").await.unwrap();
                // Every watch now resumes from a compacted revision: 410 Gone, then a new list.
                let gone = pods
                    .watch(&Default::default(), &before)
                    .await
                    .map(|_| ())
                    .err()
                    .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 410));
                let first = if gone {
                    true
                } else {
                    use futures::StreamExt;
                    let mut stream = pods
                        .watch(&Default::default(), &before)
                        .await
                        .unwrap()
                        .boxed();
                    matches!(stream.next().await, Some(Ok(kube::api::WatchEvent::Error(s))) if s.code == 410)
                };
                assert!(
                    first,
                    "a watch from before the compaction is not answered 410 Gone"
                );
            }
            other => unreachable!("unknown fault {other}"),
        }
        current = wait_settled(
            &w,
            &format!("a new leader after the {fault}"),
            Some(&old.leader),
            &op,
        )
        .await;
        eprintln!(
            "restarts: after the {fault}: {} leads at epoch {}",
            current.leader, current.epoch
        );
        // Usually the next epoch. Skipping is allowed, repeating never is (I3, checked by the
        // watcher): a token committed to the Lease and then abandoned (a reconcile past its
        // deadline, on a loaded machine) is never handed out again. Under the chaos run and a
        // benchmark beside it, a cut once skipped 7 (epoch 13 after 5).
        assert!(
            current.epoch > old.epoch,
            "{fault}: epoch {} after {}\n{}",
            current.epoch,
            old.epoch,
            op.logs()
        );
        w.kubelet.set_ready(&old.leader, true).await.unwrap();
    }
    let leaders = watch.assert_held().await;
    eprintln!("restarts: leaders seen {leaders:?}");
    drop(op);
    drop(w);
}
