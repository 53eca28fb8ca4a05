//! The leader's Service (`spec.service`): what the Service and, in `EndpointSlice` mode, its
//! EndpointSlice should be for a given leader pod, which owned objects are left over, and the
//! `Routing` condition. Pure, so that the controller only writes what it is given and the shapes
//! are tested without a cluster.
//!
//! The slice never lists two pods: every write of it carries the whole list, of one endpoint or
//! none. During a handover the old leader's endpoint is replaced by the new leader's in one write
//! once the promotion has landed; it is taken out alone ([`clear_for_handover`]) in step 3 when
//! nobody is promoted, and when the promotion fails.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::crd::{
    LEASE_GROUP_LABEL, LeaderGroup, LeaderGroupStatus, LeaderService, LeaderServicePort,
    ROLE_LABEL, ROLE_LEADER, RoutingMode, TargetPort,
};
use crate::election::set_condition;

#[cfg(test)]
mod tests;

/// Type of the condition that says whether the group's Service reaches its leader.
pub const ROUTING: &str = "Routing";
/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label that says who writes an EndpointSlice: Kubernetes' own controllers leave the
/// slices of another manager alone.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This operator's value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "leadergroup.io";

/// What the group's routing should be, for the leader it will have after this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Routes {
    /// The Service as the operator writes it (merged into the existing one by [`service_update`]).
    pub service: Service,
    /// `EndpointSlice` mode: the whole slice, with the leader's endpoint or none.
    pub slice: Option<EndpointSlice>,
    /// The `Routing` condition.
    pub condition: RoutingCondition,
    /// A Service of that name exists that the group does not own: it is left alone.
    pub name_taken: bool,
}

/// The `Routing` condition's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingCondition {
    /// True when the Service reaches the leader.
    pub routed: bool,
    /// `Routed`, `NoLeader`, `NoAddress`, `PortUnresolved` or `NameTaken`.
    pub reason: &'static str,
    /// What a user reads.
    pub message: String,
}

/// The name of the group's Service (and of its EndpointSlice): `spec.service.name`, else
/// `<group>-leader`.
pub fn service_name(group: &LeaderGroup, spec: &LeaderService) -> String {
    spec.name
        .clone()
        .unwrap_or_else(|| format!("{}-leader", group.name_any()))
}

/// The routing for `leader`, the pod that leads once this pass is done (None: nobody).
/// `existing` is the Service of that name, if there is one: one the group does not own is never
/// taken over, and the slice then stays empty.
pub fn routes(
    group: &LeaderGroup,
    spec: &LeaderService,
    leader: Option<&Pod>,
    existing: Option<&Service>,
) -> Routes {
    let name = service_name(group, spec);
    let service = service(group, spec, &name);
    let taken = existing.is_some_and(|s| !owned_by(s.meta(), group));
    let resolved = leader.map(|pod| (pod, endpoint_ports(spec, pod)));
    let condition = if taken {
        RoutingCondition {
            routed: false,
            reason: "NameTaken",
            message: format!(
                "a Service {name} exists that this group does not own: it is left alone; set spec.service.name to another name"
            ),
        }
    } else {
        condition(spec, &name, resolved.as_ref())
    };
    let slice = (spec.mode == RoutingMode::EndpointSlice).then(|| {
        let endpoint = match (&resolved, taken) {
            (Some((pod, Ok(ports))), false) => pod_address(pod).map(|a| (*pod, a, ports.clone())),
            _ => None,
        };
        slice(group, &name, endpoint)
    });
    Routes {
        service,
        slice,
        condition,
        name_taken: taken,
    }
}

fn condition(
    spec: &LeaderService,
    name: &str,
    resolved: Option<&(&Pod, Result<Vec<EndpointPort>, String>)>,
) -> RoutingCondition {
    let Some((pod, ports)) = resolved else {
        return RoutingCondition {
            routed: false,
            reason: "NoLeader",
            message: format!("no pod leads: the Service {name} has no endpoint"),
        };
    };
    let leader = pod.name_any();
    if let Err(unresolved) = ports {
        return RoutingCondition {
            routed: false,
            reason: "PortUnresolved",
            message: format!(
                "{unresolved} of the leader {leader}: the Service {name} has no endpoint"
            ),
        };
    }
    match (spec.mode, pod_address(pod)) {
        (RoutingMode::Label, _) => RoutingCondition {
            routed: true,
            reason: "Routed",
            message: format!(
                "the Service {name} selects the leader {leader} by its label {ROLE_LABEL}={ROLE_LEADER}"
            ),
        },
        (RoutingMode::EndpointSlice, Some(address)) => RoutingCondition {
            routed: true,
            reason: "Routed",
            message: format!(
                "the EndpointSlice {name} lists the leader {leader} ({}) alone",
                address.ip
            ),
        },
        (RoutingMode::EndpointSlice, None) => RoutingCondition {
            routed: false,
            reason: "NoAddress",
            message: format!(
                "the leader {leader} has no IP address yet: the Service {name} has no endpoint"
            ),
        },
    }
}

