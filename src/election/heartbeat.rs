//! Heartbeat liveness (`spec.liveness: Heartbeat`): whether the leader still renews its Lease,
//! judged from when this replica saw the renewals arrive (never from the `renewTime` another
//! machine wrote).

use jiff::{SignedDuration, Timestamp};

use super::Observation;
use super::records::Records;
use crate::crd::Liveness;

/// What the leader's renewals say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Heartbeat {
    /// Readiness mode, the Lease does not yet ask its holder to renew, or nobody holds it.
    NotJudged,
    /// The holder has not been seen renewing since it acquired the Lease; `overdue` once a whole
    /// Lease duration has passed that way. It is reported, never deposed for it: a pod without
    /// the agent would otherwise lose leadership, and the next one too, for ever.
    Awaiting {
        holder: String,
        overdue: bool,
        due: Timestamp,
    },
    /// The holder renews; `lapsed` once no renewal has been seen for a Lease duration: it may no
    /// longer lead (it stopped acting a third of a duration ago).
    Renewing {
        holder: String,
        lapsed: bool,
        deadline: Timestamp,
    },
}

impl Heartbeat {
    /// Judges the Lease's holder as of `obs.now`.
    pub fn judge(obs: &Observation<'_>, records: &Records) -> Heartbeat {
        let Some(lease) = records.lease.as_ref() else {
            return Heartbeat::NotJudged;
        };
        let Some(holder) = lease.holder.clone() else {
            return Heartbeat::NotJudged;
        };
        if obs.group.spec.liveness != Liveness::Heartbeat || !lease.heartbeat {
            return Heartbeat::NotJudged;
        }
        let seen = obs.seen();
        let duration = SignedDuration::from_secs(i64::from(lease.duration_seconds.max(1)));
        // A rewrite of this holder's Lease (see `LeaseSeen::not_before`) never brings its
        // deadline forward.
        let after = |t: Timestamp| {
            let deadline = t.checked_add(duration).unwrap_or(Timestamp::MAX);
            seen.not_before.map_or(deadline, |n| n.max(deadline))
        };
        match seen.renewed_at {
            Some(renewed) => {
                let deadline = after(renewed);
                Heartbeat::Renewing {
                    holder,
                    lapsed: obs.now >= deadline,
                    deadline,
                }
            }
            None => {
                let due = after(seen.written_at);
                Heartbeat::Awaiting {
                    holder,
                    overdue: obs.now >= due,
                    due,
                }
            }
        }
    }

    /// The holder whose renewals stopped, if any: it is no longer eligible.
    pub fn lapsed(&self) -> Option<&str> {
        match self {
            Heartbeat::Renewing {
                holder,
                lapsed: true,
                ..
            } => Some(holder),
            _ => None,
        }
    }

    /// The next instant after `now` at which the verdict changes, if any.
    pub fn next_change(&self, now: Timestamp) -> Option<Timestamp> {
        let at = match self {
            Heartbeat::NotJudged => return None,
            Heartbeat::Awaiting { due, .. } => *due,
            Heartbeat::Renewing { deadline, .. } => *deadline,
        };
        (at > now).then_some(at)
    }
}
