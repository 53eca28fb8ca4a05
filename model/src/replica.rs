//! An operator replica's pass over one group, as `controller::converge` runs it: observe (the
//! watch caches and the replica's barrier flag), decide with the operator's own
//! [`election::decide`], then send the plan's steps as a small state machine, each step sending
//! its requests and waiting for their answers:
//! 1 commit; 2 record, 3 demote and release, 4 barrier then check, together; the strays; 5
//! promote (only while active, conditional on the version the check read); then the follower
//! marks and the removals of marks. The barrier flag is the replica's memory of the group: set
//! when a promotion that raised it lands, removed when a reconcile hits its deadline, cleared
//! when the replica turns active.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_operator::election::{self, Barrier, Observation, Plan, Promotion};
use leadergroup_operator::marks;

use crate::api::{PodId, PodPatch, ReplicaId, Reply, Request, World};
use crate::error::ModelError;
use crate::objects::{self, pod_id};
use crate::state::{Check, Pass, Phase, Slot, State};

/// How a pass ended before its last step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// A 409 (or the pod to promote gone): `converge` reads the group and the Lease afresh.
    Conflict,
    /// Any other error (a 5xx, a reset, a stale decision): the error policy requeues.
    Error,
    /// The reconcile's deadline: its requests are abandoned, and the barrier flag removed.
    Deadline,
}

/// What the decision observes: the group and the Lease from the cache (from the API server
/// after a 409), the pods from the cache.
fn observed(state: &State, replica: ReplicaId) -> Option<World> {
    let r = state.replicas.get(usize::from(replica))?;
    let mut world = r.cache.clone();
    if r.fresh {
        world.group = state.server.group.clone();
        world.lease = state.server.lease.clone();
    }
    Some(world)
}

/// Observe and decide; sends the pass's first requests. `Ok(false)`: nothing to do (the decision
/// defers to another replica, or the group is as it should be).
pub fn reconcile(state: &mut State, replica: ReplicaId, pods: usize) -> Result<bool, ModelError> {
    let Some(world) = observed(state, replica) else {
        return Ok(false);
    };
    let group = objects::group(&world.group, pods)?;
    let lease = world.lease.as_ref().map(objects::lease);
    let all: Vec<Pod> = world.pods().map(|(id, p)| objects::pod(id, p)).collect();
    let concerned: Vec<&Pod> = all
        .iter()
        .filter(|p| election::concerns(&group, lease.as_ref(), p))
        .collect();
    let identity = objects::replica_name(replica);
    let groups: Vec<&LeaderGroup> = vec![&group];
    let retired = BTreeSet::new();
    let Some(r) = state.replicas.get(usize::from(replica)) else {
        return Ok(false);
    };
    // The memory is keyed by the group's UID: a group created again starts with its flag down.
    let barrier_up = r.barrier_up == Some(world.group.incarnation);
    let plan = election::decide(&Observation {
        group: &group,
        groups: &groups,
        pods: &concerned,
        lease: lease.as_ref(),
        services: &[],
        slices: &[],
        lease_seen: world.lease.as_ref().map(objects::lease_seen),
        barrier_up,
        retired: &retired,
        identity: &identity,
        node_grace: objects::NODE_GRACE,
        now: objects::now(),
    });
    if plan.deferred.is_some() {
        return Ok(false);
    }
    if let Some(refused) = &plan.refused {
        return Err(ModelError::UnexpectedDecision(refused.reason));
    }
    let pass = pass(&plan, &world)?;
    let commit = match &plan.commit {
        Some(record) => Some(Request::LeaseCas {
            expected: world.lease.as_ref().map(|l| l.rv),
            holder: record.holder.as_deref().map(pod_id).transpose()?,
            holder_uid: record.holder_uid.clone(),
            epoch: record.epoch,
            arbiter: replica,
            owner: world.group.incarnation,
        }),
        None => None,
    };
    let idle = commit.is_none()
        && pass.fanout.is_empty()
        && pass.barriers.is_empty()
        && pass.promote.is_none()
        && pass.mark_followers.is_empty()
        && pass.unmark.is_empty();
    if idle {
        return Ok(false);
    }
    if let Some(r) = state.replicas.get_mut(usize::from(replica)) {
        r.fresh = false;
        r.pass = Some(pass);
    }
    match commit {
        Some(req) => {
            state.send(replica, Slot::Commit, req);
        }
        None => fan_out(state, replica),
    }
    Ok(true)
}

