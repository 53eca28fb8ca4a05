//! Step 2 of the protocol, record: the status to write, with its conditions.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use super::candidates::Candidates;
use super::eligibility;
use super::heartbeat::Heartbeat;
use super::history;
use super::records::Records;
use super::{
    HEARTBEAT, LATE_STEP_DOWN, LEADER_ELECTED, OVERLAPPING, Observation, READY, RECONCILED,
    Transition,
};
use crate::crd::{LeaderGroup, LeaderGroupStatus, Liveness};
use crate::lease_record::LeaseRecord;

/// What this decision chose, as the status records it: the leader, its epoch, the transition to
/// it, and the Lease the decision leaves.
pub(super) struct Chosen<'a> {
    pub leader: &'a Option<String>,
    pub epoch: i64,
    pub transition: Option<&'a Transition>,
    pub lease: Option<&'a LeaseRecord>,
}

/// The status after this decision, if it differs from the group's: nothing is written for nothing.
pub(super) fn change(
    obs: &Observation<'_>,
    members: &Candidates<'_>,
    records: &Records,
    heartbeat: &Heartbeat,
    chosen: &Chosen<'_>,
) -> Option<LeaderGroupStatus> {
    let leader = chosen.leader;
    let mut next = next(obs, &records.status, members, chosen);
    let generation = obs.group.metadata.generation;
    let at = (generation, obs.now);
    let heartbeat = heartbeat_condition(obs, leader, heartbeat, members.lapsed.as_deref());
    set_or_remove(&mut next, HEARTBEAT, heartbeat, at);
    let late = late_step_down(obs).map(|m| (TRUE, "LeaseOutlastsNodeGrace", m));
    set_or_remove(&mut next, LATE_STEP_DOWN, late, at);
    set_ready(&mut next, generation, obs.now);
    (Some(&next) != obs.group.status.as_ref()).then_some(next)
}

/// The longest Lease duration a member may time itself by after this decision, given the Lease
/// it leaves (`after`): the spec's, the Lease's longest of its tenure, a pending predecessor's,
/// and, within the same epoch, what the status already says (the Lease may have been deleted
/// since). A new epoch whose predecessor stepped down starts afresh.
fn longest_lease_seconds(
    obs: &Observation<'_>,
    current: &LeaderGroupStatus,
    epoch: i64,
    after: Option<&LeaseRecord>,
) -> Option<i32> {
    if epoch == 0 {
        return None;
    }
    let lease = after.map_or(0, |l| {
        let predecessor = l.predecessor.as_ref().filter(|p| p.pending());
        l.longest_seen()
            .max(predecessor.map_or(0, |p| p.lease_seconds))
    });
    let kept = if current.epoch == epoch {
        current.longest_lease_seconds.unwrap_or(0)
    } else {
        0
    };
    Some(obs.group.spec.lease_duration_seconds.max(lease).max(kept))
}

/// In Readiness mode, why a leader cut off from the API server may still believe it leads after
/// its successor is chosen, if it may. Its last confirmation holds for two thirds of the Lease
/// (leadergroup-client, leadergroup-agent); the operator chooses a successor once the pod turns
/// NotReady, which for a node cut off takes the node controller's grace period. The leader stops
/// first only if the first is the shorter. (Heartbeat mode hands over a whole Lease after the
/// last renewal, so the leader always stops first.)
fn late_step_down(obs: &Observation<'_>) -> Option<String> {
    if obs.group.spec.liveness == Liveness::Heartbeat {
        return None;
    }
    let seconds = obs.group.spec.lease_duration_seconds;
    let lease = std::time::Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    let confirmation = lease * 2 / 3;
    if confirmation < obs.node_grace {
        return None;
    }
    let grace = obs.node_grace.as_secs_f64();
    Some(format!(
        "a leader cut off from the API server believes it leads for up to {:.1} s (two thirds of \
         leaseDurationSeconds {seconds}), but a successor may be chosen once its node turns \
         NotReady, after the node controller's grace period of {grace:.0} s (the operator's \
         --node-monitor-grace-period): set leaseDurationSeconds below {:.0}, or use liveness \
         Heartbeat",
        confirmation.as_secs_f64(),
        (grace * 1.5).ceil()
    ))
}

