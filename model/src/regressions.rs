//! The I1 holes the checker found, as exact interleavings replayed step by step against the
//! model (the operator's own decisions at every step). Each `replay_*` returns what happened;
//! the tests beside them assert that the operator's code as it is now leaves one leader, and
//! say how the interleaving ended on the code before its fix.

use stateright::Model;

use crate::api::{PodId, PodPatch, ReplicaId, Request};
use crate::display;
use crate::finalizer::LeaseOnDeletion;
use crate::model::{Action, Config, LeaderGroupModel};
use crate::replica;
use crate::state::{Msg, State};

/// How a replayed interleaving ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// I1 broke: these pods (name, epoch) carry the group's leader label at once.
    TwoLeaders(Vec<(String, i64)>),
    /// I3 broke: a promotion landed with an epoch lower than one handed before, or handed to
    /// another pod already.
    TokenReused,
    /// The interleaving ran to its end and I1 and I3 held.
    OneLeader,
    /// A step was not possible in the model: the path no longer exists as written.
    Blocked { step: usize, wanted: String },
}

/// A promotion request of `pod` sent by `from`.
fn is_promotion(m: &Msg, from: ReplicaId, pod: PodId) -> bool {
    m.from == from
        && matches!(m.req, Request::Patch { pod: p, patch: PodPatch::Promote { .. }, .. } if p == pod)
}

/// The steps so far, for the transcript.
struct Replay {
    model: LeaderGroupModel,
    states: Vec<State>,
    actions: Vec<Action>,
    blocked: Option<(usize, String)>,
}

impl Replay {
    fn new(config: Config, settled: bool) -> Self {
        let model = LeaderGroupModel::new(config).raw();
        let init = if settled {
            model.settled()
        } else {
            model.created()
        };
        Replay {
            model,
            states: vec![init],
            actions: Vec::new(),
            blocked: None,
        }
    }

    fn state(&self) -> Option<&State> {
        self.states.last()
    }

    /// Takes `action` if it is enabled and changes something.
    fn act(&mut self, action: Action) -> &mut Self {
        if self.blocked.is_some() {
            return self;
        }
        let mut enabled = Vec::new();
        let next = self.state().and_then(|s| {
            self.model.actions(s, &mut enabled);
            enabled
                .contains(&action)
                .then(|| self.model.step(s, &action))
                .flatten()
        });
        match next {
            Some(next) => {
                self.states.push(next);
                self.actions.push(action);
            }
            None => self.blocked = Some((self.actions.len() + 1, action.to_string())),
        }
        self
    }

    /// Delivers (or fails) the first request in flight that `pick` selects.
    fn request(&mut self, pick: impl Fn(&Msg) -> bool, fail: bool, what: &str) -> &mut Self {
        let found = self
            .state()
            .and_then(|s| s.inflight.iter().find(|m| pick(m)).cloned());
        match found {
            Some(m) if fail => self.act(Action::Fail(m)),
            Some(m) => self.act(Action::Deliver(m)),
            None => {
                if self.blocked.is_none() {
                    self.blocked = Some((self.actions.len() + 1, what.to_string()));
                }
                self
            }
        }
    }

    /// `replica` reconciles and its pass runs: its checks taken, the requests it awaits
    /// delivered oldest first, but those `hold` selects, until nothing it awaits is left to
    /// deliver.
    fn pass(&mut self, replica: ReplicaId, hold: impl Fn(&Msg) -> bool) -> &mut Self {
        self.act(Action::Reconcile(replica));
        self.pass_on(replica, hold)
    }

    /// The pass `replica` has under way runs on, as in [`Replay::pass`].
    fn pass_on(&mut self, replica: ReplicaId, hold: impl Fn(&Msg) -> bool) -> &mut Self {
        for _ in 0..64 {
            let Some(s) = self.state() else {
                break;
            };
            if self.blocked.is_some() {
                break;
            }
            if replica::awaits_check(s, replica) {
                self.act(Action::Check(replica));
                continue;
            }
            let next = s
                .inflight
                .iter()
                .find(|m| m.from == replica && m.awaited.is_some() && !hold(m))
                .cloned();
            match next {
                Some(m) => {
                    self.act(Action::Deliver(m));
                }
                None => break,
            }
        }
        self
    }

    /// Delivers every request in flight, oldest first, whoever sent it.
    fn drain(&mut self) -> &mut Self {
        for _ in 0..64 {
            let next = self.state().and_then(|s| s.inflight.first().cloned());
            match next {
                Some(m) if self.blocked.is_none() => {
                    self.act(Action::Deliver(m));
                }
                _ => break,
            }
        }
        self
    }

