//! Step 1 of the protocol, commit: the Lease content to write, and when to look again to renew it.

use std::time::Duration;

use jiff::Timestamp;

use super::Observation;
use super::heartbeat::Heartbeat;
use super::records::Records;
use super::token::Token;
use crate::crd::Liveness;
use crate::lease_record::{Lapsed, LeaseRecord, renew_interval};

/// The Lease content to write, unless the Lease already says it and needs no renewal yet. In
/// Heartbeat mode the operator never renews: it writes `renewTime` only with `acquireTime` (a new
/// holder, or the switch to Heartbeat), so that any other `renewTime` is the holder's. `lapsed`:
/// the holder whose heartbeat lapsed now; `lapse_record`: the lapsed incarnation the Lease is to
/// remember ([`super::lapse::Lapse`]).
pub(super) fn commit(
    obs: &Observation<'_>,
    records: &Records,
    leader: &Option<String>,
    token: Token,
    lapsed: Option<&str>,
    lapse_record: Option<&Lapsed>,
) -> Option<LeaseRecord> {
    let lease = records.lease.as_ref();
    let duration = obs.group.spec.lease_duration_seconds;
    let heartbeat = obs.group.spec.liveness == Liveness::Heartbeat;
    let holder_uid = leader.as_deref().and_then(|l| super::pod_uid(obs.pods, l));
    let same_holder = lease.is_some_and(|l| &l.holder == leader && l.epoch == token.epoch);
    let acquired_now = leader.as_ref().map(|_| obs.now);
    let (acquire_time, renew_time) = match lease {
        Some(l) if same_holder && !token.minted && heartbeat && l.heartbeat => {
            (l.acquire_time, l.renew_time)
        }
        // Switching to Heartbeat restarts the holder's clock: no renewal of the operator's may
        // pass for one of the holder's.
        Some(_) if heartbeat => (acquired_now, Some(obs.now)),
        Some(l) if same_holder && !token.minted => (l.acquire_time, Some(obs.now)),
        _ => (acquired_now, Some(obs.now)),
    };
    let predecessor =
        super::step_down::predecessor(obs, lease, leader.as_deref(), token.minted, lapsed);
    // A Lease that records no UID yet (written before UIDs were) names the same incarnation.
    let same_tenure = same_holder
        && !token.minted
        && lease.is_some_and(|l| l.holder_uid.is_none() || l.holder_uid == holder_uid);
    // A shortened Lease keeps the longest duration of the tenure: its holder's member may time
    // itself by that one until it is deposed.
    let longest_seconds = lease
        .filter(|_| same_tenure)
        .map(LeaseRecord::longest_seen)
        .filter(|&longest| longest > duration);
    let acknowledged = same_holder && !token.minted && lease.is_some_and(|l| l.acknowledged);
    let wanted = LeaseRecord {
        holder: leader.clone(),
        holder_uid: holder_uid.clone(),
        epoch: token.epoch,
        duration_seconds: duration,
        longest_seconds,
        acquire_time,
        renew_time,
        arbiter: Some(obs.identity.to_string()),
        heartbeat,
        released_by: None,
        // The member's word holds for this tenure only.
        acknowledged,
        acknowledged_by: lease
            .filter(|_| acknowledged)
            .map(|l| l.acknowledged_by.clone())
            .unwrap_or_default(),
        predecessor,
        lapsed: lapse_record.cloned(),
    };
    match lease {
        Some(l)
            if same_holder
                && l.holder_uid == holder_uid
                && l.duration_seconds == duration
                && l.longest_seconds.filter(|&x| x > duration) == longest_seconds
                && l.arbiter.as_deref() == Some(obs.identity)
                && l.heartbeat == heartbeat
                && l.predecessor == wanted.predecessor
                && l.lapsed.as_ref() == lapse_record
                && (heartbeat || l.renew_due_at().is_some_and(|due| due > obs.now)) =>
        {
            None
        }
        _ => Some(wanted),
    }
}

/// Time until the decision should be taken again without a watch event: the next renewal, or in
/// Heartbeat mode the instant the holder's renewals are due.
pub(super) fn requeue_after(
    obs: &Observation<'_>,
    lease: Option<&LeaseRecord>,
    heartbeat: &Heartbeat,
) -> Duration {
    let fallback = renew_interval(obs.group.spec.lease_duration_seconds.max(1));
    let next = match obs.group.spec.liveness {
        Liveness::Heartbeat => heartbeat.next_change(obs.now),
        Liveness::Readiness => lease.and_then(|l| l.renew_due_at()),
    };
    next.map(|at| until(obs.now, at))
        .unwrap_or(fallback)
        .max(Duration::from_millis(100))
}

/// The time from `now` to `at`, none when `at` is past.
pub(super) fn until(now: Timestamp, at: Timestamp) -> Duration {
    let ms = at.duration_since(now).as_millis().max(0);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