/// The pass's requests, from the plan.
fn pass(plan: &Plan, world: &World) -> Result<Pass, ModelError> {
    let writes = &plan.pods;
    let mut fanout = Vec::new();
    if let Some(status) = &plan.status {
        fanout.push(Request::Status {
            expected: world.group.rv,
            status: objects::status(status)?,
        });
    }
    for pod in &writes.demote {
        fanout.push(Request::Patch {
            pod: pod_id(pod)?,
            patch: PodPatch::Follower,
            precondition: None,
        });
    }
    for pod in &writes.release {
        fanout.push(Request::Patch {
            pod: pod_id(&pod.name)?,
            patch: PodPatch::Unmark,
            precondition: Some(objects::parse_rv(&pod.resource_version)?),
        });
    }
    let promote = match &writes.promote {
        Some(p) => Some((pod_id(&p.pod)?, p.uid.clone(), p.epoch)),
        None => None,
    };
    // Step 3 bars the deposed leaders the group holds (with their follower marks); step 4's
    // barriers precede the check.
    for b in &writes.deposed {
        fanout.push(barrier(b)?);
    }
    let barriers = writes
        .barriers
        .iter()
        .map(barrier)
        .collect::<Result<Vec<_>, _>>()?;
    let mut expected_leaders = 0u8;
    for pod in &writes.expected_leaders {
        expected_leaders |= 1 << pod_id(pod)?;
    }
    Ok(Pass {
        phase: Phase::Committing,
        fanout,
        barriers,
        promote,
        raises_barrier: writes.raises_barrier,
        group_incarnation: world.group.incarnation,
        expected_leaders,
        selector: world.group.spec.clone(),
        every_leader: writes.list_every_leader,
        unchecked: writes
            .unchecked_version
            .as_deref()
            .map(objects::parse_rv)
            .transpose()?,
        mark_followers: writes
            .mark_followers
            .iter()
            .map(|p| pod_id(p))
            .collect::<Result<_, _>>()?,
        unmark: writes
            .unmark
            .iter()
            .map(|p| Ok((pod_id(&p.name)?, objects::parse_rv(&p.resource_version)?)))
            .collect::<Result<_, ModelError>>()?,
    })
}

/// `actions::pods::raise_barrier`.
fn barrier(b: &Barrier) -> Result<Request, ModelError> {
    Ok(Request::Patch {
        pod: pod_id(&b.pod)?,
        patch: PodPatch::Barrier {
            epoch: b.epoch,
            follower: b.with_follower_marks,
            clear: b.clears_marks,
        },
        precondition: None,
    })
}

/// Steps 2, 3 and 4 go out together once the commit landed.
fn fan_out(state: &mut State, replica: ReplicaId) {
    let Some(pass) = pass_mut(state, replica) else {
        return;
    };
    let fanout = std::mem::take(&mut pass.fanout);
    let barriers = std::mem::take(&mut pass.barriers);
    pass.phase = Phase::Fanout {
        pending: count(fanout.len()),
        barriers: count(barriers.len()),
        check: None,
        failed: false,
    };
    for req in fanout {
        let slot = match &req {
            Request::Status { .. } => Slot::Record,
            _ => Slot::Demote,
        };
        state.send(replica, slot, req);
    }
    for req in barriers {
        state.send(replica, Slot::Barrier, req);
    }
    advance(state, replica);
}

fn count(n: usize) -> u8 {
    u8::try_from(n).unwrap_or(u8::MAX)
}

fn pass_mut(state: &mut State, replica: ReplicaId) -> Option<&mut Pass> {
    state
        .replicas
        .get_mut(usize::from(replica))
        .and_then(|r| r.pass.as_mut())
}

/// Whether the pass waits for its check: the barrier writes landed, the list not taken yet.
pub fn awaits_check(state: &State, replica: ReplicaId) -> bool {
    state
        .replicas
        .get(usize::from(replica))
        .and_then(|r| r.pass.as_ref())
        .is_some_and(|p| {
            p.promote.is_some()
                && matches!(
                    p.phase,
                    Phase::Fanout {
                        barriers: 0,
                        check: None,
                        failed: false,
                        ..
                    }
                )
        })
}

