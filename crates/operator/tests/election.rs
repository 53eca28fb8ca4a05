//! Election and handover, observed the way a user would: pod labels and annotations, the Lease,
//! the status, the Events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{CONVERGE, InvariantWatcher, Operator, epoch, install_crd, lease, role};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::{LeaderGroup, LeaderGroupSpec, PodSelector};
use leadergroup_testenv::{Kubelet, control_plane, namespace, wait_for_object};

fn group(name: &str, app: &str) -> LeaderGroup {
    LeaderGroup::new(
        name,
        LeaderGroupSpec {
            selector: PodSelector { match_labels: [("app".to_string(), app.to_string())].into(), ..Default::default() },
            lease_duration_seconds: 15,
            preferred_leader: None,
            paused: false,
        },
    )
}

#[tokio::test]
async fn three_ready_pods_elect_one_leader_at_epoch_one() {
    let cp = control_plane().await.unwrap();
    let ns = namespace("elect").await.unwrap();
    install_crd(&ns.client).await;
    let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
    for i in 0..3 {
        kubelet.create_ready_pod(&format!("app-{i}"), &[("app", "pay")]).await.unwrap();
    }
    let watch = InvariantWatcher::start(&ns.client, &ns.name).await;
    let operator = Operator::start(cp, &ns.name, "op-1", &[]).await;
    let groups: Api<LeaderGroup> = Api::namespaced(ns.client.clone(), &ns.name);
    groups.create(&PostParams::default(), &group("pay", "pay")).await.unwrap();

    let g = wait_for_object(&groups, "pay", "a leader at epoch 1", CONVERGE, |g: Option<&LeaderGroup>| {
        g.and_then(|g| g.status.as_ref()).is_some_and(|s| s.leader.is_some() && s.epoch == 1)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", operator.logs()));
    let status = g.unwrap().status.unwrap();
    let leader = status.leader.clone().unwrap();
    assert_eq!(status.ready.as_deref(), Some("3/3"));
    assert_eq!(status.succession.len(), 2);

    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    leadergroup_testenv::wait_until("roles converge", CONVERGE, || async {
        let list = pods.list(&Default::default()).await?;
        let leaders: Vec<_> = list.items.iter().filter(|p| role(p) == Some("leader")).map(|p| p.name_any()).collect();
        let followers = list.items.iter().filter(|p| role(p) == Some("follower")).count();
        Ok::<_, kube::Error>((leaders == vec![leader.clone()] && followers == 2).then_some(()))
    })
    .await
    .unwrap();
    let leader_pod = pods.get(&leader).await.unwrap();
    assert_eq!(epoch(&leader_pod), Some(1));
    let lease = lease(&ns.client, &ns.name, "pay").await.expect("Lease exists");
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some(leader.as_str()));
    assert_eq!(watch.assert_held(), vec![(leader, 1)]);
}
