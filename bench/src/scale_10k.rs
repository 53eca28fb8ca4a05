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

use crate::error::{Error, Result};
use crate::markdown::{Block, Table, counts};
use crate::ours::{Groups, LEASE_SECONDS, sample};
use crate::results::Record;
use crate::scale::{cost_targets, rss, start_ours};
use crate::scenario::{Context, Measured, OURS, Scenario, measuring};
use leadergroup_testenv::OperatorProcess;

pub const SCALE_10K: Scenario = Scenario {
    name: "scale-10k",
    help: "10,000 groups (or the first value of `--scale`), then an operator restart",
    files: &["scale-10k"],
    in_full_run: false,
    measure: |ctx| measuring(measure(ctx)),
    render: |records| blocks(&records[0]),
};

/// Groups per namespace.
const GROUPS_PER_NAMESPACE: usize = 1000;
/// Creations in flight over all namespaces (pods: a create then a status write each).
const CREATE_CONCURRENCY: usize = 64;
/// How long every group may take to be led, and the restarted operator to catch up: ten times
/// the 120 s target, so that a start which misses it is still measured to its end, and the
/// restart after it.
const BOUND: Duration = Duration::from_secs(600);

/// The case of the restart's samples.
const RESTART: &str = "restart";

/// The setup, the start, the restart, and the targets.
fn blocks(result: &Record) -> Vec<Block> {
    let Some((_, case)) = result.entries().into_iter().find(|e| e.0 == OURS) else {
        return Vec::new();
    };
    let number = |metric: &str| result.number("", "", metric);
    let columns = [
        "groups",
        "pods",
        "namespaces",
        "Lease duration",
        "created in",
        "creations in flight",
        "run",
    ];
    let setup = Table::new(&columns).with([
        case.to_owned(),
        number("pods").to_string(),
        number("namespaces").to_string(),
        format!("{} s", number("lease_s")),
        format!("{:.0} s", number("create_s")),
        number("create_concurrency").to_string(),
        format!("{} (`{}`)", result.run.started_at, result.run.command),
    ]);
    let mut tables = vec![setup, start(result, case)];
    tables.extend(restart_table(result));
    let note = result.text(OURS, case, "note");
    vec![
        Block::tables("scale-10k", tables).notes(note.map(|note| format!("**{note}.**"))),
        Block::tables("scale-10k-targets", [targets(result, case)]),
    ]
}

