//! Fencing: a protected resource refuses an epoch lower than the highest it has accepted, so a
//! deposed leader (paused, cut off, late) cannot overwrite its successor's work.
//!
//! - [`object`]: a Kubernetes object guarded by the annotation [`FENCED_OBJECT_EPOCH_ANNOTATION`], written with
//!   a resourceVersion compare-and-swap.
//! - `sql` (feature `postgres`): a fence row per group in PostgreSQL, raised in the same
//!   transaction as the write.

pub mod object;
#[cfg(feature = "postgres")]
pub mod sql;

use std::time::Duration;

use crate::Epoch;

pub use object::{FENCED_OBJECT_EPOCH_ANNOTATION, ObjectFenceError, replace_fenced};

/// How long one fenced write may take, for a group whose Lease lasts `lease_duration`: two thirds
/// of it, the time a leader's role stays confirmed without a new answer from the API server
/// ([`crate::Membership::write_deadline`] applies it to the duration last seen). A write still
/// unanswered by then is given up: its leader may no longer be confirmed, and it must check its
/// role again rather than wait on a request that may never be answered.
pub fn write_deadline(lease_duration: Duration) -> Duration {
    lease_duration * 2 / 3
}

/// A write presented an epoch lower than the highest the resource has accepted: the writer has
/// been deposed and must stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "stale fencing token: epoch {presented} was presented, but epoch {highest} has already been \
     accepted (a newer leader has written; this one must stop)"
)]
pub struct StaleEpoch {
    /// The epoch the refused write carried.
    pub presented: Epoch,
    /// The highest epoch the resource had accepted.
    pub highest: Epoch,
}
