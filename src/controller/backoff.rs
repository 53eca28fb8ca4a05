//! The backoff of groups whose reconcile met a permanent error ([`crate::retry`]), or missed its
//! deadline [`STALE_RUN`] times in a row: 2 s, doubling with each consecutive failure to at most
//! a cap (5 minutes for a refusal), reset by a reconcile that succeeds or by a change of the
//! group's spec. Until the wait is over, the group's watch events do not run the failing requests
//! again: a pod event cannot grant a permission or fix an object.

use std::time::{Duration, Instant};

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
pub(super) struct Failing {
    /// Consecutive deadline misses.
    pub stale: u32,
    /// Consecutive failures counted for the backoff.
    pub failures: u32,
    retry_at: Instant,
    /// The spec generation that failed: a new one is tried at once.
    generation: Option<i64>,
}

impl Failing {
    pub fn new(generation: Option<i64>) -> Failing {
        Failing {
            stale: 0,
            failures: 0,
            retry_at: Instant::now(),
            generation,
        }
    }

    /// Counts a failure at `generation` that backs off; returns the wait before the next try, at
    /// most `cap`.
    pub fn failed(&mut self, generation: Option<i64>, cap: Duration) -> Duration {
        if self.generation != generation {
            self.failures = 0;
            self.generation = generation;
        }
        self.failures = self.failures.saturating_add(1);
        let wait = delay(self.failures, cap);
        self.retry_at = Instant::now() + wait;
        wait
    }

    /// Counts a missed deadline; returns how many in a row.
    pub fn missed_deadline(&mut self) -> u32 {
        self.stale = self.stale.saturating_add(1);
        self.stale
    }

    /// How long a try at `generation` must still wait, unless the spec changed since.
    pub fn waiting(&self, generation: Option<i64>) -> Option<Duration> {
        if self.generation != generation {
            return None;
        }
        let left = self.retry_at.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
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
}
