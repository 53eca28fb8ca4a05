//! One handover, whatever the world: a system's candidates at rest, a fault to their leader, the
//! first other candidate to lead, then the fault undone and the struck candidate replaced as its
//! controller would. Ours and the peers implement [`Candidates`] on the light cluster (`ours`,
//! `peers`) and on the real one (`e2e`): this module imports none of them.

use std::time::{Duration, SystemTime};

use leadergroup_testenv::histories::{Report, unix_ms};

use crate::error::Result;
use crate::observe::ms_between;

/// How a handover is caused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The leader leaves gracefully: its pod deleted (ours on the light cluster: the simulated
    /// kubelet removes it shortly after; a peer's process there: SIGTERM).
    Graceful,
    /// The leader's process dies (ours on the light cluster: its pod turns NotReady, and Ready
    /// again afterwards, as a follower; a peer's process there: SIGKILL).
    Crash,
    /// The leader's process stops without dying (SIGSTOP; the real cluster only).
    Frozen,
}

/// The leader of a system at rest: the process that leads, and its pod.
#[derive(Clone, Debug)]
pub struct Leader {
    pub identity: String,
    pub pod: String,
}

/// A system's candidates, as a handover drives them.
pub(crate) trait Candidates {
    /// The leader, once the system is at rest.
    async fn leader(&mut self) -> Result<Leader>;
    /// Strikes `leader` with `fault`; when the clock started, just before the fault.
    async fn strike(&mut self, leader: &Leader, fault: Fault) -> Result<SystemTime>;
    /// When a candidate other than `leader` first led at or after `t0`.
    async fn new_leader(&mut self, leader: &Leader, t0: SystemTime) -> Result<SystemTime>;
    /// Undoes `fault` and replaces the struck candidate; `handed_over`: whether another led.
    async fn recover(&mut self, leader: Leader, fault: Fault, handed_over: bool) -> Result<()>;
}

/// One handover by `fault`: milliseconds from the fault to the new leader.
pub async fn handover(candidates: &mut impl Candidates, fault: Fault) -> Result<f64> {
    let old = candidates.leader().await?;
    let t0 = candidates.strike(&old, fault).await?;
    let new = candidates.new_leader(&old, t0).await;
    candidates.recover(old, fault, new.is_ok()).await?;
    Ok(ms_between(t0, new?))
}

/// One system's handovers of one kind: the milliseconds of each, why any failed, and what the
/// histories of its applications gave (the struck one's included): per repetition the longest
/// time two of them believed they led and the longest time none did, and every such overlap
/// (`split_brains` counts them).
#[derive(Clone, Debug, Default)]
pub struct Handovers {
    pub ms: Vec<f64>,
    pub failures: Vec<String>,
    pub split_brains: u64,
    pub app_overlap_ms: Vec<f64>,
    pub app_none_ms: Vec<f64>,
    /// Each overlap, said in a line.
    pub overlaps: Vec<String>,
}

impl Handovers {
    /// Adds what the histories of its next repetition, struck at `t0`, gave.
    pub fn judged(&mut self, t0: SystemTime, report: &Report) {
        let rep = self.app_overlap_ms.len() + 1;
        // To the microsecond: the digits beyond are the float's noise of Unix milliseconds.
        let us = |ms: f64| (ms * 1e3).round() / 1e3;
        self.app_overlap_ms.push(us(report.app_overlap_ms));
        self.app_none_ms.push(us(report.none_ms));
        for o in report.overlaps() {
            self.split_brains += 1;
            let who: Vec<String> = o.members.iter().map(|(name, _)| name.clone()).collect();
            let after = o.from_ms - unix_ms(t0);
            self.overlaps.push(format!(
                "#{rep}: {} for {:.0} ms, from {after:.0} ms after the fault",
                who.join(" and "),
                o.ms()
            ));
        }
    }

    /// Adds a repetition's outcome, its milliseconds or why it failed, and logs it as `what`;
    /// whether it succeeded.
    pub fn add(&mut self, what: &str, outcome: Result<f64>) -> bool {
        match outcome {
            Ok(ms) => {
                tracing::info!("{what}: {ms:.0} ms");
                self.ms.push(ms);
                true
            }
            Err(e) => {
                tracing::info!("{what}: {e}");
                self.failures.push(e.to_string());
                false
            }
        }
    }
}

/// Up to `reps` handovers by `fault`, a second apart, added to `result` (logged as `what`); a
/// handover that fails is a result, not a harness error: it ends the repetitions. Whether none
/// failed.
pub async fn repeat(
    candidates: &mut impl Candidates,
    fault: Fault,
    reps: usize,
    what: &str,
    result: &mut Handovers,
) -> bool {
    for i in 1..=reps {
        let outcome = handover(candidates, fault).await;
        if !result.add(&format!("{what} {fault:?} #{i}"), outcome) {
            return false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    true
}