/// The group's Service: ClusterIP, labeled with the group, owned by it; in `Label` mode selecting
/// the group's `matchLabels` and the leader label, in `EndpointSlice` mode without selector.
fn service(group: &LeaderGroup, spec: &LeaderService, name: &str) -> Service {
    let selector = (spec.mode == RoutingMode::Label).then(|| {
        let mut selector = group.spec.selector.match_labels.clone();
        selector.insert(ROLE_LABEL.into(), ROLE_LEADER.into());
        selector
    });
    Service {
        metadata: owned_meta(group, name, BTreeMap::new()),
        spec: Some(ServiceSpec {
            selector,
            ports: Some(spec.ports.iter().map(service_port).collect()),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn service_port(port: &LeaderServicePort) -> ServicePort {
    ServicePort {
        name: port.name.clone(),
        port: port.port,
        target_port: Some(match &port.target_port {
            Some(TargetPort::Name(name)) => IntOrString::String(name.clone()),
            Some(TargetPort::Number(n)) => IntOrString::Int(*n),
            None => IntOrString::Int(port.port),
        }),
        protocol: Some(port.protocol.as_str().into()),
        ..ServicePort::default()
    }
}

/// The group's metadata on an object it owns: the group label, `labels`, its owner reference.
fn owned_meta(group: &LeaderGroup, name: &str, mut labels: BTreeMap<String, String>) -> ObjectMeta {
    labels.insert(LEASE_GROUP_LABEL.into(), group.name_any());
    ObjectMeta {
        name: Some(name.into()),
        namespace: group.namespace(),
        labels: Some(labels),
        owner_references: group.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// Whether the object carries an owner reference to this group (by uid).
pub fn owned_by(meta: &ObjectMeta, group: &LeaderGroup) -> bool {
    let uid = group.metadata.uid.as_deref();
    uid.is_some()
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "LeaderGroup" && Some(o.uid.as_str()) == uid)
}

/// The ports of the leader's endpoint: each Service port's `targetPort` resolved against the
/// pod's containers (a name to the number of the container port of that name and protocol), named
/// as the Service port is (that is how kube-proxy pairs them). Err: the first port that does not
/// resolve, described for the condition.
fn endpoint_ports(spec: &LeaderService, pod: &Pod) -> Result<Vec<EndpointPort>, String> {
    spec.ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let number = match &port.target_port {
                None => port.port,
                Some(TargetPort::Number(n)) => *n,
                Some(TargetPort::Name(target)) => {
                    container_port(pod, target, port.protocol.as_str()).ok_or_else(|| {
                        let named = port.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
                        format!(
                            "spec.service.ports[{i}]{named}: targetPort {target:?} names no {} port of the containers",
                            port.protocol.as_str()
                        )
                    })?
                }
            };
            Ok(EndpointPort {
                name: Some(port.name.clone().unwrap_or_default()),
                port: Some(number),
                protocol: Some(port.protocol.as_str().into()),
                app_protocol: None,
            })
        })
        .collect()
}

/// The number of the pod's container port named `name` with `protocol` (TCP when unset), as
/// Kubernetes resolves a Service's named targetPort: among the containers, then the native
/// sidecars (init containers with `restartPolicy: Always`, such as the agent and its proxy).
fn container_port(pod: &Pod, name: &str, protocol: &str) -> Option<i32> {
    let spec = pod.spec.as_ref()?;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| {
            p.name.as_deref() == Some(name) && p.protocol.as_deref().unwrap_or("TCP") == protocol
        })
        .map(|p| p.container_port)
}

/// A pod's address and its family.
struct Address {
    ip: String,
    family: &'static str,
}

fn pod_address(pod: &Pod) -> Option<Address> {
    let ip = pod
        .status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())?;
    let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
    Some(Address { ip, family })
}

/// The slice: `endpoint` (the leader, its address and its resolved ports) or no endpoint at all.
fn slice(
    group: &LeaderGroup,
    name: &str,
    endpoint: Option<(&Pod, Address, Vec<EndpointPort>)>,
) -> EndpointSlice {
    let labels = BTreeMap::from([
        (SERVICE_NAME_LABEL.to_string(), name.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
    ]);
    let metadata = owned_meta(group, name, labels);
    let Some((pod, address, ports)) = endpoint else {
        return EndpointSlice {
            metadata,
            address_type: "IPv4".into(),
            endpoints: Some(Vec::new()),
            ports: None,
        };
    };
    EndpointSlice {
        metadata,
        address_type: address.family.into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![address.ip],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                uid: pod.metadata.uid.clone(),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        }]),
        ports: Some(ports),
    }
}

