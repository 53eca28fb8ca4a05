//! The StatefulSet split brain: the leader's node is lost, and its pod is force-deleted, the
//! documented way out, while its container still runs there. The StatefulSet re-creates the pod
//! under the same name on the other node, with a new UID. The operator is stopped across the
//! re-creation, so that it sees only the outcome, as after a watch gap or a restart: the old pod's
//! deletion never reaches it.
//!
//! The new incarnation is a new candidate: it leads with a higher epoch than its predecessor, the
//! status records its UID, and a fence that saw the new epoch refuses a write with the old one,
//! the token the cut-off container still holds.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use leadergroup_client::Epoch;
use leadergroup_client::fence::replace_fenced;
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::{InvariantWatcher, Undo, run_ok, wait_settled, wait_until};
use serde_json::json;

use crate::cluster::{
    APP, CONVERGE, Cluster, PODS, RELEASE, RELEASE_NS, is_ready, node_of, pod_summary,
    webapp_container,
};

/// The node lost, where the first incarnation runs, and the one its successor runs on.
const CUT: &str = "lg-node-1";
const PEER: &str = "lg-node-2";
/// The StatefulSet's one pod.
const POD: &str = "web-0";
/// The chart's default number of operator replicas, restored after the stop.
const OPERATOR_REPLICAS: &str = "2";

fn scale_operator(c: &Cluster, replicas: &str) -> std::process::Command {
    let mut scale = c.cp.kubectl();
    scale.args([
        "--namespace",
        RELEASE_NS,
        "scale",
        &format!("deployment/{RELEASE}"),
        &format!("--replicas={replicas}"),
    ]);
    scale
}

fn pod_epoch(pod: &Pod) -> Option<i64> {
    leadergroup_testenv::pods::epoch(pod)
}

#[tokio::test]
async fn a_force_deleted_leader_re_created_under_its_name_gets_a_new_token() {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let ns = leadergroup_testenv::namespace_in(c.client.clone(), "e2e-incarnation")
        .await
        .unwrap();
    let _ns_guard = c.namespace_guard(&ns.name);
    let pods: Api<Pod> = ns.api();
    let watch = InvariantWatcher::start(&c.client, &ns.name).await;

    // The first incarnation on node 1 (node 2 cordoned while it is scheduled).
    {
        let _cordoned = c.cordon(PEER).await;
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": APP},
            "spec": {
                "replicas": 1,
                "serviceName": APP,
                "selector": {"matchLabels": {"app": APP}},
                "template": {
                    "metadata": {"labels": {"app": APP}},
                    "spec": {
                        "terminationGracePeriodSeconds": 5,
                        "containers": [webapp_container(0)],
                    },
                },
            },
        }))
        .unwrap();
        ns.api::<StatefulSet>()
            .create(&PostParams::default(), &set)
            .await
            .unwrap();
        let group: LeaderGroup = serde_json::from_value(json!({
            "apiVersion": "leadergroup.io/v1alpha1", "kind": "LeaderGroup",
            "metadata": {"name": APP},
            "spec": {"selector": {"matchLabels": {"app": APP}}},
        }))
        .unwrap();
        ns.api::<LeaderGroup>()
            .create(&PostParams::default(), &group)
            .await
            .unwrap();
        wait_until("web-0 Ready on node 1", PODS, || async {
            let p = pods.get_opt(POD).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(p.filter(|p| is_ready(p) && node_of(p) == CUT).map(|_| ()))
        })
        .await
        .unwrap();
    }
    let first = wait_settled(&c.client, &ns.name, APP, "web-0 leads", CONVERGE, |s| {
        s.leader == POD
    })
    .await
    .unwrap();
    let old = pods.get(POD).await.unwrap();
    let old_uid = old.uid().unwrap();
    assert_eq!(pod_epoch(&old), Some(first.epoch));

    // The operator stopped; node 1 lost; its pod force-deleted while its container runs on.
    let restart = Undo::new(scale_operator(&c, OPERATOR_REPLICAS));
    run_ok(scale_operator(&c, "0")).await;
    wait_until("no operator pod", PODS, || async {
        Ok::<_, String>(c.operator_pods().await.is_empty().then_some(()))
    })
    .await
    .unwrap();
    let _cordoned = c.cordon(CUT).await;
    let (_uncut, _) = c.cut_node(CUT).await;
    pods.delete(
        POD,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    let new = wait_until("web-0 re-created and Ready on node 2", PODS, || async {
        let p = pods.get_opt(POD).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(p.filter(|p| p.uid().as_ref() != Some(&old_uid) && is_ready(p)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let new_uid = new.uid().unwrap();
    assert_eq!(node_of(&new), PEER);

    // The operator back: the new incarnation leads with a token of its own.
    drop(restart);
    c.wait_operator_active(None).await;
    let second = wait_settled(
        &c.client,
        &ns.name,
        APP,
        "the new web-0 leads",
        CONVERGE,
        |s| s.leader == POD && s.epoch != first.epoch,
    )
    .await;
    let second = match second {
        Ok(s) => s,
        Err(e) => panic!(
            "{e}\npods: {:#?}",
            pod_summary(&pods.list(&Default::default()).await.unwrap().items)
        ),
    };
    assert!(
        second.epoch > first.epoch,
        "the new incarnation's epoch {} is above its predecessor's {}",
        second.epoch,
        first.epoch
    );
    let group = ns.api::<LeaderGroup>().get(APP).await.unwrap();
    let status = group.status.unwrap_or_default();
    assert_eq!(status.leader_uid.as_deref(), Some(new_uid.as_str()));
    assert_eq!(pod_epoch(&pods.get(POD).await.unwrap()), Some(second.epoch));

    // A fence that saw the new incarnation's token refuses the old one's.
    let config_maps: Api<ConfigMap> = ns.api();
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "ledger"}})).unwrap(),
        )
        .await
        .unwrap();
    let write = |epoch: i64, writer: &'static str| {
        let config_maps = config_maps.clone();
        async move {
            replace_fenced(
                &config_maps,
                "ledger",
                Epoch::new(epoch).expect("an epoch is never negative"),
                Duration::from_secs(10),
                |cm| {
                    cm.data
                        .get_or_insert_default()
                        .insert("writer".into(), writer.into());
                },
            )
            .await
        }
    };
    write(second.epoch, "new incarnation").await.unwrap();
    let refused = write(first.epoch, "old incarnation").await;
    let stale = refused
        .as_ref()
        .err()
        .and_then(|e| e.stale())
        .unwrap_or_else(|| panic!("the old incarnation's write was not refused: {refused:?}"));
    assert_eq!(stale.presented.get(), first.epoch);
    println!(
        "web-0 re-created on {PEER} while {CUT} was cut: epoch {} -> {} (uid {old_uid} -> {new_uid}); \
         the old token's write refused: {stale}",
        first.epoch, second.epoch
    );
    watch.assert_held().await;
}
