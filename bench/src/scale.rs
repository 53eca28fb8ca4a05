//! Scenario `scale`: ours, then the peers, at several group counts: the time until every group
//! is led, a steady window's API requests, CPU and memory, and our handovers at each size. Run
//! alone (`--only scale`), it measures ours at the sizes of `--scale` and replaces only those
//! entries of `scale.json`; the file's run record is then this run's, and each entry kept from
//! an earlier run names that run.

use std::time::{Duration, SystemTime};

use futures::future::LocalBoxFuture;

use crate::candidates::Fault;
use crate::error::Result;
use crate::markdown::{Block, Table, counts, met, ms, spread_row, spread_table};
use crate::observe::{RequestCounts, Steady, is_polling_read, is_write, ms_between, steady_window};
use crate::ours::{ALL_LED_BOUND, CREATE_CONCURRENCY, Groups, LEASE_SECONDS, sample};
use crate::peers::{PeerGroup, PeerKind};
use crate::results::{Record, Results, Run};
use crate::scenario::{Context, OURS, Outcome, Scenario, measuring};
use leadergroup_testenv::OperatorProcess;
use leadergroup_testenv::record::Sample;
use leadergroup_testenv::stats::{Summary, summarize};

/// The entries measured by this invocation: per system, a case per group count.
struct Measured {
    record: Record,
    /// Run alone: ours only, in place of our entries at those sizes; the rest of the file stays,
    /// each entry naming the run that measured it.
    alone: bool,
}

pub const SCALE: Scenario = Scenario {
    name: "scale",
    help: "Ours, then the peers (not alone), at the sizes of `--scale`",
    files: &["scale"],
    in_full_run: true,
    measure: |ctx| measuring(measure_ours(ctx)),
    render: |records| blocks(&records[0]),
};

/// Our handovers at one size: the trigger as the tables name it, and its metric.
const HANDOVERS: [(&str, &str); 2] = [
    ("NotReady", "handover_notready_ms"),
    ("deletion", "handover_deleted_ms"),
];

/// Every entry, our handovers at each size, and the targets.
fn blocks(scale: &Record) -> Vec<Block> {
    let mut table = Table::new(&[
        "system",
        "groups",
        "to all led",
        "requests/s per group (by verb, resource)",
        "writes per group per 5 s",
        "polling reads/s per group",
        "CPU s/min",
        "RSS (peak)",
    ]);
    let mut handovers = spread_table(&["groups", "trigger"]);
    let (mut notes, mut failures) = (Vec::new(), Vec::new());
    for (system, groups) in scale.entries() {
        let number = |metric: &str| scale.number(system, groups, metric);
        let requests = scale.counts(system, groups, "requests_per_s_per_group");
        table.row([
            system.to_owned(),
            groups.to_owned(),
            ms(number("to_all_led_ms")),
            counts(&requests.unwrap_or_default()),
            format!("{:.2}", number("writes_per_group_per_third")),
            format!("{:.3}", number("polling_reads_per_s_per_group")),
            format!("{:.2}", number("cpu_s_per_min")),
            rss(number("rss_mib"), number("peak_rss_mib")),
        ]);
        for (trigger, metric) in HANDOVERS {
            let samples = scale.values(system, groups, metric);
            if !samples.is_empty() {
                handovers.row(spread_row(&[groups, trigger], &samples));
            }
        }
        if let Some(run) = scale.text(system, groups, "measured_in") {
            let note = format!("{system} at {groups} groups: from an earlier run, {run}.");
            notes.push(note);
        }
        if let Some(note) = scale.text(system, groups, "note") {
            failures.push(format!("**{system} at {groups} groups: {note}.**"));
        }
    }
    notes.extend(failures);
    vec![
        Block::tables("scale", [table]).notes(notes),
        Block::tables("scale-handovers", [handovers]),
        Block::tables("scale-targets", [targets(scale)]),
    ]
}

/// Resident memory and its peak, MiB.
pub fn rss(rss_mib: f64, peak_rss_mib: f64) -> String {
    format!("{rss_mib:.1} MiB ({peak_rss_mib:.1})")
}