/// Step 4's fresh reads (`actions::pods::check` and the Lease), unless the plan needs none (then
/// the promotion is conditional on the version the decision observed): the pods the observed selector
/// matches (every pod labeled leader, with `every_leader`), of them those carrying the group's
/// leader marks by the operator's own [`marks::leads_for`], the pod to promote if it is still the
/// incarnation decided on ([`Promotion::is_incarnation`]), and whether the Lease names it at the
/// promotion's epoch, by the operator's own [`Promotion::is_committed_in`].
pub fn check(state: &mut State, replica: ReplicaId) {
    let server = state.server.clone();
    let Some(pass) = pass_mut(state, replica) else {
        return;
    };
    let Some((target, uid, epoch)) = pass.promote.clone() else {
        return;
    };
    if let Some(rv) = pass.unchecked {
        if let Phase::Fanout { check, .. } = &mut pass.phase {
            *check = Some(Check {
                strays: 0,
                target: Some(rv),
            });
        }
        advance(state, replica);
        return;
    }
    let mut strays = 0u8;
    for (id, pod) in server.pods() {
        let listed = pass.every_leader || pass.selector.selects(id);
        let leads = marks::leads_for(&objects::pod(id, pod), objects::GROUP);
        if listed && leads && pass.expected_leaders & (1 << id) == 0 {
            strays |= 1 << id;
        }
    }
    let promotion = Promotion {
        pod: objects::pod_name(target),
        uid,
        epoch,
    };
    let committed = promotion.is_committed_in(server.lease.as_ref().map(objects::lease).as_ref());
    let target = server
        .pod(target)
        .filter(|p| {
            pass.selector.selects(target)
                && committed
                && promotion.is_incarnation(&objects::pod(target, p))
        })
        .map(|p| p.rv);
    if let Phase::Fanout { check, .. } = &mut pass.phase {
        *check = Some(Check { strays, target });
    }
    advance(state, replica);
}

/// An answer reached its sender.
pub fn answer(state: &mut State, replica: ReplicaId, slot: Slot, reply: Reply) {
    let Some(pass) = pass_mut(state, replica) else {
        return;
    };
    let ok = reply == Reply::Ok;
    match (slot, &mut pass.phase) {
        (Slot::Commit, Phase::Committing) => {
            if ok {
                fan_out(state, replica);
            } else {
                end(state, replica, End::Conflict);
            }
            return;
        }
        (
            Slot::Record | Slot::Demote,
            Phase::Fanout {
                pending, failed, ..
            },
        ) => {
            *pending = pending.saturating_sub(1);
            *failed |= !ok;
        }
        (Slot::Barrier, Phase::Fanout { barriers, .. }) => *barriers = barriers.saturating_sub(1),
        (Slot::Stray, Phase::Strays { pending, .. }) => *pending = pending.saturating_sub(1),
        (Slot::Promote, Phase::Promoting) => {
            if !ok {
                end(state, replica, End::Conflict);
                return;
            }
            let raised = pass.raises_barrier.then_some(pass.group_incarnation);
            if let Some(incarnation) = raised
                && let Some(r) = state.replicas.get_mut(usize::from(replica))
            {
                r.barrier_up = Some(incarnation);
            }
            tidy(state, replica);
            return;
        }
        (Slot::Follower, Phase::Followers { pending }) => *pending = pending.saturating_sub(1),
        // A 409 on the removal of a pod's marks waits for the next pass.
        (Slot::Unmark, Phase::Unmarking { pending }) => *pending = pending.saturating_sub(1),
        _ => {
            end(state, replica, End::Conflict);
            return;
        }
    }
    advance(state, replica);
}

