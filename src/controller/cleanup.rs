//! The finalizer's deletion path: a deleted group leaves no marks on pods and no Lease behind
//! (garbage collection of the owned Lease is not relied on).

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::info;

use super::Context;
use crate::actions;
use crate::crd::LeaderGroup;
use crate::error::Result;

/// On deletion of the group: removes its marks from the pods, deletes its Lease, then lets go.
pub(super) async fn run(group: Arc<LeaderGroup>, ctx: &Context, ns: &str) -> Result<Action> {
    let name = group.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let leases_api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    for pod in actions::pods::marked(&pods_api, &name).await? {
        actions::pods::unmark(
            &pods_api,
            &pod.name_any(),
            pod.resource_version().as_deref(),
        )
        .await?;
    }
    if let Some(lease) = actions::lease::read(&leases_api, &group.lease_name()).await?
        && group.owns_lease(&lease)
    {
        actions::lease::delete(&leases_api, &lease).await?;
    }
    ctx.lease_sightings
        .forget(&ObjectRef::from_obj(group.as_ref()));
    ctx.metrics.forget_group(ns, &name);
    info!(group = %name, "group deleted: marks removed from its pods, Lease deleted");
    Ok(Action::await_change())
}