    fn outcome(&self) -> Outcome {
        if let Some((step, wanted)) = &self.blocked {
            return Outcome::Blocked {
                step: *step,
                wanted: wanted.clone(),
            };
        }
        let Some(s) = self.state() else {
            return Outcome::OneLeader;
        };
        let leaders: Vec<(String, i64)> = s
            .server
            .leaders()
            .map(|(id, p)| (crate::objects::pod_name(id), p.epoch.unwrap_or(0)))
            .collect();
        if leaders.len() > 1 {
            Outcome::TwoLeaders(leaders)
        } else if !crate::properties::i3(s) {
            Outcome::TokenReused
        } else {
            Outcome::OneLeader
        }
    }

    fn transcript(&self) -> String {
        display::path(&self.model, &self.states, &self.actions)
    }
}

const A: ReplicaId = 0;
const B: ReplicaId = 1;
const P1: PodId = 0;
const P2: PodId = 1;

/// A Lease write of `from`.
fn is_lease_write(m: &Msg, from: ReplicaId) -> bool {
    m.from == from && matches!(m.req, Request::LeaseCas { .. })
}

/// A status write of `from`.
fn is_status_write(m: &Msg, from: ReplicaId) -> bool {
    m.from == from && matches!(m.req, Request::Status { .. })
}

/// Hole 1, a late promotion after a selector edit: `op-a`'s first election promotes `p1`, which
/// carries no marks yet; the promotion is held in flight and `op-a` pauses (the HA Lease moves
/// to `op-b`); the user edits spec.selector so that it no longer selects `p1`. `op-b` elects
/// `p2`: its barrier covers only the pods the new selector matches or that carry marks, its
/// demotion skips the unmarked `p1`, its check lists only the new selector. Nothing wrote `p1`,
/// so the held promotion's precondition still holds: it lands beside `p2`, at a lower epoch.
pub fn replay_late_promotion_after_selector_edit() -> (Outcome, String) {
    let mut r = Replay::new(Config::selector(), false);
    r.pass(A, |m| is_promotion(m, A, P1))
        .act(Action::ToggleSelected(P1))
        .act(Action::Failover(B))
        .act(Action::Expire)
        .act(Action::Sync(B))
        .pass(B, |_| false)
        .request(|m| is_promotion(m, A, P1), false, "op-a's promotion of p1");
    (r.outcome(), r.transcript())
}

/// Hole 2, the barrier flag survives a promotion whose outcome is unknown: `p1` leads and
/// `op-a`'s barrier is up; preferredLeader moves leadership to `p2`, whose promotion ends in a
/// 5xx for `op-a` while the server still holds it; the flag stays up. preferredLeader moves it
/// back to `p1`: the flag skips the barrier, and the demotion of `p2` (a follower, no leader
/// label) changes nothing, not even its resourceVersion. The held promotion of `p2` lands.
pub fn replay_barrier_flag_survives_unknown_outcome() -> (Outcome, String) {
    let mut r = Replay::new(Config::unknown_outcome(), true);
    r.act(Action::Prefer(Some(P2)))
        .act(Action::Sync(A))
        .pass(A, |m| is_promotion(m, A, P2))
        .request(|m| is_promotion(m, A, P2), true, "op-a's promotion of p2")
        .act(Action::Prefer(Some(P1)))
        .act(Action::Sync(A))
        .pass(A, |m| is_promotion(m, A, P2))
        .request(|m| is_promotion(m, A, P2), false, "op-a's promotion of p2");
    (r.outcome(), r.transcript())
}

/// Hole 3, a leader label outside the selector that a newly active replica's stale pod cache
/// never showed: `op-a` elects `p1` (its barrier up). The user edits spec.selector so that it no
/// longer selects `p1`; `op-a` moves leadership to `p2` (Lease and status at epoch 2) and sends
/// the release of `p1` (its marks off, only if unchanged), which is held in flight. The HA Lease
/// moves to `op-b`, whose pod cache is as old as the group's creation: its first decision
/// (creating a Lease) fails, it reads the group and the Lease afresh, the Lease runs out, and it
/// takes the group over for `p2`. Neither its decision (`p1` not selected, not named, seen
/// unmarked) nor a check listing only the new selector's pods shows `p1`'s leader label: `p2`
/// is promoted beside it.
pub fn replay_stale_cache_beside_a_leader_outside_the_selector() -> (Outcome, String) {
    let mut r = Replay::new(Config::selector(), false);
    r.pass(A, |_| false)
        .act(Action::ToggleSelected(P1))
        .act(Action::Sync(A))
        .act(Action::Reconcile(A))
        .act(Action::Failover(B))
        .act(Action::Reconcile(B))
        .request(|m| is_lease_write(m, A), false, "op-a's Lease write")
        .request(|m| is_status_write(m, A), false, "op-a's status write")
        .request(|m| is_lease_write(m, B), false, "op-b's Lease create")
        .act(Action::Expire)
        .pass(B, |_| false);
    (r.outcome(), r.transcript())
}

