//! The state of the Heartbeat model: the group's Lease, its pods' marks, the group's spec and
//! status, the operator's sighting of the Lease, each pod's client, the renewals in flight, the
//! time, and what the faults and edits have used up.

use std::collections::BTreeMap;

use leadergroup_client::Epoch;
use leadergroup_client::belief::Belief;
use leadergroup_client::role::LeaseObservation;
use leadergroup_operator::lease_sightings::Sighting;

use super::clock::Tick;
use crate::api::{PodId, Rv};
use crate::objects::pod_name;

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
    /// The longest duration of the holder's tenure, when the Lease was shortened since
    /// (`leadergroup.io/longest-lease-seconds`, as the operator writes it).
    pub longest: Option<u8>,
    /// When the operator wrote the current holder in (`acquireTime`, and `renewTime` until
    /// the holder renews), on its wall clock.
    pub acquired: Tick,
    /// The holder's last renewal that landed (`renewTime`); `None`: not renewed since acquired.
    pub renewed: Option<Stamp>,
    /// The renewal before it, when another member of the same pod wrote it at this epoch: each
    /// member's acknowledgement counts (`acknowledged-by` lists both).
    pub also_renewed: Option<Stamp>,
    /// The last holder that acknowledged its leadership, once deposed: its pod, its epoch, the
    /// Lease duration it last saw, and whether it is known to have stepped down.
    pub predecessor: Option<(PodId, i64, u8, bool)>,
    /// A foreign writer (neither the operator nor a member) put a holder of its own in, at a
    /// higher epoch, and kept the Lease's other fields: `holder` is still the pod it replaced,
    /// whose renewal and acknowledgement the Lease still carries.
    pub forged: bool,
    /// Deleted by hand: the API server has no Lease (the other fields say what it held), until
    /// the operator creates it again.
    pub deleted: bool,
    pub rv: Rv,
}

impl HbLease {
    /// The holder the Lease names.
    pub fn holder_name(&self) -> String {
        if self.forged {
            INTRUDER.to_string()
        } else {
            pod_name(self.holder)
        }
    }
}

/// The holder a foreign writer puts in the Lease: no pod of the group.
pub const INTRUDER: &str = "intruder";

/// The predecessor of a Lease created again after a deletion, when the operator cannot name it
/// (`lease_record::UNKNOWN_PREDECESSOR`): no pod.
pub const UNKNOWN_POD: PodId = PodId::MAX;

/// The second member of pod `p1` (configuration `two-members`): a member id is the pod's id for
/// its first member, and this bit set on the pod's id for its second. The second's processes
/// count from [`SECOND_PROCESS`], so that its member names differ from the first's.
pub const SECOND_MEMBER: u8 = 0x80;
pub const SECOND_PROCESS: u8 = 100;

/// The pod a member runs in.
pub fn pod_of(member: u8) -> PodId {
    member & !SECOND_MEMBER
}

/// How far above the Lease's epoch a foreign writer sets it.
pub const FORGED_EPOCH_STEP: i64 = 2;

/// A renewal on its way to the API server: a compare-and-swap on the version its client read.
/// It may land at any later point, also after its client was cut off or restarted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Renewal {
    /// The member that sent it ([`SECOND_MEMBER`]; its pod is [`pod_of`] it).
    pub member: u8,
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

/// The member name of process `process` of `pod`'s client (the real client draws one at random).
pub fn member_name(pod: &str, process: u8) -> String {
    format!("{pod}/{process}")
}

impl Client {
    pub fn started(pod: &str, process: u8) -> Client {
        Client {
            belief: Belief::new(pod, member_name(pod, process), true),
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
    pub operator_restarts: u8,
    pub lease_deletions: u8,
    pub duration_edits: u8,
    pub preference_edits: u8,
    pub readiness: u8,
    pub forgeries: u8,
    pub status_patches: u8,
    pub pod_gc: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbState {
    pub now: Tick,
    pub lease: HbLease,
    /// Per pod: the epoch of its leader marks (`role=leader` and the epoch), `None`: follower.
    pub marks: Vec<Option<i64>>,
    /// Per pod: Ready (its process runs whatever this says).
    pub ready: Vec<bool>,
    /// Per pod: `phase: Failed`, set by the pod GC (its node lost) while its process runs on.
    pub failed: Vec<bool>,
    /// `spec.preferredLeader`.
    pub preferred: Option<PodId>,
    /// `spec.leaseDurationSeconds`.
    pub spec_duration: u8,
    /// The status's leader and epoch.
    pub status: (PodId, i64),
    /// The status's longest Lease duration, if it records one.
    pub status_longest: Option<u8>,
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
    /// The index in `clients` of `member`: the pods' first members in pod order, then the second
    /// members.
    pub fn member_index(&self, member: u8) -> usize {
        if member & SECOND_MEMBER != 0 {
            self.marks.len() + usize::from(pod_of(member))
        } else {
            usize::from(member)
        }
    }

    /// Every member, first members first.
    pub fn members(&self) -> Vec<u8> {
        let pods = self.marks.len();
        (0..self.clients.len())
            .filter_map(|i| {
                let id = if i < pods {
                    i
                } else {
                    (i - pods) | usize::from(SECOND_MEMBER)
                };
                u8::try_from(id).ok()
            })
            .collect()
    }

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

    /// Versions renumbered by rank (only equality matters), renewals in flight sorted, and what a
    /// client keeps only to compare with the present forgotten once it can no longer match: a
    /// renewal sent at an earlier tick (only one sent this tick counts), a refusal at a version
    /// other than the one it last read (it only reads newer ones). An inert belief (see
    /// [`Inert`]) is replaced by a new process's, which has the same futures as far as the
    /// properties see: two states that differ only in these are one.
    pub fn canonical(mut self) -> Self {
        let now = self.now;
        let members = self.members();
        for (m, c) in members.into_iter().zip(self.clients.iter_mut()) {
            let pod = pod_name(pod_of(m));
            if c.belief.is_inert(&pod) {
                c.belief = Belief::new(pod.clone(), member_name(&pod, c.process), true);
                c.lease_rv = None;
            }
            if c.last_sent != Some(now) {
                c.last_sent = None;
            }
            if c.refused_at != c.lease_rv {
                c.refused_at = None;
            }
        }
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

/// A belief that can lead only after both its pod and its Lease are read again: its pod, as
/// confirmed, carries no leader marks, and its Lease, as confirmed, does not name it. Each of
/// those reads replaces what the belief held of the object (the Lease's read its duration and its
/// renewal clock too: a Lease not naming the pod left no clock anchored, and a renewal that lands
/// meanwhile counts only once one is), so until both happen the role is not `Leader`, and after
/// both it is whatever a new process's would be. The properties only ask who believes `Leader`:
/// such a belief may be taken for a new process's, and its Lease version (used only once a Lease
/// naming it is read) dropped.
pub trait Inert {
    fn is_inert(&self, pod: &str) -> bool;
}

impl Inert for Belief {
    fn is_inert(&self, pod: &str) -> bool {
        let o = self.observation();
        let marked = o
            .pod
            .as_ref()
            .and_then(|c| c.state.as_ref())
            .is_some_and(|m| m.leader || m.epoch.is_some());
        let named = match &o.lease {
            LeaseObservation::Confirmed(c) => c
                .state
                .as_ref()
                .is_some_and(|l| l.holder.as_deref() == Some(pod)),
            LeaseObservation::NoGroup | LeaseObservation::Unconfirmed => false,
        };
        !marked && !named && o.renewed.is_none()
    }
}
