//! The decisions that elect nobody: a Lease of the group's name it does not own, another operator
//! replica arbitrating the group, a selector that cannot be evaluated, a Lease epoch the operator
//! never wrote, or no token left to mint.

use jiff::SignedDuration;
use kube::ResourceExt;
use kube::core::Selector;

use super::marking::carries_leader_marks;
use super::records::Records;
use super::token::{Exhausted, ImplausibleEpoch, MAX_UNRECORDED_EPOCHS};
use super::{Decision, Observation, status};
use crate::crd::EPOCH_ANNOTATION;
use crate::marks;

/// The refusal that applies, if any, in this order.
pub(super) fn refusal(obs: &Observation<'_>, records: &Records) -> Option<Decision> {
    lease_not_owned(obs, records)
        .or_else(|| deferred(obs, records))
        .or_else(|| invalid_selector(obs, records))
        .or_else(|| implausible_epoch(obs, records))
}

/// A Lease of the group's name that the group does not own is never overwritten, unless an
/// earlier group of the name left it (the group takes it over, and its epoch with it).
fn lease_not_owned(obs: &Observation<'_>, records: &Records) -> Option<Decision> {
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
    let demote = obs
        .pods
        .iter()
        .filter(|p| marks::is_marked_for(p, &name) && carries_leader_marks(p))
        .map(|p| p.name_any())
        .collect();
    Some(Decision::LeaseNotOwned {
        status: status::refused(group, s, "LeaseNotOwned", &message, obs.now),
        demote,
    })
}

/// Another replica wrote the Lease and it is still fresh: that replica arbitrates the group,
/// unless it is known to have stopped on purpose (it released the operator Lease after its last
/// reconcile: a rollout of the operator must not stall the groups). Fresh is timed on this
/// replica's clock from its own sightings, never from the `renewTime` the other replica's clock
/// wrote: in Readiness mode that replica renews the Lease, so it counts as alive for a Lease
/// duration from the last renewal this replica saw; in Heartbeat mode the holder renews it whether
/// or not its arbiter lives, so from this replica's sighting of the arbiter's last write.
fn deferred(obs: &Observation<'_>, records: &Records) -> Option<Decision> {
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
    (until > obs.now).then(|| Decision::Deferred {
        arbiter: arbiter.clone(),
        until,
    })
}

/// The API server refuses an empty or malformed selector; this catches one that got past it.
fn invalid_selector(obs: &Observation<'_>, records: &Records) -> Option<Decision> {
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
    let status = refused_keeping_the_records(obs, records, "InvalidSelector", &message);
    Some(Decision::InvalidSelector { message, status })
}

/// The Lease's epoch jumped above every token the group recorded or handed out, further than the
/// operator ever writes it: not adopted (a forged `i64::MAX` would exhaust the range) and not
/// overwritten (if it was real, going back below it could repeat a token). The group holds: its
/// leader keeps its marks, nobody new is elected, and the condition says how to resolve it.
fn implausible_epoch(obs: &Observation<'_>, records: &Records) -> Option<Decision> {
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
    let status = refused_keeping_the_records(obs, records, "ImplausibleEpoch", &message);
    Some(Decision::ImplausibleEpoch { message, status })
}

/// The leader would change and the next epoch cannot be minted: the group keeps what it has
/// (its leader, if any, keeps its marks) and the condition says why and how to recover.
pub(super) fn tokens_exhausted(
    obs: &Observation<'_>,
    records: &Records,
    exhausted: Exhausted,
) -> Decision {
    let message = format!(
        "no new leader can be elected: the highest epoch issued is {}, the largest there is, \
         and a token is never handed out twice; serve the application under a LeaderGroup of \
         another name, whose epochs start anew, and reset the fences that accepted this one's",
        exhausted.highest
    );
    let status = refused_keeping_the_records(obs, records, "TokensExhausted", &message);
    Decision::TokensExhausted { message, status }
}

/// The status of a refusal that keeps the recorded leader and epoch: condition `LeaderElected`
/// False for `reason`, saying `message`.
fn refused_keeping_the_records(
    obs: &Observation<'_>,
    records: &Records,
    reason: &str,
    message: &str,
) -> crate::crd::LeaderGroupStatus {
    status::refused(obs.group, records.status.clone(), reason, message, obs.now)
}