/// Hole 6, found by the chaos run: a failed pass forgets the leader it moved the Lease off.
/// `op-a` elects `p1`; its watch caches lag behind (they still show the group as created: no
/// Lease, `p1` unmarked) while its barrier flag is up. The user edits spec.selector so that it no
/// longer selects `p1`. `op-a`'s decision on its caches creates the Lease: a 409, so it reads the
/// group and the Lease afresh, and moves leadership to `p2` (Lease and status at epoch 2). The
/// barrier that would clear `p1`'s marks ends in a 5xx and does not land (yet). Decided again
/// after another 409, the Lease and the status name `p2` only, the pod cache shows `p1`
/// unmarked, and a check by the selector does not list `p1`: `p2` is promoted beside it, unless
/// the failed passes took the barrier flag down so that the check lists every leader label.
pub fn replay_failed_pass_forgets_the_leader_it_moved_off() -> (Outcome, String) {
    let mut r = Replay::new(Config::combined(), false);
    r.pass(A, |_| false)
        .act(Action::ToggleSelected(P1))
        .pass(A, |_| false)
        .act(Action::Reconcile(A))
        .request(|m| is_lease_write(m, A), false, "op-a's Lease write")
        .request(|m| is_status_write(m, A), false, "op-a's status write")
        .request(|m| is_barrier(m, A, P1), true, "op-a's barrier of p1")
        .pass(A, |_| false)
        .pass(A, |m| is_barrier(m, A, P1));
    (r.outcome(), r.transcript())
}

/// A barrier write of `pod` by `from`.
fn is_barrier(m: &Msg, from: ReplicaId, pod: PodId) -> bool {
    m.from == from
        && matches!(m.req, Request::Patch { pod: p, patch: PodPatch::Barrier { .. }, .. } if p == pod)
}

/// Hole 4 (I3), a promotion decided on a stale Lease cache: `op-b` takes over `op-a`'s first
/// election of `p1` (epoch 1). The user edits spec.selector so that it no longer selects `p1`;
/// `op-b`, reading the group afresh after a 409, moves leadership to `p2` at epoch 2 and
/// promotes it. Its next pass decides on its caches, which still show the group before the
/// edit, the Lease naming `p1` at epoch 1 and `p1` unmarked: nothing to commit, `p1` to
/// promote at epoch 1. A check that reads only pods finds `p1` selected (by the selector as
/// observed) and unchanged since the read: `p1` is handed epoch 1 after `p2` was handed 2.
pub fn replay_promotion_on_a_stale_lease_cache() -> (Outcome, String) {
    let mut r = Replay::new(Config::selector(), false);
    r.act(Action::Reconcile(A))
        .act(Action::Failover(B))
        .request(|m| is_lease_write(m, A), false, "op-a's Lease create")
        .act(Action::Sync(B))
        .request(|m| is_status_write(m, A), false, "op-a's status write")
        .act(Action::Expire)
        .pass(B, |_| false)
        .act(Action::Sync(B))
        .act(Action::ToggleSelected(P1))
        .pass(B, |_| false)
        .act(Action::Reconcile(B))
        .request(|m| is_barrier(m, A, P2), false, "op-a's barrier of p2")
        .act(Action::Check(B))
        .drain();
    (r.outcome(), r.transcript())
}

