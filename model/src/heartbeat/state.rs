//! The state of the Heartbeat model: the group's Lease, its pods' marks, the group's spec and
//! status, the operator's sighting of the Lease, each pod's client, the renewals in flight, the
//! time, and what the faults and edits have used up.

use std::collections::BTreeMap;

use leadergroup_client::Epoch;
use leadergroup_client::belief::Belief;
use leadergroup_client::publication::Publication;
use leadergroup_client::role::LeaseObservation;
use leadergroup_operator::lease_sightings::Sighting;

use super::clock::{self, Tick};
use crate::api::{PodId, Rv};
use crate::error::ModelError;
use crate::objects::{pod_id, pod_name};

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
    /// The last holder that acknowledged its leadership, once deposed.
    pub predecessor: Option<HbPredecessor>,
    /// A foreign writer (neither the operator nor a member) put a holder of its own in, at a
    /// higher epoch, and kept the Lease's other fields: `holder` is still the pod it replaced,
    /// whose renewal and acknowledgement the Lease still carries.
    pub forged: bool,
    /// Deleted by hand: the API server has no Lease (the other fields say what it held), until
    /// the operator creates it again.
    pub deleted: bool,
    /// The group's liveness as the operator wrote it (`leadergroup.io/liveness: Heartbeat`); in
    /// Readiness mode `renewed` holds the members' acknowledgements (each written by a note of
    /// its own) and the operator renews the Lease itself (`operator_renewed`).
    pub heartbeat: bool,
    /// In Readiness mode, the operator's last renewal (`renewTime`), on its wall clock; `None`:
    /// not renewed since acquired.
    pub operator_renewed: Option<Tick>,
    pub rv: Rv,
}

/// A member by its name's parts: its pod and its process ([`member_name`]).
pub type MemberName = (PodId, u8);

/// The predecessor the Lease names (`leadergroup.io/predecessor` and the annotations beside it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbPredecessor {
    /// Its pod ([`UNKNOWN_POD`]: a Lease created again that could not name it).
    pub pod: PodId,
    pub epoch: i64,
    /// The longest Lease duration it may have seen.
    pub duration: u8,
    /// Its members that acknowledged, each awaited (`-members`; empty: any one member).
    pub members: Vec<MemberName>,
    /// Its members that said they stepped down (`leadergroup.io/stepped-down-by`), with, once it
    /// has stepped down, every one of `members` (as the operator writes them).
    pub stepped_down_by: Vec<MemberName>,
    /// It no longer reports `Leader` at `epoch`: each member said so, or the operator knows it.
    pub stepped_down: bool,
}

impl HbPredecessor {
    /// As the operator writes it and reads it back: once stepped down, every awaited member is
    /// listed as having said so; and the step-down counts once every awaited member said so
    /// (any one, when none is named).
    pub fn normalized(mut self) -> Self {
        let everyone = self
            .members
            .iter()
            .all(|m| self.stepped_down_by.contains(m));
        self.stepped_down |= !self.stepped_down_by.is_empty() && everyone;
        if self.stepped_down {
            self.stepped_down_by.extend(self.members.iter().copied());
        }
        self.stepped_down_by.sort_unstable();
        self.stepped_down_by.dedup();
        self
    }
}

/// The members a Lease created again names when it cannot know them
/// (`lease_record::UNKNOWN_MEMBERS`): no member says this name, so only the operator's own
/// knowledge ends the wait.
pub const UNKNOWN_MEMBERS: MemberName = (UNKNOWN_POD, u8::MAX);

/// The member a name stands for, as the model's members are named ([`member_name`]).
pub fn parse_member(name: &str) -> Result<MemberName, ModelError> {
    if name == leadergroup_operator::lease_record::UNKNOWN_MEMBERS {
        return Ok(UNKNOWN_MEMBERS);
    }
    let (pod, process) = name
        .split_once('/')
        .ok_or_else(|| ModelError::UnknownPod(name.to_string()))?;
    let process = process
        .parse()
        .map_err(|_| ModelError::UnknownPod(name.to_string()))?;
    Ok((pod_id(pod)?, process))
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

/// A member's step-down on its way to the API server (`leadergroup.io/stepped-down` at `epoch`,
/// its name added to `-by`): a replace of the Lease as it read it, at that version.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SteppedDown {
    pub member: u8,
    pub process: u8,
    pub expected: Rv,
    pub epoch: Epoch,
    /// In Readiness mode, the note is the member's acknowledgement of its leadership at `epoch`
    /// (`leadergroup.io/acknowledged-by-epoch`, its name added), not a step-down.
    pub acknowledges: bool,
}

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

