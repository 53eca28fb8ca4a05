//! The faults of a run, drawn from its seed alone: the same seed gives the same faults, with the
//! same targets, lengths and pauses between them. Which pod is "the leader" when a fault strikes,
//! and what the operator makes of it, is decided by the run itself.
//!
//! The odd-numbered groups run in Heartbeat mode (their leaders renew the Lease through the
//! client's `Membership`), the even-numbered ones in Readiness mode; every pod runs a
//! `Membership` ([`crate::members`]).

use std::time::Duration;

use serde::Serialize;

/// Which operator replica a replica fault strikes (resolved when it strikes: their /readyz).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Replica {
    /// The one acting (holding the operator's Lease).
    Active,
    /// The one waiting.
    Standby,
}

/// Which pod of a group a pod fault strikes (resolved when it strikes: the leader label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Target {
    Leader,
    Follower,
}

/// One fault. Lengths say how long it lasts before it is undone (the undoing runs on its own, so
/// faults overlap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// SIGKILL; a new process `down` later.
    KillReplica { replica: Replica, down: Duration },
    /// SIGSTOP, SIGCONT `paused` later: every request it sent or sends lands late.
    PauseReplica { replica: Replica, paused: Duration },
    /// SIGTERM (a rollout of the operator), then a new process.
    RollReplica { replica: Replica },
    /// Its connection holds every byte for `held`, then delivers them late.
    HoldReplica { replica: Replica, held: Duration },
    /// Its connection goes silent for `cut` (a partition), then the hung connections close.
    CutReplica { replica: Replica, cut: Duration },
    /// The pod is deleted (its kubelet removes it 300 ms later) and a new one replaces it.
    DeletePod { group: usize, target: Target },
    /// The pod turns NotReady, Ready again `not_ready` later.
    FlapPod {
        group: usize,
        target: Target,
        not_ready: Duration,
    },
    /// The group's Lease is deleted by hand.
    DeleteLease { group: usize },
    /// Someone else rewrites the group's Lease (its own compare-and-swap): another holder and a
    /// forged epoch, as an admin or as a member of the group (its ServiceAccount, whose Role may
    /// update the group's Lease so that the leader can renew it).
    ForgeLease {
        group: usize,
        epoch: ForgedEpoch,
        by: Forger,
    },
    /// Every promotion (a pod's label set to leader) is held inside the API server for `held`
    /// (an admission webhook), then lands late.
    HoldPromotions { held: Duration },
    /// kube-apiserver is killed (SIGKILL) and started again (same port, same etcd).
    RestartApiServer,
    /// A user edits the group's spec, and puts the field back `undo_after` later.
    EditSpec {
        group: usize,
        edit: SpecEdit,
        undo_after: Duration,
    },
    /// The pod's application (its `Membership`) stops, and starts again `down` later in the same
    /// pod: a restarted client.
    RestartMember {
        group: usize,
        target: Target,
        down: Duration,
    },
    /// The pod's node is cut off from the API server for `cut` (Heartbeat groups only): its
    /// `Membership`'s connections go silent, and its kubelet reports nothing (the pod faults skip
    /// it meanwhile), so the pod stays Ready in the API.
    CutMember {
        group: usize,
        target: Target,
        cut: Duration,
    },
    /// The pod's `Membership`'s open connections stall for good (half-open: no byte, no close)
    /// while new ones flow.
    StallMember { group: usize, target: Target },
    /// The replica's open connections (its watches among them) stall for good while new ones
    /// flow: only the operator's own bound on a silent watch ends them.
    StallReplica { replica: Replica },
    /// The leader's `Membership` is cut off for `cut` (it goes on reporting `Leader` until its
    /// confirmation lapses), and meanwhile someone does `then`.
    CutLeaderThen {
        group: usize,
        cut: Duration,
        then: WhileCut,
    },
    /// The pod's agent is frozen for `paused` (a starved sidecar; [`crate::members`]): it hands
    /// its application no publication and its connection holds every byte, while the
    /// application runs on with the last publication it got, which it stops acting on at its
    /// validity. With `hand_over` (a leader's only), `preferredLeader` names a follower meanwhile
    /// (put back after the resume): the handover of safety round five's first finding.
    PauseAgent {
        group: usize,
        target: Target,
        paused: Duration,
        hand_over: bool,
    },
}

/// What happens while a leader's `Membership` is cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum WhileCut {
    /// `leaseDurationSeconds` shortened to 1 s, then `preferredLeader` names a follower: the
    /// handover must wait as long as the Lease the leader last saw (both undone after the cut).
    ShortenThenHandOver,
    /// The Lease deleted by hand: it comes back, and a handover must still wait for the leader.
    DeleteLease,
    /// The status patched by hand to name a follower at the leader's epoch: no token twice.
    PatchStatus,
    /// One of the leader pod's two members cut off alone (the other hears and steps down), then
    /// `preferredLeader` names a follower: the handover must wait for both (undone after the
    /// cut; a pod of one member skips it).
    OneMemberThenHandOver,
}

