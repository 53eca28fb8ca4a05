//! The marks to change on pods: demote (step 3 of the protocol), promote (step 5), and, off the
//! critical path, mark the other candidates follower and unmark the pods that left the group.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::membership::Membership;
use super::records::Records;
use super::token::Token;
use super::{Observation, Promotion};
use crate::crd::{ROLE_FOLLOWER, ROLE_LEADER};
use crate::marks;

/// The pod patches of one decision.
#[derive(Default)]
pub(super) struct Marking {
    pub demote: Vec<String>,
    pub promote: Option<Promotion>,
    pub mark_followers: Vec<String>,
    pub unmark: Vec<(String, String)>,
}

impl Marking {
    /// The patches that leave only `leader` marked leader, with its token. A paused group
    /// touches no pod.
    pub fn plan(
        obs: &Observation<'_>,
        members: &Membership<'_>,
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
        let demote = demote(obs.pods, &members.owned, named, leader);
        Marking {
            promote: promote(&group, obs.pods, leader, token.epoch),
            mark_followers: mark_followers(&group, &members.owned, leader),
            unmark: unmark(&group, obs.pods, members, &demote),
            demote,
        }
    }
}

/// The leaders the records name that still exist, then the group's pods that carry a leader's
/// marks (strays), but for `leader`; each once.
fn demote(
    pods: &[&Pod],
    owned: &[&Pod],
    named: [Option<&str>; 2],
    leader: Option<&str>,
) -> Vec<String> {
    let named = named
        .into_iter()
        .flatten()
        .filter(|name| pods.iter().any(|p| p.name_any() == *name))
        .map(str::to_string);
    let strays = owned
        .iter()
        .filter(|p| carries_leader_marks(p))
        .map(|p| p.name_any());
    let mut demote: Vec<String> = Vec::new();
    for name in named.chain(strays) {
        if leader != Some(name.as_str()) && !demote.contains(&name) {
            demote.push(name);
        }
    }
    demote
}

/// The leader's marks, unless its pod already carries them all (or is not there to mark).
fn promote(group: &str, pods: &[&Pod], leader: Option<&str>, epoch: i64) -> Option<Promotion> {
    let leader = leader?;
    let pod = pods.iter().find(|p| p.name_any() == leader)?;
    let marked = marks::role(pod) == Some(ROLE_LEADER)
        && marks::epoch(pod) == Some(epoch)
        && marks::is_marked_for(pod, group);
    (!marked).then(|| Promotion {
        pod: leader.to_string(),
        epoch,
    })
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
    membership: &Membership<'_>,
    demote: &[String],
) -> Vec<(String, String)> {
    pods.iter()
        .filter(|p| marks::is_marked_for(p, group))
        .map(|p| (p.name_any(), p.resource_version().unwrap_or_default()))
        .filter(|(name, _)| !membership.owns(name) && !demote.contains(name))
        .collect()
}

/// A leader's role label or a fencing token, either of which must go from any pod but the leader.
pub(super) fn carries_leader_marks(pod: &Pod) -> bool {
    marks::role(pod) == Some(ROLE_LEADER) || marks::epoch(pod).is_some()
}
