//! The actions of the transition protocol: each one API call, small and idempotent.

pub mod batch;
pub mod events;
pub mod lease;
pub mod pods;
pub mod routing;
pub mod status;