/// A user's edit of a group's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SpecEdit {
    /// The selector leaves the pod out (`matchExpressions`: its `pod` label `NotIn`).
    Selector { exclude: Target },
    /// `preferredLeader` names a follower.
    PreferredLeader,
    /// `leaseDurationSeconds` takes this value.
    LeaseDuration(u32),
    /// `paused: true`.
    Paused,
    /// `liveness` flips (Readiness to Heartbeat, or back).
    Liveness,
}

impl Fault {
    /// A short, static name (the report's rows).
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::KillReplica { .. } => "replica killed",
            Fault::PauseReplica { .. } => "replica paused",
            Fault::RollReplica { .. } => "replica rolled",
            Fault::HoldReplica { .. } => "replica's requests held",
            Fault::CutReplica { .. } => "replica cut off",
            Fault::DeletePod { .. } => "pod deleted",
            Fault::FlapPod { .. } => "pod NotReady flap",
            Fault::DeleteLease { .. } => "Lease deleted",
            Fault::ForgeLease { .. } => "foreign Lease write",
            Fault::HoldPromotions { .. } => "promotions held",
            Fault::RestartApiServer => "kube-apiserver killed and restarted",
            Fault::EditSpec { edit, .. } => match edit {
                SpecEdit::Selector { .. } => "spec edit: selector",
                SpecEdit::PreferredLeader => "spec edit: preferredLeader",
                SpecEdit::LeaseDuration(_) => "spec edit: leaseDurationSeconds",
                SpecEdit::Paused => "spec edit: paused",
                SpecEdit::Liveness => "spec edit: liveness",
            },
            Fault::RestartMember { .. } => "client restarted",
            Fault::CutMember { .. } => "client's node cut off",
            Fault::StallMember { .. } => "client's connections stalled",
            Fault::StallReplica { .. } => "replica's connections stalled",
            Fault::CutLeaderThen { then, .. } => match then {
                WhileCut::ShortenThenHandOver => "client cut off, Lease shortened, handover",
                WhileCut::DeleteLease => "client cut off, Lease deleted",
                WhileCut::PatchStatus => "client cut off, status patched",
                WhileCut::OneMemberThenHandOver => "one of two members cut off, handover",
            },
            Fault::PauseAgent { hand_over, .. } => {
                if *hand_over {
                    "leader's agent paused, handover"
                } else {
                    "agent paused"
                }
            }
        }
    }

    /// The group it strikes, for the faults of one group.
    pub fn group(&self) -> Option<usize> {
        match self {
            Fault::FlapPod { group, .. }
            | Fault::DeletePod { group, .. }
            | Fault::DeleteLease { group }
            | Fault::ForgeLease { group, .. }
            | Fault::EditSpec { group, .. }
            | Fault::RestartMember { group, .. }
            | Fault::CutMember { group, .. }
            | Fault::CutLeaderThen { group, .. }
            | Fault::PauseAgent { group, .. }
            | Fault::StallMember { group, .. } => Some(*group),
            _ => None,
        }
    }

    /// The replica it strikes, for the replica faults (which strike one at a time).
    /// How long it lasts before it is undone; None for one that is over when it strikes (a
    /// SIGTERM, a deletion), and for a stall, which its replica's own bound ends.
    pub fn length(&self) -> Option<Duration> {
        match self {
            Fault::KillReplica { down: d, .. }
            | Fault::PauseReplica { paused: d, .. }
            | Fault::HoldReplica { held: d, .. }
            | Fault::CutReplica { cut: d, .. }
            | Fault::FlapPod { not_ready: d, .. }
            | Fault::HoldPromotions { held: d }
            | Fault::EditSpec { undo_after: d, .. }
            | Fault::RestartMember { down: d, .. }
            | Fault::CutMember { cut: d, .. }
            | Fault::CutLeaderThen { cut: d, .. }
            | Fault::PauseAgent { paused: d, .. } => Some(*d),
            _ => None,
        }
    }

    pub fn replica(&self) -> Option<Replica> {
        match self {
            Fault::KillReplica { replica, .. }
            | Fault::PauseReplica { replica, .. }
            | Fault::RollReplica { replica }
            | Fault::HoldReplica { replica, .. }
            | Fault::CutReplica { replica, .. }
            | Fault::StallReplica { replica } => Some(*replica),
            _ => None,
        }
    }
}