/// `current`, the slice as it is, without any endpoint, when it lists a pod other than
/// `next_leader_uid` (the pod that leads once this pass is done); None when it lists nothing
/// else. Step 3 of a pass that promotes nobody, and the way out of a failed promotion: the old
/// leader's endpoint does not outlive its leadership.
pub fn clear_for_handover(
    current: Option<&EndpointSlice>,
    next_leader_uid: Option<&str>,
) -> Option<EndpointSlice> {
    let current = current?;
    let others = current.endpoints.iter().flatten().any(|e| {
        next_leader_uid.is_none()
            || e.target_ref.as_ref().and_then(|r| r.uid.as_deref()) != next_leader_uid
    });
    others.then(|| EndpointSlice {
        endpoints: Some(Vec::new()),
        ports: None,
        ..current.clone()
    })
}

/// One write of the slice.
#[derive(Clone, Debug, PartialEq)]
pub enum SliceWrite {
    /// There is none: create it.
    Create(EndpointSlice),
    /// Replace it, conditional on the resourceVersion in the metadata (the slice as read).
    Replace(EndpointSlice),
    /// Its address type cannot change: delete it (conditional on its resourceVersion), then
    /// create this one.
    Recreate(EndpointSlice),
}

/// The write that makes the slice `current` (None: there is none) into `desired`, or None when
/// they already agree. A replace carries `current`'s metadata, its resourceVersion the write's
/// precondition.
pub fn slice_write(current: Option<&EndpointSlice>, desired: &EndpointSlice) -> Option<SliceWrite> {
    let Some(current) = current else {
        return Some(SliceWrite::Create(desired.clone()));
    };
    if current.address_type != desired.address_type {
        let mut next = desired.clone();
        next.metadata.resource_version = current.metadata.resource_version.clone();
        return Some(SliceWrite::Recreate(next));
    }
    let same = slice_content(current) == slice_content(desired)
        && carries(&current.metadata, &desired.metadata);
    (!same).then(|| {
        let mut next = desired.clone();
        next.metadata = merged_meta(&current.metadata, &desired.metadata);
        SliceWrite::Replace(next)
    })
}

/// What of a slice decides where traffic goes, with the API server's defaults evened out.
fn slice_content(s: &EndpointSlice) -> impl PartialEq + use<> {
    let endpoints: Vec<_> = s
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            (
                e.addresses.clone(),
                e.target_ref.as_ref().and_then(|r| r.uid.clone()),
                (c.ready, c.serving, c.terminating),
            )
        })
        .collect();
    let ports: Vec<_> = s
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port,
                p.protocol.clone(),
            )
        })
        .collect();
    (s.address_type.clone(), endpoints, ports)
}

/// The Service to write so that `current` becomes what `desired` asks (selector, ports, the
/// group's label and owner reference), keeping everything else of it (its ClusterIP among them);
/// None when it already is.
pub fn service_update(current: &Service, desired: &Service) -> Option<Service> {
    let spec = current.spec.clone().unwrap_or_default();
    let want = desired.spec.clone().unwrap_or_default();
    let same = selector(&spec) == selector(&want)
        && service_ports(&spec) == service_ports(&want)
        && carries(&current.metadata, &desired.metadata);
    (!same).then(|| Service {
        metadata: merged_meta(&current.metadata, &desired.metadata),
        spec: Some(ServiceSpec {
            selector: want.selector,
            ports: want.ports,
            ..spec
        }),
        status: None,
    })
}

fn selector(spec: &ServiceSpec) -> BTreeMap<String, String> {
    spec.selector.clone().unwrap_or_default()
}

/// What of a Service port routes: name, port, targetPort, protocol.
type PortKey = (Option<String>, i32, Option<IntOrString>, Option<String>);

fn service_ports(spec: &ServiceSpec) -> Vec<PortKey> {
    spec.ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().filter(|n| !n.is_empty()),
                p.port,
                p.target_port.clone(),
                p.protocol.clone(),
            )
        })
        .collect()
}

/// Whether `current` carries every owner reference of `desired` (the group's).
pub fn same_owner(current: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let owners = current.owner_references.as_deref().unwrap_or_default();
    desired
        .owner_references
        .iter()
        .flatten()
        .all(|o| owners.iter().any(|c| c.uid == o.uid))
}

/// Whether `current` carries `desired`'s labels and owner references.
fn carries(current: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let labels = current.labels.clone().unwrap_or_default();
    desired
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && same_owner(current, desired)
}

