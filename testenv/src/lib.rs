//! Test support for leadergroup-operator: a real Kubernetes control plane (etcd + kube-apiserver,
//! built from pinned Go modules by `controlplane/build.sh`), a fresh namespace per test, and a
//! simulated kubelet that creates pods on a fake node and reports their status the way a kubelet
//! does; and a private PostgreSQL server ([`Postgres`]) for the tests of the SQL fence.
//!
//! ```no_run
//! # async fn example() -> Result<(), leadergroup_testenv::Error> {
//! use leadergroup_testenv::{namespace, Kubelet};
//! let ns = namespace("election").await?;
//! let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
//! let pod = kubelet.create_ready_pod("app-0", &[("app", "demo")]).await?;
//! # let _ = pod; Ok(())
//! # }
//! ```
//!
//! There is no kube-controller-manager and no scheduler: nothing creates `default`
//! ServiceAccounts (so [`namespace`] does), nothing garbage-collects ownerReferences, a deleted
//! namespace stays `Terminating` forever (so tests never delete theirs; the whole cluster is thrown
//! away), and a pod bound to a node is only removed once its kubelet says so ([`Kubelet`]).

mod active;
pub mod app_latency;
mod containers;
mod controlplane;
pub mod crd;
mod error;
mod files;
#[cfg(feature = "gc-pause")]
pub mod gc_pause;
mod held;
pub mod histories;
mod https;
pub mod invariants;
mod kubelet;
mod marks;
mod member;
mod namespace;
mod operator;
pub mod pods;
mod postgres;
mod private;
mod proxy;
mod realcluster;
pub mod record;
mod settled;
pub mod stats;
mod tools;
pub mod traffic_timings;
mod wait;
mod watch;

pub use active::{ActiveMonitor, Overlap, ReadyzAddr, readyz_role};
pub use containers::{Frozen, freezer_state, kill_container};
pub use controlplane::{
    BIN_DIR_ENV, ControlPlane, E2E_KUBECONFIG_ENV, KUBECONFIG_ENV, attach, control_plane,
    e2e_cluster,
};
pub use crd::install_crd;
pub use error::Error;
pub use files::{FileHistory, Version};
pub use held::{HeldRequests, HoldRule};
pub use https::{Trust, https_get};
pub use invariants::{Gap, InvariantWatcher};
pub use kubelet::{Kubelet, NODE_NAME};
/// The names on the wire, from the one place the operator, the client and the agent read them.
pub use leadergroup_client::wire;
pub use marks::Marks;
pub use member::{MemberRules, MemberWorld, member_account, member_rules};
pub use namespace::{TestNamespace, namespace, namespace_in};
pub use operator::{OperatorLaunch, OperatorProcess, free_port};
pub use postgres::{POSTGRES_BIN_ENV, Postgres};
pub use private::PrivateCluster;
pub use proxy::{Proxy, api_server_addr};
pub use realcluster::{
    OPERATOR_LEASE, OPERATOR_NAMESPACE, OPERATOR_POD_SELECTOR, OPERATOR_RELEASE, RealCluster, Undo,
    node_ready,
};
pub use settled::{Settled, judge_settled, settled, wait_settled};
pub use tools::{http_get, run_ok, run_tool};
pub use wait::{wait_for_object, wait_until, wait_until_every};
pub use watch::{Seen, Watched};

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