/// Every kind, in the report's order.
pub const KINDS: [&str; 26] = [
    "pod NotReady flap",
    "pod deleted",
    "foreign Lease write",
    "Lease deleted",
    "replica killed",
    "replica paused",
    "replica rolled",
    "replica's requests held",
    "replica cut off",
    "promotions held",
    "kube-apiserver killed and restarted",
    "spec edit: selector",
    "spec edit: preferredLeader",
    "spec edit: leaseDurationSeconds",
    "spec edit: paused",
    "spec edit: liveness",
    "client restarted",
    "client's node cut off",
    "client's connections stalled",
    "replica's connections stalled",
    "client cut off, Lease shortened, handover",
    "client cut off, Lease deleted",
    "client cut off, status patched",
    "one of two members cut off, handover",
    "agent paused",
    "leader's agent paused, handover",
];

/// Whether group `g` runs in Heartbeat mode (the odd-numbered ones).
pub fn heartbeat(g: usize) -> bool {
    g % 2 == 1
}

/// How many members (`Membership`s) each pod of group `g` runs: two in g2, g3, g6, g7, ... (one
/// of each mode in every four groups), one elsewhere.
pub fn members_per_pod(g: usize) -> usize {
    if g % 4 >= 2 { 2 } else { 1 }
}

/// The epoch annotation a foreign Lease write leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ForgedEpoch {
    /// The Lease's epoch moved by this much (up to 3 above or below; never below 0).
    Offset(i64),
    /// The largest epoch there is: never adopted, and the run then deletes the Lease as
    /// docs/protocol.md says to recover from a forgery.
    Top,
    /// A negative epoch, which no token ever is.
    Negative(i64),
    /// Not a number at all.
    NotANumber,
}

impl ForgedEpoch {
    /// The annotation's value, given the Lease's epoch before the write.
    pub fn value(self, current: i64) -> String {
        match self {
            ForgedEpoch::Offset(offset) => current.saturating_add(offset).max(0).to_string(),
            ForgedEpoch::Top => i64::MAX.to_string(),
            ForgedEpoch::Negative(value) => value.to_string(),
            ForgedEpoch::NotANumber => "forged".to_owned(),
        }
    }
}

/// Who writes a foreign Lease write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Forger {
    /// The run's admin.
    Admin,
    /// The group's members' ServiceAccount, with the documented member Role.
    Member,
}

/// A fault and the pause before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    pub before: Duration,
    pub fault: Fault,
}

/// `faults` steps for `groups` groups, from `seed`.
pub fn plan(seed: u64, faults: usize, groups: usize) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..faults)
        .map(|_| Step {
            before: ms(&mut rng, 10, 150),
            fault: fault(&mut rng, groups.max(1)),
        })
        .collect()
}

