//! The finalizer's deletion path: a deleted group leaves no marks on pods, and its Lease released
//! (no holder, no owner) with its epoch, so that a group created again under the name hands out
//! tokens above every one this group handed out.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::info;

use super::Context;
use crate::actions;
use crate::crd::LeaderGroup;
use crate::error::Result;
use crate::routing;

/// On deletion of the group: removes its marks from the pods, leaves its Lease released (its
/// epoch kept for a group created again under the name), deletes its Service and EndpointSlice,
/// then lets go.
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
        actions::lease::leave(&leases_api, &lease).await?;
    }
    delete_owned(ctx, ns, &group).await?;
    ctx.memory.forget(&ObjectRef::from_obj(group.as_ref()));
    ctx.metrics.forget_group(ns, &name);
    info!(group = %name, "group deleted: marks removed from its pods, Lease released with its epoch, Service and EndpointSlice deleted");
    Ok(Action::await_change())
}

/// The group's own Services and slices (the garbage collector would remove them too, through
/// their owner reference; it is not relied on, as for the Lease).
async fn delete_owned(ctx: &Context, ns: &str, group: &LeaderGroup) -> Result<()> {
    let services = ctx.caches.services.state();
    let slices = ctx.caches.slices.state();
    let slices_api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    let services_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let stale_slices = routing::leftovers(group, slices.iter().map(AsRef::as_ref), None);
    let stale_services = routing::leftovers(group, services.iter().map(AsRef::as_ref), None);
    actions::routing::delete_all(&slices_api, &stale_slices).await?;
    actions::routing::delete_all(&services_api, &stale_services).await
}