async fn measure_ours(ctx: &Context) -> Result<Measured> {
    let sizes = ctx
        .options
        .scale
        .clone()
        .unwrap_or_else(|| ctx.pick(vec![1, 100, 1000], vec![1, 10]));
    let mut record = Record::default();
    let alone = ctx.options.only.is_some();
    for size in sizes {
        tracing::info!("scale: ours, {size} groups");
        ours_at(ctx, size, &mut record).await?;
    }
    Ok(Measured { record, alone })
}

/// The targets: handover latency at every size, cost and memory at the largest.
fn targets(scale: &Record) -> Table {
    let mut table = Table::new(&["target", "measured", "met"]);
    let mut ours: Vec<(usize, &str)> = scale
        .entries()
        .into_iter()
        .filter(|e| e.0 == OURS)
        .filter_map(|(_, case)| Some((case.parse().ok()?, case)))
        .collect();
    ours.sort_unstable();
    let handovers = |case: &str| -> Vec<(&str, Summary)> {
        let summary = |(what, metric)| Some((what, summarize(&scale.values(OURS, case, metric))?));
        HANDOVERS.into_iter().filter_map(summary).collect()
    };
    for (groups, case) in ours.iter().filter(|(groups, _)| *groups < 1000) {
        for (what, s) in handovers(case) {
            let target = format!("handover after {what} at {groups} groups: p50 ≤ 15 ms");
            let measured = format!("p50 {}", ms(s.median_ms));
            table.target(target, measured, s.median_ms <= 15.0);
        }
    }
    let Some((groups, case)) = ours.last() else {
        return table;
    };
    for (what, s) in handovers(case) {
        let target = format!("handover after {what} at {groups} groups: p50 ≤ 20 ms, p99 ≤ 100 ms");
        let measured = format!("p50 {}, p99 {}", ms(s.median_ms), ms(s.p99_ms));
        table.target(target, measured, s.median_ms <= 20.0 && s.p99_ms <= 100.0);
    }
    let title = |target: &str| format!("{target} ({groups} groups)");
    table.rows.extend(cost_targets(scale, case, title));
    let (rss, peak) = (
        scale.number(OURS, case, "rss_mib"),
        scale.number(OURS, case, "peak_rss_mib"),
    );
    table.row([
        format!("RSS < 64 MiB at {groups} groups / {} pods", groups * 3),
        format!("steady {rss:.1} MiB, peak {peak:.1} MiB (while converging)"),
        format!("steady {}, peak {}", met(rss < 64.0), met(peak < 64.0)),
    ]);
    table
}

/// The two API-cost rows of a targets table for our entry at `case` (at most one write per group
/// per third of the Lease, no polling reads), each titled by `title` from the target's name.
pub fn cost_targets(
    record: &Record,
    case: &str,
    title: impl Fn(&str) -> String,
) -> Vec<Vec<String>> {
    let mut rows = Table::default();
    let writes = record.number(OURS, case, "writes_per_group_per_third");
    let reads = record.number(OURS, case, "polling_reads_per_s_per_group");
    let write_target = title("≤ 1 write per group per third of the Lease");
    rows.target(write_target, format!("{writes:.2}"), writes <= 1.05);
    let read_target = title("no polling reads");
    rows.target(
        read_target,
        format!("{reads:.3}/s per group"),
        reads < 0.001,
    );
    rows.rows
}

/// Adds the entry of `system` at `groups` groups whose Lease lasts `lease_seconds` to `record`:
/// from its start to every group led (NaN when not all were), and a steady window's figures,
/// per group.
pub fn add_entry(
    record: &mut Record,
    (system, groups): (&str, usize),
    to_all_led_ms: f64,
    steady: &Steady,
    lease_seconds: i32,
) {
    let n = groups.max(1) as f64;
    let per_group: RequestCounts = steady
        .requests
        .iter()
        .map(|(k, v)| (k.clone(), v / n))
        .collect();
    let sum = |keep: fn(&str) -> bool| -> f64 {
        let kept = per_group.iter().filter(|(k, _)| keep(k));
        kept.map(|(_, v)| v).sum()
    };
    let case = groups.to_string();
    let mut add = |metric: &str, value: f64| record.add(system, &case, metric, value);
    add("to_all_led_ms", to_all_led_ms);
    add("window_s", steady.seconds);
    // + 0.0: an empty f64 sum is -0.0, which would print as "-0.000".
    let writes = sum(is_write) * f64::from(lease_seconds) / 3.0 + 0.0;
    add("writes_per_group_per_third", writes);
    add("polling_reads_per_s_per_group", sum(is_polling_read) + 0.0);
    add("cpu_s_per_min", steady.cpu_s_per_min);
    add("rss_mib", steady.end.rss_mib);
    add("peak_rss_mib", steady.end.peak_rss_mib);
    record.add(system, &case, "requests_per_s_per_group", per_group);
}

