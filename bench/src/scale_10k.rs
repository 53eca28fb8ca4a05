//! Scenario `scale-10k`: 10,000 groups of three Ready pods (30,000 pods) over ten namespaces, the
//! operator watching every namespace. Measured: the time from the operator's start until an
//! independent watch sees every group led; a steady window (API requests per group by verb, CPU,
//! RSS steady and peak); then a restart of the operator at that size (SIGKILL, a new process):
//! the time until it is ready (every watch listed) and until it has reconciled every group once,
//! and what the restart changed: every group's epoch and leader before and after, and every
//! change of a leader label the watches saw meanwhile (must both be 0).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use kube::Api;
use kube::api::ListParams;
use leadergroup_operator::crd::LeaderGroup;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::markdown::{Block, Table, counts};
use crate::ours::{Groups, LEASE_SECONDS, sample};
use crate::results::Run;
use crate::scale::{ScaleEntry, cost_targets, start_ours};
use crate::scenario::{Context, Recorded, Scenario, measuring};
use leadergroup_testenv::OperatorProcess;

pub const SCALE_10K: Scenario = Scenario::of::<ScaleBigResult>(
    "scale-10k",
    "10,000 groups (or the first value of `--scale`), then an operator restart",
    |ctx| measuring(measure(ctx)),
);

/// Groups per namespace.
const GROUPS_PER_NAMESPACE: usize = 1000;
/// Creations in flight over all namespaces (pods: a create then a status write each).
const CREATE_CONCURRENCY: usize = 64;
/// How long every group may take to be led, and the restarted operator to catch up: ten times
/// the 60 s target, so that a start which misses it is still measured to its end, and the
/// restart after it.
const BOUND: Duration = Duration::from_secs(600);

/// What an operator restart at this size did.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Restart {
    /// From the new process's start until /readyz answers 200 (every watch has listed).
    pub to_ready_ms: f64,
    /// From the new process's start until it has reconciled as many times as there are groups
    /// (`leadergroup_reconcile_seconds_count`): every group decided again, nothing to change.
    pub to_all_reconciled_ms: f64,
    /// Groups whose `status.epoch` differs after the restart (must be 0).
    pub epoch_changes: usize,
    /// Groups whose `status.leader` differs after the restart (must be 0).
    pub leader_changes: usize,
    /// Changes of a leader label the independent watches saw from the kill until the end of
    /// the window after the restart (must be 0).
    pub label_flaps: u64,
    /// How long after the restart the watches kept counting.
    pub watched_s: f64,
    /// RSS of the new process at the end, and its peak, MiB.
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
}

/// `bench/results/scale-10k.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ScaleBigResult {
    /// The groups' Lease duration, s.
    pub lease_seconds: i32,
    /// Namespaces the groups are spread over.
    pub namespaces: usize,
    /// Pods (three per group).
    pub pods: usize,
    /// How long the harness took to create the groups and their pods, s.
    pub create_s: f64,
    /// Creations the harness kept in flight.
    pub create_concurrency: usize,
    /// CPU seconds the operator used from its start until every group was led.
    pub converge_cpu_s: f64,
    /// The start and the steady window, as in the scale scenario.
    pub entry: ScaleEntry,
    /// Groups led when the harness stopped waiting, if not all were (the window then measured
    /// an operator still converging, and no restart was made).
    #[serde(default)]
    pub led_at_bound: Option<usize>,
    /// The restart, made once every group was led.
    pub restart: Option<Restart>,
}

impl Recorded for ScaleBigResult {
    const FILE: &'static str = "scale-10k";
    const OPTIONAL: bool = true;

    /// The setup, the start, the restart, and the targets.
    fn blocks(&self, run: &Run) -> Vec<Block> {
        let mut tables = vec![self.setup(run), self.start()];
        tables.extend(self.restart.as_ref().map(restart_table));
        let notes = self.entry.note.iter().map(|note| format!("**{note}.**"));
        vec![
            Block::tables("scale-10k", tables).notes(notes),
            Block::tables("scale-10k-targets", [self.targets()]),
        ]
    }
}

