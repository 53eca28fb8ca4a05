//! The example web application (three replicas of a Deployment) with a LeaderGroup and a Service
//! that selects `leadergroup.io/role=leader`: requests through the Service's ClusterIP reach only
//! the leader, before and after a handover, and a rolling update of the Deployment moves
//! leadership at each old leader's deletionTimestamp, before its container stops.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use leadergroup_testenv::wait_until;

use crate::cluster::{APP, CONVERGE, PODS, Scene, container_running};

/// Requests sent through the Service each time the test checks who answers.
const REQUESTS: usize = 20;

#[tokio::test]
async fn the_leader_service_reaches_only_the_leader_before_and_after_a_handover() {
    let w = Scene::start("e2e-service", 0).await;
    w.app.first_answer_from(&w.first.leader).await;
    let answers = w.app.ask_many(REQUESTS).await;
    assert!(
        answers
            .iter()
            .all(|a| a.as_deref() == Some(w.first.leader.as_str())),
        "only the leader {} answers: {answers:?}",
        w.first.leader
    );

    // Handover by deletion; the clock starts when the w.watch shows the new leader's label.
    let deleted = Instant::now();
    w.app
        .pods
        .delete(&w.first.leader, &DeleteParams::default())
        .await
        .unwrap();
    let second = w
        .app
        .wait_handover(&w.first, &["LeaderTerminating"], CONVERGE)
        .await;
    w.log.caught_up().await;
    let labeled = w
        .log
        .leader_seen(&second.leader, deleted)
        .expect("the watch showed the new leader's label");
    let served = w.app.first_answer_from(&second.leader).await;
    let to_label = labeled - deleted;
    let to_served = served.saturating_duration_since(labeled);
    println!(
        "handover by deletion: DELETE -> new leader label {:.0} ms; label -> first request served by the new leader {:.0} ms",
        to_label.as_secs_f64() * 1e3,
        to_served.as_secs_f64() * 1e3
    );
    let answers = w.app.ask_many(REQUESTS).await;
    assert!(
        answers
            .iter()
            .all(|a| a.as_deref() == Some(second.leader.as_str())),
        "only the new leader {} answers: {answers:?}",
        second.leader
    );
    w.finish().await;
}

#[tokio::test]
async fn a_rolling_update_moves_leadership_at_each_old_leaders_deletion_timestamp() {
    // The app drains for 3 s after SIGTERM: the window in which the old leader still runs.
    let w = Scene::start("e2e-rolling", 3).await;
    let old_pods: Vec<String> = w.app.list().await.iter().map(|p| p.name_any()).collect();

    let started = Instant::now();
    let change = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": APP, "env": [{"name": "VERSION", "value": "2"}]}
    ]}}}});
    w.app
        .deployments
        .patch(APP, &PatchParams::default(), &Patch::Strategic(&change))
        .await
        .unwrap();
    wait_until("the rollout done", PODS, || async {
        let d: Deployment = w
            .app
            .deployments
            .get(APP)
            .await
            .map_err(|e| e.to_string())?;
        let s = d.status.clone().unwrap_or_default();
        let pods = w.app.list().await;
        let done = s.observed_generation == d.metadata.generation
            && s.updated_replicas == Some(3)
            && s.ready_replicas == Some(3)
            && s.replicas == Some(3)
            && pods.len() == 3
            && pods.iter().all(|p| !old_pods.contains(&p.name_any()));
        Ok::<_, String>(done.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let last = w
        .app
        .wait_settled("a new pod leads", CONVERGE, |s| {
            !old_pods.contains(&s.leader)
        })
        .await;
    let rollout = started.elapsed();

    // Every move of the label after the w.first leader: from an old pod that was terminating (it
    // had its deletionTimestamp) and still existed with its container running.
    w.log.caught_up().await;
    let moves: Vec<_> = w
        .log
        .moves()
        .into_iter()
        .filter(|m| m.at >= started)
        .collect();
    assert!(!moves.is_empty(), "leadership moved to the new pods");
    for m in &moves {
        let old = m.old.as_ref().expect("a previous leader");
        let name = old.name_any();
        assert!(
            old_pods.contains(&name),
            "the label moved away from an old pod: {m:?}"
        );
        assert!(
            old.metadata.deletion_timestamp.is_some(),
            "{name} was terminating when the label moved to {}",
            m.new
        );
        assert!(
            m.old_present,
            "{name} still existed when the label moved to {}",
            m.new
        );
        assert!(
            container_running(old),
            "{name}'s container was still running when the label moved to {}",
            m.new
        );
    }
    // Never two leaders; the epoch grew by one per move.
    let leaders = w.leaders().await;
    assert_eq!(
        last.epoch,
        w.first.epoch + moves.len() as i64,
        "{leaders:?}"
    );
    let status = w.app.groups.get(APP).await.unwrap().status.unwrap();
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("LeaderTerminating")
    );
    println!(
        "rolling update of 3 replicas: {} leadership moves ({}), epoch {} -> {}, all at the old leader's deletionTimestamp with its container running; rollout {:.1} s",
        moves.len(),
        moves
            .iter()
            .map(|m| format!("{} -> {}", m.old.as_ref().unwrap().name_any(), m.new))
            .collect::<Vec<_>>()
            .join(", "),
        w.first.epoch,
        last.epoch,
        rollout.as_secs_f64()
    );
    w.finish().await;
}
