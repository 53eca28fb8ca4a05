//! What the durable records say about the group's leader: its status, its Lease (the source of
//! truth), and the highest token any of its pods carries.

use std::collections::BTreeSet;

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
    /// Each pod marked for the group with the token it carries.
    pub pod_epochs: Vec<(String, i64)>,
    /// The epoch of a Lease an earlier group of this name left ([`crate::crd::LeaderGroup::inherits_lease`]),
    /// 0 otherwise: that group handed out every token up to it.
    pub inherited_epoch: i64,
    /// Leaders the status or the Lease names whose pod exists under another UID than the one
    /// recorded: created again under the same name, they are new candidates, not the leader.
    pub replaced: BTreeSet<String>,
}

impl Records {
    pub fn read(obs: &Observation<'_>) -> Self {
        let group = obs.group.name_any();
        let status = obs.group.status.clone().unwrap_or_default();
        let lease = obs.lease.map(LeaseRecord::from_lease);
        let recorded = [
            (status.leader.as_deref(), status.leader_uid.as_deref()),
            lease.as_ref().map_or((None, None), |l| {
                (l.holder.as_deref(), l.holder_uid.as_deref())
            }),
        ];
        let replaced = recorded
            .into_iter()
            .filter_map(|(name, uid)| Some((name?, uid?)))
            .filter(|(name, uid)| super::pod_uid(obs.pods, name).is_some_and(|live| live != *uid))
            .map(|(name, _)| name.to_string())
            .collect();
        let inherited_epoch = obs
            .lease
            .filter(|l| obs.group.inherits_lease(l))
            .zip(lease.as_ref())
            .map_or(0, |(_, l)| l.epoch);
        let pod_epochs: Vec<(String, i64)> = obs
            .pods
            .iter()
            .filter(|p| marks::is_marked_for(p, &group))
            .filter_map(|p| Some((p.name_any(), marks::epoch(p)?)))
            .collect();
        Records {
            replaced,
            status,
            lease,
            inherited_epoch,
            highest_pod_epoch: pod_epochs.iter().map(|(_, e)| *e).max().unwrap_or(0),
            pod_epochs,
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

    /// Whether the pod called `name` was created again since the records named it.
    pub fn is_replaced(&self, name: &str) -> bool {
        self.replaced.contains(name)
    }

    /// Who leads now: the Lease's holder, or without a Lease (deleted by hand, or not yet
    /// created) the status's leader; nobody when that pod was created again since.
    pub fn incumbent(&self) -> Option<&str> {
        let named = match &self.lease {
            Some(_) => self.lease_holder(),
            None => self.status_leader(),
        };
        named.filter(|name| !self.is_replaced(name))
    }

    /// The tokens handed out so far, for [`super::token::Token::for_leader`]. A leader created
    /// again since it was named holds none of them: its new incarnation gets a new token.
    pub fn issued(&self) -> Issued<'_> {
        Issued {
            status_leader: self.status_leader().filter(|n| !self.is_replaced(n)),
            status_epoch: self.status.epoch,
            lease_holder: self.lease_holder().filter(|n| !self.is_replaced(n)),
            lease_epoch: self.lease.as_ref().map_or(0, |l| l.epoch),
            highest_pod_epoch: self.highest_pod_epoch,
            lease_named: self.lease_holder(),
            pod_epochs: &self.pod_epochs,
            inherited_epoch: self.inherited_epoch,
        }
    }
}