/// Hole 5, a re-created pod that a replica's stale pod cache does not hold yet: `p1` leads; the
/// user prefers `p2`; the HA Lease moves to `op-b` (its barrier flag down) and the group Lease
/// runs out. `op-b` moves leadership to `p2` (Lease and status at epoch 2, `p1` barred). `p2` is
/// deleted, `op-b`'s watch caches catch up (no `p2`), and `p2` is created again. The check reads
/// the new `p2` afresh and its promotion goes out, but ends in a 5xx for `op-b` while the server
/// still holds it. `op-b`'s next decision, on its caches, sees the Lease name a pod that does not
/// exist and moves leadership back to `p1` at epoch 3: it bars neither `p2` as the deposed leader
/// (not in its cache) nor as a candidate (same), and its check finds no stray leader label (the
/// promotion has not landed). `p1` is promoted; then the held promotion of `p2` lands, its
/// precondition intact: nothing wrote the new `p2` since it was read.
pub fn replay_recreated_pod_outside_a_stale_cache() -> (Outcome, String) {
    let mut r = Replay::new(Config::recreation(), true);
    r.act(Action::Prefer(Some(P2)))
        .act(Action::Failover(B))
        .act(Action::Expire)
        .act(Action::Sync(B));
    recreated_pod_outside_a_stale_cache(&mut r, B);
    (r.outcome(), r.transcript())
}

/// Hole 5 on one replica, its barrier flag up all along (a 5xx leaves it as it is): the same
/// moves by `op-a` alone.
pub fn replay_recreated_pod_outside_a_stale_cache_barrier_up() -> (Outcome, String) {
    let mut r = Replay::new(Config::recreation(), true);
    r.act(Action::Prefer(Some(P2))).act(Action::Sync(A));
    recreated_pod_outside_a_stale_cache(&mut r, A);
    (r.outcome(), r.transcript())
}

/// How hole 5's replay with the barrier flag down ends since the check compares the incarnation:
/// the promotion of the new `p2`, at the epoch the Lease gives its old incarnation, is never
/// sent.
pub fn is_refused_as_recreated(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Blocked { wanted, .. } if wanted == RECREATED_PROMOTION)
}

/// The step of hole 5's first replay that the incarnation check removes.
const RECREATED_PROMOTION: &str = "the promotion of the new p2";

/// Hole 5 from the preference edit on: `replica`, active and its caches caught up, moves
/// leadership to `p2`, which is deleted and created again around its promotion.
fn recreated_pod_outside_a_stale_cache(r: &mut Replay, replica: ReplicaId) {
    r.act(Action::Reconcile(replica))
        .request(|m| is_lease_write(m, replica), false, "the Lease write")
        .request(|m| is_status_write(m, replica), false, "the status write")
        .act(Action::DeletePod(P2))
        .act(Action::Sync(replica))
        .act(Action::RecreatePod(P2))
        .pass_on(replica, |m| is_promotion(m, replica, P2))
        .request(
            |m| is_promotion(m, replica, P2) && m.awaited.is_some(),
            true,
            RECREATED_PROMOTION,
        )
        .pass(replica, |m| is_promotion(m, replica, P2))
        .request(
            |m| is_promotion(m, replica, P2),
            false,
            "the held promotion of the new p2",
        );
}

