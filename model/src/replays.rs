//! Every kept interleaving (`regressions`, `heartbeat::regressions`), replayed, with the ending
//! its unit test asserts: what `leadergroup-model --replay` prints, and fails on when one ends
//! otherwise.

use crate::finalizer::LeaseOnDeletion;
use crate::heartbeat::client::{AppRule, GateRule};
use crate::heartbeat::clock::Tick;
use crate::heartbeat::regressions::{self as hb, HbOutcome};
use crate::regressions::{self, Outcome};

/// One kept interleaving, replayed.
pub struct Replayed {
    pub title: &'static str,
    /// How it ended, in a line.
    pub outcome: String,
    /// The path, step by step.
    pub text: String,
    /// It ended as its test asserts: no overlap on the code as it is, or, for a replay of the
    /// code before a fix, the hole that fix closed.
    pub as_expected: bool,
}

fn one_leader(title: &'static str, (outcome, text): (Outcome, String)) -> Replayed {
    Replayed {
        title,
        as_expected: outcome == Outcome::OneLeader,
        outcome: format!("{outcome:?}"),
        text,
    }
}

/// Hole 5's path with the barrier flag down, cut where the check refuses a pod created again
/// since the decision: the promotion of the new incarnation is never sent.
fn refused_as_recreated(title: &'static str, (outcome, text): (Outcome, String)) -> Replayed {
    Replayed {
        title,
        as_expected: regressions::is_refused_as_recreated(&outcome),
        outcome: format!("{outcome:?}"),
        text,
    }
}

fn no_stale(title: &'static str, (outcome, text): (HbOutcome, String)) -> Replayed {
    Replayed {
        title,
        as_expected: outcome == HbOutcome::NoStaleLeader,
        outcome: format!("{outcome:?}"),
        text,
    }
}

/// A handover over six seconds: no instant at which two clients believe `Leader`, and the
/// successor's does in the end.
fn handover(
    title: &'static str,
    (overlap, successor, text): (Vec<Tick>, Option<Tick>, String),
) -> Replayed {
    Replayed {
        title,
        as_expected: overlap.is_empty() && successor.is_some(),
        outcome: format!(
            "two clients believe Leader at {overlap:?} s, the successor's from {successor:?} s"
        ),
        text,
    }
}

