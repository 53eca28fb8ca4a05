//! The leader's Service and EndpointSlice in one pass of the protocol: what [`crate::routing`]
//! wants for the leader the plan leaves, from the caches, and the writes at their steps: the old
//! leader's endpoint replaced by the new leader's once its promotion landed (out in step 3 when
//! there is nobody to promote, or after a failed promotion), the Service and the objects no
//! longer wanted after the handover.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::Context;
use crate::actions;
use crate::crd::{LeaderGroup, LeaderGroupStatus};
use crate::error::Result;
use crate::routing::{self, Routes};

/// The routing of one pass.
pub(super) struct RoutePlan {
    services: Api<Service>,
    slices: Api<EndpointSlice>,
    /// The Service as cached, and what it should be (None: `spec.service` is absent).
    service: Option<(Option<Arc<Service>>, Routes)>,
    /// The name of the slice (and Service) wanted.
    name: Option<String>,
    /// The slice of that name as cached.
    cached_slice: Option<EndpointSlice>,
    /// The uid of the pod that leads once this pass is done.
    next_leader_uid: Option<String>,
    /// The group's own Services and slices that are no longer wanted.
    stale_services: Vec<String>,
    stale_slices: Vec<String>,
    /// The group's generation, for the `Routing` condition's `observedGeneration`.
    generation: Option<i64>,
}

impl RoutePlan {
    /// The routing for `group` once `next` (the status the plan leaves) holds, the leader found
    /// among `pods` (the decision's pods, from the cache).
    pub(super) fn new(
        ctx: &Context,
        ns: &str,
        group: &LeaderGroup,
        next: &LeaderGroupStatus,
        pods: &[Arc<Pod>],
    ) -> Self {
        let leader = next.leader.as_deref().and_then(|name| {
            pods.iter()
                .find(|p| p.name_any() == name && p.metadata.uid == next.leader_uid)
        });
        let services = ctx.caches.services.state();
        let slices = ctx.caches.slices.state();
        let spec = group.spec.service.as_ref();
        let name = spec.map(|s| routing::service_name(group, s));
        let service = spec.map(|spec| {
            let name = routing::service_name(group, spec);
            let current = ctx.caches.services.get(&ObjectRef::new(&name).within(ns));
            let routes =
                routing::routes(group, spec, leader.map(AsRef::as_ref), current.as_deref());
            (current, routes)
        });
        let wants_slice = service.as_ref().is_some_and(|(_, r)| r.slice.is_some());
        let slice_name = name.as_deref().filter(|_| wants_slice);
        let cached_slice = slice_name
            .and_then(|n| ctx.caches.slices.get(&ObjectRef::new(n).within(ns)))
            .map(|s| (*s).clone());
        RoutePlan {
            services: Api::namespaced(ctx.client.clone(), ns),
            slices: Api::namespaced(ctx.client.clone(), ns),
            stale_services: routing::leftovers(
                group,
                services.iter().map(AsRef::as_ref),
                name.as_deref(),
            ),
            stale_slices: routing::leftovers(group, slices.iter().map(AsRef::as_ref), slice_name),
            next_leader_uid: leader.and_then(|p| p.metadata.uid.clone()),
            service,
            name,
            cached_slice,
            generation: group.metadata.generation,
        }
    }

    /// The status with the `Routing` condition as this pass leaves it; None when unchanged.
    pub(super) fn status(&self, status: &LeaderGroupStatus) -> Option<LeaderGroupStatus> {
        let condition = self.service.as_ref().map(|(_, r)| &r.condition);
        routing::with_condition(status, condition, self.generation, Timestamp::now())
    }

    /// The slice as this pass starts from.
    pub(super) fn known_slice(&self) -> Option<EndpointSlice> {
        self.cached_slice.clone()
    }

    fn desired_slice(&self) -> Option<(&str, &EndpointSlice)> {
        let (_, routes) = self.service.as_ref()?;
        Some((self.name.as_deref()?, routes.slice.as_ref()?))
    }

    /// The slice loses any endpoint but the next leader's: in step 3 when nobody is promoted,
    /// and when a promotion failed. Returns the slice as it is after.
    pub(super) async fn clear(&self) -> Result<Option<EndpointSlice>> {
        let Some((name, _)) = self.desired_slice() else {
            return Ok(None);
        };
        let uid = self.next_leader_uid.as_deref();
        actions::routing::write_slice(&self.slices, name, self.known_slice(), |current| {
            routing::clear_for_handover(current, uid).map(routing::SliceWrite::Replace)
        })
        .await
    }

    /// After the promotion (or with nothing to promote): the slice as wanted, from `known`, the
    /// slice as last seen. Returns the slice as it is after.
    pub(super) async fn route(
        &self,
        known: Option<EndpointSlice>,
    ) -> Result<Option<EndpointSlice>> {
        let Some((name, desired)) = self.desired_slice() else {
            return Ok(known);
        };
        actions::routing::write_slice(&self.slices, name, known, |current| {
            routing::slice_write(current, desired)
        })
        .await
    }

    /// Off the critical path: the Service as wanted, the slice too (when no promotion wrote it,
    /// and unless `keep_slice`: the next leader, not labeled yet, waits for its predecessor's
    /// step-down, and the slice keeps the predecessor until the promotion), and the group's
    /// objects no longer wanted deleted.
    pub(super) async fn tidy(&self, known: Option<EndpointSlice>, keep_slice: bool) -> Result<()> {
        if let Some((current, routes)) = &self.service
            && !routes.name_taken
        {
            actions::routing::apply_service(&self.services, current.as_deref(), &routes.service)
                .await?;
        }
        if !keep_slice {
            self.route(known).await?;
        }
        actions::routing::delete_all(&self.slices, &self.stale_slices).await?;
        actions::routing::delete_all(&self.services, &self.stale_services).await
    }
}

/// On the group's deletion: its own Services and slices (the garbage collector would remove
/// them too, through their owner reference; it is not relied on, as for the Lease).
pub(super) async fn delete_owned(ctx: &Context, ns: &str, group: &LeaderGroup) -> Result<()> {
    let services = ctx.caches.services.state();
    let slices = ctx.caches.slices.state();
    let slices_api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    let services_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let stale_slices = routing::leftovers(group, slices.iter().map(AsRef::as_ref), None);
    let stale_services = routing::leftovers(group, services.iter().map(AsRef::as_ref), None);
    actions::routing::delete_all(&slices_api, &stale_slices).await?;
    actions::routing::delete_all(&services_api, &stale_services).await
}
