//! Deleting a LeaderGroup: its finalizer removes the operator's labels and annotations from the
//! pods and leaves the Lease released (no holder, no owner, its epoch kept for a group created
//! again under the name: tests/it/recreation.rs), then lets the group go. The pods stay.

use crate::common::{Operator, World, group, lease};
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use leadergroup_operator::crd::{EPOCH_ANNOTATION, FINALIZER, GROUP_ANNOTATION, ROLE_LABEL};
use leadergroup_testenv::control_plane;

#[tokio::test]
async fn deleted_group_leaves_no_marks_and_its_lease_released_and_keeps_the_pods() {
    let w = World::new("cleanup").await;
    let pods = w.ordered_ready_pods("app", 3, "pay").await;
    // A pod of another group in the same namespace keeps its marks.
    w.kubelet
        .create_ready_pod("other-0", &[("app", "other")])
        .await
        .unwrap();
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    w.groups
        .create(&PostParams::default(), &group("other", "other"))
        .await
        .unwrap();
    w.wait_settled("pay", "pay elected", |_| true).await;
    w.wait_settled("other", "other elected", |_| true).await;
    assert!(
        w.groups
            .get("pay")
            .await
            .unwrap()
            .finalizers()
            .contains(&FINALIZER.to_string())
    );

    w.groups
        .delete("pay", &DeleteParams::default())
        .await
        .unwrap();
    w.wait_group_gone("pay").await;
    // The finalizer did its work before the group went: nothing is left to wait for.
    for name in &pods {
        let p = w.pods.get(name).await.expect("the pods still exist");
        assert!(
            !p.labels().contains_key(ROLE_LABEL),
            "{name}: {:?}",
            p.labels()
        );
        assert!(
            !p.annotations().contains_key(EPOCH_ANNOTATION),
            "{name}: {:?}",
            p.annotations()
        );
        assert!(
            !p.annotations().contains_key(GROUP_ANNOTATION),
            "{name}: {:?}",
            p.annotations()
        );
    }
    let left = lease(&w.ns.client, &w.ns.name, "pay")
        .await
        .expect("the Lease is kept for its epoch");
    assert!(
        left.owner_references().is_empty()
            && left
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_ref())
                .is_none()
            && left.annotations().get(EPOCH_ANNOTATION).map(String::as_str) == Some("1"),
        "the Lease is released with its epoch: {left:?}"
    );
    assert_eq!(
        w.settled("other").await.unwrap().map(|s| s.leader),
        Some("other-0".to_string()),
        "the other group is untouched"
    );
}
