//! Integration tests of the leadergroup-agent binary: the real process, run as a pod's
//! ServiceAccount with exactly the documented RBAC against the workspace's light control plane
//! (see leadergroup-testenv), read through its files and its HTTP endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod cut;
mod examples;
mod follow;
mod proxy;
mod startup;
mod stdout;
mod step_down;
