//! An index of the pod watch cache by namespace, label and group mark, so that a reconcile looks
//! at its own group's pods instead of every pod of the namespace. With 1000 groups of 3 pods in
//! one namespace, scanning the 3000 pods on each of the ~400 reconciles a second that renewals
//! cause took most of a core.
//!
//! The index answers with names, a superset of the pods that concern a group; the caller reads
//! those pods from the store and keeps the ones [`crate::election::concerns`] accepts, so the
//! decision sees exactly what a full scan would give it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodSpec, PodStatus,
};
use kube::runtime::watcher;

use crate::crd::{EPOCH_ANNOTATION, GROUP_ANNOTATION, PodSelector, SelectorOperator};
use crate::marks;
use crate::relist::{Change, Relist, key};

/// Drops from a pod what no decision reads, before the pod enters the watch cache: the spec but
/// for its node and its containers' names and ports (what the leader's EndpointSlice is made
/// of), managedFields, owner references, every annotation but ours (a last-applied-configuration
/// alone can be kilobytes) and the status but for its phase, Ready condition, addresses and each
/// container's state without its details (the step-down rule reads whether any still runs).
/// Thousands of pods are held in memory, most of them of no group at all.
pub fn trim_pod(pod: &mut Pod) {
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        node_name: spec.node_name,
        containers: spec
            .containers
            .into_iter()
            .filter(|c| c.ports.as_ref().is_some_and(|p| !p.is_empty()))
            .map(|c| Container {
                name: c.name,
                ports: c.ports,
                ..Container::default()
            })
            .collect(),
        ..PodSpec::default()
    });
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == GROUP_ANNOTATION || k == EPOCH_ANNOTATION);
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            conditions: status
                .conditions
                .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
            pod_ip: status.pod_ip,
            pod_ips: status.pod_ips,
            container_statuses: status.container_statuses.map(bare_states),
            init_container_statuses: status.init_container_statuses.map(bare_states),
            ..PodStatus::default()
        });
    }
}

/// Each container's name and state, bounded: which of running, waiting or terminated (with its
/// exit code), without messages, reasons, times or images, which can be kilobytes.
fn bare_states(statuses: Vec<ContainerStatus>) -> Vec<ContainerStatus> {
    statuses
        .into_iter()
        .map(|c| ContainerStatus {
            name: c.name,
            state: c.state.map(|s| ContainerState {
                running: s.running.map(|_| ContainerStateRunning::default()),
                waiting: s.waiting.map(|_| ContainerStateWaiting::default()),
                terminated: s.terminated.map(|t| ContainerStateTerminated {
                    exit_code: t.exit_code,
                    ..ContainerStateTerminated::default()
                }),
            }),
            ..ContainerStatus::default()
        })
        .collect()
}

/// Pod names by namespace, label and group mark; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct PodIndex {
    inner: Arc<RwLock<Index>>,
}

#[derive(Default)]
struct Index {
    namespaces: HashMap<String, Namespace>,
    /// The watch's relist in progress.
    relist: Relist,
}

#[derive(Default)]
struct Namespace {
    /// Label key, then value, then the names of the pods that carry it.
    labels: HashMap<String, HashMap<String, BTreeSet<String>>>,
    /// The group named by a pod's group annotation, then the names of the pods that carry it.
    marks: HashMap<String, BTreeSet<String>>,
    /// What each pod is filed under, to take it out again when it changes.
    filed: HashMap<String, Filed>,
}

#[derive(Clone, PartialEq)]
struct Filed {
    labels: BTreeMap<String, String>,
    mark: Option<String>,
}

impl PodIndex {
    /// Applies one event of the pod watch, as the reflector applies it to the store.
    pub fn apply(&self, event: &watcher::Event<Pod>) {
        let Ok(mut index) = self.inner.write() else {
            return;
        };
        match index.relist.follow(event) {
            Change::File(pod) => index.file(pod),
            Change::Remove(pod) => {
                if let Some((ns, name)) = key(pod) {
                    index.remove(&ns, &name);
                }
            }
            Change::Retain(listed) => index.retain(&listed),
            Change::Nothing => {}
        }
    }

