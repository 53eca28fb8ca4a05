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

use crate::error::{Error, Result};
use crate::markdown::{Block, Table};
use crate::observe::{RequestCounts, is_write, steady_window};
use crate::ours::in_flight;
use crate::results::Record;
use crate::scenario::{Context, Measured, Scenario, measuring};

pub const HEARTBEAT_WRITES: Scenario = Scenario {
    name: "heartbeat-writes",
    help: "Heartbeat mode's renewal writes",
    files: &["heartbeat-writes"],
    in_full_run: true,
    measure: |ctx| measuring(measure(ctx)),
    render: |records| blocks(&records[0]),
};

/// Groups measured.
const GROUPS: usize = 100;

/// The setup, and per mode its writes.
fn blocks(result: &Record) -> Vec<Block> {
    let groups = result.number("", "", "groups");
    let setup = Table::new(&["groups", "Lease duration"]).with([
        groups.to_string(),
        format!("{} s", result.number("", "", "lease_s")),
    ]);
    let mut table = Table::new(&[
        "mode",
        "window s",
        "writes/s (all groups)",
        "writes per group per s",
        "by verb and resource",
    ]);
    for mode in result.cases() {
        let requests = result
            .counts("", mode, "requests_per_s")
            .unwrap_or_default();
        let writes = requests.iter().filter(|(k, _)| is_write(k));
        let writes_per_s: f64 = writes.clone().map(|(_, v)| v).sum();
        let by_verb: Vec<String> = writes
            .filter(|(_, v)| **v >= 0.005)
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        table.row([
            mode.to_owned(),
            format!("{:.0}", result.number("", mode, "window_s")),
            format!("{writes_per_s:.2}"),
            format!("{:.3}", writes_per_s / groups),
            by_verb.join(", "),
        ]);
    }
    vec![Block::tables("heartbeat-writes", [setup, table])]
}

async fn measure(ctx: &Context) -> Result<Measured> {
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
    let mut record = Record::default();
    record.add("", "", "groups", GROUPS);
    record.add("", "", "lease_s", crate::ours::LEASE_SECONDS);
    measure_mode(&mut record, "Readiness", admin, ctx.window(), &idle).await?;

    // Heartbeat: a Membership follows each leader pod, the groups switch mode.
    let mut memberships = Vec::new();
    for g in &set.names {
        let leader = set.watch.leader(g);
        let pod = leader
            .ok_or_else(|| Error::Other(format!("{g} has no leader")))?
            .pod;
        let (client, namespace) = (set.client.clone(), set.namespace.clone());
        memberships.push(Membership::start(client, namespace, pod, Some(g.clone())));
    }
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
    measure_mode(&mut record, "Heartbeat", admin, ctx.window(), &idle).await?;
    drop(memberships);
    drop(op);
    Ok(Measured("heartbeat-writes", record))
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

/// One mode's steady window over every group: its length and requests per second.
async fn measure_mode(
    record: &mut Record,
    mode: &str,
    admin: &kube::Client,
    length: Duration,
    idle: &RequestCounts,
) -> Result<()> {
    tracing::info!("heartbeat-writes: {mode}, {} s window", length.as_secs());
    let steady = steady_window(admin, length, Some(idle), Default::default).await?;
    record.add("", mode, "window_s", length.as_secs_f64());
    record.add("", mode, "requests_per_s", steady.requests);
    Ok(())
}