/// `groups` groups (the first value of `--scale`) over `groups / 1000` namespaces (at least
/// one), their Leases lasting `--lease`.
async fn measure(ctx: &Context) -> Result<Measured> {
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

    let mut record = Record::default();
    record.add("", "", "lease_s", lease_seconds);
    record.add("", "", "namespaces", namespaces);
    record.add("", "", "pods", groups * 3);
    record.add("", "", "create_s", create_s);
    record.add("", "", "create_concurrency", CREATE_CONCURRENCY);
    let bound = ("operator-scale-10k.log", BOUND, lease_seconds);
    let (op, led_at_bound, converge_cpu_s) =
        start_ours(ctx, &sets, None, bound, &mut record).await?;
    record.add("", "", "converge_cpu_s", converge_cpu_s);
    if let Some(count) = led_at_bound {
        record.add("", "", "led_at_bound", count);
        let note = format!(
            "{count} of {groups} groups were led {} s after the start, when the harness stopped waiting; the window measured an operator still converging, and no restart was made",
            BOUND.as_secs()
        );
        record.add(OURS, &groups.to_string(), "note", note);
    }
    // The restart is measured only once every group was led: its checks compare led groups.
    if led_at_bound.is_some() {
        drop(op);
    } else {
        // Past a whole Lease duration: every group was renewed by the new process, or changed.
        let watched = Duration::from_secs(u64::from(lease_seconds.unsigned_abs())) + ctx.settle();
        restart(ctx, &sets, watched, op, &mut record).await?;
    }
    let doubles: u64 = sets.iter().map(|s| s.watch.double_leaders()).sum();
    light.record(|run| run.double_leaders += doubles);
    Ok(Measured("scale-10k", record))
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
/// leader labels), into `record`. The new process is stopped when it returns.
async fn restart(
    ctx: &Context,
    sets: &[Groups],
    watched: Duration,
    mut op: OperatorProcess,
    record: &mut Record,
) -> Result<()> {
    let groups: usize = sets.iter().map(|s| s.names.len()).sum();
    tracing::info!("scale-10k: restart (SIGKILL, a new process)");
    let before = statuses(sets).await?;
    let flaps = || -> u64 { sets.iter().map(|s| s.watch.leader_changes()).sum() };
    let flaps_before = flaps();
    let _ = op.kill().await;
    let op = ctx
        .start_operator(None, "operator-scale-10k-restarted.log")
        .await?;
    let (to_ready, to_all_reconciled) = caught_up(&op, groups).await?;
    tokio::time::sleep(watched).await;
    let after = statuses(sets).await?;
    let changed = |differs: fn(&Status, &Status) -> bool| {
        before
            .iter()
            .filter(|(k, b)| after.get(*k).is_none_or(|a| differs(a, b)))
            .count()
    };
    let last = sample(&op, ctx.light().await?.ticks);
    let figures = [
        // From the new process's start until /readyz answers 200 (every watch has listed).
        ("to_ready_ms", to_ready),
        // ... until it has reconciled as many times as there are groups
        // (`leadergroup_reconcile_seconds_count`): every group decided again, nothing to change.
        ("to_all_reconciled_ms", to_all_reconciled),
        // Groups whose `status.epoch`, or `status.leader`, differs after the restart (must be 0).
        ("epoch_changes", changed(|a, b| a.0 != b.0) as f64),
        ("leader_changes", changed(|a, b| a.1 != b.1) as f64),
        // Changes of a leader label the independent watches saw from the kill until the end of
        // the window after the restart (must be 0).
        ("label_flaps", (flaps() - flaps_before) as f64),
        ("watched_s", watched.as_secs_f64()),
        ("rss_mib", last.rss_mib),
        ("peak_rss_mib", last.peak_rss_mib),
    ];
    for (metric, value) in figures {
        record.add("", RESTART, metric, value);
    }
    drop(op);
    Ok(())
}

/// Waits until the operator `op`, just started, has reconciled `groups` groups: milliseconds from
/// its start until it was ready, and until then.
async fn caught_up(op: &OperatorProcess, groups: usize) -> Result<(f64, f64)> {
    let mut to_ready = None;
    let to_all_reconciled = loop {
        if op.started.elapsed() > BOUND {
            let what = format!("the restarted operator to reconcile {groups} groups");
            return Err(Error::Timeout(what));
        }
        if to_ready.is_none() && op.get("/readyz").await.is_some_and(|(code, _)| code == 200) {
            to_ready = Some(op.started.elapsed().as_secs_f64() * 1000.0);
        }
        if reconciles(op).await.is_some_and(|n| n >= groups as u64) {
            break op.started.elapsed().as_secs_f64() * 1000.0;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tracing::info!(
        "scale-10k: restarted: ready after {:.1} s, every group reconciled after {:.1} s",
        to_ready.unwrap_or(f64::NAN) / 1000.0,
        to_all_reconciled / 1000.0
    );
    Ok((to_ready.unwrap_or(to_all_reconciled), to_all_reconciled))
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

/// From the start to every group led, or `at_bound` of how many were led at the bound.
fn to_all_led(result: &Record, case: &str, at_bound: impl FnOnce(f64) -> String) -> String {
    let s = result.number(OURS, case, "to_all_led_ms") / 1000.0;
    let led_at_bound = result.values("", "", "led_at_bound");
    led_at_bound
        .first()
        .map_or_else(|| format!("{s:.1} s"), |n| at_bound(*n))
}

/// The start and the steady window.
fn start(result: &Record, groups: &str) -> Table {
    let bound = BOUND.as_secs();
    let led = to_all_led(result, groups, |n| {
        format!("not within {bound} s: {n} of {groups} led then")
    });
    let n =
        |metric: &str, decimals| format!("{:.*}", decimals, result.number(OURS, groups, metric));
    let window = n("window_s", 0);
    let window = format!("requests/s per group, steady {window} s window (by verb, resource)");
    let requests = result.counts(OURS, groups, "requests_per_s_per_group");
    let cpu = format!("{:.1} s", result.number("", "", "converge_cpu_s"));
    let rss = rss(
        result.number(OURS, groups, "rss_mib"),
        result.number(OURS, groups, "peak_rss_mib"),
    );
    let led_label = "from operator start to every group led (independent watches)";
    let rows = [
        (led_label.into(), led),
        ("CPU until then".into(), cpu),
        (window, counts(&requests.unwrap_or_default())),
        (
            "writes per group per third of the Lease".into(),
            n("writes_per_group_per_third", 2),
        ),
        (
            "polling reads/s per group".into(),
            n("polling_reads_per_s_per_group", 3),
        ),
        ("CPU s/min, steady".into(), n("cpu_s_per_min", 2)),
        ("RSS steady (peak)".into(), rss),
    ];
    Table::pairs(["measure", "value"], rows)
}

fn targets(result: &Record, case: &str) -> Table {
    let mut targets = Table::new(&["target", "measured", "met"]);
    let number = |metric: &str| result.number(OURS, case, metric);
    let led = to_all_led(result, case, |n| {
        format!("{n} of {case} led when the harness stopped waiting")
    });
    let all_led = result.values("", "", "led_at_bound").is_empty();
    let in_time = all_led && number("to_all_led_ms") <= 120_000.0;
    let groups = |target: &str| format!("{case} groups: {target}");
    targets.target(groups("all led within 120 s"), led, in_time);
    let (rss, peak) = (number("rss_mib"), number("peak_rss_mib"));
    let memory = format!("{rss:.1} MiB (peak {peak:.1})");
    targets.target(groups("steady RSS < 256 MiB"), memory, rss < 256.0);
    targets.rows.extend(cost_targets(result, case, groups));
    let restart = |metric: &str| result.number("", RESTART, metric);
    if !restart("to_ready_ms").is_nan() {
        let (epochs, flaps) = (restart("epoch_changes"), restart("label_flaps"));
        let reconciled = restart("to_all_reconciled_ms") / 1000.0;
        let measured = format!(
            "{epochs} epochs, {flaps} label changes; every group reconciled {reconciled:.1} s after the start"
        );
        let held = epochs == 0.0 && flaps == 0.0 && restart("leader_changes") == 0.0;
        let target = groups("a restart changes no epoch and flaps no label");
        targets.target(target, measured, held);
    }
    targets
}

/// The restart's table, if one was made.
fn restart_table(result: &Record) -> Option<Table> {
    let x = |metric: &str| result.number("", RESTART, metric);
    if x("to_ready_ms").is_nan() {
        return None;
    }
    let flaps = format!(
        "leader label changes seen by the watches, from the kill to {:.0} s after the restart",
        x("watched_s")
    );
    let secs = |metric: &str| format!("{:.1} s", x(metric) / 1000.0);
    let ready = "from the new process's start to ready (every watch listed)";
    let rows = [
        (ready.into(), secs("to_ready_ms")),
        (
            "... to every group reconciled once".into(),
            secs("to_all_reconciled_ms"),
        ),
        (
            "groups whose epoch changed".into(),
            x("epoch_changes").to_string(),
        ),
        (
            "groups whose leader changed".into(),
            x("leader_changes").to_string(),
        ),
        (flaps, x("label_flaps").to_string()),
        (
            "RSS of the new process at the end (peak)".into(),
            rss(x("rss_mib"), x("peak_rss_mib")),
        ),
    ];
    Some(Table::pairs(
        ["restart (SIGKILL, a new process)", "value"],
        rows,
    ))
}
