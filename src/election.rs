//! The election decision: from a group, the pods and groups of its namespace, its Lease and the
//! time to a [`Plan`] of steps. Pure: no client in reach, so every election rule
//! (docs/concepts.md, "How it elects") is tested here.

mod candidates;
mod commit;
mod eligibility;
mod heartbeat;
mod history;
mod lapse;
mod leader;
mod marking;
mod records;
mod refusal;
mod status;
mod step_down;
mod token;
mod transition;
mod writes;

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use self::candidates::Candidates;
use self::heartbeat::Heartbeat;
use self::lapse::Lapse;
use self::marking::Marking;
use self::records::Records;
use self::refusal::refusal;
pub use self::status::{api_accepted, api_refused, set_condition};
use self::token::Token;
pub use self::transition::{Reason, Transition};
pub use self::writes::{Barrier, PodWrites};
use crate::crd::{LeaderGroup, LeaderGroupStatus};
use crate::lease_record::LeaseRecord;
use crate::lease_sightings::LeaseSeen;
use crate::marks::is_marked_for;

/// Type of the condition that says whether the group is healthy: a pod leads and the API server
/// accepts the operator's requests for it (what `kubectl wait --for=condition=Ready` reads).
pub const READY: &str = "Ready";
/// Type of the condition that says whether a pod leads.
pub const LEADER_ELECTED: &str = "LeaderElected";
/// Type of the condition that says whether the leader renews the Lease (Heartbeat mode).
pub const HEARTBEAT: &str = "Heartbeat";
/// Type of the condition that says some selected pods belong to an older group.
pub const OVERLAPPING: &str = "Overlapping";
/// Type of the condition that says, in Readiness mode, that a leader cut off from the API server
/// may still believe it leads after its successor is chosen: two thirds of the Lease (how long
/// its last confirmation holds) are not shorter than the node controller's grace period (how long
/// its node takes to turn NotReady). Present (True) only then.
pub const LATE_STEP_DOWN: &str = "LateStepDown";
/// Type of the condition that says the API server refuses the operator's requests for the group
/// for good (False, with the refusal), until a reconcile succeeds again (then it is removed).
pub const RECONCILED: &str = "Reconciled";

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
    /// When this replica saw the Lease reach its current state, on its own clock (`None`: not
    /// tracked, taken as seen at `now`).
    pub lease_seen: Option<LeaseSeen>,
    /// Operator replicas known to have stopped on purpose: the groups they arbitrate are taken
    /// over without waiting their Leases out.
    pub retired: &'a BTreeSet<String>,
    /// This operator replica's identity.
    pub identity: &'a str,
    /// The node controller's grace period (its `--node-monitor-grace-period`): how long a node
    /// cut off from the API server takes to turn NotReady, and its pods with it.
    pub node_grace: Duration,
    /// The time of the decision.
    pub now: Timestamp,
}

impl Observation<'_> {
    /// When this replica saw the Lease reach its current state; untracked, as if just now (which
    /// only ever waits longer).
    fn seen(&self) -> LeaseSeen {
        self.lease_seen.unwrap_or(LeaseSeen {
            written_at: self.now,
            renewed_at: None,
            not_before: None,
        })
    }
}

/// What the decision concluded.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// A Lease of the group's name exists that this group does not own: nothing is written to it.
    LeaseNotOwned {
        /// The status to record (condition False, reason LeaseNotOwned).
        status: LeaderGroupStatus,
        /// The group's pods that still carry a leader's marks: the status says nobody leads, so
        /// no Service may route to them.
        demote: Vec<String>,
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
    /// The Lease's epoch is further above the recorded tokens than the operator ever writes it:
    /// nobody new is elected, nothing is written but the status, until it is resolved.
    ImplausibleEpoch {
        /// What the condition says: the Lease field, both values, and the ways out.
        message: String,
        /// The status to record.
        status: LeaderGroupStatus,
    },
    /// The leader would change, and no token can be minted for the next one: nobody new is
    /// elected, nothing is written but the status.
    TokensExhausted {
        /// What the condition says.
        message: String,
        /// The status to record.
        status: LeaderGroupStatus,
    },
    /// The steps to take, in protocol order.
    Act(Box<Plan>),
}

/// The leader's marks to put on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promotion {
    /// The pod.
    pub pod: String,
    /// Its fencing token.
    pub epoch: i64,
}

impl Promotion {
    /// Whether `lease` (read afresh before the promotion) names this pod holder at this epoch: a
    /// decision taken on a Lease cache older than the Lease hands out a token the Lease no
    /// longer holds, unless a commit in the same pass made it so.
    pub fn is_committed_in(&self, lease: Option<&Lease>) -> bool {
        lease.map(LeaseRecord::from_lease).is_some_and(|record| {
            record.holder.as_deref() == Some(self.pod.as_str()) && record.epoch == self.epoch
        })
    }
}

/// A pod by name, with the resourceVersion it was seen at: a write conditional on it lands only
/// if the pod is unchanged since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodVersion {
    /// The pod's name.
    pub name: String,
    /// Its resourceVersion when it was seen.
    pub resource_version: String,
}

