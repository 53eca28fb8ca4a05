//! The invariant watcher judges what the API server holds, not what its watches happened to
//! deliver by then: a test that saw a write through a read must not be judged on a watch that
//! is still behind it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use leadergroup_testenv::crd::shipped_crd;
use leadergroup_testenv::{
    InvariantWatcher, Kubelet, Marks, Proxy, api_server_addr, control_plane, install_crd, namespace,
};

#[tokio::test]
async fn a_pod_watch_behind_the_api_server_is_waited_for_before_judging() {
    let cp = control_plane().await.unwrap();
    let ns = namespace("watcher-behind").await.unwrap();
    install_crd(&ns.client, &shipped_crd().unwrap())
        .await
        .unwrap();
    let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
    kubelet.ensure_node().await.unwrap();
    kubelet
        .create_ready_pod("app-0", &[("app", "x")])
        .await
        .unwrap();

    let proxy = Proxy::start(api_server_addr().await.unwrap())
        .await
        .unwrap();
    let watch = InvariantWatcher::start(&cp.client_via(proxy.addr).await.unwrap(), &ns.name).await;
    // The watches' connections go silent, as a half-open one does; the marks are written past
    // the proxy, so the watch cannot have shown them.
    proxy.stall();
    let marks = Marks::in_namespace(&ns, "test", 15);
    marks.put_lease("g", Some("app-0"), 1).await.unwrap();
    watch.forged_marks("app-0", 1);
    marks.mark_leader("app-0", "g", 1).await.unwrap();

    // The stalled connections close a while later; the watch relists on a new one.
    let heal = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.heal();
    };
    let ((), leaders) = tokio::join!(heal, watch.assert_held());
    assert_eq!(leaders, vec![("app-0".to_owned(), 1)]);
}
