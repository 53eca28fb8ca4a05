//! Scenario `handover`: graceful termination and crash of the leader, ours on one group alone on
//! the server (its latencies are milliseconds, and nothing else may load the machine meanwhile),
//! then the four peers side by side. Its results files, `graceful.json` and `crash.json`, carry
//! the full run's record, which the page's run and machine tables show.

use std::time::{Duration, Instant};

use crate::candidates::{Fault, Handovers, repeat};
use crate::error::{Error, Result};
use crate::markdown::{Block, Table, counts, spread_row, spread_table};
use crate::observe::{RequestCounts, api_requests, rates};
use crate::ours::Groups;
use crate::peers::{PeerGroup, PeerKind};
use crate::results::{Record, Results, Run};
use crate::scenario::{Context, Light, OURS, Outcome, Scenario, measuring};
use futures::future::LocalBoxFuture;

/// Both results files, `graceful.json` and `crash.json`, as measured (in the order of
/// [`SCENARIOS`]): per system (ours first), its settings and milliseconds per handover (case: the
/// scenario's name); ours, its API requests per repetition.
struct Measured([Record; 2]);

/// The two scenarios: name, fault, and how ours is measured.
const SCENARIOS: [(&str, Fault, &str); 2] = [
    (
        "graceful",
        Fault::Graceful,
        "delete the leader pod; the simulated kubelet removes it 300 ms later; leader label seen by an independent watch",
    ),
    (
        "crash",
        Fault::Crash,
        "leader pod reported NotReady through pods/status; leader label seen by an independent watch",
    ),
];

pub const HANDOVERS: Scenario = Scenario {
    name: "handover",
    help: "Graceful and crash handovers: ours on one group, then the peers",
    files: &["graceful", "crash", "floor"],
    in_full_run: true,
    measure: |ctx| measuring(measure_ours(ctx)),
    render: |records| blocks(&records[0], &records[1], &records[2]),
};

/// The run and machine (the full run's record, in `graceful.json`), and the two scenarios.
fn blocks(graceful: &Record, crash: &Record, floor: &Record) -> Vec<Block> {
    let run = &graceful.run;
    let floor_ms = floor.median("", crate::floor::CASE, "ms");
    vec![
        Block::tables("run", [run.table(&[])]).notes(run.quick.then(|| {
            "**This is a `--quick` smoke run: too few repetitions to mean anything.**".to_owned()
        })),
        Block::tables("machine", [machine(run)]),
        handover_block(graceful, SCENARIOS[0].0, floor_ms),
        handover_block(crash, SCENARIOS[1].0, floor_ms),
    ]
}

async fn measure_ours(ctx: &Context) -> Result<Measured> {
    let light = ctx.light().await?;
    let baseline = ctx.baseline().await?;
    let (groups, op) = ctx
        .led_groups("bench-ours", 1, "operator-single.log")
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reps = ctx.pick(100, 5);
    let graceful = ours(light, baseline, &groups, SCENARIOS[0], reps).await?;
    let crash = ours(light, baseline, &groups, SCENARIOS[1], reps).await?;
    light.record(|run| run.double_leaders += groups.watch.double_leaders());
    drop(op);
    Ok(Measured([graceful, crash]))
}

/// The machine, the versions, and what the run saw besides its figures.
fn machine(run: &Run) -> Table {
    let mut table = Table::new(&["item", "value"]);
    for (k, v) in run.machine.iter().chain(&run.versions) {
        table.row([k.as_str(), v]);
    }
    table.row(["control plane", &run.control_plane]);
    table.row([
        "idle API server baseline (subtracted from every window), requests/s",
        &counts(&run.baseline_requests_per_s),
    ]);
    table.row([
        "the independent watch saw two leaders in one group".to_owned(),
        format!("{} times", run.double_leaders),
    ]);
    for (peer, n) in &run.peer_split_brains {
        table.row([
            format!("{peer}: a candidate started leading while another still believed it led (handover scenarios)"),
            format!("{n} times"),
        ]);
    }
    for (peer, why) in &run.peer_failures {
        table.row([
            format!("{peer}: its handover repetitions stopped early"),
            why.clone(),
        ]);
    }
    table
}

/// One scenario's table (ours against the floor, the peers against ours), and our requests.
fn handover_block(result: &Record, scenario: &str, floor_ms: f64) -> Block {
    let mut table = spread_table(&["system"]);
    table.columns.push("median vs ours; settings".into());
    let mut ours = None;
    for system in result.systems(scenario) {
        let median = result.median(system, scenario, "ms");
        let mut row = spread_row(&[system], &result.values(system, scenario, "ms"));
        let settings = result
            .text(system, scenario, "settings")
            .unwrap_or_default();
        row.push(match ours {
            None => format!("{:.1}× the floor; {settings}", median / floor_ms),
            Some(ours) => format!("{:.0}× ours; {settings}", median / ours),
        });
        ours.get_or_insert(median);
        table.rows.push(row);
    }
    let calls = result.counts(OURS, scenario, "api_requests_per_repetition");
    let calls = calls.map(|calls| {
        Table::new(&["our API requests per repetition, by verb and resource"])
            .with([counts(&calls)])
    });
    Block::tables(scenario, [table].into_iter().chain(calls))
}

