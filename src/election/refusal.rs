//! The decisions that elect nobody: a Lease of the group's name it does not own, another operator
//! replica arbitrating the group, a selector that cannot be evaluated, a Lease epoch the operator
//! never wrote, or no token left to mint.

use std::time::Duration;

use jiff::SignedDuration;
use kube::ResourceExt;
use kube::core::Selector;

use super::marking::carries_leader_marks;
use super::records::Records;
use super::token::{Exhausted, ImplausibleEpoch, MAX_UNRECORDED_EPOCHS};
use super::{Deferred, Observation, Plan, Refused, status};
use crate::crd::{EPOCH_ANNOTATION, LeaderGroupStatus};
use crate::marks;

/// The refusal that applies, if any, in this order.
pub(super) fn refusal(obs: &Observation<'_>, records: &Records) -> Option<Plan> {
    lease_not_owned(obs, records)
        .or_else(|| deferred(obs, records))
        .or_else(|| invalid_selector(obs, records))
        .or_else(|| implausible_epoch(obs, records))
}

/// A Lease of the group's name that the group does not own is never overwritten, unless an
/// earlier group of the name left it (the group takes it over, and its epoch with it).
fn lease_not_owned(obs: &Observation<'_>, records: &Records) -> Option<Plan> {
    let group = obs.group;
    if obs
        .lease
        .is_none_or(|lease| group.owns_lease(lease) || group.inherits_lease(lease))
    {
        return None;
    }
    let message = format!(
        "Lease {} exists and is not owned by this LeaderGroup; it is never overwritten",
        group.lease_name()
    );
    let mut s = records.status.clone();
    s.leader = None;
    s.succession.clear();
    let name = group.name_any();
    // Nobody leads: no Service may route to the pods that still carry a leader's marks.
    let demote = obs
        .pods
        .iter()
        .filter(|p| marks::is_marked_for(p, &name) && carries_leader_marks(p))
        .map(|p| p.name_any())
        .collect();
    let status = status::refused(group, s, "LeaseNotOwned", &message, obs.now);
    let (route, status) = super::routed(obs, Some(status));
    let mut plan = refused(obs, status, "LeaseNotOwned", message);
    plan.pods.demote = demote;
    plan.route = Some(route);
    // The Lease watch only sees Leases labeled with a group, so the foreign Lease going away
    // produces no event: look again, once per Lease duration.
    plan.requeue_after = Some(Duration::from_secs(u64::from(
        group.spec.lease_duration_seconds.unsigned_abs(),
    )));
    Some(plan)
}

/// Another replica wrote the Lease and it is still fresh: that replica arbitrates the group,
/// unless it is known to have stopped on purpose (it released the operator Lease after its last
/// reconcile: a rollout of the operator must not stall the groups). Fresh is timed on this
/// replica's clock from its own sightings, never from the `renewTime` the other replica's clock
/// wrote: in Readiness mode that replica renews the Lease, so it counts as alive for a Lease
/// duration from the last renewal this replica saw; in Heartbeat mode the holder renews it whether
/// or not its arbiter lives, so from this replica's sighting of the arbiter's last write.
fn deferred(obs: &Observation<'_>, records: &Records) -> Option<Plan> {
    let lease = records.lease.as_ref()?;
    let arbiter = lease.arbiter.as_ref()?;
    if arbiter == obs.identity || obs.retired.contains(arbiter) {
        return None;
    }
    let seen = obs.seen();
    let last_sign_of_life = if lease.heartbeat {
        seen.written_at
    } else {
        seen.renewed_at.unwrap_or(seen.written_at)
    };
    let until = last_sign_of_life
        .checked_add(SignedDuration::from_secs(i64::from(lease.duration_seconds)))
        .ok()?;
    if until <= obs.now {
        return None;
    }
    let wait = super::commit::until(obs.now, until) + Duration::from_millis(100);
    Some(Plan {
        deferred: Some(Deferred {
            arbiter: arbiter.clone(),
            until,
        }),
        ..Plan::nothing(Some(wait))
    })
}

/// The API server refuses an empty or malformed selector; this catches one that got past it.
fn invalid_selector(obs: &Observation<'_>, records: &Records) -> Option<Plan> {
    let selector = &obs.group.spec.selector;
    // Validated through kube's parser once; matching then uses the allocation-free
    // PodSelector::matches.
    let problem = if selector.is_empty() {
        "the selector is empty".to_string()
    } else {
        Selector::try_from(selector.to_label_selector())
            .err()?
            .to_string()
    };
    let message = format!("spec.selector is invalid: {problem}");
    Some(refused_keeping_the_records(
        obs,
        records,
        "InvalidSelector",
        message,
    ))
}

/// The Lease's epoch jumped above every token the group recorded or handed out, further than the
/// operator ever writes it: not adopted (a forged `i64::MAX` would exhaust the range) and not
/// overwritten (if it was real, going back below it could repeat a token). The group holds: its
/// leader keeps its marks, nobody new is elected, and the condition says how to resolve it.
fn implausible_epoch(obs: &Observation<'_>, records: &Records) -> Option<Plan> {
    let ImplausibleEpoch { lease, floor } = records.issued().implausible_lease_epoch()?;
    let group = obs.group.name_any();
    let message = format!(
        "Lease {} metadata.annotations[{EPOCH_ANNOTATION}] is {lease}, but the highest token \
         this group recorded or handed out is {floor}: more than {MAX_UNRECORDED_EPOCHS} above, \
         which the operator never writes, so it is not adopted and nobody new is elected. If it \
         was forged, delete the Lease (the operator writes it again from the status, at {floor}); \
         if tokens up to {lease} were handed out, record it: kubectl patch leadergroup {group} \
         --subresource=status --type=merge -p '{{\"status\":{{\"epoch\":{lease}}}}}'",
        obs.group.lease_name()
    );
    Some(refused_keeping_the_records(
        obs,
        records,
        "ImplausibleEpoch",
        message,
    ))
}

/// The leader would change and the next epoch cannot be minted: the group keeps what it has
/// (its leader, if any, keeps its marks) and the condition says why and how to recover.
pub(super) fn tokens_exhausted(
    obs: &Observation<'_>,
    records: &Records,
    exhausted: Exhausted,
) -> Plan {
    let message = format!(
        "no new leader can be elected: the highest epoch issued is {}, the largest there is, \
         and a token is never handed out twice; serve the application under a LeaderGroup of \
         another name, whose epochs start anew, and reset the fences that accepted this one's",
        exhausted.highest
    );
    refused_keeping_the_records(obs, records, "TokensExhausted", message)
}

/// A refusal that keeps the recorded leader and epoch: condition `LeaderElected` False for
/// `reason`, saying `message`; looked at again on a change only.
fn refused_keeping_the_records(
    obs: &Observation<'_>,
    records: &Records,
    reason: &'static str,
    message: String,
) -> Plan {
    let status = status::refused(obs.group, records.status.clone(), reason, &message, obs.now);
    refused(obs, Some(status), reason, message)
}

/// The plan of a refusal for `reason`: the status (None: unchanged) and nothing else.
fn refused(
    obs: &Observation<'_>,
    status: Option<LeaderGroupStatus>,
    reason: &'static str,
    message: String,
) -> Plan {
    Plan {
        refused: Some(Refused { reason, message }),
        status: status.filter(|s| obs.group.status.as_ref() != Some(s)),
        ..Plan::nothing(None)
    }
}
