//! The API server: the group, its Lease and the pods, each with a resourceVersion, and how a
//! request the operator sent is applied when the server gets to it.
//!
//! resourceVersions only ever matter by equality (a precondition holds or not), so the model keeps
//! no global counter in the state: a write takes one above every version the state still refers
//! to, and [`crate::state::State::canonical`] renumbers them, so that two histories that leave the
//! same objects behind are one state.

use crate::ghost::Ghost;

/// A resourceVersion (an etcd revision).
pub type Rv = u32;
/// A pod, by its index (its name is `p<index+1>`).
pub type PodId = u8;
/// An operator replica, by its index (`op-a`, `op-b`).
pub type ReplicaId = u8;

/// The operator's role label on a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Leader,
    Follower,
}

/// A pod as the API server has it: only what the decision reads and the operator writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodObj {
    /// Which pod of that name this is: a re-created pod is a new object (new uid, no marks,
    /// younger).
    pub incarnation: u8,
    /// Running and Ready=True.
    pub ready: bool,
    /// `leadergroup.io/role`.
    pub role: Option<Role>,
    /// `leadergroup.io/epoch`.
    pub epoch: Option<i64>,
    /// `leadergroup.io/group` names the group.
    pub marked: bool,
    /// The barrier annotation (`leadergroup.io/fence`).
    pub barrier: Option<i64>,
    pub rv: Rv,
}

impl PodObj {
    /// Whether it carries the group's leader marks (I1 counts these).
    pub fn is_leader(&self) -> bool {
        self.role == Some(Role::Leader) && self.marked
    }
}

/// The group's spec, abstractly: which pods the user's selector edits exclude, the preferred
/// leader, paused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Spec {
    /// Bit `p`: the selector excludes pod `p` (`pod NotIn [...]`).
    pub excluded: u8,
    pub preferred: Option<PodId>,
    pub paused: bool,
}

impl Spec {
    pub fn selects(&self, pod: PodId) -> bool {
        self.excluded & (1 << pod) == 0
    }
}

/// The group's status as the operator wrote it: the whole object (serialized, so that any
/// difference the operator's own comparison sees is a different state), and its leader and
/// epoch for the properties.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Status {
    pub json: String,
    pub leader: Option<PodId>,
    pub epoch: i64,
}

/// The LeaderGroup.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupObj {
    /// Which group of the name this is: a group deleted and created again is a new object (a new
    /// UID, no status).
    pub incarnation: u8,
    pub spec: Spec,
    /// `metadata.generation`: bumped by spec edits, recorded in the status.
    pub generation: i64,
    pub status: Option<Status>,
    pub rv: Rv,
}

/// The group's Lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseObj {
    pub holder: Option<PodId>,
    /// The UID of the holder's pod (`leadergroup.io/holder-uid`): the incarnation that holds it.
    pub holder_uid: Option<String>,
    pub epoch: i64,
    /// The replica that wrote it (`leadergroup.io/arbiter`).
    pub arbiter: ReplicaId,
    /// Time passed without a write: it ran out (another replica may take the group over, and its
    /// arbiter renews it). Time is otherwise not modelled: a decision sees either a fresh Lease
    /// (renewed just now) or one that ran out.
    pub expired: bool,
    /// The incarnation of the group that owns it (its owner reference); `None`: released by the
    /// finalizer of a deleted group (no holder, no arbiter, no owner, its epoch kept).
    pub owner: Option<u8>,
    pub rv: Rv,
}

/// Everything the API server holds, or a replica's watch caches hold of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct World {
    pub group: GroupObj,
    pub lease: Option<LeaseObj>,
    /// By pod index; `None`: deleted.
    pub pods: Vec<Option<PodObj>>,
}

impl World {
    /// The pods that carry the group's leader marks.
    pub fn leaders(&self) -> impl Iterator<Item = (PodId, &PodObj)> {
        self.pods().filter(|(_, p)| p.is_leader())
    }

    /// The pods that exist, with their index.
    pub fn pods(&self) -> impl Iterator<Item = (PodId, &PodObj)> {
        self.pods
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((u8::try_from(i).ok()?, p.as_ref()?)))
    }

    pub fn pod(&self, pod: PodId) -> Option<&PodObj> {
        self.pods.get(usize::from(pod)).and_then(Option::as_ref)
    }

    pub fn pod_mut(&mut self, pod: PodId) -> Option<&mut PodObj> {
        self.pods.get_mut(usize::from(pod)).and_then(Option::as_mut)
    }

    /// Every resourceVersion the world refers to.
    pub fn rvs_mut(&mut self) -> impl Iterator<Item = &mut Rv> {
        std::iter::once(&mut self.group.rv)
            .chain(self.lease.as_mut().map(|l| &mut l.rv))
            .chain(self.pods.iter_mut().flatten().map(|p| &mut p.rv))
    }
}

/// The marks a pod patch writes (`actions::pods`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodPatch {
    /// `promote`: role=leader, the epoch, the group.
    Promote { epoch: i64 },
    /// `mark_follower` (also how a leader is demoted): role=follower, no epoch, the group.
    Follower,
    /// `raise_barrier`: the barrier annotation, with the follower's marks when `follower`, or
    /// without any of the operator's marks when `clear`.
    Barrier {
        epoch: i64,
        follower: bool,
        clear: bool,
    },
    /// `unmark`: none of the operator's marks.
    Unmark,
}