impl Outcome for Measured {
    fn measure_peers<'a>(&'a mut self, ctx: &'a Context) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let light = ctx.light().await?;
            tracing::info!("peers: graceful and crash handovers, the four kinds side by side");
            let reps = ctx.pick(
                [(10, 5), (15, 10), (8, 4), (8, 4)],
                [(1, 1), (2, 1), (1, 1), (1, 1)],
            );
            let kinds = ctx.peers().await?.iter().zip(reps).enumerate();
            let runs = kinds.map(|(i, (kind, reps))| async move {
                let ns = leadergroup_testenv::namespace(&format!("bench-peer-{i}")).await?;
                let kubeconfig = ctx.light().await?.cp.kubeconfig_path();
                let group = PeerGroup::start(kubeconfig, &ctx.log_dir, kind, &ns, 1)?;
                let samples = peer_handovers(light, kind, group, reps).await?;
                Ok::<_, Error>((kind.peer, samples))
            });
            for (peer, samples) in futures::future::try_join_all(runs).await? {
                for ((result, samples), (case, ..)) in self.0.iter_mut().zip(samples).zip(SCENARIOS)
                {
                    result.add(peer.name, case, "settings", peer.settings);
                    result.add(peer.name, case, "ms", samples);
                }
            }
            Ok(())
        })
    }

    fn write(&mut self, run: &Run, results: &Results) -> Result<()> {
        for (record, (name, ..)) in self.0.iter_mut().zip(SCENARIOS) {
            record.run = run.clone();
            results.write(name, record)?;
        }
        Ok(())
    }
}

/// `reps` (graceful, crash) handovers of `group`, milliseconds; its split brains and failures
/// go to the run's record. A peer that fails to hand over within its bound is a result, not a
/// harness error: the failure is recorded and that kind's remaining repetitions skipped.
async fn peer_handovers(
    light: &Light,
    kind: &PeerKind,
    mut group: PeerGroup,
    reps: (usize, usize),
) -> Result<[Vec<f64>; 2]> {
    group
        .wait_all_led(kind.lease() * 3 + Duration::from_secs(30))
        .await?;
    let what = format!("peers: {}", kind.peer.name);
    let mut out = [(); 2].map(|()| Handovers::default());
    let [graceful, crash] = &mut out;
    if repeat(&mut group, Fault::Graceful, reps.0, &what, graceful).await {
        repeat(&mut group, Fault::Crash, reps.1, &what, crash).await;
    }
    let failures: Vec<String> = out.iter().flat_map(|r| r.failures.clone()).collect();
    let (name, split_brains) = (kind.peer.name.to_owned(), group.overlaps());
    group.stop().await;
    light.record(|run| {
        run.peer_split_brains.insert(name.clone(), split_brains);
        if !failures.is_empty() {
            run.peer_failures.insert(name, failures.join("; "));
        }
    });
    tracing::info!("peers: {} done", kind.peer.name);
    Ok(out.map(|r| r.ms))
}

/// Requests the harness itself makes while it drives our handovers (the simulated kubelet and the
/// stand-in ReplicaSet): left out of the operator's API calls per handover.
fn harness_request(key: &str) -> bool {
    matches!(
        key,
        "GET pods" | "PATCH pods/status" | "DELETE pods" | "POST pods"
    )
}

/// `reps` of our handovers of `scenario` (name, fault, settings) of group `g-0`, with the operator's API
/// requests per repetition, by verb and resource, from the API server's counters (less the idle
/// baseline and the harness's own requests).
async fn ours(
    light: &Light,
    baseline: &RequestCounts,
    groups: &Groups,
    (scenario, fault, settings): (&str, Fault, &str),
    reps: usize,
) -> Result<Record> {
    tracing::info!("ours: {reps} {scenario} handovers");
    let before = api_requests(&light.admin).await?;
    let t0 = Instant::now();
    let samples = groups.handovers(vec![0; reps], fault).await?;
    let seconds = t0.elapsed().as_secs_f64();
    let after = api_requests(&light.admin).await?;
    let calls: RequestCounts = rates(&before, &after, seconds, Some(baseline))
        .into_iter()
        .filter(|(k, _)| !harness_request(k))
        .map(|(k, per_s)| (k, per_s * seconds / reps.max(1) as f64))
        .filter(|(_, v)| *v >= 0.05)
        .collect();
    let mut record = Record::default();
    record.add(OURS, scenario, "settings", settings);
    record.add(OURS, scenario, "ms", samples);
    record.add(OURS, scenario, "api_requests_per_repetition", calls);
    Ok(record)
}