/// `current`'s metadata with `desired`'s labels and owner references added.
fn merged_meta(current: &ObjectMeta, desired: &ObjectMeta) -> ObjectMeta {
    let mut meta = current.clone();
    meta.managed_fields = None;
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(desired.labels.clone().unwrap_or_default());
    let owners = meta.owner_references.get_or_insert_with(Vec::new);
    for o in desired.owner_references.iter().flatten() {
        if !owners.iter().any(|c| c.uid == o.uid) {
            owners.push(o.clone());
        }
    }
    meta
}

/// The names of the group's own objects (labeled with it and owned by it) that are not `keep`:
/// the Service or slice of a former name, a slice left from `EndpointSlice` mode, everything once
/// `spec.service` is removed.
pub fn leftovers<'a, K: Resource + 'a>(
    group: &LeaderGroup,
    objects: impl IntoIterator<Item = &'a K>,
    keep: Option<&str>,
) -> Vec<String> {
    let name = group.name_any();
    objects
        .into_iter()
        .filter(|o| {
            o.meta().namespace == group.metadata.namespace
                && o.meta()
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LEASE_GROUP_LABEL))
                    == Some(&name)
                && owned_by(o.meta(), group)
                && o.meta().name.as_deref() != keep
        })
        .filter_map(|o| o.meta().name.clone())
        .collect()
}

/// The group's routing as one pass leaves it: what its Service and slice should be, and what they
/// are as observed, so that the executor writes only what differs.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The Service as observed, and what it and its slice should be (None: `spec.service` is
    /// absent).
    pub service: Option<(Option<Service>, Routes)>,
    /// The name of the Service and slice wanted.
    pub name: Option<String>,
    /// The slice of that name as observed.
    pub slice: Option<EndpointSlice>,
    /// The UID of the pod that leads once the pass is done.
    pub leader_uid: Option<String>,
    /// The group's own Services that are no longer wanted.
    pub stale_services: Vec<String>,
    /// The group's own slices that are no longer wanted.
    pub stale_slices: Vec<String>,
}

impl Route {
    /// The routing for `group` once `next` (the status the pass leaves) holds, its leader found
    /// among `pods`; `services` and `slices` are the group's namespace's, as observed.
    pub fn new(
        group: &LeaderGroup,
        next: &LeaderGroupStatus,
        pods: &[&Pod],
        services: &[&Service],
        slices: &[&EndpointSlice],
    ) -> Route {
        let leader = next.leader.as_deref().and_then(|name| {
            pods.iter()
                .find(|p| p.name_any() == name && p.metadata.uid == next.leader_uid)
                .copied()
        });
        let spec = group.spec.service.as_ref();
        let name = spec.map(|s| service_name(group, s));
        let named = |meta: &ObjectMeta, wanted: &str| {
            meta.name.as_deref() == Some(wanted) && meta.namespace == group.metadata.namespace
        };
        let service = spec.map(|spec| {
            let wanted = service_name(group, spec);
            let current = services
                .iter()
                .find(|s| named(s.meta(), &wanted))
                .map(|s| (*s).clone());
            let routes = routes(group, spec, leader, current.as_ref());
            (current, routes)
        });
        let wants_slice = service.as_ref().is_some_and(|(_, r)| r.slice.is_some());
        let slice_name = name.as_deref().filter(|_| wants_slice);
        let slice = slice_name.and_then(|wanted| {
            slices
                .iter()
                .find(|s| named(s.meta(), wanted))
                .map(|s| (*s).clone())
        });
        Route {
            stale_services: leftovers(group, services.iter().copied(), name.as_deref()),
            stale_slices: leftovers(group, slices.iter().copied(), slice_name),
            leader_uid: leader.and_then(|p| p.metadata.uid.clone()),
            service,
            name,
            slice,
        }
    }

    /// `status` with the `Routing` condition as this pass leaves it; None when unchanged.
    pub fn status(
        &self,
        status: &LeaderGroupStatus,
        generation: Option<i64>,
        now: Timestamp,
    ) -> Option<LeaderGroupStatus> {
        let condition = self.service.as_ref().map(|(_, r)| &r.condition);
        with_condition(status, condition, generation, now)
    }

    /// The slice wanted, by name.
    pub fn desired_slice(&self) -> Option<(&str, &EndpointSlice)> {
        let (_, routes) = self.service.as_ref()?;
        Some((self.name.as_deref()?, routes.slice.as_ref()?))
    }
}

/// `status` with the `Routing` condition set to `condition` (removed when None); None when that
/// changes nothing.
pub fn with_condition(
    status: &LeaderGroupStatus,
    condition: Option<&RoutingCondition>,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<LeaderGroupStatus> {
    let mut next = status.clone();
    match condition {
        Some(c) => {
            let truth = if c.routed { "True" } else { "False" };
            set_condition(
                &mut next,
                (ROUTING, truth, c.reason, &c.message),
                generation,
                now,
            );
        }
        None => next.conditions.retain(|c| c.type_ != ROUTING),
    }
    (next != *status).then_some(next)
}
