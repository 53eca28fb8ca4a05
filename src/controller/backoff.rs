//! The backoff of groups whose reconcile met a permanent error ([`crate::retry`]), or missed its
//! deadline [`STALE_RUN`] times in a row: 2 s, doubling with each consecutive failure to at most
//! a cap (5 minutes for a refusal), reset by a reconcile that succeeds or by a change of the
//! group's spec. Until the wait is over, the group's watch events do not run the failing requests
//! again: a pod event cannot grant a permission or fix an object.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;

use crate::crd::LeaderGroup;

/// The first wait after a permanent error.
pub const FIRST: Duration = Duration::from_secs(2);
/// The longest wait after a refusal.
pub const CAP: Duration = Duration::from_secs(300);
/// The longest wait of a group whose reconciles miss their deadline: the API server may be fast
/// again any moment.
pub const CAP_SLOW: Duration = Duration::from_secs(30);
/// How many reconciles in a row may miss their deadline before the group says so and backs off.
pub const STALE_RUN: u32 = 5;

/// The wait after the `failures`-th consecutive permanent error (1 is the first), at most `cap`.
pub fn delay(failures: u32, cap: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    FIRST.saturating_mul(1 << doublings).min(cap)
}

/// One group's run of failures.
struct Failing {
    /// Consecutive deadline misses.
    stale: u32,
    /// Consecutive failures counted for the backoff.
    failures: u32,
    retry_at: Instant,
    /// The spec generation that failed: a new one is tried at once.
    generation: Option<i64>,
}

/// The groups in a run of permanent errors.
#[derive(Default)]
pub struct PermanentBackoff(Mutex<HashMap<ObjectRef<LeaderGroup>, Failing>>);

impl Failing {
    fn new(generation: Option<i64>) -> Failing {
        Failing {
            stale: 0,
            failures: 0,
            retry_at: Instant::now(),
            generation,
        }
    }
}

impl PermanentBackoff {
    /// Counts a failure of `group` at `generation` that backs off; returns the wait before the
    /// next try, at most `cap`.
    pub fn failed(
        &self,
        group: &ObjectRef<LeaderGroup>,
        generation: Option<i64>,
        cap: Duration,
    ) -> Duration {
        let Ok(mut groups) = self.0.lock() else {
            return FIRST;
        };
        let failing = groups
            .entry(group.clone())
            .or_insert_with(|| Failing::new(generation));
        if failing.generation != generation {
            failing.failures = 0;
            failing.generation = generation;
        }
        failing.failures = failing.failures.saturating_add(1);
        let wait = delay(failing.failures, cap);
        failing.retry_at = Instant::now() + wait;
        wait
    }

    /// Counts a missed deadline of `group`; returns how many in a row.
    pub fn missed_deadline(&self, group: &ObjectRef<LeaderGroup>) -> u32 {
        let Ok(mut groups) = self.0.lock() else {
            return 0;
        };
        let failing = groups
            .entry(group.clone())
            .or_insert_with(|| Failing::new(None));
        failing.stale = failing.stale.saturating_add(1);
        failing.stale
    }

    /// How many deadlines in a row `group` has missed.
    pub fn missed_deadlines(&self, group: &ObjectRef<LeaderGroup>) -> u32 {
        self.0
            .lock()
            .ok()
            .and_then(|groups| groups.get(group).map(|f| f.stale))
            .unwrap_or(0)
    }

    /// Ends `group`'s run: its reconcile succeeded.
    pub fn succeeded(&self, group: &ObjectRef<LeaderGroup>) {
        if let Ok(mut groups) = self.0.lock() {
            groups.remove(group);
        }
    }

    /// How long `group` at `generation` must still wait, if it is in a run of permanent errors
    /// and its spec has not changed since.
    pub fn waiting(
        &self,
        group: &ObjectRef<LeaderGroup>,
        generation: Option<i64>,
    ) -> Option<Duration> {
        let groups = self.0.lock().ok()?;
        let failing = groups.get(group)?;
        if failing.generation != generation {
            return None;
        }
        let left = failing.retry_at.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// How many consecutive permanent errors `group` has met.
    pub fn failures(&self, group: &ObjectRef<LeaderGroup>) -> u32 {
        self.0
            .lock()
            .ok()
            .and_then(|groups| groups.get(group).map(|f| f.failures))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_two_seconds_to_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(|n| delay(n, CAP).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(u32::MAX, CAP), CAP);
        assert_eq!(delay(6, CAP_SLOW), CAP_SLOW);
    }

    #[test]
    fn a_success_or_a_new_spec_resets_the_run() {
        let backoff = PermanentBackoff::default();
        let g = ObjectRef::new("g").within("ns");
        assert_eq!(backoff.failed(&g, Some(1), CAP), FIRST);
        assert_eq!(backoff.failed(&g, Some(1), CAP), FIRST * 2);
        assert!(backoff.waiting(&g, Some(1)).is_some());
        // A new generation is tried at once, and starts its own run.
        assert_eq!(backoff.waiting(&g, Some(2)), None);
        assert_eq!(backoff.failed(&g, Some(2), CAP), FIRST);
        assert_eq!(backoff.missed_deadline(&g), 1);
        assert_eq!(backoff.missed_deadline(&g), 2);
        backoff.succeeded(&g);
        assert_eq!(backoff.waiting(&g, Some(2)), None);
        assert_eq!(backoff.failures(&g), 0);
        assert_eq!(backoff.missed_deadlines(&g), 0);
    }
}