/// `groups` groups (the first value of `--scale`) over `groups / 1000` namespaces (at least
/// one), their Leases lasting `--lease`.
async fn measure(ctx: &Context) -> Result<ScaleBigResult> {
    let light = ctx.light().await?;
    // The idle baseline before the groups exist.
    ctx.baseline().await?;
    let groups = ctx
        .options
        .scale
        .as_ref()
        .and_then(|sizes| sizes.first().copied())
        .unwrap_or(ctx.pick(10_000, 200));
    let lease_seconds = ctx.options.lease.unwrap_or(LEASE_SECONDS);
    let namespaces = groups.div_ceil(GROUPS_PER_NAMESPACE).max(1);
    let t_create = Instant::now();
    let sets = create(groups, namespaces, lease_seconds).await?;
    let create_s = t_create.elapsed().as_secs_f64();
    tracing::info!("scale-10k: created in {create_s:.0} s");

    let bound = ("operator-scale-10k.log", BOUND, lease_seconds);
    let (mut entry, op, led_at_bound, converge_cpu_s) = start_ours(ctx, &sets, None, bound).await?;
    if let Some(count) = led_at_bound {
        entry.note = Some(format!(
            "{count} of {groups} groups were led {} s after the start, when the harness stopped waiting; the window measured an operator still converging, and no restart was made",
            BOUND.as_secs()
        ));
    }
    tracing::info!(
        "scale-10k: steady: {:.2} writes per group per third, {:.3} polling reads/s per group, {:.1} CPU s/min, RSS {:.1} MiB (peak {:.1})",
        entry.writes_per_group_per_third,
        entry.polling_reads_per_s_per_group,
        entry.cpu_s_per_min,
        entry.rss_mib,
        entry.peak_rss_mib
    );

    // The restart is measured only once every group was led: its checks compare led groups.
    let restart = if led_at_bound.is_some() {
        drop(op);
        None
    } else {
        // Past a whole Lease duration: every group was renewed by the new process, or changed.
        let watched = Duration::from_secs(u64::from(lease_seconds.unsigned_abs())) + ctx.settle();
        Some(restart(ctx, &sets, watched, op).await?)
    };
    let doubles: u64 = sets.iter().map(|s| s.watch.double_leaders()).sum();
    light.record(|run| run.double_leaders += doubles);
    Ok(ScaleBigResult {
        lease_seconds,
        namespaces,
        pods: groups * 3,
        create_s,
        create_concurrency: CREATE_CONCURRENCY,
        converge_cpu_s,
        entry,
        led_at_bound,
        restart,
    })
}

/// `groups` groups over `namespaces` namespaces, their Leases lasting `lease_seconds`.
async fn create(groups: usize, namespaces: usize, lease_seconds: i32) -> Result<Vec<Groups>> {
    tracing::info!(
        "scale-10k: creating {groups} groups, {} pods, in {namespaces} namespaces ({CREATE_CONCURRENCY} creations in flight)",
        groups * 3
    );
    let per_ns = (CREATE_CONCURRENCY / namespaces).max(1);
    try_join_all((0..namespaces).map(|i| {
        let count = (groups - i * GROUPS_PER_NAMESPACE).min(GROUPS_PER_NAMESPACE);
        async move { Groups::create(&format!("bench-10k-{i}"), count, per_ns, lease_seconds).await }
    }))
    .await
}

