//! `leadergroup-chaos`: a randomized fault run, seeded and repeatable. Two
//! operator replicas with `--leader-elect` run several groups on a control plane of the run's own,
//! while the plan's faults strike: replicas killed, paused, rolled, their requests held or cut;
//! leaders and followers deleted or flapping NotReady; Leases deleted or rewritten by someone
//! else; promotions held inside the API server; kube-apiserver killed and restarted; the groups'
//! specs edited (selector, `preferredLeader`, `leaseDurationSeconds`, `paused`, `liveness`); the
//! replicas' watches stalled. Every pod runs the client's `Membership` in this process (half the
//! groups in Heartbeat mode, where it renews the Lease; two per pod in half the groups), each
//! followed by an application through a relay (the pod's agent, which the faults pause), and
//! restarted, cut off (a node, or one member alone) and stalled by the faults too. An
//! independent watch checks I1, I3 and the order of the writes at every event and times every
//! gap (I4); each round of faults ends with every group settled (I2); and at no instant may the
//! applications of two pods of a group act as leader, each on the last publication it got and
//! only before its validity (on this process's one clock).
//!
//! `make chaos` runs the published run: its result `chaos/results/latest.json` ([`Results`]) and
//! the page rendered from it, `docs/chaos.md`; `make test` runs a short one
//! (`tests/it/chaos.rs`).

mod error;
pub mod members;
pub mod plan;
mod replica;
mod report;
pub mod results;
mod run;
mod world;

use std::path::PathBuf;
use std::time::Duration;

pub use error::Error;
pub use report::{Report, secs};
pub use results::{Commit, Results};

/// One run's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The plan's seed.
    pub seed: u64,
    /// How many faults.
    pub faults: usize,
    /// How many groups (3 pods each).
    pub groups: usize,
    /// The groups' `leaseDurationSeconds`.
    pub lease_seconds: u32,
    /// The operator replicas' own Lease, in seconds.
    pub operator_lease_seconds: u32,
    /// Faults per round (each round ends with every group settled).
    pub round: usize,
    /// I4's bound: the longest a group may go without an eligible leader while it has an
    /// eligible candidate, faults and all.
    pub gap_bound: Duration,
    /// The operator binary.
    pub operator: PathBuf,
    /// Where the replicas' logs go.
    pub work_dir: PathBuf,
    /// The replicas' `RUST_LOG`; `None`: the operator tests' default.
    pub operator_log: Option<String>,
}

impl Config {
    /// The defaults of `make chaos`, for `faults` faults from `seed`.
    pub fn new(seed: u64, faults: usize, operator: PathBuf, work_dir: PathBuf) -> Config {
        Config {
            seed,
            faults,
            groups: 4,
            lease_seconds: 3,
            operator_lease_seconds: 4,
            round: 100,
            gap_bound: Duration::from_secs(30),
            operator,
            work_dir,
            operator_log: None,
        }
    }
}

/// Runs the plan of `config` and reports; everything it started is stopped when it returns.
pub async fn run(config: &Config) -> Result<Report, Error> {
    let steps = plan::plan(config.seed, config.faults, config.groups);
    run::run(config, &steps).await
}
