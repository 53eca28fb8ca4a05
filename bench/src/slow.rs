//! Scenario `slow`: a slow API server. Users of client-go report leadership flapping when Lease
//! writes take seconds under load (a p99 of 3.5 s at 10,000 nodes). Every system's connections go
//! through one [`Proxy`] that delivers every byte of the API server's answers 1 to 3.5 s late
//! (the lag drawn anew every second; requests and the order of bytes are untouched), all systems
//! side by side in one window: the time until every group is led, how often a leader changed
//! with no fault during a steady window, how often two believed they led at once, and ours'
//! crash handovers under that lag.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use leadergroup_testenv::{Proxy, api_server_addr};

use crate::candidates::Fault;
use crate::error::Result;
use crate::markdown::{Block, Table, ms, spread_row, spread_table};
use crate::observe::ms_between;
use crate::ours::{CREATE_CONCURRENCY, Groups, LEASE_SECONDS};
use crate::peers::PeerGroup;
use crate::results::Record;
use crate::scenario::{Context, Measured, OURS, Scenario, measuring};

pub const SLOW: Scenario = Scenario {
    name: "slow",
    help: "A slow API server: every answer 1 to 3.5 s late, every system side by side",
    files: &["slow"],
    in_full_run: true,
    measure: |ctx| measuring(measure(ctx)),
    render: |records| blocks(&records[0]),
};

/// How long every group may take to be led under the lag (the peers: eight of their Leases).
const LED_BOUND: Duration = Duration::from_secs(120);

/// The lag's bounds, ms.
const LAG_MS: (u64, u64) = (1_000, 3_500);

/// What the lag does, as the page says it.
const CONDITIONS: &str = "every byte of the API server's answers to every system delivered 1 to 3.5 s late (a TCP proxy; the lag drawn anew every second), all systems side by side";

async fn measure(ctx: &Context) -> Result<Measured> {
    let light = ctx.light().await?;
    let (groups, steady, crashes) = ctx.pick(
        (10, Duration::from_secs(60), 2),
        (2, Duration::from_secs(10), 1),
    );
    let proxy = Arc::new(Proxy::start(api_server_addr().await?).await?);
    let kubeconfig = light.cp.kubeconfig_via(proxy.addr)?;
    let lag = tokio::spawn(vary_lag(Arc::clone(&proxy)));
    tracing::info!(
        "slow: {groups} groups per system, {} s steady, {crashes} crash handovers of ours",
        steady.as_secs()
    );
    let mut record = Record::default();
    record.add("", "", "conditions", CONDITIONS);
    record.add("", "", "groups", groups);
    record.add("", "", "steady_s", steady.as_secs());

    // Ours: the groups made by the admin (no lag), the operator through the proxy.
    let ours = Groups::create("bench-slow", groups, CREATE_CONCURRENCY, LEASE_SECONDS).await?;
    let t0 = SystemTime::now();
    let op = ctx
        .start_operator_via(Some(&ours.namespace), "operator-slow.log", &kubeconfig)
        .await?;
    // The peers' candidates through the same proxy, started at once.
    let mut peers = Vec::new();
    for kind in ctx.peers().await? {
        let ns = leadergroup_testenv::namespace("bench-slow-peer").await?;
        let group = PeerGroup::start(&kubeconfig, &ctx.log_dir, kind, &ns, groups)?;
        peers.push((kind, ns, group));
    }
    record.add(
        OURS,
        "",
        "settings",
        format!("LeaderGroup leaseDurationSeconds {LEASE_SECONDS}, liveness Readiness"),
    );
    // Not all led within the bound is a finding too, with how many were.
    match ours.wait_all_led(LED_BOUND).await {
        Ok(at) => record.add(OURS, "", "to_all_led_ms", ms_between(t0, at)),
        Err(e) => record.add(
            OURS,
            "",
            "failures",
            vec![format!("{} of {groups} led: {e}", ours.led())],
        ),
    }
    for (kind, _, group) in &peers {
        let name = kind.peer.name;
        record.add(name, "", "settings", kind.peer.settings);
        match group.wait_all_led(kind.lease() * 8).await {
            Ok(at) => record.add(name, "", "to_all_led_ms", ms_between(t0, at)),
            Err(e) => record.add(name, "", "failures", vec![e.to_string()]),
        }
    }

    // The steady window: no fault, so every leader change is one the lag caused.
    let from = SystemTime::now();
    let (changes, doubles) = (ours.watch.leader_changes(), ours.watch.double_leaders());
    let overlaps: Vec<u64> = peers.iter().map(|(_, _, g)| g.overlaps()).collect();
    tokio::time::sleep(steady).await;
    record.add(
        OURS,
        "",
        "leader_changes",
        ours.watch.leader_changes() - changes,
    );
    record.add(OURS, "", "overlaps", ours.watch.double_leaders() - doubles);
    for ((kind, _, group), before) in peers.iter().zip(overlaps) {
        record.add(
            kind.peer.name,
            "",
            "leader_changes",
            group.starts_since(from),
        );
        record.add(kind.peer.name, "", "overlaps", group.overlaps() - before);
    }

    // What a crash costs under the lag (ours; the peers' crash detection is their Lease). A
    // handover that does not complete is a finding, kept with its error, not the run's end.
    let (mut handovers, mut failed) = (Vec::new(), Vec::new());
    for i in 0..crashes.min(groups) {
        match ours.handovers([i], Fault::Crash).await {
            Ok(ms) => handovers.extend(ms),
            Err(e) => failed.push(format!("g-{i}: {e}")),
        }
    }
    record.add(OURS, "", "handover_crash_ms", handovers);
    record.add(OURS, "", "handover_failures", failed);
    record.add(OURS, "", "overlaps_total", ours.watch.double_leaders());
    for (_, ns, group) in peers {
        group.stop().await;
        drop(ns);
    }
    drop(op);
    lag.abort();
    let _ = lag.await;
    drop(proxy);
    Ok(Measured("slow", record))
}

