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
    watch.assert_held();
}
