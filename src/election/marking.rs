//! The marks to change on pods: demote and release (step 3 of the protocol), promote (step 5),
//! and, off the critical path, mark the other candidates follower and unmark the pods that left
//! the group.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::candidates::Candidates;
use super::records::Records;
use super::token::Token;
use super::{Deposed, Observation, PodVersion, Promotion};
use crate::crd::{ROLE_FOLLOWER, ROLE_LEADER};
use crate::marks;

/// The pod patches of one decision.
#[derive(Default)]
pub(super) struct Marking {
    pub demote: Vec<String>,
    pub release: Vec<PodVersion>,
    pub promote: Option<Promotion>,
    pub mark_followers: Vec<String>,
    pub unmark: Vec<PodVersion>,
    pub barrier_candidates: Vec<String>,
    pub deposed: Vec<Deposed>,
}

impl Marking {
    /// The patches that leave only `leader` marked leader, with its token. A paused group
    /// touches no pod.
    pub fn plan(
        obs: &Observation<'_>,
        members: &Candidates<'_>,
        records: &Records,
        leader: &Option<String>,
        token: Token,
    ) -> Marking {
        if obs.group.spec.paused {
            return Marking::default();
        }
        let group = obs.group.name_any();
        let named = [records.status_leader(), records.lease_holder()];
        let leader = leader.as_deref();
        let (demote, release) = demote(&group, obs.pods, members, named, leader);
        let done: Vec<&str> = demote
            .iter()
            .map(String::as_str)
            .chain(release.iter().map(|r| r.name.as_str()))
            .collect();
        let promote = promote(&group, obs.pods, leader, token.epoch);
        let deposed = deposed(&group, obs.pods, members, named, leader, token.epoch);
        Marking {
            deposed,
            barrier_candidates: promote
                .as_ref()
                .map(|p| barrier_candidates(&group, obs.pods, members, &p.pod))
                .unwrap_or_default(),
            promote,
            mark_followers: mark_followers(&group, &members.owned, leader),
            unmark: unmark(&group, obs.pods, members, &done),
            demote,
            release,
        }
    }
}

/// The leaders the records name that still exist, then the pods that carry a leader's marks
/// (strays) and are the group's (held by it, or marked for it), but for `leader`; each once. Those the group holds are demoted (follower
/// marks). Those it no longer holds (they left the selector, or an older group took them) are
/// released, losing all of its marks, only if they still carry its marks and are unchanged since
/// they were seen: a pod marked for another group is that group's, and is never written.
fn demote(
    group: &str,
    pods: &[&Pod],
    members: &Candidates<'_>,
    named: [Option<&str>; 2],
    leader: Option<&str>,
) -> (Vec<String>, Vec<PodVersion>) {
    let named = named
        .into_iter()
        .flatten()
        .filter_map(|name| pods.iter().find(|p| p.name_any() == name).copied());
    // Strays: pods the group holds that carry a leader's marks, and pods it does not hold that
    // carry its own (a late promotion that landed after the pod left the selector).
    let strays = pods.iter().copied().filter(|p| {
        carries_leader_marks(p) && (members.owns(&p.name_any()) || marks::is_marked_for(p, group))
    });
    let mut demote: Vec<String> = Vec::new();
    let mut release: Vec<PodVersion> = Vec::new();
    for pod in named.chain(strays) {
        let name = pod.name_any();
        let listed = demote.contains(&name) || release.iter().any(|r| r.name == name);
        if leader == Some(name.as_str()) || listed {
            continue;
        }
        if members.owns(&name) {
            demote.push(name);
        } else if marks::is_marked_for(pod, group) {
            release.push(seen(pod));
        }
    }
    (demote, release)
}

/// The pods the records name as leader, other than `leader`, each once, also those the pods
/// observed do not show: a pod deleted and created again under the name may be missing from a
/// watch cache that lags while a promotion of its new incarnation, read afresh by an earlier
/// pass, is in flight (the write of a pod that is really gone is a 404, taken as done).
fn deposed(
    group: &str,
    pods: &[&Pod],
    candidates: &Candidates<'_>,
    named: [Option<&str>; 2],
    leader: Option<&str>,
    epoch: i64,
) -> Vec<Deposed> {
    let mut deposed: Vec<Deposed> = Vec::new();
    for name in named.into_iter().flatten() {
        if leader == Some(name) || deposed.iter().any(|d| d.pod == name) {
            continue;
        }
        let seen = pods.iter().find(|p| p.name_any() == name);
        deposed.push(Deposed {
            pod: name.to_string(),
            member: candidates.owns(name),
            epoch,
            foreign: seen.is_some_and(|pod| marks::marked_group(pod).is_some_and(|g| g != group)),
        });
    }
    deposed
}

/// The leader's marks, unless its pod already carries them all (or is not there to mark).
fn promote(group: &str, pods: &[&Pod], leader: Option<&str>, epoch: i64) -> Option<Promotion> {
    let leader = leader?;
    let pod = pods.iter().find(|p| p.name_any() == leader)?;
    (!marks::leads_for_at(pod, group, epoch)).then(|| Promotion {
        pod: leader.to_string(),
        uid: pod.metadata.uid.clone(),
        epoch,
    })
}

/// The pods an earlier decision could have promoted, but for `leader`: the group's candidates
/// and the pods marked for it.
fn barrier_candidates(
    group: &str,
    pods: &[&Pod],
    members: &Candidates<'_>,
    leader: &str,
) -> Vec<String> {
    pods.iter()
        .filter(|p| {
            members.matched.iter().any(|m| m.name_any() == p.name_any())
                || marks::is_marked_for(p, group)
        })
        .map(|p| p.name_any())
        .filter(|name| name != leader)
        .collect()
}

/// The group's other pods that carry no leader's marks and not yet the follower's.
fn mark_followers(group: &str, owned: &[&Pod], leader: Option<&str>) -> Vec<String> {
    owned
        .iter()
        .filter(|p| !carries_leader_marks(p))
        .filter(|p| !(marks::role(p) == Some(ROLE_FOLLOWER) && marks::is_marked_for(p, group)))
        .map(|p| p.name_any())
        .filter(|name| leader != Some(name.as_str()))
        .collect()
}

/// Pods marked for the group that it no longer holds, and not demoted already, with the
/// resourceVersion they were seen at: their marks go only if they are unchanged since.
fn unmark(
    group: &str,
    pods: &[&Pod],
    candidates: &Candidates<'_>,
    done: &[&str],
) -> Vec<PodVersion> {
    pods.iter()
        .filter(|p| marks::is_marked_for(p, group))
        .map(|p| seen(p))
        .filter(|p| !candidates.owns(&p.name) && !done.contains(&p.name.as_str()))
        .collect()
}

/// The pod as seen, for a write conditional on it being unchanged since.
fn seen(pod: &Pod) -> PodVersion {
    PodVersion {
        name: pod.name_any(),
        resource_version: pod.resource_version().unwrap_or_default(),
    }
}

/// A leader's role label or a fencing token, either of which must go from any pod but the leader.
pub(super) fn carries_leader_marks(pod: &Pod) -> bool {
    marks::role(pod) == Some(ROLE_LEADER) || marks::epoch(pod).is_some()
}
