//! Step 1 of the protocol, commit: the Lease content to write, and when to look again to renew it.

use std::time::Duration;

use super::Observation;
use super::records::Records;
use super::token::Token;
use crate::lease_record::{LeaseRecord, renew_interval};

/// The Lease content to write, unless the Lease already says it and needs no renewal yet.
pub(super) fn commit(
    obs: &Observation<'_>,
    records: &Records,
    leader: &Option<String>,
    token: Token,
) -> Option<LeaseRecord> {
    let lease = records.lease.as_ref();
    let duration = obs.group.spec.lease_duration_seconds;
    let same_holder = lease.is_some_and(|l| &l.holder == leader && l.epoch == token.epoch);
    let acquire_time = match lease {
        Some(l) if same_holder && !token.minted => l.acquire_time,
        _ => leader.as_ref().map(|_| obs.now),
    };
    let wanted = LeaseRecord {
        holder: leader.clone(),
        epoch: token.epoch,
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
pub(super) fn requeue_after(obs: &Observation<'_>, lease: Option<&LeaseRecord>) -> Duration {
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