/// Draws the proxy's lag anew every second, uniformly in [`LAG_MS`] (a xorshift seeded by the
/// clock: the figures are a spread, not a replay).
async fn vary_lag(proxy: Arc<Proxy>) {
    let mut state = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    loop {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let lag = LAG_MS.0 + state % (LAG_MS.1 - LAG_MS.0 + 1);
        proxy.lag(Duration::from_millis(lag));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One table of every system, and the targets.
fn blocks(slow: &Record) -> Vec<Block> {
    let steady = slow.number("", "", "steady_s");
    let mut table = Table::new(&[
        "system",
        "all led after",
        &format!("leader changes without a fault ({steady:.0} s)"),
        "overlaps",
        "settings",
    ]);
    let mut systems: Vec<&str> = slow
        .systems("")
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    systems.sort_by_key(|s| !s.starts_with(OURS));
    for system in &systems {
        let failures = slow.texts(system, "", "failures");
        let led = match failures.is_empty() {
            true => ms(slow.number(system, "", "to_all_led_ms")),
            false => failures.join("; "),
        };
        table.row([
            system.to_string(),
            led,
            format!("{:.0}", slow.number(system, "", "leader_changes")),
            format!("{:.0}", slow.number(system, "", "overlaps")),
            slow.text(system, "", "settings").unwrap_or_default(),
        ]);
    }
    let samples = slow.values(OURS, "", "handover_crash_ms");
    let failed = slow.texts(OURS, "", "handover_failures");
    let handovers = (!samples.is_empty()).then(|| {
        spread_table(&["ours, crash handover under the lag"])
            .with(spread_row(&["leader NotReady → another labeled"], &samples))
    });
    let mut failures = Table::new(&["ours, crash handovers that did not complete"]);
    failures.row([match failed.is_empty() {
        true => "none".to_owned(),
        false => failed.join("; "),
    }]);
    let changes = slow.number(OURS, "", "leader_changes");
    let overlaps = slow.number(OURS, "", "overlaps_total");
    let mut targets = Table::new(&["target", "measured", "met"]);
    targets.target(
        "slow API server: no leader change that no fault caused (ours)".to_owned(),
        format!("{changes:.0}"),
        changes == 0.0,
    );
    targets.target(
        "slow API server: never two leaders (ours, the whole run)".to_owned(),
        format!("{overlaps:.0}"),
        overlaps == 0.0,
    );
    targets.target(
        "slow API server: every crash handed over (ours)".to_owned(),
        format!("{} of {}", samples.len(), samples.len() + failed.len()),
        failed.is_empty(),
    );
    let conditions = slow.text("", "", "conditions").unwrap_or_default();
    let groups = slow.number("", "", "groups");
    vec![
        Block::tables(
            "slow",
            std::iter::once(table).chain(handovers).chain([failures]),
        )
        .notes(
            [format!(
                "{groups:.0} groups per system; {conditions}. Run {} (`{}`).",
                slow.run.started_at, slow.run.command
            )]
            .into_iter()
            .chain(
                slow.run
                    .quick
                    .then(|| "**A `--quick` smoke run, not figures to publish.**".to_owned()),
            ),
        ),
        Block::tables("slow-targets", [targets]),
    ]
}