/// A group deleted and created again under its name: `p1` leads at epoch 1; it turns NotReady
/// and `op-a` hands over to `p2` at epoch 2. The user deletes the group (the finalizer removes
/// the marks and does with the Lease what `lease_on_deletion` says) and creates it again; `op-a`,
/// its caches caught up, elects in the new group. With the Lease released (the finalizer as it
/// is), the new group inherits the Lease's epoch and hands `p2` epoch 3; with the Lease deleted
/// (as it was), it starts again at epoch 1, a token `p1` was handed already.
pub fn replay_group_recreated(lease: LeaseOnDeletion) -> (Outcome, String) {
    let config = Config {
        lease_on_deletion: lease,
        ..Config::group_recreated_lease_deleted()
    };
    let mut r = Replay::new(config, true);
    r.act(Action::SetReady(P1, false))
        .act(Action::Sync(A))
        .pass(A, |_| false)
        .act(Action::RecreateGroup)
        .act(Action::Sync(A))
        .pass(A, |_| false);
    (r.outcome(), r.transcript())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(outcome: &Outcome) -> Vec<&str> {
        match outcome {
            Outcome::TwoLeaders(l) => l.iter().map(|(n, _)| n.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    /// Before the barrier on deposed leaders, `p1` (epoch 1) and `p2` (epoch 2) were both
    /// labeled leader. Now `op-b`'s decision bars `p1` (the Lease holder and status leader it
    /// moves away from), and the held promotion fails its precondition.
    #[test]
    fn late_promotion_after_selector_edit_cannot_land() {
        let (outcome, transcript) = replay_late_promotion_after_selector_edit();
        println!("{transcript}");
        assert_eq!(outcome, Outcome::OneLeader, "{transcript}");
    }

    /// Before the barrier on deposed leaders, `p1` (epoch 3) and `p2` (epoch 2) were both
    /// labeled leader. Now the second decision bars `p2` (the Lease holder it moves away from)
    /// with a write that always changes it, and the held promotion fails its precondition.
    #[test]
    fn barrier_flag_surviving_an_unknown_outcome_lets_no_promotion_land() {
        let (outcome, transcript) = replay_barrier_flag_survives_unknown_outcome();
        println!("{transcript}");
        assert_eq!(outcome, Outcome::OneLeader, "{transcript}");
        assert!(names(&outcome).is_empty());
    }

    /// Before step 4's check listed every leader label of the namespace when the group's barrier
    /// is not known up, `p1` (epoch 1) and `p2` (epoch 2) were both labeled leader. Now `op-b`'s
    /// check finds `p1`'s label and demotes it as a stray before the promotion.
    #[test]
    fn stale_cache_beside_a_leader_outside_the_selector_demotes_it() {
        let (outcome, transcript) = replay_stale_cache_beside_a_leader_outside_the_selector();
        println!("{transcript}");
        assert_eq!(outcome, Outcome::OneLeader, "{transcript}");
    }

    /// Before a deposed leader was barred whether the pod cache shows it or not, `p1` (epoch 3)
    /// and the re-created `p2` (epoch 2) were both labeled leader, with the deciding replica's
    /// barrier flag down (after the HA Lease moved) as with it up. Now its decision bars `p2`
    /// (the Lease holder it moves away from, not in its cache), and the held promotion fails
    /// its precondition. With the flag down the path ends earlier since the check compares the
    /// incarnation too (`Promotion::is_incarnation`): it reads the new `p2`, not the one decided
    /// on, and the promotion at the old incarnation's epoch is never sent. With the flag up the
    /// pass skips the check (it commits its promotion itself), and the promotion, conditional on
    /// the old incarnation's version, cannot land.
    #[test]
    fn recreated_pod_outside_a_stale_cache_is_barred() {
        let (outcome, transcript) = replay_recreated_pod_outside_a_stale_cache();
        println!("{transcript}");
        assert!(
            is_refused_as_recreated(&outcome),
            "{outcome:?}\n{transcript}"
        );
        let (outcome, transcript) = replay_recreated_pod_outside_a_stale_cache_barrier_up();
        println!("{transcript}");
        assert_eq!(outcome, Outcome::OneLeader, "{transcript}");
    }

    /// Before a failed pass took the barrier flag down, `p1` (epoch 1) and `p2` (epoch 2) were
    /// both labeled leader: the check after the failures listed only the pods the new selector
    /// matches. Now it lists every leader label of the group, finds `p1`'s, and demotes it as a
    /// stray before the promotion.
    #[test]
    fn failed_pass_leaves_no_leader_outside_the_selector() {
        let (outcome, transcript) = replay_failed_pass_forgets_the_leader_it_moved_off();
        println!("{transcript}");
        assert_eq!(outcome, Outcome::OneLeader, "{transcript}");
        assert!(
            transcript.contains("p2") && transcript.contains("epoch=2"),
            "{transcript}"
        );
    }

    /// Before step 4's check read the Lease afresh and promoted only the pod it names at the
    /// decided epoch, `p1` was handed epoch 1 after `p2` had been handed epoch 2. Now the check
    /// finds the Lease at `p2`, epoch 2: the pass ends in a conflict, and the decision taken
    /// afresh promotes nobody new.
    #[test]
    fn promotion_on_a_stale_lease_cache_is_refused() {
        let (outcome, transcript) = replay_promotion_on_a_stale_lease_cache();
        println!("{transcript}");
        assert_eq!(outcome, Outcome::OneLeader, "{transcript}");
    }

    /// The finalizer leaves the Lease released with its epoch: the group created again hands
    /// `p2` epoch 3, above every epoch its name handed. With the finalizer as it was before (it
    /// deleted the Lease), the same moves ended in `TokenReused`: the new group handed `p2`
    /// epoch 1, which `p1` had been handed, after epoch 2.
    #[test]
    fn group_recreated_hands_no_token_twice() {
        let (outcome, transcript) = replay_group_recreated(LeaseOnDeletion::Released);
        println!("{transcript}");
        assert_eq!(outcome, Outcome::OneLeader, "{transcript}");
        assert!(transcript.contains("epoch=3"), "{transcript}");
        let (before, transcript) = replay_group_recreated(LeaseOnDeletion::Deleted);
        println!("{transcript}");
        assert_eq!(before, Outcome::TokenReused, "{transcript}");
    }
}