    /// The names of the pods of `ns` that may concern a group with this selector and name,
    /// besides the leaders its status and Lease name (the caller adds those): the pods carrying
    /// the group's mark, and those the selector can match. None when the selector cannot be
    /// narrowed by the index (no matchLabels and no `In` requirement): every pod of the
    /// namespace may match.
    pub fn candidates(&self, ns: &str, group: &str, selector: &PodSelector) -> Option<Vec<String>> {
        let index = self.inner.read().ok()?;
        let Some(n) = index.namespaces.get(ns) else {
            return Some(Vec::new());
        };
        let mut names: BTreeSet<&String> = n.marks.get(group).into_iter().flatten().collect();
        names.extend(n.selectable(selector)?);
        Some(names.into_iter().cloned().collect())
    }
}

impl Index {
    fn file(&mut self, pod: &Pod) {
        let Some((ns, name)) = key(pod) else {
            return;
        };
        let filed = Filed {
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            mark: marks::marked_group(pod).map(str::to_string),
        };
        if self
            .namespaces
            .get(&ns)
            .and_then(|n| n.filed.get(&name))
            .is_some_and(|f| *f == filed)
        {
            return;
        }
        self.remove(&ns, &name);
        let n = self.namespaces.entry(ns).or_default();
        for (k, v) in &filed.labels {
            n.labels
                .entry(k.clone())
                .or_default()
                .entry(v.clone())
                .or_default()
                .insert(name.clone());
        }
        if let Some(group) = &filed.mark {
            n.marks
                .entry(group.clone())
                .or_default()
                .insert(name.clone());
        }
        n.filed.insert(name, filed);
    }

    fn remove(&mut self, ns: &str, name: &str) {
        let Some(n) = self.namespaces.get_mut(ns) else {
            return;
        };
        let Some(filed) = n.filed.remove(name) else {
            return;
        };
        for (k, v) in &filed.labels {
            if let Some(values) = n.labels.get_mut(k) {
                if let Some(pods) = values.get_mut(v) {
                    pods.remove(name);
                    if pods.is_empty() {
                        values.remove(v);
                    }
                }
                if values.is_empty() {
                    n.labels.remove(k);
                }
            }
        }
        if let Some(group) = &filed.mark
            && let Some(pods) = n.marks.get_mut(group)
        {
            pods.remove(name);
            if pods.is_empty() {
                n.marks.remove(group);
            }
        }
        if n.filed.is_empty() {
            self.namespaces.remove(ns);
        }
    }

    /// Keeps only the pods in `seen`.
    fn retain(&mut self, seen: &HashSet<(String, String)>) {
        let gone: Vec<(String, String)> = self
            .namespaces
            .iter()
            .flat_map(|(ns, n)| n.filed.keys().map(move |name| (ns.clone(), name.clone())))
            .filter(|k| !seen.contains(k))
            .collect();
        for (ns, name) in gone {
            self.remove(&ns, &name);
        }
    }
}

impl Namespace {
    /// A superset of the pods the selector matches, or None when every pod may match.
    fn selectable(&self, selector: &PodSelector) -> Option<Vec<&String>> {
        let carrying = |k: &str, v: &str| self.labels.get(k).and_then(|values| values.get(v));
        // Every match carries each matchLabels pair: the rarest pair's pods are enough.
        if !selector.match_labels.is_empty() {
            let rarest = selector
                .match_labels
                .iter()
                .map(|(k, v)| carrying(k, v))
                .min_by_key(|pods| pods.map_or(0, BTreeSet::len))
                .flatten();
            return Some(rarest.map(|pods| pods.iter().collect()).unwrap_or_default());
        }
        // Or carries one of the values of an `In` requirement.
        let within = selector
            .match_expressions
            .iter()
            .find(|r| r.operator == SelectorOperator::In)?;
        Some(
            within
                .values
                .iter()
                .filter_map(|v| carrying(&within.key, v))
                .flatten()
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests;