/// The agent around a member (`Membership::start_gated`): the member's publications, and the
/// agent's loop that acts on them after the fact, each a step of its own, so it may lag any
/// number of steps behind: it takes the publication made last (its files and `/role` then say
/// it, and the application reads them), and its command runs for it later. The member's
/// step-down waits until the agent has acted on the very publication made then (the [`Gate`]).
///
/// [`Gate`]: leadergroup_client::publication::Gate
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Agent {
    /// The member's publication now (`Membership::publications`), by `Publication::next`.
    pub published: Publication,
    /// The publication the agent took last: what its files say, and so what its application
    /// holds.
    pub held: Publication,
    /// Publications taken whose command has not run yet, oldest first (`ActedInOrder`).
    pub running: Vec<Publication>,
    /// The publication acted on last, as the member was told (`ActedOn::publication`).
    pub acted: Option<Publication>,
}

impl Agent {
    /// A starting agent: its files say `unknown`, which it has acted on.
    pub fn started() -> Agent {
        Agent {
            published: Publication::initial(),
            held: Publication::initial(),
            running: Vec::new(),
            acted: Some(Publication::initial()),
        }
    }
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
    /// A step-down it sent and still awaits.
    pub noting: bool,
    /// Its step-down was answered (written, or 409) at this version: not again on it.
    pub noted_at: Option<Rv>,
    /// The agent around it; `None`: an in-process `Membership`, whose application reads
    /// `Membership::role` and pauses with it.
    pub agent: Option<Agent>,
    /// Frozen (a starved or throttled agent): it reads, writes, publishes and acts on nothing,
    /// and loses the answers that arrive meanwhile, while its application runs on.
    pub paused: bool,
}

/// The member name of process `process` of `pod`'s client (the real client draws one at random).
pub fn member_name(pod: &str, process: u8) -> String {
    format!("{pod}/{process}")
}

