//! Scenario `scale`: ours, then the peers, at several group counts: the time until every group
//! is led, a steady window's API requests, CPU and memory, and our handovers at each size. Run
//! alone (`--only scale`), it measures ours at the sizes of `--scale` and replaces only those
//! entries of `scale.json`.

use std::time::{Duration, SystemTime};

use futures::future::LocalBoxFuture;
use serde::{Deserialize, Serialize};

use crate::candidates::Fault;
use crate::error::Result;
use crate::handover::Handover;
use crate::markdown::{Block, Table, counts, met, ms, spread_row, spread_table};
use crate::observe::{Steady, is_polling_read, is_write, ms_between, steady_window};
use crate::ours::{ALL_LED_BOUND, CREATE_CONCURRENCY, Groups, LEASE_SECONDS, sample};
use crate::peers::{PeerGroup, PeerKind};
use crate::results::{Results, Run, Stamped};
use crate::scenario::{Context, Outcome, Recorded, Scenario, measuring};
use leadergroup_testenv::OperatorProcess;

/// Our name in the tables.
pub const OURS: &str = "leadergroup-operator";

/// One system at one group count.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ScaleEntry {
    pub system: String,
    /// Groups (of three candidates).
    pub groups: usize,
    /// From process start to every group led (NaN, written as null, when not all were).
    #[serde(deserialize_with = "nan_if_null")]
    pub time_to_all_led_ms: f64,
    /// Length of the steady-state window.
    pub window_s: f64,
    /// Requests per second per group in the window, by verb and resource.
    pub requests_per_s_per_group: crate::observe::RequestCounts,
    /// Writes per group per third of the Lease duration (15 s: per 5 s).
    pub writes_per_group_per_third: f64,
    /// Reads that are not watches, per second per group.
    pub polling_reads_per_s_per_group: f64,
    /// CPU seconds per minute in the window (peers: the three processes together).
    pub cpu_s_per_min: f64,
    /// RSS at the end of the window, MiB (peers: summed).
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    /// Ours: handovers after NotReady at this size.
    pub handover_notready: Option<Handover>,
    /// Ours: handovers after deletion at this size.
    pub handover_deleted: Option<Handover>,
    /// What went wrong at this size, if anything.
    pub note: Option<String>,
    /// The run it was measured in, when not the page's (`--only scale`).
    #[serde(default)]
    pub measured_in: Option<String>,
}

impl ScaleEntry {
    /// The per-group figures of `groups` groups whose Lease lasts `lease_seconds`, from a steady
    /// window's totals; no handovers yet.
    pub fn new(
        system: &str,
        groups: usize,
        time_to_all_led_ms: f64,
        steady: &Steady,
        lease_seconds: i32,
    ) -> ScaleEntry {
        let n = groups.max(1) as f64;
        let per_group: crate::observe::RequestCounts = steady
            .requests
            .iter()
            .map(|(k, v)| (k.clone(), v / n))
            .collect();
        let sum = |keep: fn(&str) -> bool| -> f64 {
            per_group
                .iter()
                .filter(|(k, _)| keep(k))
                .map(|(_, v)| v)
                .sum()
        };
        ScaleEntry {
            system: system.into(),
            groups,
            time_to_all_led_ms,
            window_s: steady.seconds,
            // + 0.0: an empty f64 sum is -0.0, which would print as "-0.000".
            writes_per_group_per_third: sum(is_write) * f64::from(lease_seconds) / 3.0 + 0.0,
            polling_reads_per_s_per_group: sum(is_polling_read) + 0.0,
            requests_per_s_per_group: per_group,
            cpu_s_per_min: steady.cpu_s_per_min,
            rss_mib: steady.end.rss_mib,
            peak_rss_mib: steady.end.peak_rss_mib,
            handover_notready: None,
            handover_deleted: None,
            note: None,
            measured_in: None,
        }
    }

    fn is_ours(&self) -> bool {
        self.system == OURS
    }
}