/// The status that records this decision: the leader, its epoch, the candidates and conditions.
fn next(
    obs: &Observation<'_>,
    current: &LeaderGroupStatus,
    m: &Candidates<'_>,
    chosen: &Chosen<'_>,
) -> LeaderGroupStatus {
    let Chosen {
        leader,
        epoch,
        transition,
        lease,
    } = *chosen;
    let ready = i32::try_from(m.succession.len()).unwrap_or(i32::MAX);
    let candidates = i32::try_from(m.matched.len()).unwrap_or(i32::MAX);
    let mut s = LeaderGroupStatus {
        leader: leader.clone(),
        leader_uid: leader.as_deref().and_then(|l| super::pod_uid(obs.pods, l)),
        epoch: epoch.max(current.epoch),
        lease_name: Some(obs.group.lease_name()),
        longest_lease_seconds: longest_lease_seconds(obs, current, epoch, lease),
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
        history: history::after(obs, current, transition),
        eligibility: eligibility::of(m, leader.as_deref()),
    };
    if let Some(t) = transition {
        s.last_transition_time = Some(Time(obs.now));
        s.last_transition_reason = Some(t.reason.as_str().to_string());
    }
    let lapsed = leader.is_some() && m.lapsed.as_deref() == leader.as_deref();
    let (elected, reason, message) = if lapsed {
        lapsed_holder(leader.as_deref().unwrap_or_default(), epoch)
    } else {
        leader_elected(leader, obs.group.spec.paused, epoch, candidates, ready)
    };
    let generation = obs.group.metadata.generation;
    set_condition(
        &mut s,
        (LEADER_ELECTED, truth(elected), reason, &message),
        generation,
        obs.now,
    );
    let overlapping = overlapping(m).map(|message| (TRUE, "OverlappingGroup", message));
    set_or_remove(&mut s, OVERLAPPING, overlapping, (generation, obs.now));
    s
}

