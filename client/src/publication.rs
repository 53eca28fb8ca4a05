//! What a member publishes to whoever acts on its role: the role, which publication it is, and
//! until when it holds; and the gate a consumer that acts after the fact (the agent: its files,
//! its command) puts on the member's step-down. Pure: [`crate::Membership`] and the model checker
//! (`model/`) run the same code.

use tokio::time::Instant;

use crate::{Epoch, Role};

/// One publication of a member's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Publication {
    /// The role.
    pub role: Role,
    /// Counts the publications since the member started: the step-down gate compares it, since
    /// the role alone can come back to a value acted on earlier.
    pub seq: u64,
    /// While [`Role::Leader`]: the instant the role lapses unless the API server confirms it
    /// again (two thirds of the Lease duration after the oldest confirmation it rests on). The
    /// operator labels no successor before it, so a consumer that stops acting by then never
    /// acts beside one, even when the member itself is paused and publishes nothing more.
    pub valid_until: Option<Instant>,
}

impl Publication {
    /// What a member publishes before it has confirmed anything.
    pub fn initial() -> Publication {
        Publication {
            role: Role::Unknown,
            seq: 0,
            valid_until: None,
        }
    }

    /// The publication that follows this one for `role`, decided from an observation that lapses
    /// at `lapses_at`; `None` when it would say nothing new.
    pub fn next(&self, role: Role, lapses_at: Option<Instant>) -> Option<Publication> {
        let valid_until = lapses_at.filter(|_| role.is_leader());
        (role != self.role || valid_until != self.valid_until).then_some(Publication {
            role,
            seq: self.seq + 1,
            valid_until,
        })
    }

    /// Whether the role holds at `now`: leader only before [`Publication::valid_until`].
    pub fn role_at(&self, now: Instant) -> Role {
        match self.valid_until {
            Some(until) if now >= until => Role::Unknown,
            _ => self.role,
        }
    }
}

/// What a member tells the operator in the Lease, at an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Note {
    /// As the holder: it will report `Leader` at this epoch, and step down when deposed.
    Acknowledged(Epoch),
    /// As the predecessor: it no longer reports `Leader` at this epoch.
    SteppedDown(Epoch),
}

/// A gated member's consumer: what the member publishes now, and which publication the consumer
/// has acted on last (files written, command run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gate {
    /// The member's publication now.
    pub published: Publication,
    /// The [`Publication::seq`] the consumer acted on last.
    pub acted: Option<u64>,
}

impl Gate {
    /// Whether the member may say it stepped down from `epoch`: the consumer acted on the very
    /// publication made now (not on an earlier one of the same value), and that one does not
    /// lead at `epoch`.
    pub fn released(&self, epoch: Epoch) -> bool {
        self.acted == Some(self.published.seq) && self.published.role.leader_epoch() != Some(epoch)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn leader(epoch: u32) -> Role {
        Role::Leader {
            epoch: Epoch::from(epoch),
        }
    }

    #[test]
    fn a_publication_follows_the_role_and_the_leaders_validity() {
        let t0 = Instant::now();
        let p0 = Publication::initial();
        assert_eq!(p0.next(Role::Unknown, Some(t0)), None, "nothing new");
        let p1 = p0
            .next(leader(3), Some(t0 + Duration::from_secs(10)))
            .unwrap();
        assert_eq!(p1.seq, 1);
        assert_eq!(p1.valid_until, Some(t0 + Duration::from_secs(10)));
        // A new confirmation moves the validity: a new publication of the same role.
        let p2 = p1
            .next(leader(3), Some(t0 + Duration::from_secs(15)))
            .unwrap();
        assert_eq!((p2.seq, p2.role), (2, leader(3)));
        // Only a leader carries a validity.
        let p3 = p2
            .next(Role::Follower, Some(t0 + Duration::from_secs(20)))
            .unwrap();
        assert_eq!(p3.valid_until, None);
        assert_eq!(p3.next(Role::Follower, Some(t0)), None);
    }

    #[test]
    fn a_leader_publication_says_unknown_once_its_validity_has_passed() {
        let t0 = Instant::now();
        let p = Publication::initial()
            .next(leader(3), Some(t0 + Duration::from_secs(10)))
            .unwrap();
        assert_eq!(p.role_at(t0), leader(3));
        assert_eq!(p.role_at(t0 + Duration::from_secs(10)), Role::Unknown);
        assert_eq!(Publication::initial().role_at(t0), Role::Unknown);
    }

    /// Finding 2 of safety round five: a role that comes back to a value acted on earlier is a
    /// new publication, and acting on the earlier one does not release the step-down.
    #[test]
    fn the_gate_opens_only_for_the_publication_acted_on() {
        let t0 = Instant::now();
        let unknown = Publication::initial()
            .next(leader(2), Some(t0))
            .unwrap()
            .next(Role::Unknown, None)
            .unwrap();
        let leading = unknown.next(leader(3), Some(t0)).unwrap();
        let deposed = leading.next(Role::Unknown, None).unwrap();
        assert_eq!(
            deposed.role, unknown.role,
            "the same value, published again"
        );
        // The consumer acted on the first `unknown`, and is still running its command for
        // `leader` at epoch 3.
        let gate = Gate {
            published: deposed,
            acted: Some(unknown.seq),
        };
        assert!(!gate.released(Epoch::from(3)));
        let gate = Gate {
            published: deposed,
            acted: Some(leading.seq),
        };
        assert!(!gate.released(Epoch::from(3)));
        let gate = Gate {
            published: deposed,
            acted: Some(deposed.seq),
        };
        assert!(gate.released(Epoch::from(3)));
        // Acted on a leader at the epoch asked of: never.
        let gate = Gate {
            published: leading,
            acted: Some(leading.seq),
        };
        assert!(!gate.released(Epoch::from(3)));
    }
}
