//! The transition protocol (docs/protocol.md), run for one group: observe (the group, its
//! namespace's groups, the pods that concern it, its Lease, Services and slices, and this
//! replica's memory of it), decide ([`election::decide`], pure), then execute the plan
//! ([`super::execute`]). After a 409 it observes afresh and decides again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::debug;

use super::Context;
use super::execute::execute;
use crate::actions;
use crate::crd::LeaderGroup;
use crate::election::{self, Observation, Plan};
use crate::error::{ReconcileError, Result};
use crate::lease_sightings::{LeaseSeen, Now};

/// How many times one reconcile may decide: after as many 409s, the last one goes to the error
/// policy.
const MAX_ATTEMPTS: usize = 5;

/// Brings the group to what the decision wants: observes, decides and executes, and after a 409
/// observes afresh (the group and the Lease from the API server) and decides again.
///
/// `started` is when the reconcile began: the handover clock when no pod event started one.
pub(super) async fn converge(
    group: Arc<LeaderGroup>,
    ctx: &Context,
    ns: &str,
    started: Instant,
) -> Result<Action> {
    let clock = ctx
        .memory
        .take_handover(&ObjectRef::from_obj(group.as_ref()))
        .unwrap_or(started);
    let groups_api: Api<LeaderGroup> = Api::namespaced(ctx.client.clone(), ns);
    let leases_api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let lease_name = group.lease_name();

    // The cache may not show this replica's own last writes yet: deciding on it would meet a 409.
    let group_ref = ObjectRef::from_obj(group.as_ref());
    let mut group = ctx.memory.fresher_group((*group).clone());
    let cached = ctx
        .caches
        .leases
        .get(&ObjectRef::new(&lease_name).within(ns))
        .map(|l| (*l).clone());
    let mut lease = ctx.memory.fresher_lease(&group_ref, cached);
    let mut attempt = 1;
    loop {
        let seen = observe(ctx, ns, group, lease);
        let plan = seen.decide(&ctx.identity);
        let observed = seen.lease.as_ref();
        let object = match execute(ctx, ns, &seen.group, observed, plan, clock).await {
            Err(ReconcileError::Conflict(object)) => object,
            other => return other,
        };
        ctx.metrics.conflict(object);
        // This pass may have committed a move off a leader whose demotion or release then
        // failed: the decision taken again no longer names that pod, and the pod cache (not
        // read again) may never have shown its leader label, so only a check beyond the
        // selector, which the barrier flag being down asks for, still finds it.
        ctx.memory.barrier_down(&ObjectRef::from_obj(&seen.group));
        if attempt == MAX_ATTEMPTS {
            return Err(ReconcileError::Conflict(object));
        }
        debug!(attempt, %object, "conflict: reading afresh and deciding again");
        group = groups_api.get(&seen.group.name_any()).await?;
        lease = actions::lease::read(&leases_api, &lease_name).await?;
        attempt += 1;
    }
}

/// Everything one decision reads, owned, so that the [`Observation`] can borrow it.
struct Snapshot {
    /// The group, from the cache, or from the API server after a conflict.
    group: LeaderGroup,
    /// The other groups of its namespace, from the cache (to settle overlapping selectors).
    other_groups: Vec<Arc<LeaderGroup>>,
    /// The pods that concern the group ([`election::concerns`]), from the cache.
    pods: Vec<Arc<Pod>>,
    /// The group's Lease, from the cache, or from the API server after a conflict.
    lease: Option<Lease>,
    /// The namespace's Services labeled with a group, from the cache.
    services: Vec<Arc<Service>>,
    /// The namespace's slices this operator writes, from the cache.
    slices: Vec<Arc<EndpointSlice>>,
    /// When this replica saw the Lease reach that state.
    lease_seen: Option<LeaseSeen>,
    /// Whether the group's barrier is up, as this replica remembers.
    barrier_up: bool,
    /// The instant of the observation, on this replica's clock.
    now: Timestamp,
    /// Operator replicas known to have stopped on purpose.
    retired: BTreeSet<String>,
    /// The node controller's grace period, as configured.
    node_grace: Duration,
}

impl Snapshot {
    /// The decision on what was observed, at this instant.
    fn decide(&self, identity: &str) -> Plan {
        let pods: Vec<&Pod> = self.pods.iter().map(AsRef::as_ref).collect();
        let services: Vec<&Service> = self.services.iter().map(AsRef::as_ref).collect();
        let slices: Vec<&EndpointSlice> = self.slices.iter().map(AsRef::as_ref).collect();
        let mut groups: Vec<&LeaderGroup> = self.other_groups.iter().map(AsRef::as_ref).collect();
        groups.push(&self.group);
        election::decide(&Observation {
            group: &self.group,
            groups: &groups,
            pods: &pods,
            lease: self.lease.as_ref(),
            services: &services,
            slices: &slices,
            lease_seen: self.lease_seen,
            barrier_up: self.barrier_up,
            retired: &self.retired,
            identity,
            node_grace: self.node_grace,
            now: self.now,
        })
    }
}

/// The observe step: the group and its Lease as given, with the rest of what the decision reads
/// from the watch caches and from this replica's memory of the group.
fn observe(ctx: &Context, ns: &str, group: LeaderGroup, lease: Option<Lease>) -> Snapshot {
    let now = Now::read();
    let lease_seen = ctx
        .memory
        .lease_seen(&ObjectRef::from_obj(&group), lease.as_ref(), now);
    let in_ns = |meta: &ObjectMeta| meta.namespace.as_deref() == Some(ns);
    let pods = concerned_pods(ctx, ns, &group, lease.as_ref());
    let other_groups = ctx
        .groups_in(ns)
        .into_iter()
        .filter(|g| g.metadata.name != group.metadata.name)
        .collect();
    let services = ctx.caches.services.state();
    let slices = ctx.caches.slices.state();
    Snapshot {
        barrier_up: ctx.memory.barrier_up(&group),
        group,
        other_groups,
        pods,
        lease,
        services: services
            .into_iter()
            .filter(|s| in_ns(&s.metadata))
            .collect(),
        slices: slices.into_iter().filter(|s| in_ns(&s.metadata)).collect(),
        lease_seen,
        now: now.wall,
        retired: ctx.retired.snapshot(),
        node_grace: ctx.node_grace,
    }
}

/// The pods of `ns` the decision for `group` looks at, from the index when the selector allows,
/// else from a scan of the cache.
fn concerned_pods(
    ctx: &Context,
    ns: &str,
    group: &LeaderGroup,
    lease: Option<&Lease>,
) -> Vec<Arc<Pod>> {
    let name = group.metadata.name.as_deref().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = match ctx.pod_index.candidates(ns, name, &group.spec.selector) {
        Some(mut names) => {
            names.extend(election::named_leaders(group, lease).map(str::to_string));
            names.sort_unstable();
            names.dedup();
            names
                .iter()
                .filter_map(|n| ctx.caches.pods.get(&ObjectRef::new(n).within(ns)))
                .collect()
        }
        None => ctx
            .caches
            .pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .collect(),
    };
    pods.into_iter()
        .filter(|p| election::concerns(group, lease, p))
        .collect()
}
