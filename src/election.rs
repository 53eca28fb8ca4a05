//! The election decision: from a group, the pods, groups, Services and slices of its namespace,
//! its Lease, this replica's memory of it and the time to a [`Plan`]: every write of one
//! reconcile, in protocol order. Pure: no client in reach, so every election rule
//! (docs/concepts.md, "How it elects") is tested here, and the model checker runs this very
//! function.

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
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
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
use crate::routing::Route;

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

/// Everything the decision looks at: what the API server (or its watch cache) shows, and what
/// this replica remembers of the group.
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
    /// The Services of its namespace labeled with a group: its leader's Service among them.
    pub services: &'a [&'a Service],
    /// The EndpointSlices of its namespace this operator writes.
    pub slices: &'a [&'a EndpointSlice],
    /// When this replica saw the Lease reach its current state, on its own clock (`None`: not
    /// tracked, taken as seen at `now`).
    pub lease_seen: Option<LeaseSeen>,
    /// This replica raised the group's barrier since it last turned active and abandoned no
    /// request in the group since: no earlier promotion can still land (the barrier, `election::writes`).
    pub barrier_up: bool,
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

/// The leader's marks to put on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promotion {
    /// The pod.
    pub pod: String,
    /// The UID of its incarnation as the decision saw it: leadership belongs to one incarnation.
    pub uid: Option<String>,
    /// Its fencing token.
    pub epoch: i64,
}

impl Promotion {
    /// Whether `lease` (read afresh before the promotion) names this incarnation holder at this
    /// epoch: a decision taken on a Lease cache older than the Lease hands out a token the Lease
    /// no longer holds, unless a commit in the same pass made it so.
    pub fn is_committed_in(&self, lease: Option<&Lease>) -> bool {
        lease
            .map(LeaseRecord::from_lease)
            .is_some_and(|record| self.is_recorded_in(&record))
    }

    /// Whether `pod` (read afresh before the promotion) is the incarnation decided on: a pod
    /// created again under the name since is another candidate, which a retried promotion
    /// would otherwise label at the old incarnation's epoch, refused by its own members.
    pub fn is_incarnation(&self, pod: &Pod) -> bool {
        pod.metadata.name.as_deref() == Some(self.pod.as_str()) && pod.metadata.uid == self.uid
    }

    /// Whether `record` names this incarnation holder at this epoch (a Lease that records no UID
    /// yet names whichever incarnation, as the members read it).
    fn is_recorded_in(&self, record: &LeaseRecord) -> bool {
        record.holder.as_deref() == Some(self.pod.as_str())
            && record
                .holder_uid
                .as_ref()
                .is_none_or(|uid| self.uid.as_ref() == Some(uid))
            && record.epoch == self.epoch
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

/// Another operator replica arbitrates the group and its Lease is still fresh: nothing is
/// written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferred {
    /// That replica.
    pub arbiter: String,
    /// When its Lease runs out and this replica may take over.
    pub until: Timestamp,
}

/// Why nobody new is elected: the status says so, and step 6 publishes a Warning Event when it
/// changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The reason: `LeaseNotOwned`, `InvalidSelector`, `ImplausibleEpoch` or `TokensExhausted`.
    pub reason: &'static str,
    /// What the condition says.
    pub message: String,
}

/// Every write of one reconcile, in the order of the transition protocol (docs/protocol.md),
/// and when to look again. A refusal and a deferral are plans too.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Another replica arbitrates the group: the plan writes nothing.
    pub deferred: Option<Deferred>,
    /// The group elects nobody new, and why.
    pub refused: Option<Refused>,
    /// 1. Commit: the Lease content to write with a resourceVersion precondition, if it differs
    ///    from what it holds (a change of holder, a renewal, a re-creation).
    pub commit: Option<LeaseRecord>,
    /// 2. Record: the status to write (the `Routing` condition included), if it differs from the
    ///    current one.
    pub status: Option<LeaderGroupStatus>,
    /// 3 to 5, and the tidying after 6: the pod writes.
    pub pods: PodWrites,
    /// 5 waits for the predecessor's step-down: the leader's route stays as it is, so that the
    ///    old leader's endpoint is replaced by the new one's in one write at the promotion.
    pub awaits_step_down: bool,
    /// 6. Tell: the change of leader, if any, for the Event and the metrics.
    pub transition: Option<Transition>,
    /// The leader's Service and EndpointSlice (None: left as they are).
    pub route: Option<Route>,
    /// When to look again even without a watch event (None: only on one).
    pub requeue_after: Option<Duration>,
}

