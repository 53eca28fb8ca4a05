//! Scenario `scale-10k` (issue 14, part 3): 10,000 groups of three Ready pods (30,000 pods) over
//! ten namespaces, the operator watching every namespace. Measured: the time from the operator's
//! start until an independent watch sees every group led; a steady window (API requests per
//! group by verb, CPU, RSS steady and peak); then a restart of the operator at that size (SIGKILL,
//! a new process): the time until it is ready (every watch listed) and until it has reconciled
//! every group once, and what the restart changed: every group's epoch and leader before and
//! after, and every change of a leader label the watches saw meanwhile (must both be 0).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use futures::future::try_join_all;
use kube::Api;
use kube::api::ListParams;
use leadergroup_operator::crd::LeaderGroup;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::observe::{LeaderWatch, RequestCounts, ms_between, proc_sample};
use crate::ours::{Groups, OperatorProcess};
use crate::report::{Run, ScaleEntry};
use crate::say;

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
    /// Its peak RSS, MiB.
    pub peak_rss_mib: f64,
}

/// `bench/results/scale-10k.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ScaleBig {
    /// The run.
    pub run: Run,
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

/// Runs it: `groups` groups over `groups / 1000` namespaces (at least one), their Leases
/// lasting `lease_seconds`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    cp: &leadergroup_testenv::ControlPlane,
    operator: &Path,
    log_dir: &Path,
    groups: usize,
    lease_seconds: i32,
    settle: Duration,
    window: Duration,
    baseline: &RequestCounts,
    run: Run,
) -> Result<ScaleBig> {
    let ticks = crate::observe::ticks_per_second();
    let namespaces = groups.div_ceil(GROUPS_PER_NAMESPACE).max(1);
    say(format!(
        "scale-10k: creating {groups} groups, {} pods, in {namespaces} namespaces ({CREATE_CONCURRENCY} creations in flight)",
        groups * 3
    ));
    let t_create = Instant::now();
    let per_ns = (CREATE_CONCURRENCY / namespaces).max(1);
    let sets =
        try_join_all((0..namespaces).map(|i| {
            let count = (groups - i * GROUPS_PER_NAMESPACE).min(GROUPS_PER_NAMESPACE);
            async move {
                Groups::create_with(&format!("bench-10k-{i}"), count, per_ns, lease_seconds).await
            }
        }))
        .await?;
    let create_s = t_create.elapsed().as_secs_f64();
    say(format!("scale-10k: created in {create_s:.0} s"));
    let watches = try_join_all(
        sets.iter()
            .map(|s| LeaderWatch::start(&s.client, &s.namespace)),
    )
    .await?;
    let admin = cp.client().await?;

    let op = OperatorProcess::start_watching(
        operator,
        cp.kubeconfig_path(),
        None,
        &log_dir.join("operator-scale-10k.log"),
    )
    .await?;
    let t0 = SystemTime::now() - op.started.elapsed();
    let mut led = Some(t0);
    for (set, watch) in sets.iter().zip(&watches) {
        let deadline = BOUND.saturating_sub(op.started.elapsed());
        match set.wait_all_led_within(watch, deadline).await {
            Ok(at) => led = led.map(|l| l.max(at)),
            Err(e) => {
                say(format!("scale-10k: {e}"));
                led = None;
                break;
            }
        }
    }
    let led_count: usize = sets
        .iter()
        .zip(&watches)
        .map(|(s, w)| s.names.iter().filter(|g| w.leader(g).is_some()).count())
        .sum();
    let to_all_led = led.map_or(f64::NAN, |at| ms_between(t0, at));
    let converge_cpu_s = op.sample(ticks).cpu_seconds;
    say(format!(
        "scale-10k: {led_count} of {groups} groups led {:.1} s after the start ({converge_cpu_s:.1} CPU s)",
        op.started.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(settle).await;
    let (requests, cpu, sample) =
        crate::window(&admin, window, baseline, || op.sample(ticks)).await?;
    let mut entry = ScaleEntry::with_lease(
        "leadergroup-operator",
        groups,
        to_all_led,
        window.as_secs_f64(),
        requests,
        cpu,
        lease_seconds,
    );
    entry.rss_mib = sample.rss_mib;
    entry.peak_rss_mib = sample.peak_rss_mib;
    let led_at_bound = led.is_none().then_some(led_count);
    if let Some(count) = led_at_bound {
        entry.note = Some(format!(
            "{count} of {groups} groups were led {} s after the start, when the harness stopped waiting; the window measured an operator still converging, and no restart was made",
            BOUND.as_secs()
        ));
    }
    say(format!(
        "scale-10k: steady: {:.2} writes per group per third, {:.3} polling reads/s per group, {:.1} CPU s/min, RSS {:.1} MiB (peak {:.1})",
        entry.writes_per_group_per_third,
        entry.polling_reads_per_s_per_group,
        entry.cpu_s_per_min,
        entry.rss_mib,
        entry.peak_rss_mib
    ));

    // The restart is measured only once every group was led: its checks compare led groups.
    let (op, restart) = if led_at_bound.is_some() {
        (op, None)
    } else {
        let (op, restart) = measure_restart(
            op,
            cp,
            operator,
            log_dir,
            &sets,
            &watches,
            groups,
            lease_seconds,
            settle,
            ticks,
        )
        .await?;
        (op, Some(restart))
    };
    op.stop().await;
    let mut run = run;
    run.double_leaders += watches.iter().map(LeaderWatch::double_leaders).sum::<u64>();
    Ok(ScaleBig {
        run,
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

/// Kills the operator (SIGKILL) and starts a new process: how long until it is ready and has
/// reconciled every group, and what changed meanwhile (epochs, leaders, leader labels). Returns
/// the new process, still running.
#[allow(clippy::too_many_arguments)]
async fn measure_restart(
    op: OperatorProcess,
    cp: &leadergroup_testenv::ControlPlane,
    operator: &Path,
    log_dir: &Path,
    sets: &[Groups],
    watches: &[LeaderWatch],
    groups: usize,
    lease_seconds: i32,
    settle: Duration,
    ticks: f64,
) -> Result<(OperatorProcess, Restart)> {
    say("scale-10k: restart (SIGKILL, a new process)");
    let before = statuses(sets).await?;
    let flaps_before: u64 = watches.iter().map(LeaderWatch::leader_changes).sum();
    op.stop().await;
    let op = OperatorProcess::start_watching(
        operator,
        cp.kubeconfig_path(),
        None,
        &log_dir.join("operator-scale-10k-restarted.log"),
    )
    .await?;
    let mut to_ready = None;
    let to_all_reconciled = loop {
        let elapsed = op.started.elapsed();
        if elapsed > BOUND {
            return Err(Error::Timeout(format!(
                "the restarted operator to reconcile {groups} groups"
            )));
        }
        if to_ready.is_none() && op.get("/readyz").await.is_some_and(|(code, _)| code == 200) {
            to_ready = Some(op.started.elapsed().as_secs_f64() * 1000.0);
        }
        if op.reconciles().await.is_some_and(|n| n >= groups as u64) {
            break op.started.elapsed().as_secs_f64() * 1000.0;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    say(format!(
        "scale-10k: restarted: ready after {:.1} s, every group reconciled after {:.1} s",
        to_ready.unwrap_or(f64::NAN) / 1000.0,
        to_all_reconciled / 1000.0
    ));
    // Past a whole Lease duration: every group renewed by the new process, or changed.
    let watched = Duration::from_secs(u64::from(lease_seconds.unsigned_abs())) + settle;
    tokio::time::sleep(watched).await;
    let after = statuses(sets).await?;
    let flaps: u64 = watches.iter().map(LeaderWatch::leader_changes).sum::<u64>() - flaps_before;
    let epoch_changes = before
        .iter()
        .filter(|(k, (epoch, _))| after.get(*k).map(|a| a.0) != Some(*epoch))
        .count();
    let leader_changes = before
        .iter()
        .filter(|(k, (_, leader))| after.get(*k).map(|a| &a.1) != Some(leader))
        .count();
    let last = proc_sample(op.pid, ticks).unwrap_or_default();
    let restart = Restart {
        to_ready_ms: to_ready.unwrap_or(to_all_reconciled),
        to_all_reconciled_ms: to_all_reconciled,
        epoch_changes,
        leader_changes,
        label_flaps: flaps,
        watched_s: watched.as_secs_f64(),
        rss_mib: last.rss_mib,
        peak_rss_mib: last.peak_rss_mib,
    };
    Ok((op, restart))
}

/// Every group's epoch and leader, by namespace and name, from the API server.
async fn statuses(sets: &[Groups]) -> Result<BTreeMap<(String, String), (i64, Option<String>)>> {
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

/// The page's section.
pub fn section(r: &ScaleBig) -> String {
    use std::fmt::Write as _;
    let e = &r.entry;
    let mut o = String::new();
    let _ = writeln!(o, "## 3b. Scale: {} groups\n", e.groups);
    let _ = writeln!(
        o,
        "{} groups of three Ready pods ({} pods) in {} namespaces, Lease duration {} s, created before the operator starts ({:.0} s with {} creations in flight: a pod is a create and a status write); the operator watches every namespace. Run of {} (`{}`).\n",
        e.groups,
        r.pods,
        r.namespaces,
        r.lease_seconds,
        r.create_s,
        r.create_concurrency,
        r.run.started_at,
        r.run.command
    );
    let _ = writeln!(
        o,
        "| measure | value |\n|---|---|\n| from operator start to every group led (independent watches) | {} |\n| CPU until then | {:.1} s |\n| requests/s per group, steady {:.0} s window (by verb, resource) | {} |\n| writes per group per third of the Lease | {:.2} |\n| polling reads/s per group | {:.3} |\n| CPU s/min, steady | {:.2} |\n| RSS steady (peak) | {:.1} MiB ({:.1}) |",
        match r.led_at_bound {
            Some(n) => format!(
                "not within {} s: {n} of {} led then",
                BOUND.as_secs(),
                e.groups
            ),
            None => format!("{:.1} s", e.time_to_all_led_ms / 1000.0),
        },
        r.converge_cpu_s,
        e.window_s,
        crate::report::counts(&e.requests_per_s_per_group),
        e.writes_per_group_per_third,
        e.polling_reads_per_s_per_group,
        e.cpu_s_per_min,
        e.rss_mib,
        e.peak_rss_mib
    );
    if let Some(note) = &e.note {
        let _ = writeln!(o, "\n**{note}.**");
    }
    let Some(x) = &r.restart else {
        return o;
    };
    let _ = writeln!(
        o,
        "\nThen an operator restart at that size (SIGKILL, a new process):\n\n| measure | value |\n|---|---|\n| from the new process's start to ready (every watch listed) | {:.1} s |\n| ... to every group reconciled once | {:.1} s |\n| groups whose epoch changed | {} |\n| groups whose leader changed | {} |\n| leader label changes seen by the watches, from the kill to {:.0} s after the restart | {} |\n| RSS of the new process at the end (peak) | {:.1} MiB ({:.1}) |\n",
        x.to_ready_ms / 1000.0,
        x.to_all_reconciled_ms / 1000.0,
        x.epoch_changes,
        x.leader_changes,
        x.watched_s,
        x.label_flaps,
        x.rss_mib,
        x.peak_rss_mib
    );
    o
}
