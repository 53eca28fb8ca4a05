//! The stateright model: the bounded configurations, the actions the checker may take in any
//! order, and how each one changes the state.

use stateright::{Model, Property};

use crate::api::{GroupObj, PodId, PodObj, ReplicaId, Spec, World};
use crate::finalizer::{self, LeaseOnDeletion};
use crate::ghost::Ghost;
use crate::state::{Msg, Replica, Spent, State};
use crate::{properties, replica, user};

/// A bounded configuration: how many pods, and how many of each fault and edit one path may
/// take. Everything else (deliveries, cache catch-ups, reconciles, checks) is unbounded.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    pub pods: u8,
    /// Start also from the settled group (a leader elected, the barrier up), not only from the
    /// group's creation.
    pub from_settled: bool,
    /// Requests that end in a 5xx or a reset for their sender while the server may still apply
    /// them.
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
    /// The group deleted (its finalizer run) and created again under its name.
    pub recreations: u8,
    /// What the finalizer does with the Lease (released, as the operator does; deleted, as it did
    /// before, to show the counterexample).
    pub lease_on_deletion: LeaseOnDeletion,
    /// Also check, from every state, that once faults stop a leader is labeled.
    pub recovery: bool,
    /// Liveness with stateright's `eventually`: at any point of a path the faults and edits
    /// may end for good (`Action::EndFaults`, enabled until taken, so every path that ends has
    /// taken it); from there, every path must reach a state with one leader.
    pub liveness: bool,
    /// States whose Lease or status went past this epoch are not explored further: decisions
    /// on stale caches may keep minting epochs, and the space must stay finite.
    pub max_epoch: i64,
}

impl Config {
    /// Both holes' ingredients on two pods, from the group's creation and from a settled group
    /// (too large to exhaust breadth first in memory: the base of the two below).
    pub fn combined() -> Self {
        Config {
            name: "combined",
            pods: 2,
            from_settled: true,
            failures: 1,
            deadlines: 0,
            crashes: 0,
            failovers: 1,
            expiries: 1,
            readiness: 0,
            deletions: 0,
            selector_edits: 1,
            preference_edits: 2,
            pause_edits: 0,
            recreations: 0,
            lease_on_deletion: LeaseOnDeletion::Released,
            liveness: false,
            recovery: false,
            max_epoch: 4,
        }
    }

    /// Hole 1's ingredients only: a first election, a selector edit, a failover.
    pub fn selector() -> Self {
        Config {
            name: "selector",
            failures: 0,
            preference_edits: 0,
            from_settled: false,
            ..Config::combined()
        }
    }

    /// Hole 2's ingredients only: a settled group, a lost answer, two preference edits.
    pub fn unknown_outcome() -> Self {
        Config {
            name: "unknown-outcome",
            selector_edits: 0,
            failovers: 0,
            expiries: 0,
            ..Config::combined()
        }
    }

    /// The binary's larger run: both holes' ingredients together, with a deadline and a
    /// readiness change besides.
    pub fn large() -> Self {
        Config {
            name: "large",
            pods: 2,
            from_settled: true,
            failures: 1,
            deadlines: 1,
            crashes: 0,
            failovers: 1,
            expiries: 1,
            readiness: 1,
            deletions: 0,
            selector_edits: 1,
            preference_edits: 1,
            pause_edits: 0,
            recreations: 0,
            lease_on_deletion: LeaseOnDeletion::Released,
            liveness: false,
            recovery: false,
            max_epoch: 4,
        }
    }

    /// A pod deleted and created again under its name (a new UID) around a settled group,
    /// with a crash, a lost answer, a failover and a preference edit: one token per incarnation.
    pub fn recreation() -> Self {
        Config {
            name: "recreation",
            pods: 2,
            from_settled: true,
            failures: 1,
            deadlines: 0,
            crashes: 1,
            failovers: 1,
            expiries: 1,
            readiness: 0,
            deletions: 1,
            selector_edits: 0,
            preference_edits: 1,
            pause_edits: 0,
            recreations: 0,
            lease_on_deletion: LeaseOnDeletion::Released,
            liveness: false,
            recovery: false,
            max_epoch: 4,
        }
    }

