//! Each party's clocks. The model's time is a tick count (one tick is one second); each party
//! reads it on its own monotonic clock, from an origin of its own, and on its own wall clock, set
//! apart from the others': only intervals on one party's clock may ever be compared, and the code
//! under test must never compare one party's time with another's.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use leadergroup_operator::lease_sightings::Now;

use crate::api::PodId;

/// A moment of the model's time, in ticks (seconds) since its start.
pub type Tick = u8;

/// Where every monotonic clock of the model is counted from.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn secs(t: u64) -> Duration {
    Duration::from_secs(t)
}

fn wall(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

/// The operator replica's clocks at `tick`.
pub fn operator(tick: Tick) -> Now {
    Now {
        wall: wall(i64::from(tick)),
        monotonic: *BASE + secs(500 + u64::from(tick)),
    }
}

/// The operator's wall clock at `tick` (what it writes in `acquireTime`).
pub fn operator_wall(tick: Tick) -> Timestamp {
    operator(tick).wall
}

/// The client of `pod` at `tick`, on its monotonic clock (another origin than the operator's).
pub fn client(pod: PodId, tick: Tick) -> tokio::time::Instant {
    tokio::time::Instant::from_std(*BASE + secs(100 * (1 + u64::from(pod)) + u64::from(tick)))
}

/// The client of `pod`'s wall clock at `tick`, as its process `process` writes it in
/// `renewTime`: seconds ahead of the operator's, and the process in the sub-second digits, so
/// that two renewals never write the same time.
pub fn client_wall(pod: PodId, process: u8, tick: Tick) -> Timestamp {
    wall(i64::from(tick) + 7 + 3 * i64::from(pod))
        + SignedDuration::from_millis(1 + i64::from(process))
}

/// An instant of the client of `pod`'s monotonic clock, as seconds of the model's time.
pub fn client_secs(pod: PodId, at: tokio::time::Instant) -> f64 {
    at.saturating_duration_since(client(pod, 0)).as_secs_f64()
}
