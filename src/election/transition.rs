//! A change of the recorded leader, and why it happened.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::Observation;
use super::candidates::{Candidates, is_running_ready};
use super::records::Records;
use super::token::Token;

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
    /// The leader's own renewals of the Lease stopped for a Lease duration (Heartbeat mode).
    LeaderHeartbeatLost,
    /// The leader pod was created again under its name (another UID): a new candidate.
    LeaderReplaced,
    /// Leadership moved to `spec.preferredLeader`.
    Preferred,
    /// No pod is eligible: nobody leads.
    NoCandidates,
}

impl Reason {
    /// Every reason, in declaration order (a test holds it to that): the metric's label values.
    pub const ALL: [Reason; 9] = [
        Reason::Initial,
        Reason::LeaderDeleted,
        Reason::LeaderTerminating,
        Reason::LeaderNotReady,
        Reason::LeaderLeftGroup,
        Reason::LeaderHeartbeatLost,
        Reason::LeaderReplaced,
        Reason::Preferred,
        Reason::NoCandidates,
    ];

    /// The reason as the API spells it; also a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Initial => "Initial",
            Reason::LeaderDeleted => "LeaderDeleted",
            Reason::LeaderTerminating => "LeaderTerminating",
            Reason::LeaderNotReady => "LeaderNotReady",
            Reason::LeaderLeftGroup => "LeaderLeftGroup",
            Reason::LeaderHeartbeatLost => "LeaderHeartbeatLost",
            Reason::LeaderReplaced => "LeaderReplaced",
            Reason::Preferred => "Preferred",
            Reason::NoCandidates => "NoCandidates",
        }
    }
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

impl Transition {
    /// The change from the leader the status records to `leader`, if they differ.
    pub(super) fn between(
        obs: &Observation<'_>,
        members: &Candidates<'_>,
        records: &Records,
        leader: &Option<String>,
        token: Token,
    ) -> Option<Transition> {
        let (from, to) = (records.status_leader(), leader.as_deref());
        let replaced = from.is_some_and(|f| records.is_replaced(f));
        (from != to || replaced).then(|| Transition {
            from: from.map(str::to_string),
            to: to.map(str::to_string),
            epoch: token.epoch,
            reason: if replaced && to.is_some() {
                Reason::LeaderReplaced
            } else {
                reason(obs.pods, members, from, to)
            },
        })
    }
}

fn reason(pods: &[&Pod], m: &Candidates<'_>, from: Option<&str>, to: Option<&str>) -> Reason {
    let Some(old) = from else {
        return Reason::Initial;
    };
    if to.is_none() {
        return Reason::NoCandidates;
    }
    match pods.iter().find(|p| p.name_any() == old) {
        None => Reason::LeaderDeleted,
        // A DELETE with grace period 0 (a force delete, or the kubelet finishing) shows first as an
        // update with a deletionTimestamp and a grace of 0, then as the deletion: it is a deletion.
        Some(p) if p.metadata.deletion_grace_period_seconds == Some(0) => Reason::LeaderDeleted,
        Some(p) if p.metadata.deletion_timestamp.is_some() => Reason::LeaderTerminating,
        Some(p) if !m.owns(&p.name_any()) => Reason::LeaderLeftGroup,
        Some(p) if !is_running_ready(p) => Reason::LeaderNotReady,
        Some(_) if m.lapsed.as_deref() == Some(old) => Reason::LeaderHeartbeatLost,
        Some(_) => Reason::Preferred,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_reason_is_listed_once_in_declaration_order() {
        for (i, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i, "{reason:?}");
        }
        let names: HashSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
        for r in Reason::ALL {
            assert_eq!(
                r.as_str(),
                format!("{r:?}"),
                "the API spells it as it is named"
            );
        }
    }
}
