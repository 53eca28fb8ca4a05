//! The model's state: the API server, the requests in flight, the two operator replicas, which
//! one the HA Lease makes active, what the faults and edits of the bounded configuration have
//! used up, and the history the properties need.

use std::collections::BTreeMap;

use crate::api::{PodId, ReplicaId, Request, Rv, Spec, World};
use crate::ghost::Ghost;

/// Which step of its pass a reply belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    Commit,
    Record,
    Demote,
    Barrier,
    Stray,
    Promote,
    Follower,
    Unmark,
}

/// A request on its way to the API server. The checker may apply it at any later point, in any
/// order with the others, also after its sender gave up on it, crashed or paused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Msg {
    pub from: ReplicaId,
    /// The step of its sender's current pass that awaits the answer; `None`: nobody awaits it
    /// any more (its pass ended: 5xx, deadline, crash), yet it may still land.
    pub awaited: Option<Slot>,
    pub req: Request,
}

/// What step 4's fresh list found.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Check {
    /// Bit `p`: pod `p` carries the group's leader marks and the plan did not expect it.
    pub strays: u8,
    /// The pod to promote as read then (`None`: gone, or not selected, or the Lease read beside
    /// it does not name it at the promotion's epoch: either way a conflict).
    pub target: Option<Rv>,
}

/// Where a pass stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// 1: awaiting the Lease compare-and-swap.
    Committing,
    /// 2, 3 and 4 together: awaiting `pending` answers of the status and the demotions and
    /// releases, `barriers` of the barrier writes, then the check (a fresh list). Each runs to
    /// its end even when another fails (`futures::join!`): `failed` says one answered 409, and
    /// the pass ends once all have answered.
    Fanout {
        pending: u8,
        barriers: u8,
        check: Option<Check>,
        failed: bool,
    },
    /// 4, after the check: awaiting the demotions of the strays it found.
    Strays {
        pending: u8,
        target: Option<Rv>,
    },
    /// 5: awaiting the promotion.
    Promoting,
    /// Tidy: awaiting the follower marks, then the removals of marks.
    Followers {
        pending: u8,
    },
    Unmarking {
        pending: u8,
    },
}

/// One pass of the protocol in progress: what is left of the plan's writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pass {
    pub phase: Phase,
    /// Steps 2-4, sent once the commit landed (emptied then).
    pub fanout: Vec<Request>,
    pub barriers: Vec<Request>,
    /// The pod to promote, the UID of the incarnation decided on, and the epoch.
    pub promote: Option<(PodId, Option<String>, i64)>,
    pub raises_barrier: bool,
    /// The incarnation of the group it was decided for (its UID): the barrier flag it raises is
    /// that incarnation's.
    pub group_incarnation: u8,
    /// Bit `p`: pod `p` may show the leader label in the check without being a stray.
    pub expected_leaders: u8,
    /// The selector the check lists by (the group as observed).
    pub selector: Spec,
    /// The check lists every pod labeled leader, selected or not (`PodWrites::list_every_leader`).
    pub every_leader: bool,
    /// The check reads nothing; the promotion is conditional on this version of the pod as
    /// observed (`PodWrites::unchecked_version`).
    pub unchecked: Option<Rv>,
    pub mark_followers: Vec<PodId>,
    pub unmark: Vec<(PodId, Rv)>,
}

/// An operator replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Replica {
    /// Its watch caches: the world as it was at some earlier point.
    pub cache: World,
    /// The replica's memory of the group: the incarnation (its UID) whose barrier flag is up.
    pub barrier_up: Option<u8>,
    /// The last pass ended in a 409: the next decision reads the group and the Lease from the
    /// API server (as `converge` does), the pods still from the cache.
    pub fresh: bool,
    pub pass: Option<Pass>,
}

/// How many of each bounded event a path has used.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Spent {
    pub failures: u8,
    pub deadlines: u8,
    pub crashes: u8,
    pub failovers: u8,
    pub expiries: u8,
    pub readiness: u8,
    pub deletions: u8,
    pub selector_edits: u8,
    pub preference_edits: u8,
    pub pause_edits: u8,
    pub recreations: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: World,
    /// Sorted, so that the same requests in flight are the same state.
    pub inflight: Vec<Msg>,
    pub replicas: Vec<Replica>,
    /// The replica the HA Lease makes active (at most one at a time).
    pub active: Option<ReplicaId>,
    pub spent: Spent,
    pub ghost: Ghost,
    /// The last version handed out, while the state is not renumbered (counterexamples read as
    /// etcd revisions); 0 in the checker's renumbered states.
    pub rev: Rv,
    /// The model itself went wrong (see [`crate::error::ModelError`]).
    pub anomaly: bool,
    /// No fault or edit happens any more on this path (liveness configurations).
    pub faults_over: bool,
}

impl State {
    /// The version the next write takes: above every version the state refers to.
    pub fn next_rv(&mut self) -> Rv {
        let mut max = self.rev;
        self.visit_rvs(&mut |rv| max = max.max(*rv));
        self.rev = max + 1;
        self.rev
    }

    pub fn send(&mut self, from: ReplicaId, awaited: Slot, req: Request) {
        self.inflight.push(Msg {
            from,
            awaited: Some(awaited),
            req,
        });
    }

    /// Every resourceVersion the state refers to.
    pub fn visit_rvs(&mut self, f: &mut impl FnMut(&mut Rv)) {
        self.server.rvs_mut().for_each(&mut *f);
        for m in &mut self.inflight {
            m.req.rvs_mut().for_each(&mut *f);
        }
        for r in &mut self.replicas {
            r.cache.rvs_mut().for_each(&mut *f);
            if let Some(pass) = &mut r.pass {
                for req in pass.fanout.iter_mut().chain(pass.barriers.iter_mut()) {
                    req.rvs_mut().for_each(&mut *f);
                }
                for (_, rv) in &mut pass.unmark {
                    f(rv);
                }
                match &mut pass.phase {
                    Phase::Fanout {
                        check: Some(Check { target, .. }),
                        ..
                    }
                    | Phase::Strays { target, .. } => {
                        if let Some(rv) = target {
                            f(rv);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// The representative of the states that differ only by the numbers of their versions:
    /// versions renumbered by rank (equality and order kept), requests in flight sorted.
    pub fn canonical(mut self) -> Self {
        let mut seen: BTreeMap<Rv, Rv> = BTreeMap::new();
        self.visit_rvs(&mut |rv| {
            seen.insert(*rv, 0);
        });
        for (rank, v) in seen.values_mut().enumerate() {
            *v = Rv::try_from(rank + 1).unwrap_or(Rv::MAX);
        }
        self.visit_rvs(&mut |rv| {
            if let Some(r) = seen.get(rv) {
                *rv = *r;
            }
        });
        self.rev = 0;
        self.inflight.sort();
        self
    }
}
