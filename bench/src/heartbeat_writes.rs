//! Scenario `heartbeat-writes`: what Heartbeat liveness costs the API server. 100 groups of three
//! Ready pods (Lease 15 s); the API writes per group per second in a steady window, first in
//! Readiness mode (the operator renews every Lease), then in Heartbeat mode (each leader's
//! `leadergroup-client` `Membership`, in the bench process, renews its group's Lease and the
//! operator stops). Writes are the API server's own count (`apiserver_request_total`, verbs
//! POST, PUT, PATCH, DELETE, APPLY), less an idle baseline.

use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use leadergroup_client::Membership;
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_operator::election::HEARTBEAT;
use leadergroup_testenv::wait_until_every;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::markdown::{Block, Table};
use crate::observe::{RequestCounts, is_write, steady_window};
use crate::ours::in_flight;
use crate::results::Run;
use crate::scenario::{Context, Recorded, Scenario, measuring};

pub const HEARTBEAT_WRITES: Scenario = Scenario::of::<HeartbeatWritesResult>(
    "heartbeat-writes",
    "Heartbeat mode's renewal writes",
    |ctx| measuring(measure(ctx)),
);

/// Groups measured.
const GROUPS: usize = 100;

/// One mode's steady window.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Window {
    /// `Readiness` or `Heartbeat`.
    pub mode: String,
    pub seconds: f64,
    /// Requests per second by verb and resource, less the baseline.
    pub requests_per_s: RequestCounts,
    pub writes_per_s: f64,
    pub writes_per_group_per_s: f64,
}

/// `heartbeat-writes.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct HeartbeatWritesResult {
    pub groups: usize,
    /// Their Lease duration, s.
    pub lease_duration_seconds: i32,
    /// Readiness, then Heartbeat.
    pub windows: Vec<Window>,
}

impl Recorded for HeartbeatWritesResult {
    const FILE: &'static str = "heartbeat-writes";

    fn blocks(&self, _run: &Run) -> Vec<Block> {
        let setup = Table::new(&["groups", "Lease duration"]).with([
            self.groups.to_string(),
            format!("{} s", self.lease_duration_seconds),
        ]);
        let mut table = Table::new(&[
            "mode",
            "window s",
            "writes/s (all groups)",
            "writes per group per s",
            "by verb and resource",
        ]);
        for w in &self.windows {
            let writes = w
                .requests_per_s
                .iter()
                .filter(|(k, v)| **v >= 0.005 && is_write(k))
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ");
            table.row([
                w.mode.clone(),
                format!("{:.0}", w.seconds),
                format!("{:.2}", w.writes_per_s),
                format!("{:.3}", w.writes_per_group_per_s),
                writes,
            ]);
        }
        vec![Block::tables("heartbeat-writes", [setup, table])]
    }
}

async fn measure(ctx: &Context) -> Result<HeartbeatWritesResult> {
    tracing::info!("heartbeat-writes: {GROUPS} groups, Readiness then Heartbeat");
    let light = ctx.light().await?;
    let admin = &light.admin;
    let idle = steady_window(admin, Duration::from_secs(10), None, Default::default)
        .await?
        .requests;
    let (set, op) = ctx
        .led_groups("bench-hb", GROUPS, "operator-heartbeat-writes.log")
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let readiness = measured("Readiness", admin, ctx.window(), &idle).await?;

    // Heartbeat: a Membership follows each leader pod, the groups switch mode.
    let memberships: Vec<Membership> = set
        .names
        .iter()
        .map(|g| {
            let leader = set
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
    in_flight(8, &set.names, |g| {
        let (api, patch) = (api.clone(), &patch);
        async move {
            api.patch(g, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            Ok(())
        }
    })
    .await?;
    wait_renewing(&api, &set.names).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let heartbeat = measured("Heartbeat", admin, ctx.window(), &idle).await?;
    drop(memberships);
    drop(op);
    Ok(HeartbeatWritesResult {
        groups: GROUPS,
        lease_duration_seconds: crate::ours::LEASE_SECONDS,
        windows: vec![readiness, heartbeat],
    })
}

/// Waits until every group's Heartbeat condition says its leader renews.
async fn wait_renewing(api: &Api<LeaderGroup>, names: &[String]) -> Result<()> {
    let what = format!("all {} groups to report their leader renewing", names.len());
    let every = Duration::from_millis(500);
    let renewing = wait_until_every(&what, Duration::from_secs(60), every, || async {
        let list = api.list(&Default::default()).await?;
        let renewing = list.items.iter().filter(|g| {
            names.contains(&kube::ResourceExt::name_any(*g))
                && g.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == HEARTBEAT && c.reason == "Renewing")
                })
        });
        Ok::<_, kube::Error>((renewing.count() == names.len()).then_some(()))
    });
    Ok(renewing.await?)
}

/// One mode's steady window over every group.
async fn measured(
    mode: &str,
    admin: &kube::Client,
    length: Duration,
    idle: &RequestCounts,
) -> Result<Window> {
    tracing::info!("heartbeat-writes: {mode}, {} s window", length.as_secs());
    let requests_per_s = steady_window(admin, length, Some(idle), Default::default)
        .await?
        .requests;
    let writes_per_s: f64 = requests_per_s
        .iter()
        .filter(|(k, _)| is_write(k))
        .map(|(_, v)| v)
        .sum();
    Ok(Window {
        mode: mode.to_owned(),
        seconds: length.as_secs_f64(),
        requests_per_s,
        writes_per_s,
        writes_per_group_per_s: writes_per_s / GROUPS as f64,
    })
}
