//! Overlapping selectors: a pod selected by two groups belongs to the older one; the younger
//! group reports the condition Overlapping and elects among the pods it does hold.

use std::time::Duration;

use crate::common::{InvariantWatcher, Operator, Settled, World, group, role};
use kube::api::PostParams;
use leadergroup_operator::crd::{LeaderGroup, PodSelector};
use leadergroup_operator::election::OVERLAPPING;
use leadergroup_testenv::control_plane;

#[tokio::test]
async fn older_group_keeps_the_shared_pod_and_the_younger_reports_overlapping() {
    let w = World::new("overlap").await;
    // shared-0 is the oldest pod and matches both groups; only-1 matches the younger one alone.
    w.kubelet
        .create_ready_pod("shared-0", &[("app", "pay"), ("tier", "db")])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    w.kubelet
        .create_ready_pod("only-1", &[("tier", "db")])
        .await
        .unwrap();
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;

    w.groups
        .create(&PostParams::default(), &group("older", "pay"))
        .await
        .unwrap();
    w.wait_settled("older", "older elects shared-0", |_| true)
        .await;
    // creationTimestamp has 1 s granularity: make the second group strictly younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let younger = LeaderGroup::new(
        "younger",
        leadergroup_operator::crd::LeaderGroupSpec {
            selector: PodSelector {
                match_labels: [("tier".to_string(), "db".to_string())].into(),
                ..Default::default()
            },
            ..group("x", "x").spec
        },
    );
    w.groups
        .create(&PostParams::default(), &younger)
        .await
        .unwrap();

    let status = w
        .wait_status("younger", "condition Overlapping", |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == OVERLAPPING && c.status == "True")
        })
        .await;
    let overlapping = status
        .conditions
        .iter()
        .find(|c| c.type_ == OVERLAPPING)
        .unwrap();
    assert!(
        overlapping.message.contains("shared-0") && overlapping.message.contains("older"),
        "{overlapping:?}"
    );
    assert_eq!(status.candidates, 2, "the selector matches both pods");
    assert_eq!(
        status.ready_candidates, 1,
        "only one is the younger group's"
    );

    let older = w
        .wait_settled("older", "older keeps shared-0", |_| true)
        .await;
    assert_eq!(
        older,
        Settled {
            leader: "shared-0".into(),
            epoch: 1
        }
    );
    let younger = w
        .wait_settled("younger", "younger elects only-1", |_| true)
        .await;
    assert_eq!(
        younger,
        Settled {
            leader: "only-1".into(),
            epoch: 1
        }
    );
    let shared = w.pods.get("shared-0").await.unwrap();
    assert_eq!(role(&shared), Some("leader"));
    assert_eq!(
        shared
            .metadata
            .annotations
            .unwrap()
            .get(leadergroup_operator::crd::GROUP_ANNOTATION)
            .map(String::as_str),
        Some("older")
    );
    watch.assert_held().await;
}

/// An older group whose selector grows takes the younger group's leader; the
/// younger group must let go of it, never write its own marks over the older group's.
#[tokio::test]
async fn a_growing_older_group_takes_the_younger_groups_leader_without_a_fight() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::runtime::{WatchStreamExt, watcher};
    use leadergroup_operator::crd::GROUP_ANNOTATION;

    let w = World::new("overlap-grow").await;
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("older", "older"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    w.groups
        .create(&PostParams::default(), &group("younger", "younger"))
        .await
        .unwrap();
    let pods = w.ordered_ready_pods("y", 2, "younger").await;
    let first = w
        .wait_settled("younger", "younger elects y-0", |_| true)
        .await;
    assert_eq!(first.leader, pods[0]);
    let watch = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;

    // Every (group annotation, role) the shared pod goes through.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(
        Vec::<(Option<String>, Option<String>)>::new(),
    ));
    let sink = seen.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={}", pods[0]));
    let pods_api = w.pods.clone();
    let recorder = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(pods_api, config).applied_objects());
        while let Some(Ok(pod)) = events.next().await {
            let pod: Pod = pod;
            let marks = (
                pod.annotations().get(GROUP_ANNOTATION).cloned(),
                role(&pod).map(str::to_string),
            );
            let mut seen = sink.lock().unwrap();
            if seen.last() != Some(&marks) {
                seen.push(marks);
            }
        }
    });

    let grown = serde_json::json!({"selector": {"matchLabels": null, "matchExpressions": [
        {"key": "app", "operator": "In", "values": ["older", "younger"]}
    ]}});
    w.patch_spec("older", grown).await;
    let older = w.wait_settled("older", "older takes y-0", |_| true).await;
    assert_eq!(older.leader, pods[0], "the oldest Ready pod it now selects");
    // Give the younger group every chance to fight back: it has let go (the older group holds
    // both its pods), and the younger group itself has been decided on twice more since, not a
    // time slept nor the operator's count of reconciles, which the older group's alone can reach.
    w.wait_status("younger", "younger lets go of y-0", |s| s.leader.is_none())
        .await;
    for _ in 0..2 {
        decided_again(&w, "younger").await;
    }
    recorder.abort();
    let seen = seen.lock().unwrap().clone();
    let taken = seen
        .iter()
        .position(|(g, _)| g.as_deref() == Some("older"))
        .expect("the older group marked the pod");
    assert!(
        seen[taken..]
            .iter()
            .all(|(g, _)| g.as_deref() == Some("older")),
        "the younger group wrote over the older group's marks: {seen:?}"
    );
    assert_eq!(
        seen.last().unwrap(),
        &(Some("older".to_string()), Some("leader".to_string()))
    );
    // Both of its pods are the older group's now: it leads nobody, and keeps its epoch.
    let younger = w
        .wait_status("younger", "younger without candidates", |s| {
            s.leader.is_none()
        })
        .await;
    assert_eq!(younger.epoch, 1);
    watch.assert_held().await;
}

/// Waits until `group` has been decided on again: its spec edited (`historyLimit`, which no
/// decision reads but the history's length) and its status written for that generation. A
/// group's reconciles run one at a time, so every earlier pass of it has ended too.
async fn decided_again(w: &World, group: &str) {
    let current = w.groups.get(group).await.unwrap();
    let limit = current.spec.history_limit + 1;
    w.patch_spec(group, serde_json::json!({"historyLimit": limit}))
        .await;
    let generation = w.groups.get(group).await.unwrap().metadata.generation;
    w.wait_status(group, "the group decided on again", |s| {
        s.observed_generation == generation
    })
    .await;
}
