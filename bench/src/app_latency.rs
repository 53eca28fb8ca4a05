//! Scenario `app-latency`: how fast the application knows. Handovers of one group of three pods,
//! alternately by deletion and by NotReady; every candidate pod followed by an in-process
//! `leadergroup-client` `Membership` and a real `leadergroup-agent` process. The measurement is
//! the integration test's ([`leadergroup_testenv::app_latency`]), so the test and the benchmark
//! time the same thing.

use leadergroup_testenv::app_latency as measure;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::markdown::{Block, Table, ms, spread_row, spread_table};
use crate::results::Run;
use crate::scenario::{Context, Recorded, Scenario, measuring};
use leadergroup_testenv::stats::{Summary, summarize};

pub const APP_LATENCY: Scenario = Scenario::of::<AppLatencyResult>(
    "app-latency",
    "How fast the application learns its role (crate and agent)",
    |ctx| measuring(measure(ctx)),
);

/// Where each clock starts.
pub const START: &str = "the Lease's `acquireTime`, written by the operator in step 1 of the transition (the Lease CAS) and set to the `now` of the decision that picked the new leader";

/// How a clock is read from a handover.
type Read = fn(&measure::Handover) -> f64;

/// The clocks: name, where it stops, and how to read it from a handover.
const CLOCKS: [(&str, &str, Read); 4] = [
    (
        "crate: new leader `Leader`",
        "the new leader's `Membership` (`leadergroup-client`, in the bench process) publishes `Role::Leader` at the new epoch on its `watch`",
        |h| h.crate_new_leader_ms,
    ),
    (
        "crate: old leader not `Leader`",
        "the old leader's `Membership` publishes `Follower` or `Unknown`",
        |h| h.crate_old_not_leader_ms,
    ),
    (
        "agent: new leader `leader`",
        "the new leader's `leadergroup-agent` (its own process) answers a pending long poll `GET /role?wait=<version>` with `leader` at the new epoch",
        |h| h.agent_new_leader_ms,
    ),
    (
        "agent: old leader not `leader`",
        "the old leader's agent answers its long poll with `follower` or `unknown`",
        |h| h.agent_old_not_leader_ms,
    ),
];

/// One clock over one set of handovers.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Clock {
    pub clock: String,
    /// `all`, `deletion` or `NotReady`.
    pub trigger: String,
    /// Where it stops (it starts at [`START`]).
    pub stop: String,
    pub samples_ms: Vec<f64>,
    pub summary: Option<Summary>,
}

/// One handover, as measured.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct HandoverRow {
    /// `deletion` or `NotReady`.
    pub trigger: String,
    /// Old leader pod and epoch.
    pub old: (String, i64),
    /// New leader pod and epoch.
    pub new: (String, i64),
    /// From the trigger (DELETE or the NotReady status write sent) to the decision, ms.
    pub trigger_to_decision_ms: f64,
    /// The four clocks, ms from the decision.
    pub crate_new_leader_ms: f64,
    /// See [`CLOCKS`].
    pub crate_old_not_leader_ms: f64,
    /// See [`CLOCKS`].
    pub agent_new_leader_ms: f64,
    /// See [`CLOCKS`].
    pub agent_old_not_leader_ms: f64,
}

/// `bench/results/app-latency.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct AppLatencyResult {
    /// Where every clock starts.
    pub start: String,
    /// The clocks, over all handovers and per trigger.
    pub clocks: Vec<Clock>,
    pub handovers: Vec<HandoverRow>,
    /// What the test's checks found over the run (must be empty).
    pub violations: Vec<String>,
    /// The downward API volume's latency: measured on the real cluster only (a kubelet refreshes
    /// the file); `None` here.
    pub downward_api: Option<Summary>,
}

impl Recorded for AppLatencyResult {
    const FILE: &'static str = "app-latency";

    fn blocks(&self, _run: &Run) -> Vec<Block> {
        let deletions = self
            .handovers
            .iter()
            .filter(|h| h.trigger == "deletion")
            .count();
        let setup = Table::new(&["handovers", "by deletion", "by NotReady", "Lease duration"])
            .with([
                self.handovers.len().to_string(),
                deletions.to_string(),
                (self.handovers.len() - deletions).to_string(),
                format!("{} s", measure::LEASE_SECONDS),
            ]);
        let mut clocks = spread_table(&["clock", "trigger"]);
        for c in &self.clocks {
            clocks.row(spread_row(&[&c.clock, &c.trigger], c.summary.as_ref()));
        }
        clocks.row([
            "downward API file changes",
            "label PATCH",
            "see `make e2e`",
            "see `make e2e`",
            "–",
            "–",
        ]);
        let before: Vec<f64> = self
            .handovers
            .iter()
            .map(|h| h.trigger_to_decision_ms)
            .collect();
        let before = summarize(&before);
        let overlaps = self
            .handovers
            .iter()
            .filter(|h| h.crate_new_leader_ms < h.crate_old_not_leader_ms)
            .count();
        let checks = Table::new(&[
            "before the decision: median",
            "p99",
            "new leader's `Leader` before the old one stopped",
            "checks over every report",
        ])
        .with([
            before.as_ref().map_or("–".into(), |s| ms(s.median_ms)),
            before.as_ref().map_or("–".into(), |s| ms(s.p99_ms)),
            format!("{overlaps} of {} handovers", self.handovers.len()),
            if self.violations.is_empty() {
                "all held".to_owned()
            } else {
                format!("**{}**", self.violations.join("; "))
            },
        ]);
        vec![Block::tables("app-latency", [setup, clocks, checks])]
    }

    fn problems(&self) -> Vec<String> {
        self.violations.clone()
    }
}

async fn measure(ctx: &Context) -> Result<AppLatencyResult> {
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
    Ok(AppLatencyResult::new(&report))
}

impl AppLatencyResult {
    /// The clocks over all handovers and per trigger, and every handover, of `report`.
    fn new(report: &measure::Report) -> AppLatencyResult {
        let mut clocks = Vec::new();
        for (name, stop, read) in CLOCKS {
            for trigger in ["all", "deletion", "NotReady"] {
                let samples: Vec<f64> = report
                    .handovers
                    .iter()
                    .filter(|h| trigger == "all" || h.trigger.name() == trigger)
                    .map(read)
                    .collect();
                clocks.push(Clock {
                    clock: name.into(),
                    trigger: trigger.into(),
                    stop: stop.into(),
                    summary: summarize(&samples),
                    samples_ms: samples,
                });
            }
        }
        let handovers = report
            .handovers
            .iter()
            .map(|h| HandoverRow {
                trigger: h.trigger.name().into(),
                old: h.old.clone(),
                new: h.new.clone(),
                trigger_to_decision_ms: h.decided_ms - h.triggered_ms,
                crate_new_leader_ms: h.crate_new_leader_ms,
                crate_old_not_leader_ms: h.crate_old_not_leader_ms,
                agent_new_leader_ms: h.agent_new_leader_ms,
                agent_old_not_leader_ms: h.agent_old_not_leader_ms,
            })
            .collect();
        AppLatencyResult {
            start: START.into(),
            clocks,
            violations: report.violations(),
            handovers,
            downward_api: None,
        }
    }
}
