//! Leadership belongs to one pod incarnation. A pod force-deleted and created again under the
//! same name, while no operator was watching (the StatefulSet way out of a lost node, with the
//! old container perhaps still running), is a new candidate: it never inherits its predecessor's
//! token, and the status says why leadership moved.

use kube::ResourceExt;
use kube::api::PostParams;

use crate::common::{InvariantWatcher, Operator, World, group};
use leadergroup_testenv::control_plane;

#[tokio::test]
async fn a_leader_created_again_under_its_name_never_holds_its_predecessors_token() {
    let cp = control_plane().await.unwrap();
    let w = World::new("incarnation").await;
    let pods = w.ordered_ready_pods("web", 2, "web").await;
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let mut op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("web", "web"))
        .await
        .unwrap();
    let first = w.wait_settled("web", "web-0 leads", |_| true).await;
    assert_eq!((first.leader.as_str(), first.epoch), (pods[0].as_str(), 1));
    let old_uid = w.pods.get(&pods[0]).await.unwrap().uid();

    op.kill().await;
    w.kubelet.delete_now(&pods[0]).await.unwrap();
    let again = w
        .kubelet
        .create_ready_pod(&pods[0], &[("app", "web")])
        .await
        .unwrap();
    assert_ne!(again.uid(), old_uid, "a new incarnation");

    let _op = Operator::start(cp, &w.ns.name, "op-2", &[]).await;
    let next = w
        .wait_settled("web", "a leader at a new epoch", |s| s.epoch > 1)
        .await;
    assert_eq!(next.epoch, 2, "one token per incarnation, none skipped");
    let status = w.groups.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("LeaderReplaced")
    );
    let leader = w.pods.get(&next.leader).await.unwrap();
    assert_eq!(
        status.leader_uid,
        leader.uid(),
        "the status names the incarnation"
    );
    watch.assert_held().await;
}
