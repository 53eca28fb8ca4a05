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

use crate::Epoch;

pub use object::{FENCED_OBJECT_EPOCH_ANNOTATION, ObjectFenceError, replace_fenced};

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