/// Every kept interleaving, in the order `docs/model.md` tells them.
pub fn all() -> Vec<Replayed> {
    let mut out = vec![
        one_leader(
            "hole 1, late promotion after a selector edit",
            regressions::replay_late_promotion_after_selector_edit(),
        ),
        one_leader(
            "hole 2, barrier flag survives an unknown outcome",
            regressions::replay_barrier_flag_survives_unknown_outcome(),
        ),
        one_leader(
            "hole 3, a stale pod cache beside a leader outside the selector",
            regressions::replay_stale_cache_beside_a_leader_outside_the_selector(),
        ),
        one_leader(
            "hole 4, a promotion on a stale Lease cache",
            regressions::replay_promotion_on_a_stale_lease_cache(),
        ),
        refused_as_recreated(
            "hole 5, a re-created pod outside a stale pod cache",
            regressions::replay_recreated_pod_outside_a_stale_cache(),
        ),
        one_leader(
            "hole 5 on one replica, its barrier flag up",
            regressions::replay_recreated_pod_outside_a_stale_cache_barrier_up(),
        ),
        one_leader(
            "the group deleted and created again",
            regressions::replay_group_recreated(LeaseOnDeletion::Released),
        ),
    ];
    let (outcome, text) = regressions::replay_group_recreated(LeaseOnDeletion::Deleted);
    out.push(Replayed {
        title: "the group deleted and created again, its Lease deleted (the finalizer before the fix: a token reused)",
        as_expected: outcome == Outcome::TokenReused,
        outcome: format!("{outcome:?}"),
        text,
    });
    out.push(no_stale(
        "Heartbeat, a shorter Lease during a cut-off",
        hb::replay_shorter_duration_during_a_cut_off(),
    ));
    out.push(no_stale(
        "Heartbeat, a restarted client",
        hb::replay_restarted_client(),
    ));
    let (outcome, renewed_unlabeled, text) = hb::replay_successor_deposed_before_its_label();
    out.push(Replayed {
        title: "Heartbeat, a successor deposed before its label",
        as_expected: outcome == HbOutcome::NoStaleLeader && !renewed_unlabeled,
        outcome: format!("{outcome:?}, renewed unlabeled: {renewed_unlabeled}"),
        text,
    });
    out.push(handover(
        "Heartbeat, an immediate handover with the old leader cut off",
        hb::replay_immediate_handover_with_the_old_leader_cut_off(),
    ));
    out.push(handover(
        "Heartbeat, the Lease deleted under a cut-off leader",
        hb::replay_lease_deleted_under_a_cut_off_leader(),
    ));
    out.push(no_stale(
        "Heartbeat, a shorter Lease, then an operator restart",
        hb::replay_shorter_duration_then_an_operator_restart(),
    ));
    out.push(handover(
        "Heartbeat, a switchover after a shortened Lease",
        hb::replay_switchover_after_a_shortened_lease(),
    ));
    out.push(handover(
        "Heartbeat, a shortened Lease deleted during the wait",
        hb::replay_shortened_lease_deleted_during_the_wait(),
    ));
    out.push(handover(
        "Heartbeat, the pod GC sets a cut-off leader's pod Failed",
        hb::replay_pod_gc_failed_under_a_cut_off_leader(),
    ));
    out.push(handover(
        "Heartbeat, the status patched by hand, then the Lease deleted",
        hb::replay_status_patched_then_lease_deleted(),
    ));
    out.push(handover(
        "Heartbeat, two members of one pod, one cut off",
        hb::replay_two_members_one_cut_off(),
    ));
    out.push(handover(
        "Heartbeat, a preference after a foreign write",
        hb::replay_preference_after_a_foreign_write(),
    ));
    out.push(handover(
        "Heartbeat, a preference after the Lease was taken back",
        hb::replay_preference_after_a_lease_taken_back(),
    ));
    // Issue 48's findings 1 and 2: each on the code before commit 146e1dd (two applications
    // act as leader) and as it is (none).
    out.push(applications(
        "Heartbeat, a paused agent after a switchover, its application ignoring validUntil (before the fix: finding 1)",
        hb::replay_paused_agent_after_a_switchover(AppRule::IgnoresValidity),
        true,
    ));
    out.push(applications(
        "Heartbeat, a paused agent after a switchover, its application honouring validUntil",
        hb::replay_paused_agent_after_a_switchover(AppRule::HonoursValidity),
        false,
    ));
    out.push(applications(
        "Heartbeat, an agent back at a role acted on, its step-down gated by value (before the fix: finding 2)",
        hb::replay_agent_returns_to_a_role_acted_on(GateRule::ByValue),
        true,
    ));
    out.push(applications(
        "Heartbeat, an agent back at a role acted on, its step-down gated on the publication",
        hb::replay_agent_returns_to_a_role_acted_on(GateRule::BySeq),
        false,
    ));
    out
}

/// A replay of what the applications act on: two pods' applications act as leader at some
/// instant exactly when `overlaps` (the code before its fix) says so.
fn applications(
    title: &'static str,
    (overlap, text): (Vec<Tick>, String),
    overlaps: bool,
) -> Replayed {
    Replayed {
        title,
        as_expected: overlap.is_empty() != overlaps,
        outcome: format!("two pods' applications act as leader at {overlap:?} s"),
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `--replay` fails on: every kept interleaving ends as its own test asserts.
    #[test]
    fn every_replay_ends_as_expected() {
        let unexpected: Vec<String> = all()
            .into_iter()
            .filter(|r| !r.as_expected)
            .map(|r| format!("{}: {}\n{}", r.title, r.outcome, r.text))
            .collect();
        assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    }
}
