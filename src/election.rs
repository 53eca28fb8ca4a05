//! The election decision: from a group, the pods and groups of its namespace, its Lease and the
//! time to a [`Plan`] of steps. Pure: no client in reach, so every rule of DESIGN.md is tested here.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::core::Selector;

use crate::crd::{LeaderGroup, LeaderGroupStatus, ROLE_FOLLOWER, ROLE_LEADER};
use crate::lease_record::{LeaseRecord, renew_interval};
pub use crate::marks::epoch as pod_epoch;
use crate::marks::{is_marked_for, role};

/// Type of the condition that says whether a pod leads.
pub const LEADER_ELECTED: &str = "LeaderElected";
/// Type of the condition that says some selected pods belong to an older group.
pub const OVERLAPPING: &str = "Overlapping";

/// Why leadership changed; the names are the API's `lastTransitionReason` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A leader was elected where there was none.
    Initial,
    /// The leader pod is gone.
    LeaderDeleted,
    /// The leader pod has a deletionTimestamp.
    LeaderTerminating,
    /// The leader pod is not Running and Ready.
    LeaderNotReady,
    /// The leader pod is no longer selected by the group (or an older group holds it).
    LeaderLeftGroup,
    /// Leadership moved to `spec.preferredLeader`.
    Preferred,
    /// No pod is eligible: nobody leads.
    NoCandidates,
}

impl Reason {
    /// The reason as the API spells it; also a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Initial => "Initial",
            Reason::LeaderDeleted => "LeaderDeleted",
            Reason::LeaderTerminating => "LeaderTerminating",
            Reason::LeaderNotReady => "LeaderNotReady",
            Reason::LeaderLeftGroup => "LeaderLeftGroup",
            Reason::Preferred => "Preferred",
            Reason::NoCandidates => "NoCandidates",
        }
    }
}

/// Everything the decision looks at, as read from the API server (or its watch cache).
pub struct Observation<'a> {
    /// The group decided for.
    pub group: &'a LeaderGroup,
    /// Every group of its namespace, itself included, to settle overlapping selectors.
    pub groups: &'a [&'a LeaderGroup],
    /// The pods of its namespace that [`concerns`] the group (every pod of the namespace gives
    /// the same decision: the others are never looked at).
    pub pods: &'a [&'a Pod],
    /// The group's Lease, if it exists.
    pub lease: Option<&'a Lease>,
    /// This operator replica's identity.
    pub identity: &'a str,
    /// The time of the decision.
    pub now: Timestamp,
}

/// What the decision concluded.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// A Lease of the group's name exists that this group does not own: nothing is written to it.
    LeaseNotOwned {
        /// The status to record (condition False, reason LeaseNotOwned).
        status: LeaderGroupStatus,
    },
    /// Another operator replica arbitrates this group and its Lease is still fresh.
    Deferred {
        /// That replica.
        arbiter: String,
        /// When its Lease runs out and this replica may take over.
        until: Timestamp,
    },
    /// The selector cannot be evaluated (the API server's validation was bypassed).
    InvalidSelector {
        /// What is wrong with it.
        message: String,
        /// The status to record.
        status: LeaderGroupStatus,
    },
    /// The steps to take, in protocol order.
    Act(Box<Plan>),
}

/// A change of the recorded leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The leader recorded before (status.leader).
    pub from: Option<String>,
    /// The leader after; None when nobody is eligible.
    pub to: Option<String>,
    /// The epoch after.
    pub epoch: i64,
    /// Why.
    pub reason: Reason,
}

/// The leader's marks to put on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promotion {
    /// The pod.
    pub pod: String,
    /// Its fencing token.
    pub epoch: i64,
}

