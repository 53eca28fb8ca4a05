//! The operator replica in Heartbeat mode: it reads the Lease, notes it in its own
//! [`Sighting`] on its own clock, decides with the operator's own `election::decide`, and applies
//! the plan: the Lease (a rewrite for a new duration, or a new holder at the next epoch), the
//! status and the pods' marks. It reads the API server's current state and its writes land at
//! once: one replica, no requests in flight (the Readiness model explores those); what this
//! model explores is time.

use std::collections::BTreeSet;

use leadergroup_operator::election::{self, Observation};
use leadergroup_operator::lease_record::{LeaseRecord, UNKNOWN_PREDECESSOR};
use leadergroup_operator::lease_sightings::Sighting;

use super::clock;
use super::objects::{self, ARBITER};
use super::state::{
    HbLease, HbPredecessor, HbState, INTRUDER, MemberName, UNKNOWN_POD, parse_member,
};
use crate::api::PodId;
use crate::error::ModelError;
use crate::objects::pod_id;

/// Observes, decides and applies the plan. `Ok(false)`: nothing changed (not even the sighting).
pub fn reconcile(state: &mut HbState) -> Result<bool, ModelError> {
    let now = clock::operator(state.now);
    let lease = (!state.lease.deleted).then(|| objects::lease(&state.lease));
    let record = lease.as_ref().map(LeaseRecord::from_lease);
    let before = state.sighting.clone();
    // As `LeaseSightings::observe`: no Lease, no sighting.
    let sighting = record.as_ref().map(|record| match state.sighting.take() {
        Some(mut s) => {
            s.update(record, now.monotonic);
            s
        }
        None => Sighting::first(record, now.monotonic),
    });
    let seen = sighting.as_ref().map(|s| s.seen(&now));
    state.sighting = sighting;
    let group = objects::group(state)?;
    let pods: Vec<_> = (0..state.marks.len())
        .filter_map(|p| PodId::try_from(p).ok())
        .map(|p| objects::pod(state, p))
        .collect();
    let concerned: Vec<_> = pods.iter().collect();
    let groups = vec![&group];
    let retired = BTreeSet::new();
    let plan = election::decide(&Observation {
        group: &group,
        groups: &groups,
        pods: &concerned,
        lease: lease.as_ref(),
        services: &[],
        slices: &[],
        lease_seen: seen,
        // One replica that never loses a request: its barrier stays up once raised, and the
        // Heartbeat model does not explore late promotions (the Readiness model does).
        barrier_up: true,
        retired: &retired,
        identity: ARBITER,
        now: now.wall,
        node_grace: crate::objects::NODE_GRACE,
    });
    if plan.deferred.is_some() {
        return Err(ModelError::UnexpectedDecision("Deferred"));
    }
    if let Some(refused) = &plan.refused {
        return Err(ModelError::UnexpectedDecision(refused.reason));
    }
    let mut changed = state.sighting != before;
    if let Some(commit) = &plan.commit {
        let next = committed(state, record.as_ref(), commit)?;
        // Its own watch shows the write at the next reconcile's observation.
        changed |= next != state.lease;
        state.lease = next;
    }
    if let Some(status) = &plan.status
        && let Some(leader) = status.leader.as_deref()
    {
        let recorded = (pod_id(leader)?, status.epoch);
        let longest = status
            .longest_lease_seconds
            .and_then(|s| u8::try_from(s).ok());
        changed |= state.status != recorded || state.status_longest != longest;
        state.status = recorded;
        state.status_longest = longest;
    }
    for name in plan
        .pods
        .demote
        .iter()
        .chain(plan.pods.deposed.iter().map(|d| &d.pod))
        .chain(plan.pods.release.iter().map(|r| &r.name))
        .chain(
            plan.pods
                .barriers
                .iter()
                .filter(|b| b.with_follower_marks)
                .map(|b| &b.pod),
        )
        // A foreign writer's holder is no pod: the real write finds none (404) and changes nothing.
        .filter(|name| *name != INTRUDER)
    {
        if let Some(m) = state.marks.get_mut(usize::from(pod_id(name)?)) {
            changed |= m.is_some();
            *m = None;
        }
    }
    if let Some(promotion) = &plan.pods.promote
        && let Some(m) = state.marks.get_mut(usize::from(pod_id(&promotion.pod)?))
    {
        changed |= *m != Some(promotion.epoch);
        *m = Some(promotion.epoch);
    }
    Ok(changed)
}