    /// The group deleted and created again around a settled group and its first election, with
    /// a lost answer, a failover and an expiry: I3 across re-creation.
    pub fn group_recreated() -> Self {
        Config {
            name: "group-recreated",
            pods: 2,
            from_settled: true,
            failures: 1,
            deadlines: 0,
            crashes: 0,
            failovers: 1,
            expiries: 1,
            readiness: 0,
            deletions: 0,
            selector_edits: 0,
            preference_edits: 0,
            pause_edits: 0,
            recreations: 1,
            lease_on_deletion: LeaseOnDeletion::Released,
            liveness: false,
            recovery: false,
            max_epoch: 4,
        }
    }

    /// `group-recreated` with a readiness change besides (a handover before the deletion, so
    /// that the old group handed an epoch above 1), and the finalizer as it was before epochs
    /// continued across a group's re-creation: it deleted the group's Lease, so the group
    /// created again minted from 1 (its counterexample to I3 is kept as a replay).
    pub fn group_recreated_lease_deleted() -> Self {
        Config {
            name: "group-recreated-lease-deleted",
            readiness: 1,
            lease_on_deletion: LeaseOnDeletion::Deleted,
            ..Config::group_recreated()
        }
    }

    /// Liveness: the group's creation and a settled group, a failover, an expiry, a lost answer
    /// and a preference edit, after which the faults end.
    pub fn liveness() -> Self {
        Config {
            name: "liveness",
            pods: 2,
            from_settled: true,
            failures: 1,
            deadlines: 0,
            crashes: 0,
            failovers: 1,
            expiries: 1,
            readiness: 0,
            deletions: 0,
            selector_edits: 0,
            preference_edits: 1,
            pause_edits: 0,
            recreations: 0,
            lease_on_deletion: LeaseOnDeletion::Released,
            liveness: true,
            recovery: false,
            max_epoch: 4,
        }
    }

    /// The same bounds, with every fault and edit used up: what is left once the faults end.
    fn without_faults(&self) -> Self {
        Config {
            failures: 0,
            deadlines: 0,
            crashes: 0,
            failovers: 0,
            expiries: 0,
            readiness: 0,
            deletions: 0,
            selector_edits: 0,
            preference_edits: 0,
            pause_edits: 0,
            recreations: 0,
            ..self.clone()
        }
    }

    pub fn named(name: &str) -> Option<Self> {
        [
            Config::liveness(),
            Config::combined(),
            Config::selector(),
            Config::unknown_outcome(),
            Config::large(),
            Config::recreation(),
            Config::group_recreated(),
            Config::group_recreated_lease_deleted(),
        ]
        .into_iter()
        .find(|c| c.name == name)
    }
}

/// What the checker may make happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A replica observes its caches, decides and sends its first requests.
    Reconcile(ReplicaId),
    /// A replica's step 4 lists the pods afresh.
    Check(ReplicaId),
    /// The API server applies a request, and answers its sender if that still waits.
    Deliver(Msg),
    /// The sender's request ends in a 5xx or a reset; the server may still apply it later.
    Fail(Msg),
    /// A replica's reconcile hits its deadline.
    Deadline(ReplicaId),
    /// A replica crashes and starts again.
    Crash(ReplicaId),
    /// The HA Lease moves to this replica.
    Failover(ReplicaId),
    /// A replica's watch caches catch up.
    Sync(ReplicaId),
    /// The group Lease runs out.
    Expire,
    SetReady(PodId, bool),
    DeletePod(PodId),
    RecreatePod(PodId),
    /// The user edits spec.selector so that it excludes (or selects again) the pod.
    ToggleSelected(PodId),
    Prefer(Option<PodId>),
    Pause(bool),
    /// The user deletes the group; the active replica's finalizer runs; the user creates it
    /// again.
    RecreateGroup,
    /// No fault or edit happens any more on this path (liveness configurations).
    EndFaults,
}

/// The model of one group, two operator replicas, the API server and the user.
#[derive(Clone, Debug)]
pub struct LeaderGroupModel {
    pub config: Config,
    /// Renumber versions and sort requests (the checker); off to print a counterexample with
    /// versions as the API server would number them.
    pub canonical: bool,
}

pub const REPLICAS: ReplicaId = 2;

impl LeaderGroupModel {
    pub fn new(config: Config) -> Self {
        LeaderGroupModel {
            config,
            canonical: true,
        }
    }

    /// The same model, its states numbered as the API server would.
    pub fn raw(&self) -> Self {
        LeaderGroupModel {
            config: self.config.clone(),
            canonical: false,
        }
    }