/// The steps of one reconcile, in the order of the transition protocol.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// 1. Commit: the Lease content to write with a resourceVersion precondition, if it differs
    ///    from what it holds (a change of holder, a renewal, a re-creation).
    pub commit: Option<LeaseRecord>,
    /// 2. Record: the status to write, if it differs from the current one.
    pub status: Option<LeaderGroupStatus>,
    /// 3. Demote: pods to label follower and strip of their epoch (old leaders, strays).
    pub demote: Vec<String>,
    /// 4 and 5. Check (a fresh list, not the cache) and promote: the leader's marks, if the
    ///    leader pod does not already carry them.
    pub promote: Option<Promotion>,
    /// 6. Tell: the change of leader, if any, for the Event and the metrics.
    pub transition: Option<Transition>,
    /// Candidates to mark follower (label and group annotation), off the critical path.
    pub mark_followers: Vec<String>,
    /// Pods that carry this group's marks but are no longer its candidates, with the
    /// resourceVersion they were seen at (their marks are removed only if unchanged since).
    pub unmark: Vec<(String, String)>,
    /// When to look again even without a watch event (the next renewal).
    pub requeue_after: Duration,
}

/// The group's view of its namespace's pods.
struct Membership<'a> {
    /// Pods the selector matches (candidates), in succession order.
    matched: Vec<&'a Pod>,
    /// Of those, the ones this group holds (not held by an older group).
    owned: Vec<&'a Pod>,
    /// Of `matched`, the ones an older group holds, with that group's name.
    overlapped: Vec<(&'a Pod, String)>,
}

/// Whether the decision for `group` looks at `pod`: the pod is a candidate (the selector
/// matches), carries the group's marks, or is a leader the status or the Lease names. Filtering
/// the namespace's pods by it keeps a decision's cost to its own group's pods instead of every
/// pod of a namespace with many groups.
pub fn concerns(group: &LeaderGroup, lease: Option<&Lease>, pod: &Pod) -> bool {
    group.spec.selector.matches(pod.labels())
        || group
            .metadata
            .name
            .as_deref()
            .is_some_and(|name| is_marked_for(pod, name))
        || pod
            .metadata
            .name
            .as_deref()
            .is_some_and(|name| named_leaders(group, lease).any(|l| l == name))
}

/// The pods the group's status and its Lease name as leader (one, both the same, or none).
pub fn named_leaders<'a>(
    group: &'a LeaderGroup,
    lease: Option<&'a Lease>,
) -> impl Iterator<Item = &'a str> {
    let status_leader = group.status.as_ref().and_then(|s| s.leader.as_deref());
    let lease_holder = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.as_deref());
    status_leader.into_iter().chain(lease_holder)
}

