//! The end-to-end tests: the operator installed with its Helm chart on a real cluster (two nodes,
//! each a kubelet with its own containerd; kube-proxy; kube-controller-manager and the scheduler),
//! the example web application behind a Service that selects the leader, and real faults: a
//! container killed or frozen, a node stopped, the active operator replica killed; and how fast a
//! downward API volume follows a pod's labels (`downward.rs`); the GC pause with the ledger and
//! PostgreSQL refusing the thawed leader's stale write (`gc_pause.rs`); a lost node and the
//! failovers of a Readiness group, a Heartbeat group and client-go's leader election in one cut
//! (`node_loss.rs`).
//!
//! Run with `make e2e` (as root): it builds the node binaries and the images, starts the cluster
//! (`controlplane/realcluster.sh up --node-monitor-grace-period 10`), runs `cargo test --test e2e`
//! with `LEADERGROUP_E2E_KUBECONFIG` set, and stops the cluster whatever happened. Plain
//! `cargo test` does not build or run this binary (`test = false` in Cargo.toml); run without the
//! cluster, every test fails and says so.
//!
//! The tests take the cluster one at a time (`Cluster::get`); each has a namespace of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod chart;
mod cluster;
mod downward;
mod faults;
mod gc_pause;
mod incarnation;
mod lease_guard;
mod node_loss;
mod operator_ha;
mod service;
mod traffic;
