//! The integration tests: one binary, so the test support in `common` is compiled once. Each
//! module is one area, observed the way a user would against a real API server (the control plane
//! of `leadergroup-testenv`: the one `LEADERGROUP_KUBECONFIG` names, or one started for this run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod app_latency;
mod arbiter;
mod chaos;
mod chart;
mod cleanup;
mod common;
mod crash;
mod docs_examples;
mod election;
mod gc_pause;
mod ha;
mod heartbeat;
mod incarnation;
mod inputs;
mod kubectl;
mod late_promote;
mod lease;
mod ledger_manifests;
mod metrics;
mod overlap;
mod plugin;
mod recreation;
mod refusals;
mod restarts;
mod rollout;
mod secure_metrics;
mod service;
mod stalled_watch;
mod status;
mod step_down;
mod stray;
mod validation;