/// Decides what to do for `obs.group`.
pub fn decide(obs: &Observation<'_>) -> Decision {
    let group = obs.group;
    let status = group.status.clone().unwrap_or_default();
    let lease = obs.lease.map(LeaseRecord::from_lease);

    if let Some(lease_obj) = obs.lease
        && !group.owns_lease(lease_obj)
    {
        let message = format!(
            "Lease {} exists and is not owned by this LeaderGroup; it is never overwritten",
            group.lease_name()
        );
        let mut s = status.clone();
        s.leader = None;
        s.succession.clear();
        set_condition(
            &mut s,
            LEADER_ELECTED,
            false,
            "LeaseNotOwned",
            &message,
            obs.now,
        );
        return Decision::LeaseNotOwned {
            status: finish_status(s, group),
        };
    }

    if let Some(record) = &lease
        && let Some(arbiter) = &record.arbiter
        && arbiter != obs.identity
        && !record.is_expired(obs.now)
        && let Some(until) = record.expires_at()
    {
        return Decision::Deferred {
            arbiter: arbiter.clone(),
            until,
        };
    }

    // Validated through kube's parser once; matching then uses the allocation-free
    // PodSelector::matches.
    if group.spec.selector.is_empty() {
        return invalid_selector(group, status, "the selector is empty".into(), obs.now);
    }
    if let Err(e) = Selector::try_from(group.spec.selector.to_label_selector()) {
        return invalid_selector(group, status, e.to_string(), obs.now);
    }
    let membership = membership(obs);
    let succession: Vec<&Pod> = membership
        .owned
        .iter()
        .copied()
        .filter(|p| is_eligible(p))
        .collect();
    let eligible = |name: &str| succession.iter().any(|p| p.name_any() == name);

    let lease_epoch = lease.as_ref().map_or(0, |l| l.epoch);
    let lease_holder = lease.as_ref().and_then(|l| l.holder.clone());
    let pods_epoch = obs
        .pods
        .iter()
        .filter(|p| is_marked_for(p, &group.name_any()))
        .filter_map(|p| pod_epoch(p))
        .max()
        .unwrap_or(0);
    let incumbent = if lease.is_some() {
        lease_holder.clone()
    } else {
        status.leader.clone()
    };

    // Who should lead: the preferred pod when eligible, else the incumbent when eligible
    // (sticky), else the first of the succession. Paused: whoever leads now, eligible or not.
    let preferred = group
        .spec
        .preferred_leader
        .as_deref()
        .filter(|p| !p.is_empty() && eligible(p));
    let desired: Option<String> = if group.spec.paused {
        incumbent.clone()
    } else if let Some(p) = preferred {
        Some(p.to_string())
    } else if let Some(i) = incumbent.as_deref().filter(|i| eligible(i)) {
        Some(i.to_string())
    } else {
        succession.first().map(|p| p.name_any())
    };

    // The epoch of `desired`. A new token is minted only when no durable record already gives
    // `desired` one that was never handed to anybody else.
    let (epoch, acquired_now) = match &desired {
        None => (lease_epoch.max(status.epoch), false),
        Some(d)
            if status.leader.as_deref() == Some(d)
                && status.epoch >= lease_epoch
                && status.epoch >= pods_epoch =>
        {
            // The status records `d` at this epoch (the Lease may be missing or behind): restore it.
            (status.epoch, false)
        }
        Some(d)
            if lease_holder.as_deref() == Some(d)
                && lease_epoch > status.epoch
                && lease_epoch > pods_epoch =>
        {
            // Committed but never recorded (a crash between steps 1 and 2): the token was never
            // handed out, so it can be recorded now.
            (lease_epoch, false)
        }
        Some(_) if group.spec.paused => (lease_epoch.max(status.epoch), false),
        Some(_) => (lease_epoch.max(status.epoch).max(pods_epoch) + 1, true),
    };

    let commit = plan_commit(obs, lease.as_ref(), &desired, epoch, acquired_now);
    let transition = (status.leader != desired).then(|| Transition {
        from: status.leader.clone(),
        to: desired.clone(),
        epoch,
        reason: reason_for(
            obs,
            &membership,
            status.leader.as_deref(),
            desired.as_deref(),
        ),
    });

    let group_name = group.name_any();
    let leader_pod = desired
        .as_deref()
        .and_then(|d| obs.pods.iter().find(|p| p.name_any() == d));
    let paused = group.spec.paused;
    let mut demote: Vec<String> = Vec::new();
    let mut promote = None;
    let mut mark_followers = Vec::new();
    let mut unmark = Vec::new();
    if !paused {
        for name in [status.leader.as_deref(), lease_holder.as_deref()]
            .into_iter()
            .flatten()
        {
            if desired.as_deref() != Some(name)
                && obs.pods.iter().any(|p| p.name_any() == name)
                && !demote.iter().any(|d| d == name)
            {
                demote.push(name.to_string());
            }
        }
        for pod in &membership.owned {
            let name = pod.name_any();
            if desired.as_deref() == Some(name.as_str()) {
                continue;
            }
            if role(pod) == Some(ROLE_LEADER) || pod_epoch(pod).is_some() {
                if !demote.contains(&name) {
                    demote.push(name);
                }
            } else if role(pod) != Some(ROLE_FOLLOWER) || !is_marked_for(pod, &group_name) {
                mark_followers.push(name);
            }
        }
        if let (Some(d), Some(pod)) = (&desired, leader_pod)
            && (role(pod) != Some(ROLE_LEADER)
                || pod_epoch(pod) != Some(epoch)
                || !is_marked_for(pod, &group_name))
        {
            promote = Some(Promotion {
                pod: d.clone(),
                epoch,
            });
        }
        for pod in obs.pods {
            let name = pod.name_any();
            if is_marked_for(pod, &group_name)
                && !membership.owned.iter().any(|o| o.name_any() == name)
                && !demote.contains(&name)
            {
                unmark.push((name, pod.resource_version().unwrap_or_default()));
            }
        }
    }

    let next_status = next_status(
        obs,
        &status,
        &membership,
        &succession,
        &desired,
        epoch,
        transition.as_ref(),
    );
    let requeue_after = requeue_after(obs, commit.as_ref().or(lease.as_ref()));

    Decision::Act(Box::new(Plan {
        commit,
        status: (Some(&next_status) != group.status.as_ref()).then_some(next_status),
        demote,
        promote,
        transition,
        mark_followers,
        unmark,
        requeue_after,
    }))
}