/// Kills the operator (SIGKILL) and starts a new process: how long until it is ready and has
/// reconciled every group of `sets`, and what changed until `watched` after (epochs, leaders,
/// leader labels). The new process is stopped when it returns.
async fn restart(
    ctx: &Context,
    sets: &[Groups],
    watched: Duration,
    mut op: OperatorProcess,
) -> Result<Restart> {
    let groups: usize = sets.iter().map(|s| s.names.len()).sum();
    tracing::info!("scale-10k: restart (SIGKILL, a new process)");
    let before = statuses(sets).await?;
    let flaps = || -> u64 { sets.iter().map(|s| s.watch.leader_changes()).sum() };
    let flaps_before = flaps();
    let _ = op.kill().await;
    let op = ctx
        .start_operator(None, "operator-scale-10k-restarted.log")
        .await?;
    let mut to_ready = None;
    let to_all_reconciled = loop {
        if op.started.elapsed() > BOUND {
            let what = format!("the restarted operator to reconcile {groups} groups");
            return Err(Error::Timeout(what));
        }
        if to_ready.is_none() && op.get("/readyz").await.is_some_and(|(code, _)| code == 200) {
            to_ready = Some(op.started.elapsed().as_secs_f64() * 1000.0);
        }
        if reconciles(&op).await.is_some_and(|n| n >= groups as u64) {
            break op.started.elapsed().as_secs_f64() * 1000.0;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tracing::info!(
        "scale-10k: restarted: ready after {:.1} s, every group reconciled after {:.1} s",
        to_ready.unwrap_or(f64::NAN) / 1000.0,
        to_all_reconciled / 1000.0
    );
    tokio::time::sleep(watched).await;
    let after = statuses(sets).await?;
    let changed = |differs: fn(&Status, &Status) -> bool| {
        before
            .iter()
            .filter(|(k, b)| after.get(*k).is_none_or(|a| differs(a, b)))
            .count()
    };
    let last = sample(&op, ctx.light().await?.ticks);
    let restart = Restart {
        to_ready_ms: to_ready.unwrap_or(to_all_reconciled),
        to_all_reconciled_ms: to_all_reconciled,
        epoch_changes: changed(|a, b| a.0 != b.0),
        leader_changes: changed(|a, b| a.1 != b.1),
        label_flaps: flaps() - flaps_before,
        watched_s: watched.as_secs_f64(),
        rss_mib: last.rss_mib,
        peak_rss_mib: last.peak_rss_mib,
    };
    drop(op);
    Ok(restart)
}

/// The operator's reconciles so far (`leadergroup_reconcile_seconds_count`), None while it does
/// not answer.
async fn reconciles(op: &OperatorProcess) -> Option<u64> {
    let (_, body) = op.get("/metrics").await?;
    body.lines()
        .find_map(|l| l.strip_prefix("leadergroup_reconcile_seconds_count "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// A group's epoch and leader.
type Status = (i64, Option<String>);

/// Every group's epoch and leader, by namespace and name, from the API server.
async fn statuses(sets: &[Groups]) -> Result<BTreeMap<(String, String), Status>> {
    let mut out = BTreeMap::new();
    for set in sets {
        let api: Api<LeaderGroup> = Api::namespaced(set.client.clone(), &set.namespace);
        for g in api.list(&ListParams::default()).await?.items {
            let status = g.status.unwrap_or_default();
            out.insert(
                (set.namespace.clone(), g.metadata.name.unwrap_or_default()),
                (status.epoch, status.leader),
            );
        }
    }
    Ok(out)
}

impl ScaleBigResult {
    fn setup(&self, run: &Run) -> Table {
        let columns = [
            "groups",
            "pods",
            "namespaces",
            "Lease duration",
            "created in",
            "creations in flight",
            "run",
        ];
        Table::new(&columns).with([
            self.entry.groups.to_string(),
            self.pods.to_string(),
            self.namespaces.to_string(),
            format!("{} s", self.lease_seconds),
            format!("{:.0} s", self.create_s),
            self.create_concurrency.to_string(),
            format!("{} (`{}`)", run.started_at, run.command),
        ])
    }

    /// From the start to every group led, or `at_bound` of how many were led at the bound.
    fn to_all_led(&self, at_bound: impl FnOnce(usize) -> String) -> String {
        let s = self.entry.time_to_all_led_ms / 1000.0;
        self.led_at_bound
            .map_or_else(|| format!("{s:.1} s"), at_bound)
    }

    fn start(&self) -> Table {
        let (e, bound) = (&self.entry, BOUND.as_secs());
        let to_all_led =
            self.to_all_led(|n| format!("not within {bound} s: {n} of {} led then", e.groups));
        let window = format!("requests/s per group, steady {:.0} s window", e.window_s);
        let led = "from operator start to every group led (independent watches)";
        Table::of(
            &["measure", "value"],
            [
                [led.into(), to_all_led],
                [
                    "CPU until then".into(),
                    format!("{:.1} s", self.converge_cpu_s),
                ],
                [
                    window + " (by verb, resource)",
                    counts(&e.requests_per_s_per_group),
                ],
                [
                    "writes per group per third of the Lease".into(),
                    format!("{:.2}", e.writes_per_group_per_third),
                ],
                [
                    "polling reads/s per group".into(),
                    format!("{:.3}", e.polling_reads_per_s_per_group),
                ],
                [
                    "CPU s/min, steady".into(),
                    format!("{:.2}", e.cpu_s_per_min),
                ],
                ["RSS steady (peak)".into(), rss(e.rss_mib, e.peak_rss_mib)],
            ],
        )
    }

    fn targets(&self) -> Table {
        let (e, mut targets) = (&self.entry, Table::new(&["target", "measured", "met"]));
        let to_all_led = self
            .to_all_led(|n| format!("{n} of {} led when the harness stopped waiting", e.groups));
        let in_time = self.led_at_bound.is_none() && e.time_to_all_led_ms <= 60_000.0;
        let groups = |target: &str| format!("{} groups: {target}", e.groups);
        targets.target(groups("all led within 60 s"), to_all_led, in_time);
        let memory = format!("{:.1} MiB (peak {:.1})", e.rss_mib, e.peak_rss_mib);
        targets.target(groups("steady RSS < 256 MiB"), memory, e.rss_mib < 256.0);
        targets.rows.extend(cost_targets(e, groups));
        if let Some(x) = &self.restart {
            let measured = format!(
                "{} epochs, {} label changes; every group reconciled {:.1} s after the start",
                x.epoch_changes,
                x.label_flaps,
                x.to_all_reconciled_ms / 1000.0
            );
            let held = x.epoch_changes == 0 && x.label_flaps == 0 && x.leader_changes == 0;
            let target = groups("a restart changes no epoch and flaps no label");
            targets.target(target, measured, held);
        }
        targets
    }
}

/// Resident memory and its peak, MiB.
fn rss(rss_mib: f64, peak_rss_mib: f64) -> String {
    format!("{rss_mib:.1} MiB ({peak_rss_mib:.1})")
}

fn restart_table(x: &Restart) -> Table {
    let flaps = format!(
        "leader label changes seen by the watches, from the kill to {:.0} s after the restart",
        x.watched_s
    );
    let secs = |ms: f64| format!("{:.1} s", ms / 1000.0);
    let ready = "from the new process's start to ready (every watch listed)";
    Table::of(
        &["restart (SIGKILL, a new process)", "value"],
        [
            [ready.into(), secs(x.to_ready_ms)],
            [
                "... to every group reconciled once".into(),
                secs(x.to_all_reconciled_ms),
            ],
            [
                "groups whose epoch changed".into(),
                x.epoch_changes.to_string(),
            ],
            [
                "groups whose leader changed".into(),
                x.leader_changes.to_string(),
            ],
            [flaps, x.label_flaps.to_string()],
            [
                "RSS of the new process at the end (peak)".into(),
                rss(x.rss_mib, x.peak_rss_mib),
            ],
        ],
    )
}