/// A number that serde_json wrote as null (it writes NaN so).
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `scale.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ScaleResult {
    pub entries: Vec<ScaleEntry>,
}

/// The entries measured by this invocation.
struct Measured {
    entries: Vec<ScaleEntry>,
    /// Run alone: ours only, in place of our entries at those sizes; the rest of the file stays.
    alone: bool,
}

pub const SCALE: Scenario = Scenario::of::<ScaleResult>(
    "scale",
    "Ours, then the peers (not alone), at the sizes of `--scale`",
    |ctx| measuring(measure_ours(ctx)),
);

impl Recorded for ScaleResult {
    const FILE: &'static str = "scale";

    fn blocks(&self, _run: &Run) -> Vec<Block> {
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
        let mut notes = Vec::new();
        for e in &self.entries {
            table.row([
                e.system.clone(),
                e.groups.to_string(),
                ms(e.time_to_all_led_ms),
                counts(&e.requests_per_s_per_group),
                format!("{:.2}", e.writes_per_group_per_third),
                format!("{:.3}", e.polling_reads_per_s_per_group),
                format!("{:.2}", e.cpu_s_per_min),
                format!("{:.1} MiB ({:.1})", e.rss_mib, e.peak_rss_mib),
            ]);
            for (trigger, h) in [
                ("NotReady", &e.handover_notready),
                ("deletion", &e.handover_deleted),
            ] {
                if let Some(h) = h {
                    let groups = e.groups.to_string();
                    handovers.row(spread_row(&[&groups, trigger], h.summary.as_ref()));
                }
            }
            if let Some(run) = &e.measured_in {
                notes.push(format!(
                    "{} at {} groups: measured alone, in the run of {run}.",
                    e.system, e.groups
                ));
            }
        }
        notes.extend(self.entries.iter().filter_map(|e| {
            let note = e.note.as_ref()?;
            Some(format!("**{} at {} groups: {note}.**", e.system, e.groups))
        }));
        vec![
            Block::tables("scale", [table]).notes(notes),
            Block::tables("scale-handovers", [handovers]),
            Block::tables("scale-targets", [targets(self)]),
        ]
    }
}

async fn measure_ours(ctx: &Context) -> Result<Measured> {
    let sizes = ctx
        .options
        .scale
        .clone()
        .unwrap_or_else(|| ctx.pick(vec![1, 100, 1000], vec![1, 10]));
    let mut entries = Vec::new();
    for size in sizes {
        tracing::info!("scale: ours, {size} groups");
        let mut entry = ours_at(ctx, size).await?;
        if ctx.options.alone() {
            let run = ctx.light().await?.run();
            entry.measured_in = Some(format!("{} (`{}`)", run.started_at, run.command));
        }
        entries.push(entry);
    }
    let alone = ctx.options.alone();
    Ok(Measured { entries, alone })
}

/// The targets: handover latency at every size, cost and memory at the largest.
fn targets(scale: &ScaleResult) -> Table {
    let mut table = Table::new(&["target", "measured", "met"]);
    let ours = || scale.entries.iter().filter(|e| e.is_ours());
    let handovers = |e: &ScaleEntry| {
        [
            ("NotReady", e.handover_notready.clone()),
            ("deletion", e.handover_deleted.clone()),
        ]
        .into_iter()
        .filter_map(|(what, h)| Some((what, h?.summary?)))
    };
    for e in ours().filter(|e| e.groups < 1000) {
        for (what, s) in handovers(e) {
            let target = format!("handover after {what} at {} groups: p50 ≤ 15 ms", e.groups);
            table.target(
                target,
                format!("p50 {}", ms(s.median_ms)),
                s.median_ms <= 15.0,
            );
        }
    }
    let Some(e) = ours().max_by_key(|e| e.groups) else {
        return table;
    };
    for (what, s) in handovers(e) {
        let target = format!(
            "handover after {what} at {} groups: p50 ≤ 20 ms, p99 ≤ 100 ms",
            e.groups
        );
        let measured = format!("p50 {}, p99 {}", ms(s.median_ms), ms(s.p99_ms));
        table.target(target, measured, s.median_ms <= 20.0 && s.p99_ms <= 100.0);
    }
    table.rows.extend(cost_targets(e, |target| {
        format!("{target} ({} groups)", e.groups)
    }));
    table.row([
        format!(
            "RSS < 64 MiB at {} groups / {} pods",
            e.groups,
            e.groups * 3
        ),
        format!(
            "steady {:.1} MiB, peak {:.1} MiB (while converging)",
            e.rss_mib, e.peak_rss_mib
        ),
        format!(
            "steady {}, peak {}",
            met(e.rss_mib < 64.0),
            met(e.peak_rss_mib < 64.0)
        ),
    ]);
    table
}

/// The two API-cost rows of a targets table for one entry (at most one write per group per
/// third of the Lease, no polling reads), each titled by `title` from the target's name.
pub fn cost_targets(e: &ScaleEntry, title: impl Fn(&str) -> String) -> Vec<Vec<String>> {
    let mut rows = Table::default();
    let (writes, reads) = (
        e.writes_per_group_per_third,
        e.polling_reads_per_s_per_group,
    );
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

/// Ours started on `sets`, watching `namespace` (every namespace when None), logging to `log`:
/// from its start to every group led (NaN when not all were within `bound` of the start) and a
/// steady window after settling, as an entry; the operator; how many groups were led at the
/// bound, if not all; the CPU seconds it used until every group was led.
pub async fn start_ours(
    ctx: &Context,
    sets: &[Groups],
    namespace: Option<&str>,
    (log, bound, lease_seconds): (&str, Duration, i32),
) -> Result<(ScaleEntry, OperatorProcess, Option<usize>, f64)> {
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
    let entry = ScaleEntry::new(OURS, groups, to_all_led, &steady, lease_seconds);
    Ok((entry, op, led.is_none().then_some(count), converge_cpu_s))
}

/// Ours at `size` groups: to all led, a steady window, then handovers of groups spread over the
/// size.
async fn ours_at(ctx: &Context, size: usize) -> Result<ScaleEntry> {
    let light = ctx.light().await?;
    // The idle baseline before the groups exist.
    ctx.baseline().await?;
    let prefix = format!("bench-scale-{size}");
    let groups = Groups::create(&prefix, size, CREATE_CONCURRENCY, LEASE_SECONDS).await?;
    let log = format!("operator-scale-{size}.log");
    let ns = Some(groups.namespace.as_str());
    let bound = (log.as_str(), ALL_LED_BOUND, LEASE_SECONDS);
    let (mut entry, op, led_at_bound, _) =
        start_ours(ctx, std::slice::from_ref(&groups), ns, bound).await?;
    if let Some(count) = led_at_bound {
        // Record what the operator managed and what it cost, rather than losing the run.
        entry.note = Some(format!(
            "not every group was led within {} s: {count} of {size} were; the window was measured while it still converged",
            ALL_LED_BOUND.as_secs()
        ));
        return Ok(entry);
    }
    // Groups spread over the size, each handed over once; deletions between the NotReady ones.
    let spread = |reps: usize, offset: fn(usize) -> usize| {
        let step = (size / reps.max(1)).max(1);
        (0..reps).map(move |i| (i * step + offset(step)) % size)
    };
    let notready = groups.handovers(spread(ctx.pick(40, 3), |_| 0), Fault::Crash);
    let notready = notready.await?;
    let deleted = groups.handovers(spread(ctx.pick(20, 2), |step| step / 2), Fault::Graceful);
    let deleted = deleted.await?;
    light.record(|run| run.double_leaders += groups.watch.double_leaders());
    entry.peak_rss_mib = sample(&op, light.ticks).peak_rss_mib;
    drop(op);
    entry.handover_notready = Some(Handover::new(OURS, "NotReady at this size", notready, None));
    entry.handover_deleted = Some(Handover::new(OURS, "deletion at this size", deleted, None));
    Ok(entry)
}

/// A peer kind at `size` groups: three processes of `size` electors each.
async fn peer_at(ctx: &Context, kind: &PeerKind, size: usize) -> Result<ScaleEntry> {
    let light = ctx.light().await?;
    let baseline = ctx.baseline().await?;
    let ns = leadergroup_testenv::namespace(&format!("bench-peer-scale-{size}")).await?;
    let t0 = SystemTime::now();
    let group = PeerGroup::start(ctx, kind, &ns, size).await?;
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
    Ok(ScaleEntry::new(
        kind.peer.name,
        size,
        ms_between(t0, led),
        &steady,
        LEASE_SECONDS,
    ))
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
                    self.entries.push(peer_at(ctx, kind, size).await?);
                }
            }
            Ok(())
        })
    }

    fn write(&mut self, run: &Run, results: &Results) -> Result<()> {
        let entries = std::mem::take(&mut self.entries);
        if !self.alone {
            let (run, body) = (run.clone(), ScaleResult { entries });
            return results.write("scale", &Stamped { run, body });
        }
        let mut result: Stamped<ScaleResult> = results.read("scale")?;
        let kept = &mut result.body.entries;
        kept.retain(|e| !(e.is_ours() && entries.iter().any(|n| n.groups == e.groups)));
        kept.extend(entries);
        kept.sort_by_key(|e| (!e.is_ours(), e.system.clone(), e.groups));
        results.write("scale", &result)
    }
}
