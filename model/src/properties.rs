//! What must hold: the invariants of docs/protocol.md as stateright properties.
//!
//! Liveness: stateright's `eventually` is only sound on acyclic paths, and this model's paths
//! cycle (a reconcile that changes nothing, a cache that catches up); with no fairness either, a
//! path that never delivers a request would refute any `eventually`. What is checked instead:
//! `sometimes` that a pod leads and that leadership moves (reachability), and, in the
//! configurations that ask for it, from every reachable state, that the fault-free schedule of
//! [`settle`] (every request delivered, caches caught up, the active replica reconciling, the
//! Lease running out if it must) labels exactly one leader whenever an eligible pod exists: a
//! leader stays reachable whatever happened before.

use stateright::{Model, Property};

use crate::api::PodId;
use crate::model::{Action, Config, LeaderGroupModel};
use crate::state::State;

pub const I1: &str = "I1: at most one pod labeled leader";
pub const I3: &str = "I3: epochs only grow, none handed to two pods";
pub const ORDER: &str =
    "order: a pod carries epoch e only after the Lease and the status named it at e";
pub const INCARNATIONS: &str =
    "incarnations: no two incarnations of a pod name are handed the same epoch";
pub const CONSISTENT: &str = "model consistent";
pub const RECOVERS: &str = "recovers: once faults stop, one leader is labeled";
pub const EVENTUALLY_LEADS: &str =
    "liveness: once faults and edits end, every path reaches one leader (eventually)";
pub const LEADS: &str = "sometimes a pod leads";
pub const MOVES: &str = "sometimes leadership moves";

pub fn all(config: &Config) -> Vec<Property<LeaderGroupModel>> {
    let mut p = vec![
        Property::always(I1, |_, s| i1(s)),
        Property::always(I3, |_, s| i3(s)),
        Property::always(ORDER, |_, s| order(s)),
        Property::always(INCARNATIONS, |_, s: &State| {
            !s.ghost.epoch_shared_by_incarnations
        }),
        Property::always(CONSISTENT, |_, s: &State| !s.anomaly),
        Property::sometimes(LEADS, |_, s: &State| s.server.leaders().count() == 1),
        Property::sometimes(MOVES, |_, s: &State| s.ghost.last_handed >= 2),
    ];
    if config.recovery {
        p.push(Property::always(RECOVERS, recovers));
    }
    if config.liveness {
        p.push(Property::eventually(EVENTUALLY_LEADS, |_, s: &State| {
            s.faults_over && leads_as_it_should(s)
        }));
    }
    p
}

pub fn i1(s: &State) -> bool {
    s.server.leaders().count() <= 1
}

pub fn i3(s: &State) -> bool {
    !s.ghost.epoch_went_down && !s.ghost.epoch_handed_twice
}

pub fn order(s: &State) -> bool {
    s.server
        .pods()
        .filter(|(_, p)| p.marked)
        .all(|(id, p)| p.epoch.is_none_or(|e| s.ghost.recorded(id, e)))
}

fn recovers(model: &LeaderGroupModel, s: &State) -> bool {
    leads_as_it_should(&settle(model, s.clone()))
}

/// One pod labeled leader, or at most one when the group is paused or no pod is eligible
/// (selected and Ready).
fn leads_as_it_should(s: &State) -> bool {
    let spec = &s.server.group.spec;
    let eligible = s.server.pods().any(|(id, p)| p.ready && spec.selects(id));
    let leaders = s.server.leaders().count();
    if spec.paused || !eligible {
        leaders <= 1
    } else {
        leaders == 1
    }
}

/// Runs the fault-free schedule from `state` until nothing changes: every request in flight
/// delivered (oldest first), the checks taken, the caches caught up, the active replica
/// reconciling, and the Lease running out when the active replica defers to another.
pub fn settle(model: &LeaderGroupModel, mut state: State) -> State {
    const STEPS: usize = 300;
    for _ in 0..STEPS {
        match fair_step(model, &state) {
            Some(next) => state = next,
            None => break,
        }
    }
    state
}

fn fair_step(model: &LeaderGroupModel, s: &State) -> Option<State> {
    let mut candidates: Vec<Action> = Vec::new();
    if let Some(m) = s.inflight.first() {
        candidates.push(Action::Deliver(m.clone()));
    }
    for r in 0..crate::model::REPLICAS {
        candidates.push(Action::Check(r));
    }
    for r in 0..crate::model::REPLICAS {
        if s.replicas
            .get(usize::from(r))
            .is_some_and(|x| x.cache != s.server)
        {
            candidates.push(Action::Sync(r));
        }
    }
    if let Some(a) = s.active
        && s.replicas
            .get(usize::from(a))
            .is_some_and(|x| x.pass.is_none())
    {
        candidates.push(Action::Reconcile(a));
    }
    for action in candidates {
        let enabled = match &action {
            Action::Check(r) => crate::replica::awaits_check(s, *r),
            _ => true,
        };
        if !enabled {
            continue;
        }
        if let Some(next) = model.next_state(s, action)
            && &next != s
        {
            return Some(next);
        }
    }
    // Nothing else moves: time passes, so that a Lease another replica wrote runs out.
    let lease = s.server.lease.as_ref()?;
    if lease.expired || s.active == Some(lease.arbiter) {
        return None;
    }
    let mut next = s.clone();
    crate::user::expire(
        std::iter::once(&mut next.server).chain(next.replicas.iter_mut().map(|r| &mut r.cache)),
    );
    Some(next)
}

/// The pods labeled leader, for the counterexamples.
pub fn leaders(s: &State) -> Vec<(PodId, Option<i64>)> {
    s.server.leaders().map(|(id, p)| (id, p.epoch)).collect()
}
