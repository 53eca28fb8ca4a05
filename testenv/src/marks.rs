//! The operator's marks and Lease, written by hand.
//!
//! The tests of `leadergroup-client` and `leadergroup-agent` play the operator's part themselves:
//! those crates must not depend on the operator crate (an application links the client, not the
//! operator), so their tests cannot run it in-process. [`Marks`] writes exactly what the
//! operator's transition writes (step 1: the group's Lease; step 3: follower marks; step 5: the
//! leader's marks), so a test can put the group in any state in one request.

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use leadergroup_client::wire::{
    EPOCH_ANNOTATION, GROUP_ANNOTATION, ROLE_FOLLOWER, ROLE_LABEL, ROLE_LEADER, lease_name_for,
};
use serde_json::json;

use crate::{Error, Result, TestNamespace};

/// Writes the operator's marks on pods and the group's Lease, as the operator would.
#[derive(Clone)]
pub struct Marks {
    pods: Api<Pod>,
    leases: Api<Lease>,
    field_manager: String,
    lease_duration_secs: i32,
}

impl Marks {
    /// Marks written through `pods` and `leases`; the Lease is applied (server-side, forced) as
    /// `field_manager`, with `leaseDurationSeconds: lease_duration_secs`.
    pub fn new(
        pods: Api<Pod>,
        leases: Api<Lease>,
        field_manager: &str,
        lease_duration_secs: i32,
    ) -> Marks {
        Marks {
            pods,
            leases,
            field_manager: field_manager.to_owned(),
            lease_duration_secs,
        }
    }

    /// Marks written in namespace `ns` (see [`Marks::new`]).
    pub fn in_namespace(
        ns: &TestNamespace,
        field_manager: &str,
        lease_duration_secs: i32,
    ) -> Marks {
        Marks::new(ns.api(), ns.api(), field_manager, lease_duration_secs)
    }

    /// What the operator's step 5 writes: role=leader, the epoch, the group.
    pub async fn mark_leader(&self, pod: &str, group: &str, epoch: i64) -> Result<()> {
        self.patch_pod(
            pod,
            json!({"metadata": {
                "labels": {ROLE_LABEL: ROLE_LEADER},
                "annotations": {EPOCH_ANNOTATION: epoch.to_string(), GROUP_ANNOTATION: group}
            }}),
        )
        .await
    }

    /// What the operator's step 3 writes: role=follower, no epoch.
    pub async fn mark_follower(&self, pod: &str, group: &str) -> Result<()> {
        self.patch_pod(
            pod,
            json!({"metadata": {
                "labels": {ROLE_LABEL: ROLE_FOLLOWER},
                "annotations": {EPOCH_ANNOTATION: null, GROUP_ANNOTATION: group}
            }}),
        )
        .await
    }

    async fn patch_pod(&self, pod: &str, patch: serde_json::Value) -> Result<()> {
        self.pods
            .patch(pod, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(Error::kube(format!("marking pod {pod}")))?;
        Ok(())
    }

    /// What the operator's step 1 writes: the Lease `leadergroup-<group>` with `holder` at
    /// `epoch`, of the duration given to [`Marks::new`].
    pub async fn put_lease(&self, group: &str, holder: Option<&str>, epoch: i64) -> Result<()> {
        let name = lease_name_for(group);
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "annotations": {EPOCH_ANNOTATION: epoch.to_string()}},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": self.lease_duration_secs,
                "leaseTransitions": epoch,
            }
        });
        self.leases
            .patch(
                &name,
                &PatchParams::apply(&self.field_manager).force(),
                &Patch::Apply(lease),
            )
            .await
            .map_err(Error::kube(format!("applying Lease {name}")))?;
        Ok(())
    }
}
