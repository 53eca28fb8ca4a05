//! Integration tests of leadergroup-client against a real API server (the workspace's light
//! control plane, see leadergroup-testenv) and a real PostgreSQL. One binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod cut;
mod lag;
mod membership;
mod object_fence;
mod permission;
mod sql_fence;