    /// The group just created: every pod Ready and unmarked, no Lease, replica `op-a` active,
    /// both caches in sync.
    pub fn created(&self) -> State {
        let pods = usize::from(self.config.pods);
        let server = World {
            group: GroupObj {
                incarnation: 0,
                spec: Spec::default(),
                generation: 1,
                status: None,
                rv: 1,
            },
            lease: None,
            pods: (0..self.config.pods)
                .map(|i| {
                    Some(PodObj {
                        incarnation: 0,
                        ready: true,
                        role: None,
                        epoch: None,
                        marked: false,
                        barrier: None,
                        rv: 2 + u32::from(i),
                    })
                })
                .collect(),
        };
        let replica = Replica {
            cache: server.clone(),
            barrier_up: None,
            fresh: false,
            pass: None,
        };
        let state = State {
            server,
            inflight: Vec::new(),
            replicas: vec![replica; usize::from(REPLICAS)],
            active: Some(0),
            spent: Spent::default(),
            ghost: Ghost::new(pods),
            rev: 0,
            anomaly: false,
            faults_over: false,
        };
        self.finish(state)
    }

    /// The group after its first election ran without a fault: `p1` leads at epoch 1, the
    /// others are followers, `op-a` has its barrier up.
    pub fn settled(&self) -> State {
        crate::properties::settle(self, self.created())
    }

    fn finish(&self, state: State) -> State {
        if self.canonical {
            state.canonical()
        } else {
            state
        }
    }

    fn replicas(&self) -> impl Iterator<Item = ReplicaId> {
        0..REPLICAS
    }

    /// Whether `action` may happen in `state` (the budgets and the objects allow it).
    fn enabled(&self, state: &State, actions: &mut Vec<Action>) {
        let without_faults;
        let c = if state.faults_over {
            without_faults = self.config.without_faults();
            // Time still passes: a Lease another replica wrote runs out.
            let lease = state.server.lease.as_ref();
            if lease.is_some_and(|l| !l.expired && state.active != Some(l.arbiter)) {
                actions.push(Action::Expire);
            }
            &without_faults
        } else {
            if self.config.liveness {
                actions.push(Action::EndFaults);
            }
            &self.config
        };
        let s = &state.spent;
        for r in self.replicas() {
            let Some(rep) = state.replicas.get(usize::from(r)) else {
                continue;
            };
            if state.active == Some(r) && rep.pass.is_none() {
                actions.push(Action::Reconcile(r));
            }
            if replica::awaits_check(state, r) {
                actions.push(Action::Check(r));
            }
            // Only the active replica's caches move: a standby's are as old as when it last
            // acted, which keeps the standby's view to the snapshots it actually decided on.
            if state.active == Some(r) && rep.cache != state.server {
                actions.push(Action::Sync(r));
            }
            if rep.pass.is_some() && s.deadlines < c.deadlines {
                actions.push(Action::Deadline(r));
            }
            if s.crashes < c.crashes {
                actions.push(Action::Crash(r));
            }
            if state.active != Some(r) && s.failovers < c.failovers {
                actions.push(Action::Failover(r));
            }
        }
        let mut seen: Vec<&Msg> = Vec::new();
        for m in &state.inflight {
            if seen.contains(&m) {
                continue;
            }
            seen.push(m);
            actions.push(Action::Deliver(m.clone()));
            if m.awaited.is_some() && s.failures < c.failures {
                actions.push(Action::Fail(m.clone()));
            }
        }
        if state.server.lease.as_ref().is_some_and(|l| !l.expired) && s.expiries < c.expiries {
            actions.push(Action::Expire);
        }
        for (i, pod) in state.server.pods.iter().enumerate() {
            let Ok(p) = PodId::try_from(i) else {
                continue;
            };
            match pod {
                Some(obj) => {
                    if s.readiness < c.readiness {
                        actions.push(Action::SetReady(p, !obj.ready));
                    }
                    if s.deletions < c.deletions {
                        actions.push(Action::DeletePod(p));
                    }
                }
                None => actions.push(Action::RecreatePod(p)),
            }
            if s.selector_edits < c.selector_edits {
                actions.push(Action::ToggleSelected(p));
            }
            if s.preference_edits < c.preference_edits
                && state.server.group.spec.preferred != Some(p)
            {
                actions.push(Action::Prefer(Some(p)));
            }
        }
        if s.pause_edits < c.pause_edits {
            actions.push(Action::Pause(!state.server.group.spec.paused));
        }
        let finalizer_free = state
            .active
            .and_then(|a| state.replicas.get(usize::from(a)))
            .is_some_and(|r| r.pass.is_none());
        if s.recreations < c.recreations && finalizer_free {
            actions.push(Action::RecreateGroup);
        }
    }