/// A pod that the records (the status or the Lease) name as leader, and that this decision moves
/// leadership away from: a promotion of it may still be in flight, whatever the selector now
/// selects, whatever the process remembers and whether its pod cache shows it or not, so it is
/// barred with a write that always changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deposed {
    /// The pod.
    pub pod: String,
    /// The group still holds it: the barrier also gives it the follower marks.
    pub member: bool,
    /// The epoch the group has after this decision: the barrier's value.
    pub epoch: i64,
    /// It carries another group's marks, which are never written.
    pub foreign: bool,
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
    /// 3. Release: old leaders the group no longer holds (they left the selector, or an older
    ///    group took them) that still carry its marks, with the resourceVersion they were seen
    ///    at: they lose all of its marks, only if unchanged since.
    pub release: Vec<PodVersion>,
    /// 4 and 5. Check (a fresh list, not the cache) and promote: the leader's marks, if the
    ///    leader pod does not already carry them.
    pub promote: Option<Promotion>,
    /// 6. Tell: the change of leader, if any, for the Event and the metrics.
    pub transition: Option<Transition>,
    /// 4. Barrier, when an earlier promotion in the group may still be in flight: the pods it
    ///    could have been for (all but the leader), written once so that it cannot land
    ///    ([`Plan::writes`] decides whether it is needed).
    pub barrier_candidates: Vec<String>,
    /// 3. The named leaders this decision moves away from, barred in any case.
    pub deposed: Vec<Deposed>,
    /// Candidates to mark follower (label and group annotation), off the critical path.
    pub mark_followers: Vec<String>,
    /// Pods that carry this group's marks but are no longer its candidates, with the
    /// resourceVersion they were seen at (their marks are removed only if unchanged since).
    pub unmark: Vec<PodVersion>,
    /// When to look again even without a watch event (the next renewal).
    pub requeue_after: Duration,
    /// 5 waits for the predecessor's step-down: the leader's route stays as it is, so that the
    /// old leader's endpoint is replaced by the new one's in one write at the promotion.
    pub awaits_step_down: bool,
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

/// The UID of the pod called `name`, if it is among `pods` and has one.
fn pod_uid(pods: &[&Pod], name: &str) -> Option<String> {
    pods.iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .and_then(|p| p.metadata.uid.clone())
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

/// Decides what to do for `obs.group`, in this order: the refusals, who leads, with
/// which token, then the protocol's steps (commit, record, demote, promote, tell).
pub fn decide(obs: &Observation<'_>) -> Decision {
    let records = Records::read(obs);
    if let Some(refusal) = refusal(obs, &records) {
        return refusal;
    }
    let heartbeat = Heartbeat::judge(obs, &records);
    let lapse = Lapse::judge(obs, &records, &heartbeat);
    let members = Candidates::of(obs, lapse.pod.as_deref());
    let leader = leader::choose(&obs.group.spec, &members, records.incumbent())
        .or_else(|| lapse.kept_holder(obs, &members, &records));
    let token = match Token::for_leader(leader.as_deref(), obs.group.spec.paused, &records.issued())
    {
        Ok(token) => token,
        Err(exhausted) => return refusal::tokens_exhausted(obs, &records, exhausted),
    };
    let commit = commit::commit(
        obs,
        &records,
        &leader,
        token,
        heartbeat.lapsed(),
        lapse.record.as_ref(),
    );
    let transition = Transition::between(obs, &members, &records, &leader, token);
    let chosen = status::Chosen {
        leader: &leader,
        epoch: token.epoch,
        transition: transition.as_ref(),
        lease: commit.as_ref().or(records.lease.as_ref()),
    };
    let status = status::change(obs, &members, &records, &heartbeat, &chosen);
    let Marking {
        demote,
        release,
        mut promote,
        mark_followers,
        unmark,
        mut barrier_candidates,
        deposed,
    } = Marking::plan(obs, &members, &records, &leader, token);
    let mut requeue_after =
        commit::requeue_after(obs, commit.as_ref().or(records.lease.as_ref()), &heartbeat);
    // Step 5 waits for the predecessor's step-down: its member's write wakes the group through
    // the Lease watch, its lapse by this requeue.
    let after = commit.as_ref().or(records.lease.as_ref());
    let mut awaits_step_down = false;
    if let Some(wait) = step_down::awaited(obs, records.lease.as_ref(), after, leader.as_deref())
        && promote.is_some()
    {
        awaits_step_down = true;
        promote = None;
        barrier_candidates.clear();
        requeue_after = requeue_after.min(wait.max(Duration::from_millis(100)));
    }
    Decision::Act(Box::new(Plan {
        commit,
        status,
        demote,
        release,
        promote,
        transition,
        barrier_candidates,
        deposed,
        mark_followers,
        unmark,
        requeue_after,
        awaits_step_down,
    }))
}

#[cfg(test)]
mod tests;