/// Draws one fault, of 210 shares: the pods' and Leases' faults (what a cluster does all day)
/// 142, the replicas' 10 (they strike one at a time, so they pace the run), promotions held 3, a
/// kube-apiserver restart (seconds without an API) 1, the users' spec edits 10, the applications' own faults (restarts,
/// partitions, stalls) 24, a cut-off leader with a shortened Lease, a deleted Lease or a patched
/// status 10, a paused agent 10 (half of the leaders' with a handover).
fn fault(rng: &mut fastrand::Rng, groups: usize) -> Fault {
    let replica = |rng: &mut fastrand::Rng| {
        if rng.u8(0..4) == 0 {
            Replica::Standby
        } else {
            Replica::Active
        }
    };
    let target = |rng: &mut fastrand::Rng| {
        if rng.bool() {
            Target::Leader
        } else {
            Target::Follower
        }
    };
    let group = rng.usize(0..groups);
    // A Heartbeat group (the odd-numbered ones): g1, g3, ... (g0 when there is one group only).
    let heartbeat_group = |rng: &mut fastrand::Rng| {
        if groups < 2 {
            0
        } else {
            2 * rng.usize(0..groups / 2) + 1
        }
    };
    match rng.u32(0..210) {
        0..84 => Fault::FlapPod {
            group,
            target: target(rng),
            not_ready: ms(rng, 50, 3000),
        },
        84..116 => Fault::DeletePod {
            group,
            target: target(rng),
        },
        116..132 => Fault::ForgeLease {
            group,
            epoch: match rng.u8(0..8) {
                0 => ForgedEpoch::Top,
                1 => ForgedEpoch::Negative(-rng.i64(1..=i64::MAX)),
                2 => ForgedEpoch::NotANumber,
                _ => ForgedEpoch::Offset(rng.i64(-3..=3)),
            },
            by: if rng.bool() {
                Forger::Member
            } else {
                Forger::Admin
            },
        },
        132..142 => Fault::DeleteLease { group },
        142..144 => Fault::KillReplica {
            replica: replica(rng),
            down: ms(rng, 0, 2000),
        },
        144..146 => Fault::PauseReplica {
            replica: replica(rng),
            paused: ms(rng, 100, 5000),
        },
        146..147 => Fault::RollReplica {
            replica: replica(rng),
        },
        147..149 => Fault::HoldReplica {
            replica: replica(rng),
            held: ms(rng, 100, 4000),
        },
        149..150 => Fault::CutReplica {
            replica: replica(rng),
            cut: ms(rng, 100, 4000),
        },
        150..153 => Fault::HoldPromotions {
            held: ms(rng, 100, 2500),
        },
        153..154 => Fault::RestartApiServer,
        154..164 => Fault::EditSpec {
            group,
            edit: match rng.u8(0..5) {
                0 => SpecEdit::Selector {
                    exclude: target(rng),
                },
                1 => SpecEdit::PreferredLeader,
                2 => SpecEdit::LeaseDuration(rng.u32(2..=6)),
                3 => SpecEdit::Paused,
                _ => SpecEdit::Liveness,
            },
            undo_after: ms(rng, 100, 3000),
        },
        164..170 => Fault::RestartMember {
            group,
            target: target(rng),
            down: ms(rng, 0, 2000),
        },
        170..180 => Fault::CutMember {
            group: heartbeat_group(rng),
            target: target(rng),
            cut: ms(rng, 100, 5000),
        },
        190..200 => {
            let then = match rng.u8(0..4) {
                0 => WhileCut::ShortenThenHandOver,
                1 => WhileCut::DeleteLease,
                2 => WhileCut::PatchStatus,
                _ => WhileCut::OneMemberThenHandOver,
            };
            // One member cut off alone needs a pod of two.
            let two = (0..groups)
                .filter(|&g| members_per_pod(g) == 2)
                .collect::<Vec<_>>();
            let group = match then {
                WhileCut::OneMemberThenHandOver if !two.is_empty() => two[rng.usize(0..two.len())],
                _ => group,
            };
            Fault::CutLeaderThen {
                group,
                cut: ms(rng, 500, 3000),
                then,
            }
        }
        200..210 => {
            let target = target(rng);
            Fault::PauseAgent {
                group,
                target,
                // Past the two thirds of the 3 s Lease a leader's publication holds, often.
                paused: ms(rng, 100, 5000),
                hand_over: target == Target::Leader && rng.bool(),
            }
        }
        180..188 => Fault::StallMember {
            group,
            target: target(rng),
        },
        _ => Fault::StallReplica {
            replica: replica(rng),
        },
    }
}

fn ms(rng: &mut fastrand::Rng, min: u64, max: u64) -> Duration {
    Duration::from_millis(rng.u64(min..=max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        assert_eq!(plan(7, 500, 4), plan(7, 500, 4));
        assert_ne!(plan(7, 500, 4), plan(8, 500, 4));
    }

    #[test]
    fn every_kind_is_drawn_and_targets_stay_in_range() {
        let steps = plan(1, 10_000, 5);
        for kind in KINDS {
            assert!(
                steps.iter().any(|s| s.fault.kind() == kind),
                "{kind} never drawn"
            );
        }
        for s in &steps {
            assert!(s.fault.group().is_none_or(|g| g < 5), "{s:?}");
            if let Fault::CutMember { group, .. } = s.fault {
                assert!(heartbeat(group), "{s:?}");
            }
            if let Fault::PauseAgent {
                target, hand_over, ..
            } = s.fault
            {
                assert!(!hand_over || target == Target::Leader, "{s:?}");
            }
            assert!(s.before <= Duration::from_millis(150), "{s:?}");
        }
        let forged: Vec<(ForgedEpoch, Forger)> = steps
            .iter()
            .filter_map(|s| match s.fault {
                Fault::ForgeLease { epoch, by, .. } => Some((epoch, by)),
                _ => None,
            })
            .collect();
        for absurd in [ForgedEpoch::Top, ForgedEpoch::NotANumber] {
            assert!(
                forged.iter().any(|(e, _)| *e == absurd),
                "{absurd:?} never drawn"
            );
        }
        assert!(
            forged
                .iter()
                .any(|(e, _)| matches!(e, ForgedEpoch::Negative(v) if *v < 0))
        );
        assert!(forged.iter().any(|(_, by)| *by == Forger::Member));
        assert!(forged.iter().any(|(_, by)| *by == Forger::Admin));
        let restarts = steps
            .iter()
            .filter(|s| s.fault == Fault::RestartApiServer)
            .count();
        assert!((25..=100).contains(&restarts), "{restarts} restarts");
    }
}