impl Plan {
    /// A plan that writes nothing.
    fn nothing(requeue_after: Option<Duration>) -> Plan {
        Plan {
            deferred: None,
            refused: None,
            commit: None,
            status: None,
            pods: PodWrites::default(),
            awaits_step_down: false,
            transition: None,
            route: None,
            requeue_after,
        }
    }
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
/// which token, then the protocol's steps (commit, record, demote, bar and check, promote, tell,
/// tidy) and the route.
pub fn decide(obs: &Observation<'_>) -> Plan {
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
    let after = commit.as_ref().or(records.lease.as_ref());
    let chosen = status::Chosen {
        leader: &leader,
        epoch: token.epoch,
        transition: transition.as_ref(),
        lease: after,
    };
    let status = status::change(obs, &members, &records, &heartbeat, &chosen);
    let mut marking = Marking::plan(obs, &members, &records, &leader, token);
    let mut requeue_after = commit::requeue_after(obs, after, &heartbeat);
    // Step 5 waits for the predecessor's step-down: its member's write wakes the group through
    // the Lease watch, its lapse by this requeue.
    let mut awaits_step_down = false;
    if let Some(wait) = step_down::awaited(obs, records.lease.as_ref(), after, leader.as_deref())
        && marking.promote.is_some()
    {
        awaits_step_down = true;
        marking.promote = None;
        marking.barrier_candidates.clear();
        requeue_after = requeue_after.min(wait.max(Duration::from_millis(100)));
    }
    // A group taken back from another arbiter may hold its promotions in flight, whatever this
    // replica remembers from before.
    let arbiter = records.lease.as_ref().and_then(|l| l.arbiter.as_deref());
    let barrier_up = obs.barrier_up && arbiter == Some(obs.identity);
    let (route, status) = routed(obs, status);
    let mut pods = marking.writes(barrier_up);
    // A deposed pod barred by an annotation only (the cache shows another group's marks on it)
    // keeps whatever leader label the cache does not show: only a fresh list finds it.
    let marks_kept = pods
        .deposed
        .iter()
        .any(|b| !b.with_follower_marks && !b.clears_marks);
    if barrier_up
        && !marks_kept
        && let Some(promotion) = &pods.promote
        && commit.as_ref().is_some_and(|c| promotion.is_recorded_in(c))
    {
        pods.unchecked_version = obs
            .pods
            .iter()
            .find(|p| p.name_any() == promotion.pod)
            .and_then(|p| p.resource_version());
    }
    Plan {
        commit,
        status,
        pods,
        awaits_step_down,
        transition,
        route: Some(route),
        requeue_after: Some(requeue_after),
        ..Plan::nothing(None)
    }
}

/// The route to the leader `status` leaves (the group's current status when None), and the
/// status to write with its `Routing` condition (None: unchanged).
fn routed(
    obs: &Observation<'_>,
    status: Option<LeaderGroupStatus>,
) -> (Route, Option<LeaderGroupStatus>) {
    let current = obs.group.status.clone().unwrap_or_default();
    let next = status.as_ref().unwrap_or(&current);
    let route = Route::new(obs.group, next, obs.pods, obs.services, obs.slices);
    let with_condition = route.status(next, obs.group.metadata.generation, obs.now);
    (route, with_condition.or(status))
}

#[cfg(test)]
mod tests;
