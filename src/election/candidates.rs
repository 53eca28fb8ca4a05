//! The group's candidates: the pods its selector matches, less those an older group holds
//! (overlapping selectors), and of its own the eligible ones, in succession order.

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};

use super::Observation;
use crate::crd::LeaderGroup;

/// The group's view of its namespace's pods.
pub(super) struct Candidates<'a> {
    /// Pods the selector matches (candidates), in succession order.
    pub matched: Vec<&'a Pod>,
    /// Of those, the ones this group holds (not held by an older group).
    pub owned: Vec<&'a Pod>,
    /// Of `matched`, the ones an older group holds, with that group's name.
    pub overlapped: Vec<(&'a Pod, String)>,
    /// Of `owned`, the eligible ones, in succession order: who may lead.
    pub succession: Vec<&'a Pod>,
    /// The leader whose heartbeat lapsed (Heartbeat mode): Ready as far as the API server
    /// knows, and yet not eligible.
    pub lapsed: Option<String>,
}

impl<'a> Candidates<'a> {
    /// `lapsed`: a pod whose heartbeat lapsed, excluded from the succession.
    pub fn of(obs: &Observation<'a>, lapsed: Option<&str>) -> Self {
        let selector = &obs.group.spec.selector;
        let mut matched: Vec<&Pod> = obs
            .pods
            .iter()
            .copied()
            .filter(|p| selector.matches(p.labels()))
            .collect();
        matched.sort_by(|a, b| oldest_first(*a, *b));
        let older = older_groups_selecting(obs, &matched);
        let mut owned = Vec::new();
        let mut overlapped = Vec::new();
        for pod in &matched {
            let holder = older.iter().find(|g| g.spec.selector.matches(pod.labels()));
            match holder {
                Some(g) => overlapped.push((*pod, g.name_any())),
                None => owned.push(*pod),
            }
        }
        let succession = owned
            .iter()
            .copied()
            .filter(|p| is_serving(p) && p.metadata.name.as_deref() != lapsed)
            .collect();
        Candidates {
            matched,
            owned,
            overlapped,
            succession,
            lapsed: lapsed.map(str::to_string),
        }
    }

    /// Whether the group holds the pod called `name`.
    pub fn owns(&self, name: &str) -> bool {
        self.owned.iter().any(|p| p.name_any() == name)
    }

    /// Whether the pod called `name` may lead the group.
    pub fn is_eligible(&self, name: &str) -> bool {
        self.succession.iter().any(|p| p.name_any() == name)
    }
}

/// The groups older than `obs.group` that select one of `matched`, oldest first: the first of
/// them that selects a pod holds it.
fn older_groups_selecting<'a>(obs: &Observation<'a>, matched: &[&Pod]) -> Vec<&'a LeaderGroup> {
    // Only the older groups that select one of these pods can hold one; with many groups in a
    // namespace that is usually none, so ordering all of them would be wasted work.
    let mut older: Vec<&LeaderGroup> = obs
        .groups
        .iter()
        .copied()
        .filter(|g| {
            g.metadata.name != obs.group.metadata.name
                && oldest_first(*g, obs.group) == Ordering::Less
                && matched.iter().any(|p| g.spec.selector.matches(p.labels()))
        })
        .collect();
    older.sort_by(|a, b| oldest_first(*a, *b));
    older
}

/// Oldest first (creationTimestamp), then by name. For pods it is the succession order; for
/// groups it says which one keeps a pod both select.
pub(super) fn oldest_first<K: Resource>(a: &K, b: &K) -> Ordering {
    let (a, b) = (a.meta(), b.meta());
    let created = |m: &kube::core::ObjectMeta| m.creation_timestamp.as_ref().map(|t| t.0);
    created(a)
        .cmp(&created(b))
        .then_with(|| a.name.cmp(&b.name))
}

/// Running, Ready=True and not terminating: what a pod must be to lead any group (whether this
/// group may hold it is [`Candidates::is_eligible`]'s question).
pub(super) fn is_serving(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && is_running_ready(pod)
}

pub(super) fn is_running_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}
