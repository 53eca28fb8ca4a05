//! The two known I1 holes of the barrier, as exact interleavings replayed step by step against
//! the model (the operator's own decisions at every step). Each `replay_*` returns what happened;
//! the tests beside them assert today's outcome, and say which assertion flips once every
//! decision that moves the Lease away from a named pod bars that pod with a write that always
//! changes it.

use stateright::Model;

use crate::api::{PodId, PodPatch, ReplicaId, Request};
use crate::display;
use crate::model::{Action, Config, LeaderGroupModel};
use crate::replica;
use crate::state::{Msg, State};

/// How a replayed interleaving ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// I1 broke: these pods (name, epoch) carry the group's leader label at once.
    TwoLeaders(Vec<(String, i64)>),
    /// The interleaving ran to its end and I1 held.
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
}