/// The name of a member a Lease lists.
pub fn listed_name((pod, process): MemberName) -> String {
    if (pod, process) == UNKNOWN_MEMBERS {
        leadergroup_operator::lease_record::UNKNOWN_MEMBERS.to_string()
    } else {
        member_name(&pod_name(pod), process)
    }
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
            noting: false,
            noted_at: None,
            agent: None,
            paused: false,
        }
    }

    /// An agent's member ([`Agent`]).
    pub fn with_agent(mut self) -> Client {
        self.agent = Some(Agent::started());
        self
    }

    /// Whether its role rule and its writes run: neither cut off nor paused.
    pub fn hears(&self) -> bool {
        !self.cut && !self.paused
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
    pub pauses: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbState {
    /// The group's liveness: Heartbeat, or Readiness (the default mode), for the whole run.
    pub heartbeat: bool,
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
    /// The members' step-downs in flight, sorted.
    pub notes: Vec<SteppedDown>,
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
            c.lease_rv
                .into_iter()
                .chain(c.refused_at)
                .chain(c.noted_at)
                .for_each(&mut *f);
        }
        for r in &self.inflight {
            f(r.expected);
        }
        for n in &self.notes {
            f(n.expected);
        }
    }

    /// Versions renumbered by rank (only equality matters), writes in flight sorted, and what a
    /// client keeps only to compare with the present forgotten once it can no longer match: a
    /// renewal sent at an earlier tick (only one sent this tick counts), a refusal or an answered
    /// step-down at a version other than the one it last read (it only reads newer ones). An
    /// inert belief (see [`Inert`]) of an in-process member is replaced by a new process's that
    /// has read the same pod, which has the same futures as far as the properties see; an
    /// agent's is kept, since its role, even when not `Leader`, is what it publishes. Publication
    /// numbers are renumbered by rank (only their equality and order matter), a publication the
    /// application holds that no longer leads at its clock is taken for `unknown`, and, with the
    /// gate on sequence numbers, of the publications an agent took and has not acted on only the
    /// last is kept (see [`Agent::canonical`]): two states that differ only in these are one.
    pub fn canonical(mut self, app_honours_validity: bool, gate_by_seq: bool) -> Self {
        let now = self.now;
        let members = self.members();
        for (m, c) in members.into_iter().zip(self.clients.iter_mut()) {
            let pod = pod_name(pod_of(m));
            if c.agent.is_none() && c.belief.is_inert(&pod) {
                let pod_state = c.belief.observation().pod.clone().map(|p| p.state);
                let mut fresh = Belief::new(pod.clone(), member_name(&pod, c.process), true);
                // Its pod as read (the UID a step-down is asked of), at the model's start: the
                // time of an unmarked pod's read only ever dates a role that is not `Leader`.
                if let Some(state) = pod_state {
                    fresh.pod_seen(state, clock::client(m, 0));
                }
                c.belief = fresh;
                c.lease_rv = None;
            }
            if c.last_sent != Some(now) {
                c.last_sent = None;
            }
            if c.refused_at != c.lease_rv {
                c.refused_at = None;
            }
            if c.noted_at != c.lease_rv {
                c.noted_at = None;
            }
            if let Some(agent) = &mut c.agent {
                agent.canonical(clock::client(m, now), app_honours_validity, gate_by_seq);
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
        for n in &mut self.notes {
            map(&mut n.expected);
        }
        self.inflight.sort();
        self.notes.sort();
        self
    }
}

impl Agent {
    /// The publication the agent took last: the newest of those whose command runs, else the
    /// one acted on last.
    pub fn last_taken(&self) -> Option<&Publication> {
        self.running.last().or(self.acted.as_ref())
    }

    /// Whether the application, reading the agent's files at `now` (the agent's clock), acts as
    /// leader: what they say is `Leader`, and, if it honours it, before its validity ends.
    pub fn app_leads(&self, now: tokio::time::Instant, honours_validity: bool) -> bool {
        if honours_validity {
            self.held.role_at(now).is_leader()
        } else {
            self.held.role.is_leader()
        }
    }

    /// Publication numbers renumbered by rank, and what the application holds kept only for
    /// what it reads; see [`HbState::canonical`]. With the gate on sequence numbers
    /// (`gate_by_seq`), only the last publication the agent took and has not acted on matters:
    /// the gate opens only once the one acted on is the one published now, which is never an
    /// earlier one taken, so acting on those changes nothing the gate compares; the queue keeps
    /// the last, and the one acted on before it is forgotten.
    fn canonical(
        &mut self,
        now: tokio::time::Instant,
        app_honours_validity: bool,
        gate_by_seq: bool,
    ) {
        // The application reads the role and its validity, never the number; once it no longer
        // leads (at its clock, by its rule) it never will on this publication.
        self.held.seq = 0;
        if !self.app_leads(now, app_honours_validity) {
            self.held = Publication::initial();
        }
        if gate_by_seq && let Some(last) = self.running.last().copied() {
            self.running = vec![last];
            self.acted = None;
        }
        let mut seqs: Vec<u64> = std::iter::once(self.published.seq)
            .chain(self.running.iter().map(|p| p.seq))
            .chain(self.acted.map(|p| p.seq))
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        let rank = |seq: u64| {
            seqs.iter()
                .position(|s| *s == seq)
                .and_then(|i| u64::try_from(i + 1).ok())
                .unwrap_or(seq)
        };
        self.published.seq = rank(self.published.seq);
        for p in &mut self.running {
            p.seq = rank(p.seq);
        }
        if let Some(p) = &mut self.acted {
            p.seq = rank(p.seq);
        }
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
        // Named as the holder, or as the predecessor whose step-down is awaited (its members
        // owe it, from the pod's UID as read).
        let named = match &o.lease {
            LeaseObservation::Confirmed(c) => c.state.as_ref().is_some_and(|l| {
                l.holder.as_deref() == Some(pod) || l.awaited.as_ref().is_some_and(|a| a.pod == pod)
            }),
            LeaseObservation::NoGroup | LeaseObservation::Unconfirmed => false,
        };
        !marked && !named && o.renewed.is_none()
    }
}
