//! The state of the Heartbeat model: the group's Lease, its pods' marks, the group's spec and
//! status, the operator's sighting of the Lease, each pod's client, the renewals in flight, the
//! time, and what the faults and edits have used up.

use std::collections::BTreeMap;

use leadergroup_client::Epoch;
use leadergroup_client::belief::Belief;
use leadergroup_operator::lease_sightings::Sighting;

use super::clock::Tick;
use crate::api::{PodId, Rv};

/// A renewal's `renewTime`: which process of which pod's client wrote it, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stamp {
    pub pod: PodId,
    pub process: u8,
    pub tick: Tick,
}

/// The group's Lease (Heartbeat mode, arbitrated by the one operator replica `op-a`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbLease {
    pub holder: PodId,
    pub epoch: i64,
    pub duration: u8,
    /// When the operator wrote the current holder in (`acquireTime`, and `renewTime` until
    /// the holder renews), on its wall clock.
    pub acquired: Tick,
    /// The holder's last renewal that landed (`renewTime`); `None`: not renewed since acquired.
    pub renewed: Option<Stamp>,
    pub rv: Rv,
}

/// A renewal on its way to the API server: a compare-and-swap on the version its client read.
/// It may land at any later point, also after its client was cut off or restarted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Renewal {
    pub pod: PodId,
    pub process: u8,
    pub expected: Rv,
    pub epoch: Epoch,
    pub sent: Tick,
}

/// One pod's client (a `Membership`, or the agent through it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// What it believes: the client crate's own state, fed as `Membership` feeds it.
    pub belief: Belief,
    /// Cut off from the API server: it reads nothing, and its answers are lost.
    pub cut: bool,
    /// Which process of the pod's client this is (a restart starts the next one).
    pub process: u8,
    /// The version of the Lease as it last read it: what its renewals are conditional on.
    pub lease_rv: Option<Rv>,
    /// A renewal it sent and still awaits.
    pub awaiting: bool,
    /// When it last sent a renewal (at most one a tick).
    pub last_sent: Option<Tick>,
    /// A renewal was refused (409) at this version: the next waits for a newer Lease.
    pub refused_at: Option<Rv>,
}

impl Client {
    pub fn started(pod: &str, process: u8) -> Client {
        Client {
            belief: Belief::new(pod, true),
            cut: false,
            process,
            lease_rv: None,
            awaiting: false,
            last_sent: None,
            refused_at: None,
        }
    }
}

/// How many of each bounded event a path has used.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct HbSpent {
    pub cuts: u8,
    pub restarts: u8,
    pub duration_edits: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbState {
    pub now: Tick,
    pub lease: HbLease,
    /// Per pod: the epoch of its leader marks (`role=leader` and the epoch), `None`: follower.
    pub marks: Vec<Option<i64>>,
    /// `spec.leaseDurationSeconds`.
    pub spec_duration: u8,
    /// The status's leader and epoch.
    pub status: (PodId, i64),
    /// The operator's sighting of the Lease (its own code), on its own clock.
    pub sighting: Option<Sighting>,
    pub clients: Vec<Client>,
    /// Sorted, so that the same renewals in flight are the same state.
    pub inflight: Vec<Renewal>,
    pub spent: HbSpent,
    /// The model itself went wrong (a decision it does not expect).
    pub anomaly: bool,
}

impl HbState {
    /// The version the next write takes.
    pub fn next_rv(&self) -> Rv {
        let mut max = self.lease.rv;
        self.visit_rvs(&mut |rv| max = max.max(rv));
        max + 1
    }

    fn visit_rvs(&self, f: &mut impl FnMut(Rv)) {
        f(self.lease.rv);
        for c in &self.clients {
            c.lease_rv.into_iter().chain(c.refused_at).for_each(&mut *f);
        }
        for r in &self.inflight {
            f(r.expected);
        }
    }

    /// Versions renumbered by rank (only equality matters), renewals in flight sorted.
    pub fn canonical(mut self) -> Self {
        let mut seen: BTreeMap<Rv, Rv> = BTreeMap::new();
        self.visit_rvs(&mut |rv| {
            seen.insert(rv, 0);
        });
        for (rank, v) in seen.values_mut().enumerate() {
            *v = Rv::try_from(rank + 1).unwrap_or(Rv::MAX);
        }
        let map = |rv: &mut Rv| {
            if let Some(r) = seen.get(rv) {
                *rv = *r;
            }
        };
        map(&mut self.lease.rv);
        for c in &mut self.clients {
            c.lease_rv
                .iter_mut()
                .chain(c.refused_at.iter_mut())
                .for_each(map);
        }
        for r in &mut self.inflight {
            map(&mut r.expected);
        }
        self.inflight.sort();
        self
    }
}
