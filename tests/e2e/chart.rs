//! `helm install` of the chart with its default values on the real cluster: both operator replicas
//! run as containers, one is active, their probes pass, the metrics Service answers through its
//! ClusterIP over TLS to a token bound to the chart's metrics-reader ClusterRole (and 401 without
//! one); `helm upgrade` rolls the Deployment; `helm uninstall` removes it.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::{Api, ResourceExt};
use leadergroup_testenv::{Trust, http_get, https_get, run_ok, run_tool, wait_until};

use crate::cluster::{
    CONVERGE, Cluster, MetricsReader, PODS, RELEASE, RELEASE_NS, container_running, is_ready,
    repo_root,
};

const DEPLOYMENT: &str = "leadergroup-operator";

#[tokio::test]
async fn helm_install_runs_two_replicas_one_active_then_upgrade_rolls_and_uninstall_removes() {
    let c = Cluster::get().await;
    // Another test may have installed it already: start from nothing, as a user would.
    let mut status = c.cp.helm();
    status.args(["status", RELEASE, "--namespace", RELEASE_NS]);
    if run_tool(status).await.0 {
        uninstall(&c).await;
    }

    let started = Instant::now();
    run_ok(c.helm_install()).await;
    let active = c.wait_operator_active(None).await;
    let to_active = started.elapsed();
    println!(
        "helm install -> active operator ({active}): {:.1} s",
        to_active.as_secs_f64()
    );

    // Both replicas run as containers and pass their probes; exactly one says it is active.
    let pods = wait_until("two Ready operator pods", PODS, || async {
        let pods = c.operator_pods().await;
        let ready = pods
            .iter()
            .filter(|p| is_ready(p) && container_running(p))
            .count();
        Ok::<_, String>((ready == 2 && pods.len() == 2).then_some(pods))
    })
    .await
    .unwrap();
    let mut roles = Vec::new();
    for p in &pods {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
        let (code, body) = http_get(format!("{ip}:8080").parse().unwrap(), "/readyz")
            .await
            .expect("/readyz answers on the pod IP");
        assert_eq!(code, 200, "{}: {body}", p.name_any());
        roles.push((p.name_any(), body.trim().to_string()));
    }
    roles.sort_by_key(|(_, r)| r.clone());
    let holder = c.operator_lease_holder().await.unwrap();
    assert_eq!(
        roles.iter().map(|(_, r)| r.as_str()).collect::<Vec<_>>(),
        ["ready: active", "ready: standby"],
        "{roles:?}"
    );
    assert_eq!(
        roles[0].0, holder,
        "the active replica holds the Lease: {roles:?}"
    );

    // The metrics Service, from the host, through its ClusterIP (kube-proxy): the secure
    // /metrics, over TLS (the self-signed certificate not verified, as the ServiceMonitor) to the
    // token of a ServiceAccount bound to the chart's reader ClusterRole.
    let svc = Api::<Service>::namespaced(c.client.clone(), RELEASE_NS)
        .get("leadergroup-operator-metrics")
        .await
        .unwrap();
    let ip = svc.spec.and_then(|s| s.cluster_ip).unwrap();
    let scraper_ns = leadergroup_testenv::namespace_in(c.client.clone(), "e2e-scraper")
        .await
        .unwrap();
    let reader = MetricsReader::create(&scraper_ns, "scraper").await;
    // kube-proxy programs the Service shortly after its endpoints turn Ready: wait for it.
    let metrics = format!("{ip}:8443").parse().unwrap();
    let body = wait_until("the metrics Service answers", CONVERGE, || async {
        let (code, body) = https_get(metrics, "/metrics", Some(&reader.token), Trust::Any)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((code == 200).then_some(body))
    })
    .await
    .unwrap();
    assert!(body.contains("leadergroup_"), "{body}");
    let (code, body) = https_get(metrics, "/metrics", None, Trust::Any)
        .await
        .unwrap();
    assert_eq!(code, 401, "no token: {body}");
    reader.remove().await;

    // helm upgrade with a changed value rolls the Deployment: new pods with the new flag.
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), RELEASE_NS);
    let before = deployments.get(DEPLOYMENT).await.unwrap();
    let old_pods: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let mut upgrade = c.cp.helm();
    upgrade
        .args(["upgrade", RELEASE])
        .arg(repo_root().join("charts/leadergroup-operator"))
        .args(["--namespace", RELEASE_NS, "--set", "logFormat=text"]);
    let started = Instant::now();
    run_ok(upgrade).await;
    let rolled = wait_until("the upgrade rolled out", PODS, || async {
        let d = deployments
            .get(DEPLOYMENT)
            .await
            .map_err(|e| e.to_string())?;
        let status = d.status.clone().unwrap_or_default();
        let done = d.metadata.generation > before.metadata.generation
            && status.observed_generation == d.metadata.generation
            && status.updated_replicas == Some(2)
            && status.ready_replicas == Some(2)
            && status.replicas == Some(2);
        let pods = c.operator_pods().await;
        let fresh = pods.len() == 2 && pods.iter().all(|p| !old_pods.contains(&p.name_any()));
        Ok::<_, String>((done && fresh).then_some(pods))
    })
    .await
    .unwrap();
    for p in &rolled {
        let args = p.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap_or_default();
        assert!(args.contains(&"--log-format=text".to_string()), "{args:?}");
    }
    let active = c.wait_operator_active(None).await;
    println!(
        "helm upgrade -> both replicas replaced, {active} active: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    uninstall(&c).await;
    assert!(
        deployments.get_opt(DEPLOYMENT).await.unwrap().is_none(),
        "the Deployment is gone"
    );
}

/// `helm uninstall`, then waits until the operator's pods are gone.
pub async fn uninstall(c: &Cluster) {
    let mut uninstall = c.cp.helm();
    uninstall.args(["uninstall", RELEASE, "--namespace", RELEASE_NS]);
    run_ok(uninstall).await;
    wait_until("the operator pods gone", PODS, || async {
        Ok::<_, String>(c.operator_pods().await.is_empty().then_some(()))
    })
    .await
    .unwrap();
}