/// Moves the pass on while nothing is awaited.
pub fn advance(state: &mut State, replica: ReplicaId) {
    let active = state.active == Some(replica);
    let Some(pass) = pass_mut(state, replica) else {
        return;
    };
    match pass.phase.clone() {
        Phase::Fanout {
            pending: 0,
            barriers: 0,
            failed: true,
            ..
        } => end(state, replica, End::Conflict),
        Phase::Fanout {
            pending: 0,
            barriers: 0,
            check,
            failed: false,
        } => match (&pass.promote, check) {
            (None, _) => tidy(state, replica),
            (Some(_), Some(check)) => {
                let strays: Vec<PodId> =
                    (0..8u8).filter(|p| check.strays & (1 << p) != 0).collect();
                pass.phase = Phase::Strays {
                    pending: count(strays.len()),
                    target: check.target,
                };
                for pod in strays {
                    state.send(
                        replica,
                        Slot::Stray,
                        Request::Patch {
                            pod,
                            patch: PodPatch::Follower,
                            precondition: None,
                        },
                    );
                }
                advance(state, replica);
            }
            (Some(_), None) => {}
        },
        Phase::Strays { pending: 0, target } => {
            let Some((pod, _, epoch)) = pass.promote.clone() else {
                return;
            };
            let Some(version) = target else {
                end(state, replica, End::Conflict);
                return;
            };
            // still_current: never promote once another replica may be active.
            if !active {
                end(state, replica, End::Error);
                return;
            }
            pass.phase = Phase::Promoting;
            state.send(
                replica,
                Slot::Promote,
                Request::Patch {
                    pod,
                    patch: PodPatch::Promote { epoch },
                    precondition: Some(version),
                },
            );
        }
        Phase::Followers { pending: 0 } => {
            let unmark = std::mem::take(&mut pass.unmark);
            pass.phase = Phase::Unmarking {
                pending: count(unmark.len()),
            };
            for (pod, rv) in unmark {
                state.send(
                    replica,
                    Slot::Unmark,
                    Request::Patch {
                        pod,
                        patch: PodPatch::Unmark,
                        precondition: Some(rv),
                    },
                );
            }
            advance(state, replica);
        }
        Phase::Unmarking { pending: 0 } => {
            if let Some(r) = state.replicas.get_mut(usize::from(replica)) {
                r.pass = None;
            }
        }
        _ => {}
    }
}

/// Off the critical path: the follower marks, then the removals of marks.
fn tidy(state: &mut State, replica: ReplicaId) {
    let Some(pass) = pass_mut(state, replica) else {
        return;
    };
    let followers = std::mem::take(&mut pass.mark_followers);
    pass.phase = Phase::Followers {
        pending: count(followers.len()),
    };
    for pod in followers {
        state.send(
            replica,
            Slot::Follower,
            Request::Patch {
                pod,
                patch: PodPatch::Follower,
                precondition: None,
            },
        );
    }
    advance(state, replica);
}

/// The pass ends early: whatever it still awaits is abandoned, and may still land.
pub fn end(state: &mut State, replica: ReplicaId, how: End) {
    for m in &mut state.inflight {
        if m.from == replica {
            m.awaited = None;
        }
    }
    if let Some(r) = state.replicas.get_mut(usize::from(replica)) {
        r.pass = None;
        // Whatever the end, the pass may have moved the Lease off a leader whose demotion did
        // not land: the barrier flag goes down (`reconcile` and `converge`).
        r.barrier_up = None;
        if how == End::Conflict {
            r.fresh = true;
        }
    }
}

/// The process crashed and started again: no pass, no barrier flag, its caches listed afresh.
/// What it had sent is still in flight.
pub fn restart(state: &mut State, replica: ReplicaId) {
    end(state, replica, End::Error);
    let world = state.server.clone();
    if let Some(r) = state.replicas.get_mut(usize::from(replica)) {
        r.barrier_up = None;
        r.fresh = false;
        r.cache = world;
    }
}

/// The HA Lease moves to `replica`: the other one stops being active at once (its requests in
/// flight still land), and `replica` clears its barrier flags (another may have acted meanwhile).
pub fn turn_active(state: &mut State, replica: ReplicaId) {
    state.active = Some(replica);
    if let Some(r) = state.replicas.get_mut(usize::from(replica)) {
        r.barrier_up = None;
    }
}

/// The replica's watches catch up with the API server.
pub fn sync(state: &mut State, replica: ReplicaId) {
    let world = state.server.clone();
    if let Some(r) = state.replicas.get_mut(usize::from(replica)) {
        r.cache = world;
    }
}
