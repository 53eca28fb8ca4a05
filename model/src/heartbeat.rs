//! Heartbeat mode: the leader's clients renew the group's Lease, are cut off and restart, while
//! the operator times their silence and hands the Lease over. Time passes in discrete ticks (one
//! second each), and each party reads it on a clock of its own (its own origin, monotonic and
//! wall): what a client believes is the client crate's own [`leadergroup_client::belief::Belief`]
//! and role rule, and when the operator judges a lapse its own
//! [`leadergroup_operator::lease_sightings::Sighting`] and `election::decide`.
//!
//! Properties: at most one client believes `Leader` at any instant, and none once a successor
//! holds the Lease, unless the Lease still waits for its step-down (an immediate handover).

pub mod client;
pub mod clock;
pub mod display;
pub mod model;
pub mod objects;
pub mod operator;
pub mod regressions;
pub mod state;

pub use model::{HbAction, HbConfig, HeartbeatModel};
pub use state::HbState;