/// The Lease after the commit of `record` over the Lease read as `was`: the same tenure keeps
/// its times, as the operator writes them; a new holder or epoch is acquired now.
fn committed(
    state: &HbState,
    was: Option<&LeaseRecord>,
    record: &LeaseRecord,
) -> Result<HbLease, ModelError> {
    let holder = pod_id(record.holder.as_deref().unwrap_or_default())?;
    let duration = u8::try_from(record.duration_seconds)
        .map_err(|_| ModelError::UnexpectedDecision("a Lease duration out of range"))?;
    let kept = was.is_some_and(|was| {
        record.acquire_time == was.acquire_time && record.renew_time == was.renew_time
    });
    let acquired_now = record.acquire_time == Some(clock::operator_wall(state.now))
        && record.renew_time == record.acquire_time;
    // In Readiness mode the operator renews the Lease itself: the same tenure, `renewTime` now.
    let renewed_now = !record.heartbeat
        && was.is_some_and(|was| record.acquire_time == was.acquire_time)
        && record.renew_time == Some(clock::operator_wall(state.now));
    let current = &state.lease;
    let (acquired, renewed, also_renewed, operator_renewed) = if kept {
        (
            current.acquired,
            current.renewed,
            current.also_renewed,
            current.operator_renewed,
        )
    } else if acquired_now {
        (state.now, None, None, None)
    } else if renewed_now {
        (
            current.acquired,
            current.renewed,
            current.also_renewed,
            Some(state.now),
        )
    } else {
        return Err(ModelError::UnexpectedDecision(
            "Lease times the model cannot map",
        ));
    };
    let longest = record
        .longest_seconds
        .map(u8::try_from)
        .transpose()
        .map_err(|_| ModelError::UnexpectedDecision("a Lease duration out of range"))?;
    let predecessor = match &record.predecessor {
        Some(p) => {
            let names = |names: &[String]| -> Result<Vec<MemberName>, ModelError> {
                let mut members = names
                    .iter()
                    .map(|n| parse_member(n))
                    .collect::<Result<Vec<_>, _>>()?;
                members.sort_unstable();
                Ok(members)
            };
            Some(
                HbPredecessor {
                    pod: if p.pod == UNKNOWN_PREDECESSOR {
                        UNKNOWN_POD
                    } else {
                        pod_id(&p.pod)?
                    },
                    epoch: i64::from(p.epoch),
                    duration: u8::try_from(p.lease_seconds).map_err(|_| {
                        ModelError::UnexpectedDecision("a Lease duration out of range")
                    })?,
                    members: names(&p.members)?,
                    stepped_down_by: names(&p.stepped_down_by)?,
                    stepped_down: p.stepped_down,
                }
                .normalized(),
            )
        }
        None => None,
    };
    Ok(HbLease {
        holder,
        epoch: record.epoch,
        duration,
        longest,
        acquired,
        renewed,
        also_renewed,
        rv: if kept
            && !current.forged
            && !current.deleted
            && holder == current.holder
            && record.epoch == current.epoch
            && duration == current.duration
            && longest == current.longest
            && predecessor == current.predecessor
            && record.heartbeat == current.heartbeat
        {
            current.rv
        } else {
            state.next_rv()
        },
        predecessor,
        forged: false,
        deleted: false,
        heartbeat: record.heartbeat,
        operator_renewed,
    })
}