/// A write the operator sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `actions::lease::compare_and_swap`: a create when `expected` is `None`, else a replace at
    /// that resourceVersion.
    LeaseCas {
        expected: Option<Rv>,
        holder: Option<PodId>,
        holder_uid: Option<String>,
        epoch: i64,
        arbiter: ReplicaId,
        /// The incarnation of the group it was decided for: the owner it writes.
        owner: u8,
    },
    /// `actions::status::record`: a replace of the status subresource at the group's
    /// resourceVersion as read.
    Status { expected: Rv, status: Status },
    /// `actions::pods`: a JSON merge patch, with a resourceVersion precondition or none.
    Patch {
        pod: PodId,
        patch: PodPatch,
        precondition: Option<Rv>,
    },
}

impl Request {
    pub fn rvs_mut(&mut self) -> impl Iterator<Item = &mut Rv> {
        match self {
            Request::LeaseCas { expected, .. } => expected.as_mut(),
            Request::Status { expected, .. } => Some(expected),
            Request::Patch { precondition, .. } => precondition.as_mut(),
        }
        .into_iter()
    }
}

/// What the server answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Written (or nothing to write: a merge patch that changes nothing, or of a pod that is gone,
    /// which `actions::pods::merge` tolerates).
    Ok,
    /// 409: a precondition failed (or the Lease to replace is gone, as `compare_and_swap` maps
    /// it).
    Conflict,
}

/// How a request changed the server, for the counterexample's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Written; the object's resourceVersion moved.
    Written,
    /// Accepted, but nothing changed: no new resourceVersion.
    Unchanged,
    /// The pod is gone; the merge patch is a 404 the operator takes as done.
    Gone,
    Refused,
}

impl World {
    /// Applies `req` as the API server would; `next_rv` is the version a write takes.
    pub fn apply(&mut self, req: &Request, next_rv: Rv, ghost: &mut Ghost) -> (Reply, Effect) {
        match req {
            Request::LeaseCas {
                expected,
                holder,
                holder_uid,
                epoch,
                arbiter,
                owner,
            } => {
                let holds = match (&self.lease, expected) {
                    (None, None) => true,
                    (Some(l), Some(rv)) => l.rv == *rv,
                    _ => false,
                };
                if !holds {
                    return (Reply::Conflict, Effect::Refused);
                }
                self.lease = Some(LeaseObj {
                    holder: *holder,
                    holder_uid: holder_uid.clone(),
                    epoch: *epoch,
                    arbiter: *arbiter,
                    expired: false,
                    owner: Some(*owner),
                    rv: next_rv,
                });
                ghost.lease_named(*holder, *epoch);
                (Reply::Ok, Effect::Written)
            }
            Request::Status { expected, status } => {
                if self.group.rv != *expected {
                    return (Reply::Conflict, Effect::Refused);
                }
                if self.group.status.as_ref() == Some(status) {
                    return (Reply::Ok, Effect::Unchanged);
                }
                self.group.status = Some(status.clone());
                self.group.rv = next_rv;
                ghost.status_named(status.leader, status.epoch);
                (Reply::Ok, Effect::Written)
            }
            Request::Patch {
                pod,
                patch,
                precondition,
            } => {
                let Some(obj) = self.pod_mut(*pod) else {
                    return (Reply::Ok, Effect::Gone);
                };
                if precondition.is_some_and(|rv| rv != obj.rv) {
                    return (Reply::Conflict, Effect::Refused);
                }
                let before = obj.clone();
                let incarnation = obj.incarnation;
                match *patch {
                    PodPatch::Promote { epoch } => {
                        obj.role = Some(Role::Leader);
                        obj.epoch = Some(epoch);
                        obj.marked = true;
                    }
                    PodPatch::Follower => {
                        obj.role = Some(Role::Follower);
                        obj.epoch = None;
                        obj.marked = true;
                    }
                    PodPatch::Barrier {
                        epoch,
                        follower,
                        clear,
                    } => {
                        obj.barrier = Some(epoch);
                        if follower {
                            obj.role = Some(Role::Follower);
                            obj.epoch = None;
                            obj.marked = true;
                        } else if clear {
                            obj.role = None;
                            obj.epoch = None;
                            obj.marked = false;
                        }
                    }
                    PodPatch::Unmark => {
                        obj.role = None;
                        obj.epoch = None;
                        obj.marked = false;
                        obj.barrier = None;
                    }
                }
                // A barrier's value is unique to its write (the epoch and the instant), so it
                // always changes the pod.
                let always_changes = matches!(patch, PodPatch::Barrier { .. });
                if *obj == before && !always_changes {
                    // The API server does not bump the version of a patch that changes nothing.
                    return (Reply::Ok, Effect::Unchanged);
                }
                obj.rv = next_rv;
                if let PodPatch::Promote { epoch } = patch {
                    ghost.handed(*pod, incarnation, *epoch);
                }
                (Reply::Ok, Effect::Written)
            }
        }
    }
}