/// The Lease content to write, if the Lease does not already say it and needs no renewal.
fn plan_commit(
    obs: &Observation<'_>,
    lease: Option<&LeaseRecord>,
    desired: &Option<String>,
    epoch: i64,
    acquired_now: bool,
) -> Option<LeaseRecord> {
    let duration = obs.group.spec.lease_duration_seconds;
    let same_holder = lease.is_some_and(|l| &l.holder == desired && l.epoch == epoch);
    let acquire_time = match lease {
        Some(l) if same_holder && !acquired_now => l.acquire_time,
        _ => desired.as_ref().map(|_| obs.now),
    };
    let wanted = LeaseRecord {
        holder: desired.clone(),
        epoch,
        duration_seconds: duration,
        acquire_time,
        renew_time: Some(obs.now),
        arbiter: Some(obs.identity.to_string()),
    };
    match lease {
        Some(l)
            if same_holder
                && l.duration_seconds == duration
                && l.arbiter.as_deref() == Some(obs.identity)
                && l.renew_due_at().is_some_and(|due| due > obs.now) =>
        {
            None
        }
        _ => Some(wanted),
    }
}

/// Time until the next renewal is due, measured from the Lease as it will be after this pass.
fn requeue_after(obs: &Observation<'_>, lease: Option<&LeaseRecord>) -> Duration {
    let fallback = renew_interval(obs.group.spec.lease_duration_seconds.max(1));
    lease
        .and_then(|l| l.renew_due_at())
        .map(|due| {
            let ms = due.duration_since(obs.now).as_millis().max(0);
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        })
        .unwrap_or(fallback)
        .max(Duration::from_millis(100))
}

fn membership<'a>(obs: &Observation<'a>) -> Membership<'a> {
    let selector = &obs.group.spec.selector;
    let mut matched: Vec<&Pod> = obs
        .pods
        .iter()
        .copied()
        .filter(|p| selector.matches(p.labels()))
        .collect();
    matched.sort_by(|a, b| succession_order(a, b));
    // Only the older groups that select one of these pods can hold one; with many groups in a
    // namespace that is usually none, so ordering all of them would be wasted work.
    let mut older: Vec<&LeaderGroup> = obs
        .groups
        .iter()
        .copied()
        .filter(|g| {
            g.metadata.name != obs.group.metadata.name
                && group_order(g, obs.group) == Ordering::Less
                && matched.iter().any(|p| g.spec.selector.matches(p.labels()))
        })
        .collect();
    older.sort_by(|a, b| group_order(a, b));
    let mut owned = Vec::new();
    let mut overlapped = Vec::new();
    for pod in &matched {
        let holder = older.iter().find(|g| g.spec.selector.matches(pod.labels()));
        match holder {
            Some(g) => overlapped.push((*pod, g.name_any())),
            None => owned.push(*pod),
        }
    }
    Membership {
        matched,
        owned,
        overlapped,
    }
}

