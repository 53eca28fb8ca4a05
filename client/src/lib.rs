//! The application side of leadergroup-operator: know the role at once, stop in time, and
//! have stale writes refused.
//!
//! The operator elects one pod per `LeaderGroup`, records it in the Lease
//! `leadergroup-<group>` (holder = the pod's name, annotation `leadergroup.io/epoch` = the
//! fencing token) and marks the pod (label `leadergroup.io/role`, annotations
//! `leadergroup.io/epoch` and `leadergroup.io/group`). This crate reads those marks; it does not
//! depend on the operator: the operator depends on it for the names, which all live in [`wire`]
//! ([`ROLE_LABEL`], [`EPOCH_ANNOTATION`], [`GROUP_ANNOTATION`], [`LEASE_PREFIX`] among them).
//!
//! - [`Membership`] follows the pod and the group's Lease and publishes a [`Role`]:
//!   [`Role::Leader`] only while both agree and the API server confirmed it within two thirds of
//!   the Lease duration; [`Role::Unknown`] when that confirmation lapses (the application must
//!   then stop acting: a cut-off leader stops before a successor can be chosen).
//! - In Heartbeat mode (the group's `spec.liveness: Heartbeat`; the Lease carries
//!   [`LIVENESS_ANNOTATION`]) the leader's [`Membership`] also renews the Lease every third of its
//!   duration, with a compare-and-swap on its resourceVersion that moves only `renewTime` (a
//!   renewal never overwrites a newer leader), and the role is [`Role::Leader`] only while a
//!   renewal landed within two thirds of the duration. The operator hands over once it has seen no
//!   renewal for a whole duration, on its own clock, so a leader cut off from the API server (a
//!   lost node) stops a third of a duration before a successor is chosen.
//! - [`Epoch`] is the fencing token; [`fence`] has the helpers that make a resource refuse a
//!   stale one: a Kubernetes object ([`fence::replace_fenced`]) and PostgreSQL (`fence::sql`,
//!   feature `postgres`).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use leadergroup_client::{Membership, Role};
//! let client = kube::Client::try_default().await?;
//! // POD_NAME and POD_NAMESPACE from the downward API; the group from the pod's annotation.
//! let membership = Membership::start_from_env(client)?;
//! loop {
//!     let epoch = membership.wait_leader().await;
//!     tokio::select! {
//!         role = membership.leader_context() => tracing::warn!(%role, "no longer leader"),
//!         () = async { /* lead, presenting `epoch` to every protected write */ } => {}
//!     }
//! #   let _ = epoch;
//! }
//! # }
//! ```
//!
//! # RBAC
//!
//! A [`Membership`] uses the verbs `get` and `watch` on its own pod and on its group's Lease, and
//! nothing else (no `list`), and `update` on the Lease: to acknowledge its leadership and to say it
//! stepped down (and in Heartbeat mode to renew it). Grant them to the pod's ServiceAccount (here
//! group `payments`,
//! namespace `prod`, ServiceAccount `payments`):
//!
//! ```yaml
//! apiVersion: rbac.authorization.k8s.io/v1
//! kind: Role
//! metadata: {name: payments-leadergroup-member, namespace: prod}
//! rules:
//!   # Its own pod. RBAC cannot name a pod whose name is not known in advance (a Deployment's
//!   # pods), so this covers the namespace's pods; reads only.
//!   - apiGroups: [""]
//!     resources: [pods]
//!     verbs: [get, watch]
//!   # The group's Lease, and only it; update acknowledges leadership, steps down, and renews it
//!   # in Heartbeat mode (a group with spec.liveness: Heartbeat).
//!   - apiGroups: [coordination.k8s.io]
//!     resources: [leases]
//!     resourceNames: [leadergroup-payments]
//!     verbs: [get, watch, update]
//! ---
//! apiVersion: rbac.authorization.k8s.io/v1
//! kind: RoleBinding
//! metadata: {name: payments-leadergroup-member, namespace: prod}
//! roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: payments-leadergroup-member}
//! subjects:
//!   - {kind: ServiceAccount, name: payments, namespace: prod}
//! ```
//!
//! Without it the role stays [`Role::Unknown`], and [`Membership::last_error`] names the refused
//! request (verb, resource, name, namespace), as does the log (`tracing`, level error).
//!
//! The fence on a Kubernetes object needs `get` and `update` on that object.
//!

pub mod belief;
mod epoch;
mod error;
pub mod fence;
mod follow;
mod lease_writes;
#[cfg(feature = "log")]
pub mod log;
mod membership;
pub mod publication;
pub mod role;
pub mod wire;

pub use epoch::{Epoch, ParseEpochError};
pub use error::{MembershipError, Request};
pub use membership::{
    ActedOn, GROUP_ENV, Membership, MissingEnv, POD_NAME_ENV, POD_NAMESPACE_ENV, POD_UID_ENV,
};
pub use publication::Publication;
pub use role::Role;

// The names this crate reads, under the names it has always exported them by; [`wire`] has
// them all, for the operator, the agent and the tests.
pub use wire::{
    EPOCH_ANNOTATION, GROUP_ANNOTATION, LEASE_PREFIX, LIVENESS_ANNOTATION,
    LIVENESS_HEARTBEAT as HEARTBEAT, ROLE_LABEL, ROLE_LEADER as LEADER,
};

#[cfg(test)]
mod manifest_tests {
    /// A library leaves the Kubernetes version to the application that depends on it
    /// (k8s-openapi's rule for library crates): the crate's normal dependency on k8s-openapi
    /// enables no version feature, as `cargo metadata` reads the manifest.
    #[test]
    fn the_crate_picks_no_kubernetes_version_for_its_users() {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let out = std::process::Command::new(option_env!("CARGO").unwrap_or("cargo"))
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .args(["--manifest-path", manifest])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let client = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == env!("CARGO_PKG_NAME"))
            .unwrap();
        let openapi: Vec<&serde_json::Value> = client["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["name"] == "k8s-openapi" && d["kind"].is_null())
            .collect();
        assert_eq!(openapi.len(), 1, "{openapi:?}");
        let features: Vec<&str> = openapi[0]["features"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f.as_str())
            .collect();
        assert!(
            !features
                .iter()
                .any(|f| f.starts_with("v1_") || *f == "latest" || *f == "earliest"),
            "leadergroup-client enables k8s-openapi's {features:?} for every application"
        );
        assert_eq!(openapi[0]["uses_default_features"], false, "{openapi:?}");
    }
}