    /// The state after `action`, not yet renumbered. `None`: nothing changes.
    pub fn step(&self, last: &State, action: &Action) -> Option<State> {
        let mut s = last.clone();
        let pods = usize::from(self.config.pods);
        match action {
            Action::Reconcile(r) => match replica::reconcile(&mut s, *r, pods) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(_) => s.anomaly = true,
            },
            Action::Check(r) => replica::check(&mut s, *r),
            Action::Deliver(m) => {
                let i = s.inflight.iter().position(|x| x == m)?;
                let msg = s.inflight.remove(i);
                let rv = s.next_rv();
                let (reply, _) = s.server.apply(&msg.req, rv, &mut s.ghost);
                if let Some(slot) = msg.awaited {
                    replica::answer(&mut s, msg.from, slot, reply);
                }
            }
            Action::Fail(m) => {
                let i = s.inflight.iter().position(|x| x == m)?;
                let from = m.from;
                s.spent.failures += 1;
                if let Some(msg) = s.inflight.get_mut(i) {
                    msg.awaited = None;
                }
                replica::end(&mut s, from, replica::End::Error);
            }
            Action::Deadline(r) => {
                s.spent.deadlines += 1;
                replica::end(&mut s, *r, replica::End::Deadline);
            }
            Action::Crash(r) => {
                s.spent.crashes += 1;
                replica::restart(&mut s, *r);
            }
            Action::Failover(r) => {
                s.spent.failovers += 1;
                replica::turn_active(&mut s, *r);
            }
            Action::Sync(r) => replica::sync(&mut s, *r),
            Action::Expire => {
                // Once the faults ended, time passing is no fault.
                if !s.faults_over {
                    s.spent.expiries += 1;
                }
                user::expire(
                    std::iter::once(&mut s.server)
                        .chain(s.replicas.iter_mut().map(|r| &mut r.cache)),
                );
            }
            Action::SetReady(p, ready) => {
                s.spent.readiness += 1;
                let rv = s.next_rv();
                user::set_ready(&mut s.server, *p, *ready, rv);
            }
            Action::DeletePod(p) => {
                s.spent.deletions += 1;
                user::delete_pod(&mut s.server, *p);
            }
            Action::RecreatePod(p) => {
                let rv = s.next_rv();
                let incarnation = s.ghost.recreate(*p);
                user::recreate_pod(&mut s.server, *p, incarnation, rv);
            }
            Action::ToggleSelected(p) => {
                s.spent.selector_edits += 1;
                let mut spec = s.server.group.spec.clone();
                spec.excluded ^= 1 << p;
                let rv = s.next_rv();
                user::edit_spec(&mut s.server, spec, rv);
            }
            Action::Prefer(p) => {
                s.spent.preference_edits += 1;
                let mut spec = s.server.group.spec.clone();
                spec.preferred = *p;
                let rv = s.next_rv();
                user::edit_spec(&mut s.server, spec, rv);
            }
            Action::EndFaults => s.faults_over = true,
            Action::RecreateGroup => {
                s.spent.recreations += 1;
                let mut rv = s.next_rv();
                finalizer::delete_and_recreate(
                    &mut s.server,
                    self.config.lease_on_deletion,
                    || {
                        rv += 1;
                        rv - 1
                    },
                );
                s.rev = rv - 1;
            }
            Action::Pause(paused) => {
                s.spent.pause_edits += 1;
                let mut spec = s.server.group.spec.clone();
                spec.paused = *paused;
                let rv = s.next_rv();
                user::edit_spec(&mut s.server, spec, rv);
            }
        }
        Some(s)
    }
}

impl Model for LeaderGroupModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut init = vec![self.created()];
        if self.config.from_settled {
            init.push(self.settled());
        }
        init
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.enabled(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.step(last, &action).map(|s| self.finish(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all(&self.config)
    }

    fn within_boundary(&self, state: &State) -> bool {
        let lease = state.server.lease.as_ref().map_or(0, |l| l.epoch);
        let status = state.server.group.status.as_ref().map_or(0, |s| s.epoch);
        lease.max(status) <= self.config.max_epoch
    }
}
