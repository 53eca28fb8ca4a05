//! The end-to-end tests: the operator installed with its Helm chart on a real cluster (two nodes,
//! each a kubelet with its own containerd; kube-proxy; kube-controller-manager and the scheduler),
//! the example web application behind a Service that selects the leader, and real faults: a
//! container killed or frozen, a node stopped, the active operator replica killed; and how fast a
//! downward API volume follows a pod's labels (`downward.rs`); the GC pause with the ledger and
//! PostgreSQL refusing the thawed leader's stale write (`gc_pause.rs`); a lost node and the
//! failovers of a Readiness group, a Heartbeat group and client-go's leader election in one cut
//! (`node_loss.rs`); the book's shell, Python and Go clients of the agent in pods
//! (`agent_clients.rs`); an upgrade from the previous release and a rollback with live groups
//! (`upgrade.rs`, its agent groups from `agents.rs`); the chart's no-leader alert firing and
//! resolving in a real Prometheus (`alerts.rs`); the kubectl plugin's status, switchover and
//! history (`plugin.rs`); the quickstart and the install page run as written (`quickstart.rs`,
//! `install.rs`, both through `page.rs`).
//!
//! Run with `make e2e` (as root): it builds the node binaries and the images, starts the cluster
//! (`controlplane/realcluster.sh up --node-monitor-grace-period 10`), runs `cargo test --test e2e`
//! with `LEADERGROUP_E2E_KUBECONFIG` set, and stops the cluster whatever happened. Plain
//! `cargo test` does not build or run this binary (`test = false` in Cargo.toml); run without the
//! cluster, every test fails and says so.
//!
//! The tests take the cluster one at a time (`Cluster::get`); each has a namespace of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agent_clients;
mod agents;
mod alerts;
mod chart;
mod cluster;
mod downward;
mod faults;
mod gc_pause;
mod incarnation;
mod install;
mod lease_guard;
mod node_loss;
mod operator_ha;
mod operator_node_loss;
mod page;
mod plugin;
mod quickstart;
mod service;
mod traffic;
mod upgrade;