/// Ours started on `sets`, watching `namespace` (every namespace when None), logging to `log`:
/// from its start to every group led (NaN when not all were within `bound` of the start) and a
/// steady window after settling, as our entry in `record`; the operator; how many groups were led
/// at the bound, if not all; the CPU seconds it used until every group was led.
pub async fn start_ours(
    ctx: &Context,
    sets: &[Groups],
    namespace: Option<&str>,
    (log, bound, lease_seconds): (&str, Duration, i32),
    record: &mut Record,
) -> Result<(OperatorProcess, Option<usize>, f64)> {
    let light = ctx.light().await?;
    let baseline = ctx.baseline().await?;
    let op = ctx.start_operator(namespace, log).await?;
    let t0 = SystemTime::now() - op.started.elapsed();
    let mut led = Some(t0);
    for set in sets {
        let deadline = bound.saturating_sub(op.started.elapsed());
        match set.wait_all_led(deadline).await {
            Ok(at) => led = led.map(|l| l.max(at)),
            Err(e) => {
                tracing::warn!("{log}: {e}");
                led = None;
                break;
            }
        }
    }
    let converge_cpu_s = sample(&op, light.ticks).cpu_seconds;
    let (groups, count) = sets
        .iter()
        .fold((0, 0), |(n, l), s| (n + s.names.len(), l + s.led()));
    tracing::info!(
        "{log}: {count} of {groups} groups led {:.1} s after the start ({converge_cpu_s:.1} CPU s)",
        op.started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(ctx.settle()).await;
    let sample = || sample(&op, light.ticks);
    let steady = steady_window(&light.admin, ctx.window(), Some(baseline), sample).await?;
    let to_all_led = led.map_or(f64::NAN, |at| ms_between(t0, at));
    add_entry(record, (OURS, groups), to_all_led, &steady, lease_seconds);
    Ok((op, led.is_none().then_some(count), converge_cpu_s))
}

/// Ours at `size` groups, into `record`: to all led, a steady window, then handovers of groups
/// spread over the size.
async fn ours_at(ctx: &Context, size: usize, record: &mut Record) -> Result<()> {
    let light = ctx.light().await?;
    // The idle baseline before the groups exist.
    ctx.baseline().await?;
    let prefix = format!("bench-scale-{size}");
    let groups = Groups::create(&prefix, size, CREATE_CONCURRENCY, LEASE_SECONDS).await?;
    let log = format!("operator-scale-{size}.log");
    let ns = Some(groups.namespace.as_str());
    let bound = (log.as_str(), ALL_LED_BOUND, LEASE_SECONDS);
    let (op, led_at_bound, _) =
        start_ours(ctx, std::slice::from_ref(&groups), ns, bound, record).await?;
    let case = size.to_string();
    if let Some(count) = led_at_bound {
        // Record what the operator managed and what it cost, rather than losing the run.
        let note = format!(
            "not every group was led within {} s: {count} of {size} were; the window was measured while it still converged",
            ALL_LED_BOUND.as_secs()
        );
        record.add(OURS, &case, "note", note);
        stop(op, size).await;
        return Ok(());
    }
    // Groups spread over the size, each handed over once; deletions between the NotReady ones.
    let spread = |reps: usize, offset: fn(usize) -> usize| {
        let step = (size / reps.max(1)).max(1);
        (0..reps).map(move |i| (i * step + offset(step)) % size)
    };
    let notready = groups.handovers(spread(ctx.pick(40, 3), |_| 0), Fault::Crash);
    record.add(OURS, &case, HANDOVERS[0].1, notready.await?);
    let deleted = groups.handovers(spread(ctx.pick(20, 2), |step| step / 2), Fault::Graceful);
    record.add(OURS, &case, HANDOVERS[1].1, deleted.await?);
    light.record(|run| run.double_leaders += groups.watch.double_leaders());
    let peak = sample(&op, light.ticks).peak_rss_mib;
    record.add(OURS, &case, "peak_rss_mib", peak);
    stop(op, size).await;
    Ok(())
}

/// Stops the operator at `size` groups as a rollout stops it: a heap profile
/// (`make profile-heap`) is written at its exit.
async fn stop(mut op: OperatorProcess, size: usize) {
    if let Err(e) = op.terminate(Duration::from_secs(60)).await {
        tracing::warn!("scale: the operator at {size} groups did not stop on SIGTERM: {e}");
    }
}

/// A peer kind at `size` groups, into `record`: three processes of `size` electors each.
async fn peer_at(ctx: &Context, kind: &PeerKind, size: usize, record: &mut Record) -> Result<()> {
    let light = ctx.light().await?;
    let baseline = ctx.baseline().await?;
    let ns = leadergroup_testenv::namespace(&format!("bench-peer-scale-{size}")).await?;
    let t0 = SystemTime::now();
    let kubeconfig = ctx.light().await?.cp.kubeconfig_path();
    let group = PeerGroup::start(kubeconfig, &ctx.log_dir, kind, &ns, size)?;
    let led = group
        .wait_all_led(kind.lease() * 4 + Duration::from_secs(60))
        .await?;
    tokio::time::sleep(ctx.settle().min(Duration::from_secs(5))).await;
    let window = ctx.pick(Duration::from_secs(20), Duration::from_secs(5));
    let steady = steady_window(&ns.client, window, Some(baseline), || {
        group.sample(light.ticks)
    })
    .await?;
    group.stop().await;
    let entry = (kind.peer.name, size);
    add_entry(record, entry, ms_between(t0, led), &steady, LEASE_SECONDS);
    Ok(())
}

impl Outcome for Measured {
    fn measure_peers<'a>(&'a mut self, ctx: &'a Context) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if self.alone {
                return Ok(());
            }
            for kind in ctx.peers().await? {
                for size in ctx.pick(vec![1, 100], vec![2]) {
                    tracing::info!("scale: {}, {size} groups", kind.peer.name);
                    peer_at(ctx, kind, size, &mut self.record).await?;
                }
            }
            Ok(())
        })
    }

    fn write(&mut self, run: &Run, results: &Results) -> Result<()> {
        let mut record = std::mem::take(&mut self.record);
        record.run = run.clone();
        if self.alone {
            // Ours at the sizes measured now replace ours at those sizes; the other entries
            // stay, each naming the earlier run that measured it, under this run's record.
            let kept = results.read("scale")?.unwrap_or_default();
            let measured: Vec<String> = record.entries().iter().map(|e| e.1.to_owned()).collect();
            let mut samples = kept.samples.clone();
            samples.retain(|s| !(s.system == OURS && measured.contains(&s.case)));
            let mut earlier = Record {
                run: kept.run.clone(),
                samples,
            };
            let of_earlier = format!(
                "{} (`{}`, {})",
                kept.run.started_at,
                kept.run.command,
                kept.run.commit_or_version()
            );
            let entries: Vec<(String, String)> = earlier
                .entries()
                .into_iter()
                .map(|(s, c)| (s.to_owned(), c.to_owned()))
                .collect();
            for (system, case) in entries {
                if earlier.text(&system, &case, "measured_in").is_none() {
                    earlier.add(&system, &case, "measured_in", &of_earlier);
                }
            }
            let mut samples = earlier.samples;
            samples.extend(record.samples);
            let groups = |s: &Sample| s.case.parse::<usize>().unwrap_or_default();
            samples.sort_by_key(|s| (s.system != OURS, s.system.clone(), groups(s)));
            record.samples = samples;
        }
        results.write("scale", &record)
    }
}
