//! Step 2 of the protocol, record: the status to write, with its conditions.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use super::membership::Membership;
use super::records::Records;
use super::token::Token;
use super::{LEADER_ELECTED, OVERLAPPING, Observation, Transition};
use crate::crd::{LeaderGroup, LeaderGroupStatus};

/// The status after this decision, if it differs from the group's: nothing is written for nothing.
pub(super) fn change(
    obs: &Observation<'_>,
    members: &Membership<'_>,
    records: &Records,
    leader: &Option<String>,
    token: Token,
    transition: Option<&Transition>,
) -> Option<LeaderGroupStatus> {
    let next = next(
        obs,
        &records.status,
        members,
        leader,
        token.epoch,
        transition,
    );
    (Some(&next) != obs.group.status.as_ref()).then_some(next)
}

/// The status that records this decision: the leader, its epoch, the candidates and conditions.
fn next(
    obs: &Observation<'_>,
    current: &LeaderGroupStatus,
    m: &Membership<'_>,
    leader: &Option<String>,
    epoch: i64,
    transition: Option<&Transition>,
) -> LeaderGroupStatus {
    let ready = i32::try_from(m.succession.len()).unwrap_or(i32::MAX);
    let candidates = i32::try_from(m.matched.len()).unwrap_or(i32::MAX);
    let mut s = LeaderGroupStatus {
        leader: leader.clone(),
        epoch: epoch.max(current.epoch),
        lease_name: Some(obs.group.lease_name()),
        candidates,
        ready_candidates: ready,
        ready: Some(format!("{ready}/{candidates}")),
        succession: m
            .succession
            .iter()
            .map(|p| p.name_any())
            .filter(|n| Some(n) != leader.as_ref())
            .collect(),
        last_transition_time: current.last_transition_time.clone(),
        last_transition_reason: current.last_transition_reason.clone(),
        observed_generation: obs.group.metadata.generation,
        conditions: current.conditions.clone(),
    };
    if let Some(t) = transition {
        s.last_transition_time = Some(Time(obs.now));
        s.last_transition_reason = Some(t.reason.as_str().to_string());
    }
    let (elected, reason, message) =
        leader_elected(leader, obs.group.spec.paused, epoch, candidates, ready);
    set_condition(&mut s, LEADER_ELECTED, elected, reason, &message, obs.now);
    match overlapping(m) {
        None => s.conditions.retain(|c| c.type_ != OVERLAPPING),
        Some(message) => set_condition(
            &mut s,
            OVERLAPPING,
            true,
            "OverlappingGroup",
            &message,
            obs.now,
        ),
    }
    s
}

/// The `LeaderElected` condition: whether a pod leads, the reason, and a message for people.
fn leader_elected(
    leader: &Option<String>,
    paused: bool,
    epoch: i64,
    candidates: i32,
    ready: i32,
) -> (bool, &'static str, String) {
    match (leader, paused) {
        (Some(l), false) => (true, "Elected", format!("{l} leads at epoch {epoch}")),
        (Some(l), true) => (
            true,
            "Paused",
            format!("paused: no transitions; {l} leads at epoch {epoch}"),
        ),
        (None, true) => (
            false,
            "Paused",
            "paused: no transitions; nobody leads".to_string(),
        ),
        (None, false) => (
            false,
            "NoCandidates",
            format!("no eligible pod: {candidates} candidates, {ready} Running and Ready"),
        ),
    }
}

/// Which of the selected pods older groups hold, if any, grouped by group.
fn overlapping(m: &Membership<'_>) -> Option<String> {
    if m.overlapped.is_empty() {
        return None;
    }
    let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (pod, g) in &m.overlapped {
        by_group.entry(g.as_str()).or_default().push(pod.name_any());
    }
    let message = by_group
        .iter()
        .map(|(g, pods)| format!("pods {} are held by the older group {g}", pods.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    Some(message)
}

/// The status of a refused decision: condition `LeaderElected` False for `reason`.
pub(super) fn refused(
    group: &LeaderGroup,
    mut s: LeaderGroupStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> LeaderGroupStatus {
    set_condition(&mut s, LEADER_ELECTED, false, reason, message, now);
    s.lease_name = Some(group.lease_name());
    s.observed_generation = group.metadata.generation;
    s
}

/// Sets a condition, keeping its lastTransitionTime when its status does not change.
fn set_condition(
    s: &mut LeaderGroupStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let status = if value { "True" } else { "False" }.to_string();
    let since = s
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    s.conditions.retain(|c| c.type_ != type_);
    s.conditions.push(Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: since,
        observed_generation: None,
    });
    s.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}