/// Older groups first (creationTimestamp, then name): the older group keeps a contested pod.
fn group_order(a: &LeaderGroup, b: &LeaderGroup) -> Ordering {
    let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ta.cmp(&tb)
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Succession order: oldest pod first (creationTimestamp), then name.
pub fn succession_order(a: &Pod, b: &Pod) -> Ordering {
    let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ta.cmp(&tb)
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Running, Ready=True and not terminating. Group membership is checked separately.
pub fn is_eligible(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && is_running_ready(pod)
}

fn is_running_ready(pod: &Pod) -> bool {
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

fn reason_for(
    obs: &Observation<'_>,
    m: &Membership<'_>,
    from: Option<&str>,
    to: Option<&str>,
) -> Reason {
    let Some(old) = from else {
        return Reason::Initial;
    };
    if to.is_none() {
        return Reason::NoCandidates;
    }
    match obs.pods.iter().find(|p| p.name_any() == old) {
        None => Reason::LeaderDeleted,
        // A DELETE with grace period 0 (a force delete, or the kubelet finishing) shows first as an
        // update with a deletionTimestamp and a grace of 0, then as the deletion: it is a deletion.
        Some(p) if p.metadata.deletion_grace_period_seconds == Some(0) => Reason::LeaderDeleted,
        Some(p) if p.metadata.deletion_timestamp.is_some() => Reason::LeaderTerminating,
        Some(p) if !m.owned.iter().any(|o| o.name_any() == p.name_any()) => Reason::LeaderLeftGroup,
        Some(p) if !is_running_ready(p) => Reason::LeaderNotReady,
        Some(_) => Reason::Preferred,
    }
}

fn next_status(
    obs: &Observation<'_>,
    current: &LeaderGroupStatus,
    m: &Membership<'_>,
    succession: &[&Pod],
    leader: &Option<String>,
    epoch: i64,
    transition: Option<&Transition>,
) -> LeaderGroupStatus {
    let ready = i32::try_from(succession.len()).unwrap_or(i32::MAX);
    let candidates = i32::try_from(m.matched.len()).unwrap_or(i32::MAX);
    let mut s = LeaderGroupStatus {
        leader: leader.clone(),
        epoch: epoch.max(current.epoch),
        lease_name: Some(obs.group.lease_name()),
        candidates,
        ready_candidates: ready,
        ready: Some(format!("{ready}/{candidates}")),
        succession: succession
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
    let (elected, reason, message) = match (leader, obs.group.spec.paused) {
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
    };
    set_condition(&mut s, LEADER_ELECTED, elected, reason, &message, obs.now);
    if m.overlapped.is_empty() {
        s.conditions.retain(|c| c.type_ != OVERLAPPING);
    } else {
        let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (pod, g) in &m.overlapped {
            by_group.entry(g.as_str()).or_default().push(pod.name_any());
        }
        let message = by_group
            .iter()
            .map(|(g, pods)| format!("pods {} are held by the older group {g}", pods.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        set_condition(
            &mut s,
            OVERLAPPING,
            true,
            "OverlappingGroup",
            &message,
            obs.now,
        );
    }
    s
}

fn invalid_selector(
    group: &LeaderGroup,
    mut status: LeaderGroupStatus,
    message: String,
    now: Timestamp,
) -> Decision {
    let message = format!("spec.selector is invalid: {message}");
    set_condition(
        &mut status,
        LEADER_ELECTED,
        false,
        "InvalidSelector",
        &message,
        now,
    );
    Decision::InvalidSelector {
        message,
        status: finish_status(status, group),
    }
}

fn finish_status(mut s: LeaderGroupStatus, group: &LeaderGroup) -> LeaderGroupStatus {
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

#[cfg(test)]
mod tests;
