//! Scenario `app-latency` (issue 11, item 5): how fast the application knows. Handovers of one
//! group of three pods, alternately by deletion and by NotReady; every candidate pod followed by
//! an in-process `leadergroup-client` `Membership` and a real `leadergroup-agent` process. The
//! measurement itself is the integration test's ([`leadergroup_testenv::app_latency`]), so the
//! test and the benchmark time the same thing.

use leadergroup_testenv::app_latency as measure;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::report::Run;
use crate::stats::{Summary, summarize};

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
    /// What is timed.
    pub clock: String,
    /// `all`, `deletion` or `NotReady`.
    pub trigger: String,
    /// Where it stops (it starts at [`START`]).
    pub stop: String,
    /// Every sample, ms.
    pub samples_ms: Vec<f64>,
    /// Their summary.
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
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct AppLatencyResult {
    /// The run.
    pub run: Run,
    /// Where every clock starts.
    pub start: String,
    /// The clocks, over all handovers and per trigger.
    pub clocks: Vec<Clock>,
    /// Every handover.
    pub handovers: Vec<HandoverRow>,
    /// What the test's checks found over the run (must be empty).
    pub violations: Vec<String>,
    /// The downward API volume's latency: measured on the real cluster only (a kubelet refreshes
    /// the file); `None` here.
    pub downward_api: Option<Summary>,
}

/// The agent's release binary, next to the bench's own.
fn agent_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(Error::io("locating the bench binary"))?;
    let path = exe
        .parent()
        .map(|d| d.join("leadergroup-agent"))
        .ok_or_else(|| Error::Other("the bench binary has no folder".into()))?;
    if !path.is_file() {
        return Err(Error::Other(format!(
            "{} is missing: run `cargo build --release -p leadergroup-agent` (make bench does)",
            path.display()
        )));
    }
    Ok(path)
}

/// Runs `handovers` handovers on a fresh namespace of the control plane `cp`.
pub async fn run(
    cp: &leadergroup_testenv::ControlPlane,
    operator: &Path,
    log_dir: &Path,
    handovers: usize,
) -> Result<AppLatencyResult> {
    let ns = leadergroup_testenv::namespace("bench-app-latency").await?;
    let setup = measure::Setup {
        ns: &ns,
        kubeconfig: cp.kubeconfig_path(),
        cp,
        operator_bin: operator.to_path_buf(),
        agent_bin: agent_binary()?,
        log_dir: log_dir.join("app-latency"),
        handovers,
    };
    let report = measure::run(&setup)
        .await
        .map_err(|e| Error::Other(e.to_string()))?;
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
    Ok(AppLatencyResult {
        run: Run::default(),
        start: START.into(),
        clocks,
        violations: report.violations(),
        handovers: report
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
            .collect(),
        downward_api: None,
    })
}
