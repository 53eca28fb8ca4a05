//! What the durable records say about the group's leader: its status, its Lease (the source of
//! truth), and the highest token any of its pods carries.

use kube::ResourceExt;

use super::Observation;
use super::token::Issued;
use crate::crd::LeaderGroupStatus;
use crate::lease_record::LeaseRecord;
use crate::marks;

/// The records, as read for one decision.
pub(super) struct Records {
    /// The group's status (empty before the first record).
    pub status: LeaderGroupStatus,
    /// The group's Lease, if it exists.
    pub lease: Option<LeaseRecord>,
    /// The highest token a pod marked for the group carries, 0 when none does.
    pub highest_pod_epoch: i64,
}

impl Records {
    pub fn read(obs: &Observation<'_>) -> Self {
        let group = obs.group.name_any();
        Records {
            status: obs.group.status.clone().unwrap_or_default(),
            lease: obs.lease.map(LeaseRecord::from_lease),
            highest_pod_epoch: obs
                .pods
                .iter()
                .filter(|p| marks::is_marked_for(p, &group))
                .filter_map(|p| marks::epoch(p))
                .max()
                .unwrap_or(0),
        }
    }

    /// The leader the status records.
    pub fn status_leader(&self) -> Option<&str> {
        self.status.leader.as_deref()
    }

    /// The leader the Lease commits.
    pub fn lease_holder(&self) -> Option<&str> {
        self.lease.as_ref().and_then(|l| l.holder.as_deref())
    }

    /// Who leads now: the Lease's holder, or without a Lease (deleted by hand, or not yet
    /// created) the status's leader.
    pub fn incumbent(&self) -> Option<&str> {
        match &self.lease {
            Some(_) => self.lease_holder(),
            None => self.status_leader(),
        }
    }

    /// The tokens handed out so far, for [`super::token::Token::for_leader`].
    pub fn issued(&self) -> Issued<'_> {
        Issued {
            status_leader: self.status_leader(),
            status_epoch: self.status.epoch,
            lease_holder: self.lease_holder(),
            lease_epoch: self.lease.as_ref().map_or(0, |l| l.epoch),
            highest_pod_epoch: self.highest_pod_epoch,
        }
    }
}
