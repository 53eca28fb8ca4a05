//! Scenario `heartbeat-writes` (issue 12): what Heartbeat liveness costs the API server. 100
//! groups of three Ready pods (Lease 15 s); the API writes per group per second in a steady
//! window, first in Readiness mode (the operator renews every Lease), then in Heartbeat mode (each
//! leader's `leadergroup-client` `Membership`, in the bench process, renews its group's Lease and
//! the operator stops). Writes are the API server's own count (`apiserver_request_total`, verbs
//! POST, PUT, PATCH, DELETE, APPLY), less an idle baseline.

use std::path::Path;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{Patch, PatchParams};
use leadergroup_client::Membership;
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_operator::election::HEARTBEAT;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::observe::{LeaderWatch, RequestCounts, api_requests, rates};
use crate::ours::{Groups, OperatorProcess};
use crate::report::Run;

/// The verbs that write.
const WRITES: [&str; 5] = ["POST", "PUT", "PATCH", "DELETE", "APPLY"];

/// One mode's steady window.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Window {
    /// `Readiness` or `Heartbeat`.
    pub mode: String,
    /// Seconds measured.
    pub seconds: f64,
    /// Requests per second by verb and resource, less the baseline.
    pub requests_per_s: RequestCounts,
    /// Writes per second, all groups.
    pub writes_per_s: f64,
    /// Writes per group per second.
    pub writes_per_group_per_s: f64,
}

/// The scenario's result.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct HeartbeatWrites {
    /// The run.
    pub run: Run,
    /// Groups.
    pub groups: usize,
    /// Their Lease duration, s.
    pub lease_duration_seconds: i32,
    /// Readiness, then Heartbeat.
    pub windows: Vec<Window>,
}

/// Runs it: `groups` groups, windows of `window`.
pub async fn run(
    cp: &leadergroup_testenv::ControlPlane,
    operator: &Path,
    log_dir: &Path,
    groups: usize,
    window: Duration,
    run: Run,
) -> Result<HeartbeatWrites> {
    let admin = cp.client().await?;
    let idle = steady(&admin, Duration::from_secs(10), None).await?;
    let set = Groups::create("bench-hb", groups).await?;
    let watch = LeaderWatch::start(&set.client, &set.namespace).await?;
    let op = OperatorProcess::start(
        operator,
        cp.kubeconfig_path(),
        &set.namespace,
        &log_dir.join("operator-heartbeat-writes.log"),
    )
    .await?;
    set.wait_all_led(&watch).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let readiness = measured("Readiness", &admin, window, &idle, groups).await?;

    // Heartbeat: a Membership follows each leader pod, the groups switch mode.
    let memberships: Vec<Membership> = set
        .names
        .iter()
        .map(|g| {
            let leader = watch
                .leader(g)
                .ok_or_else(|| Error::Other(format!("{g} has no leader")))?;
            Ok(Membership::start(
                set.client.clone(),
                set.namespace.clone(),
                leader.pod,
                Some(g.clone()),
            ))
        })
        .collect::<Result<_>>()?;
    let api: Api<LeaderGroup> = Api::namespaced(set.client.clone(), &set.namespace);
    let patch = serde_json::json!({"spec": {"liveness": "Heartbeat"}});
    futures::stream::iter(&set.names)
        .map(|g| {
            let (api, patch) = (api.clone(), &patch);
            async move {
                api.patch(g, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    wait_renewing(&api, &set.names).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let heartbeat = measured("Heartbeat", &admin, window, &idle, groups).await?;
    drop(memberships);
    op.stop().await;
    Ok(HeartbeatWrites {
        run,
        groups,
        lease_duration_seconds: crate::ours::LEASE_SECONDS,
        windows: vec![readiness, heartbeat],
    })
}

/// Waits until every group's Heartbeat condition says its leader renews.
async fn wait_renewing(api: &Api<LeaderGroup>, names: &[String]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list = api.list(&Default::default()).await?;
        let renewing = list
            .items
            .iter()
            .filter(|g| names.contains(&kube::ResourceExt::name_any(*g)))
            .filter(|g| {
                g.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == HEARTBEAT && c.reason == "Renewing")
                })
            })
            .count();
        if renewing == names.len() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Other(format!(
                "only {renewing} of {} groups report their leader renewing after 60 s",
                names.len()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Request rates over `length`, less `baseline`.
async fn steady(
    admin: &kube::Client,
    length: Duration,
    baseline: Option<&RequestCounts>,
) -> Result<RequestCounts> {
    let before = api_requests(admin).await?;
    let t0 = std::time::Instant::now();
    tokio::time::sleep(length).await;
    let after = api_requests(admin).await?;
    Ok(rates(&before, &after, t0.elapsed().as_secs_f64(), baseline))
}

async fn measured(
    mode: &str,
    admin: &kube::Client,
    length: Duration,
    idle: &RequestCounts,
    groups: usize,
) -> Result<Window> {
    crate::say(format!(
        "heartbeat-writes: {mode}, {} s window",
        length.as_secs()
    ));
    let requests_per_s = steady(admin, length, Some(idle)).await?;
    let writes_per_s: f64 = requests_per_s
        .iter()
        .filter(|(k, _)| WRITES.iter().any(|w| k.starts_with(&format!("{w} "))))
        .map(|(_, v)| v)
        .sum();
    Ok(Window {
        mode: mode.to_owned(),
        seconds: length.as_secs_f64(),
        requests_per_s,
        writes_per_s,
        writes_per_group_per_s: writes_per_s / groups as f64,
    })
}

/// The report's section.
pub fn section(result: &HeartbeatWrites) -> String {
    let mut s = format!(
        "## API writes per group: Readiness vs Heartbeat\n\n{} groups of three Ready pods, Lease {} s, light cluster (etcd + kube-apiserver, simulated kubelet); steady windows, the API server's `apiserver_request_total` less an idle baseline. Heartbeat: each leader's `leadergroup-client` `Membership` (in the bench process) renews its Lease every third of the duration, the operator does not.\n\n| mode | window s | writes/s (all groups) | writes per group per s | by verb and resource |\n|---|---|---|---|---|\n",
        result.groups, result.lease_duration_seconds
    );
    for w in &result.windows {
        let detail = w
            .requests_per_s
            .iter()
            .filter(|(k, v)| {
                **v >= 0.005 && WRITES.iter().any(|verb| k.starts_with(&format!("{verb} ")))
            })
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            "| {} | {:.0} | {:.2} | {:.3} | {} |\n",
            w.mode, w.seconds, w.writes_per_s, w.writes_per_group_per_s, detail
        ));
    }
    s
}
