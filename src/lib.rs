//! leadergroup-operator: elects exactly one Ready pod per `LeaderGroup`, records it in a Lease
//! with a resourceVersion compare-and-swap, labels it, and fences it with a monotonic epoch.

pub mod actions;
pub mod controller;
pub mod crd;
pub mod election;
pub mod error;
pub mod group_index;
pub mod ha;
pub mod http;
pub mod lease_record;
pub mod lease_sightings;
pub mod marks;
pub mod metrics;
pub mod pod_index;
pub mod relist;
pub mod retry;
pub mod routing;

pub use error::{ReconcileError, Result, StartupError};