/// The `Heartbeat` condition, in Heartbeat mode while a pod leads: True while the leader renews
/// the Lease, Unknown until its first renewal, False when a Lease duration passed without one.
fn heartbeat_condition(
    obs: &Observation<'_>,
    leader: &Option<String>,
    heartbeat: &Heartbeat,
    lapsed: Option<&str>,
) -> Option<(&'static str, &'static str, String)> {
    let leader = leader.as_deref()?;
    if obs.group.spec.liveness != Liveness::Heartbeat {
        return None;
    }
    let seconds = obs.group.spec.lease_duration_seconds;
    let lease = obs.group.lease_name();
    if lapsed == Some(leader) {
        return Some((
            FALSE,
            "Lapsed",
            format!(
                "{leader} has not renewed Lease {lease} for {seconds} s; it leads again once \
                 it renews"
            ),
        ));
    }
    let awaiting = || {
        (
            UNKNOWN,
            "AwaitingRenewal",
            format!("{leader} has not renewed Lease {lease} yet"),
        )
    };
    Some(match heartbeat {
        // A new leader, or the Lease does not ask for renewals yet (written in this pass).
        Heartbeat::NotJudged => awaiting(),
        Heartbeat::Awaiting { holder, .. } | Heartbeat::Renewing { holder, .. }
            if holder != leader =>
        {
            awaiting()
        }
        Heartbeat::Awaiting { overdue: false, .. } => awaiting(),
        Heartbeat::Awaiting { overdue: true, .. } => (
            FALSE,
            "NoRenewal",
            format!(
                "{leader} has not renewed Lease {lease} in the {seconds} s since it became leader: \
                 run leadergroup-agent or leadergroup-client in its pod with update on that Lease; \
                 until it renews, only its readiness is watched"
            ),
        ),
        Heartbeat::Renewing { .. } => (
            TRUE,
            "Renewing",
            format!(
                "{leader} renews Lease {lease}; leadership moves after {seconds} s without a renewal"
            ),
        ),
    })
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

/// The `LeaderElected` condition while the holder whose heartbeat lapsed keeps the Lease, since
/// no other pod may lead ([`super::lapse::Lapse::kept_holder`]): its client reports no role.
fn lapsed_holder(holder: &str, epoch: i64) -> (bool, &'static str, String) {
    (
        false,
        "HeartbeatLost",
        format!(
            "{holder} stopped renewing the Lease for a Lease duration and no other pod is \
             eligible: nobody leads; {holder} keeps the Lease at epoch {epoch} (no new token) \
             until it renews again or another pod becomes eligible"
        ),
    )
}

/// Which of the selected pods older groups hold, if any, grouped by group.
fn overlapping(m: &Candidates<'_>) -> Option<String> {
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
    let generation = group.metadata.generation;
    set_condition(
        &mut s,
        (LEADER_ELECTED, FALSE, reason, message),
        generation,
        now,
    );
    set_ready(&mut s, generation, now);
    s.lease_name = Some(group.lease_name());
    s.observed_generation = generation;
    s
}

/// The status with the `Reconciled` condition False, saying why the API server refuses the
/// group's requests for good (see [`crate::retry`]); None when the status says exactly that
/// already, so that a run of the same refusal writes once.
/// `generation`: the group's `metadata.generation` when it was read.
pub fn api_refused(
    current: &LeaderGroupStatus,
    generation: Option<i64>,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Option<LeaderGroupStatus> {
    let same = current.condition(RECONCILED).is_some_and(|c| {
        c.status == FALSE
            && c.reason == reason
            && c.message == message
            && c.observed_generation == generation
    });
    if same {
        return None;
    }
    let mut next = current.clone();
    set_condition(
        &mut next,
        (RECONCILED, FALSE, reason, message),
        generation,
        now,
    );
    set_ready(&mut next, generation, now);
    Some(next)
}

/// The status without the `Reconciled` condition, once a reconcile succeeded, with `Ready` said
/// again from `LeaderElected`; None when it has no `Reconciled` condition.
pub fn api_accepted(
    current: &LeaderGroupStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<LeaderGroupStatus> {
    current.condition(RECONCILED)?;
    let mut next = current.clone();
    next.conditions.retain(|c| c.type_ != RECONCILED);
    set_ready(&mut next, generation, now);
    Some(next)
}

/// The `Ready` condition, from the others: False with the refusal while the API server refuses
/// the group's requests (`Reconciled` False), else as `LeaderElected` says (True while a pod
/// leads, paused or not), else Unknown until the first decision.
fn set_ready(s: &mut LeaderGroupStatus, generation: Option<i64>, now: Timestamp) {
    let refused = s.condition(RECONCILED).filter(|c| c.status == FALSE);
    let (status, reason, message) = match refused.or_else(|| s.condition(LEADER_ELECTED)) {
        Some(c) => (
            if c.status == TRUE { TRUE } else { FALSE },
            c.reason.clone(),
            c.message.clone(),
        ),
        None => (
            UNKNOWN,
            "Pending".to_string(),
            "no decision recorded yet".to_string(),
        ),
    };
    set_condition(s, (READY, status, &reason, &message), generation, now);
}

const TRUE: &str = "True";
const FALSE: &str = "False";
const UNKNOWN: &str = "Unknown";

fn truth(value: bool) -> &'static str {
    if value { TRUE } else { FALSE }
}

/// Sets condition `type_` to `value` (status, reason, message) for the spec of `generation` at
/// `now`, or removes it when there is none.
fn set_or_remove(
    s: &mut LeaderGroupStatus,
    type_: &str,
    value: Option<(&str, &str, String)>,
    (generation, now): (Option<i64>, Timestamp),
) {
    match value {
        None => s.conditions.retain(|c| c.type_ != type_),
        Some((status, reason, message)) => {
            set_condition(s, (type_, status, reason, &message), generation, now);
        }
    }
}

/// Sets a condition (type, status, reason, message) for the spec of `generation`, keeping its
/// lastTransitionTime when its status does not change.
pub fn set_condition(
    s: &mut LeaderGroupStatus,
    (type_, status, reason, message): (&str, &str, &str, &str),
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = status.to_string();
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
        observed_generation: generation,
    });
    s.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}
