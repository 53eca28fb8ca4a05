//! Scenario `app-latency`: how fast the application knows. Handovers of one group of three pods,
//! alternately by deletion and by NotReady; every candidate pod followed by an in-process
//! `leadergroup-client` `Membership` and a real `leadergroup-agent` process. The measurement is
//! the integration test's ([`leadergroup_testenv::app_latency`]), so the test and the benchmark
//! time the same thing.

use crate::error::Result;
use crate::markdown::{Block, Table, ms, spread_row, spread_table};
use crate::results::Record;
use crate::scenario::{Context, Measured, Scenario, measuring};
use leadergroup_testenv::app_latency as measure;
use leadergroup_testenv::stats::summarize;

pub const APP_LATENCY: Scenario = Scenario {
    name: "app-latency",
    help: "How fast the application learns its role (crate and agent)",
    files: &["app-latency"],
    in_full_run: true,
    measure: |ctx| measuring(measure(ctx)),
    render: |records| blocks(&records[0]),
};

/// How a clock is read from a handover.
type Read = fn(&measure::Handover) -> f64;

/// The clocks, each from the Lease's `acquireTime` (written by the operator in step 1 of the
/// transition, the Lease CAS, and set to the `now` of the decision that picked the new leader):
/// its name in the table, its metric, and how to read it from a handover.
const CLOCKS: [(&str, &str, Read); 4] = [
    // The new leader's `Membership` (`leadergroup-client`, in the bench process) publishes
    // `Role::Leader` at the new epoch on its `watch`.
    ("crate: new leader `Leader`", "crate_new_leader_ms", |h| {
        h.crate_new_leader_ms
    }),
    // The old leader's `Membership` publishes `Follower` or `Unknown`.
    (
        "crate: old leader not `Leader`",
        "crate_old_not_leader_ms",
        |h| h.crate_old_not_leader_ms,
    ),
    // The new leader's `leadergroup-agent` (its own process) answers a pending long poll
    // `GET /role?wait=<version>` with `leader` at the new epoch.
    ("agent: new leader `leader`", "agent_new_leader_ms", |h| {
        h.agent_new_leader_ms
    }),
    // The old leader's agent answers its long poll with `follower` or `unknown`.
    (
        "agent: old leader not `leader`",
        "agent_old_not_leader_ms",
        |h| h.agent_old_not_leader_ms,
    ),
];

/// The triggers, each a case: per case, each metric lists one value per handover, in order.
const TRIGGERS: [&str; 2] = ["deletion", "NotReady"];

/// The setup, the clocks over all handovers and per trigger, and the checks.
fn blocks(result: &Record) -> Vec<Block> {
    let all = |metric: &str| -> Vec<f64> {
        let per_trigger = TRIGGERS.map(|t| result.values("", t, metric));
        per_trigger.concat()
    };
    let before = all("trigger_to_decision_ms");
    let deletions = result
        .values("", TRIGGERS[0], "trigger_to_decision_ms")
        .len();
    let setup = Table::new(&["handovers", "by deletion", "by NotReady", "Lease duration"]).with([
        before.len().to_string(),
        deletions.to_string(),
        (before.len() - deletions).to_string(),
        format!("{} s", measure::LEASE_SECONDS),
    ]);
    let clocks = clocks(result, all);
    let overlaps = all(CLOCKS[0].1)
        .into_iter()
        .zip(all(CLOCKS[1].1))
        .filter(|(new, old)| new < old)
        .count();
    let before = summarize(&before);
    let checks = Table::new(&[
        "before the decision: median",
        "p99",
        "new leader's `Leader` before the old one stopped",
        "checks over every report",
    ])
    .with([
        before.as_ref().map_or("–".into(), |s| ms(s.median_ms)),
        before.as_ref().map_or("–".into(), |s| ms(s.p99_ms)),
        format!("{overlaps} of {} handovers", all(CLOCKS[0].1).len()),
        match result.text("", "", "problems") {
            None => "all held".to_owned(),
            Some(problems) => format!("**{problems}**"),
        },
    ]);
    vec![Block::tables("app-latency", [setup, clocks, checks])]
}

/// Each clock over all handovers (`all` reads a metric of every handover) and per trigger, and
/// the downward API's row.
fn clocks(result: &Record, all: impl Fn(&str) -> Vec<f64>) -> Table {
    let mut clocks = spread_table(&["clock", "trigger"]);
    for (name, metric, _) in CLOCKS {
        clocks.row(spread_row(&[name, "all"], &all(metric)));
        for trigger in TRIGGERS {
            let samples = result.values("", trigger, metric);
            clocks.row(spread_row(&[name, trigger], &samples));
        }
    }
    // Measured on the real cluster only: a kubelet refreshes the file.
    let e2e = "see `make e2e`";
    clocks.with([
        "downward API file changes",
        "label PATCH",
        e2e,
        e2e,
        "–",
        "–",
    ])
}

async fn measure(ctx: &Context) -> Result<Measured> {
    let light = ctx.light().await?;
    let handovers = ctx.pick(50, 4);
    tracing::info!("app-latency: {handovers} handovers, Membership and agent per pod");
    let ns = leadergroup_testenv::namespace("bench-app-latency").await?;
    let setup = measure::Setup {
        ns: &ns,
        kubeconfig: light.cp.kubeconfig_path(),
        cp: light.cp,
        operator_bin: light.operator.clone(),
        agent_bin: crate::ours::release_binary("leadergroup-agent")?,
        log_dir: ctx.log_dir.join("app-latency"),
        handovers,
    };
    let report = measure::run(&setup).await?;
    let mut record = Record::default();
    for trigger in TRIGGERS {
        let of = report
            .handovers
            .iter()
            .filter(|h| h.trigger.name() == trigger);
        let list = |read: Read| of.clone().map(read).collect::<Vec<f64>>();
        let pods = |pod: fn(&measure::Handover) -> &(String, i64)| -> Vec<String> {
            of.clone()
                .map(|h| format!("{} at {}", pod(h).0, pod(h).1))
                .collect()
        };
        record.add("", trigger, "old_leader", pods(|h| &h.old));
        record.add("", trigger, "new_leader", pods(|h| &h.new));
        let before = list(|h| h.decided_ms - h.triggered_ms);
        record.add("", trigger, "trigger_to_decision_ms", before);
        for (_, metric, read) in CLOCKS {
            record.add("", trigger, metric, list(read));
        }
    }
    record.add("", "", "problems", report.violations());
    Ok(Measured("app-latency", record))
}
