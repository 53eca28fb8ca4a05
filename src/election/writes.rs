//! Which pod gets which write in one pass of the protocol: the marking says what the marks should
//! become; [`Marking::writes`] says how to get there given whether an earlier promotion in the
//! group may still be in flight.
//!
//! The barrier is the operator's defence against its own promotions landing late. (The
//! application's fence, which refuses a deposed leader's writes by epoch, is the client crate's
//! `fence`; the two are distinct.) A request the operator gave up on (its deadline passed, or
//! its process paused after sending it) may still land, and a promotion that lands after
//! leadership moved on would label a second leader. Two things make that impossible:
//! - every promotion is conditional on the resourceVersion of its pod read fresh just before it
//!   (`actions::pods::promote`): it writes only if nothing wrote the pod since;
//! - before promoting in a group where a promotion of an earlier decision may still be in flight,
//!   the operator writes every other pod of the group once (the barrier: annotation
//!   [`BARRIER_ANNOTATION`](crate::crd::BARRIER_ANNOTATION), the epoch about to be handed out), so
//!   that such a promotion, conditional on an older resourceVersion, is refused by the API
//!   server. That is the case after this process started (another incarnation, or another
//!   replica, may have sent one), after it turned active, after any of its own requests in the
//!   group was abandoned, and after a pass in the group failed (it may have moved the Lease off
//!   a pod whose demotion then failed): [`super::Observation::barrier_up`] is false then.

use super::marking::Marking;
use super::{PodVersion, Promotion};

/// A write that changes a pod's resourceVersion, always, so that a promotion of it decided
/// earlier, and still in flight, fails its precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Barrier {
    /// The pod.
    pub pod: String,
    /// The epoch the group has after this decision: the barrier's value.
    pub epoch: i64,
    /// The same write also gives it the group's follower marks: a candidate about to be demoted
    /// or marked follower anyway is written once, not twice.
    pub with_follower_marks: bool,
    /// The same write also removes the operator's marks (a deposed leader the group no longer
    /// holds, seen carrying no other group's marks).
    pub clears_marks: bool,
}

/// The pod writes of one pass, by protocol step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodWrites {
    /// Step 3: follower marks for the old leaders the group still holds (the barred ones take
    /// theirs with the barrier).
    pub demote: Vec<String>,
    /// Step 3: all of the group's marks off the old leaders it no longer holds, only if
    /// unchanged since seen.
    pub release: Vec<PodVersion>,
    /// Step 3: the deposed leaders. Those the group still holds are barred with their follower
    /// marks, those it no longer holds with all of the operator's marks removed (unless seen
    /// carrying another group's). Either write removes any leader label of the group whenever
    /// it lands, so a late promotion that lands before it is undone by it, and one after it
    /// fails: none of them needs to precede the check (whose list, by the selector, would not
    /// show a pod the group no longer holds anyway). The write is unconditional: one
    /// conditional on the pod as seen would fail exactly when a late promotion had landed, and
    /// the decision taken again no longer names the pod.
    pub deposed: Vec<Barrier>,
    /// Step 4, before the check: the group's barrier.
    pub barriers: Vec<Barrier>,
    /// Step 5: the leader's marks, conditional on a fresh read of the pod.
    pub promote: Option<Promotion>,
    /// The pods whose leader label the check's list may still show without it being a stray:
    /// the leader to promote, and the old leaders that step 3 or a barrier is writing.
    pub expected_leaders: Vec<String>,
    /// Whether the promotion, once it lands, leaves the group with no earlier promotion in
    /// flight: the group's barrier went up in this pass (it may be empty: nobody else to bar).
    pub raises_barrier: bool,
    /// Step 4's check lists every pod of the namespace labeled leader (those carrying the
    /// group's annotation are its leaders), not only the pods the selector matches: set when the
    /// group's barrier is not known to be up. A replica that has not itself promoted in the
    /// group since it started or turned active may have a pod cache that never showed a leader
    /// label another replica put on a pod the selector has dropped since (the other replica's
    /// release of it still in flight): only a list beyond the selector shows that label.
    pub list_every_leader: bool,
    /// Step 4 reads nothing afresh, and the promotion is conditional on this resourceVersion of
    /// the pod as observed: set when this pass commits the promotion (so the Lease and the status
    /// it records are the API server's, not a cache's) and the group's barrier is up (so every
    /// leader label the group's pods carry was put by this replica's own completed passes, each
    /// of which the records name until a later pass deposes and bars it). A cache that lags the
    /// pod fails the promotion's precondition: the pass decides again, and after as many
    /// conflicts as it allows, its failure takes the barrier flag down and the next pass checks.
    pub unchecked_version: Option<String>,
    /// After step 6: follower marks for the other candidates not barred.
    pub mark_followers: Vec<String>,
    /// After step 6: all of the group's marks off pods that left it, only if unchanged.
    pub unmark: Vec<PodVersion>,
}

impl Marking {
    /// The writes of this marking. `barrier_up`: the group is known to have no earlier promotion in
    /// flight, so the group's barrier is not needed again.
    ///
    /// A deposed leader (one the status or the Lease names, and leadership moves away from) is
    /// barred in any case: whatever this process remembers, a promotion of it may be in flight,
    /// and it may be outside the selector and unmarked. The group's barrier covers
    /// [`Marking::barrier_candidates`] but the released pods: a release removes their marks only if
    /// they are unchanged, a change of resourceVersion as good as a barrier (racing it, a
    /// barrier would fail the release's precondition). The demoted ones take their follower
    /// marks with the barrier instead: a demotion of a pod that carries no leader label changes
    /// nothing, not even its version.
    pub(super) fn writes(&self, barrier_up: bool) -> PodWrites {
        let released = |pod: &str| self.release.iter().any(|r| r.name == pod);
        let follower_marks =
            |pod: &String| self.demote.contains(pod) || self.mark_followers.contains(pod);
        let deposed: Vec<Barrier> = self
            .deposed
            .iter()
            .filter(|d| !released(&d.pod))
            .map(|d| Barrier {
                pod: d.pod.clone(),
                epoch: d.epoch,
                with_follower_marks: d.member,
                clears_marks: !d.member && !d.foreign,
            })
            .collect();
        let mut barriers = Vec::new();
        let raises_barrier = self.promote.is_some() && !barrier_up;
        if let Some(promotion) = self.promote.as_ref().filter(|_| raises_barrier) {
            let barred = |pod: &String| self.deposed.iter().any(|d| d.pod == *pod);
            barriers.extend(
                self.barrier_candidates
                    .iter()
                    .filter(|pod| !released(pod) && !barred(pod))
                    .map(|pod| Barrier {
                        pod: pod.clone(),
                        epoch: promotion.epoch,
                        with_follower_marks: follower_marks(pod),
                        clears_marks: false,
                    }),
            );
        }
        let written = |pod: &String| deposed.iter().chain(&barriers).any(|b| b.pod == *pod);
        let unwritten = |pods: &[String]| -> Vec<String> {
            pods.iter().filter(|pod| !written(pod)).cloned().collect()
        };
        let expected_leaders = self
            .promote
            .iter()
            .map(|p| p.pod.clone())
            .chain(self.demote.iter().cloned())
            .chain(self.release.iter().map(|r| r.name.clone()))
            .chain(self.deposed.iter().map(|d| d.pod.clone()))
            .fold(Vec::new(), |mut all: Vec<String>, pod| {
                if !all.contains(&pod) {
                    all.push(pod);
                }
                all
            });
        PodWrites {
            demote: unwritten(&self.demote),
            release: self.release.clone(),
            promote: self.promote.clone(),
            expected_leaders,
            raises_barrier,
            list_every_leader: !barrier_up,
            unchecked_version: None,
            mark_followers: unwritten(&self.mark_followers),
            unmark: self.unmark.clone(),
            deposed,
            barriers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::Deposed;

    fn names(pods: &[&str]) -> Vec<String> {
        pods.iter().map(|p| p.to_string()).collect()
    }

    fn version(pod: &str) -> PodVersion {
        PodVersion {
            name: pod.to_string(),
            resource_version: format!("rv-{pod}"),
        }
    }

    fn barrier(pod: &str, with_follower_marks: bool) -> Barrier {
        Barrier {
            pod: pod.to_string(),
            epoch: 7,
            with_follower_marks,
            clears_marks: false,
        }
    }

    fn deposed(pod: &str, member: bool) -> Deposed {
        Deposed {
            pod: pod.to_string(),
            member,
            epoch: 7,
            foreign: false,
        }
    }

    /// `old` led (the records name it) and is demoted, `gone` left the selector and is
    /// released, `new` is promoted, `c` is a candidate not yet marked, `d` is already a
    /// follower.
    fn handover() -> Marking {
        Marking {
            demote: names(&["old"]),
            release: vec![version("gone")],
            promote: Some(Promotion {
                pod: "new".to_string(),
                uid: None,
                epoch: 7,
            }),
            barrier_candidates: names(&["old", "gone", "c", "d"]),
            deposed: vec![deposed("old", true)],
            mark_followers: names(&["c"]),
            unmark: vec![version("left")],
        }
    }

    #[test]
    fn a_first_promotion_bars_every_candidate_but_the_released() {
        let w = handover().writes(false);
        assert!(w.raises_barrier);
        assert_eq!(
            w.deposed,
            vec![barrier("old", true)],
            "off the critical path"
        );
        assert_eq!(w.barriers, vec![barrier("c", true), barrier("d", false)]);
        assert!(w.demote.is_empty(), "old is demoted by its barrier");
        assert!(w.mark_followers.is_empty(), "c is marked by its barrier");
        assert_eq!(w.release, vec![version("gone")]);
        assert_eq!(w.unmark, vec![version("left")]);
        assert_eq!(w.expected_leaders, names(&["new", "old", "gone"]));
    }

    #[test]
    fn a_deposed_leader_is_barred_even_with_the_groups_barrier_up() {
        let w = handover().writes(true);
        assert!(!w.raises_barrier);
        assert_eq!(w.deposed, vec![barrier("old", true)]);
        assert!(w.barriers.is_empty());
        assert!(w.demote.is_empty());
        assert_eq!(w.mark_followers, names(&["c"]));
        assert_eq!(w.promote.map(|p| p.pod), Some("new".to_string()));
    }

    #[test]
    fn a_deposed_leader_the_selector_dropped_is_barred_and_cleared() {
        // The records name `a`, seen unmarked (its promotion had not landed) and no longer
        // selected: neither a candidate nor marked, it is barred only because it is named, and
        // its marks go with the barrier, should the promotion have landed meanwhile.
        let plan = Marking {
            demote: Vec::new(),
            release: Vec::new(),
            barrier_candidates: names(&["c", "d"]),
            deposed: vec![deposed("a", false)],
            ..handover()
        };
        for barrier_up in [false, true] {
            let w = plan.writes(barrier_up);
            let expected = Barrier {
                clears_marks: true,
                ..barrier("a", false)
            };
            assert_eq!(w.deposed, vec![expected], "{w:?}");
            assert!(w.barriers.iter().all(|b| b.pod != "a"));
        }
    }

    #[test]
    fn a_move_to_nobody_still_bars_the_deposed_leader() {
        let plan = Marking {
            promote: None,
            ..handover()
        };
        let w = plan.writes(false);
        assert!(!w.raises_barrier);
        assert_eq!(w.deposed, vec![barrier("old", true)]);
        assert!(w.barriers.is_empty());
        assert_eq!(w.expected_leaders, names(&["old", "gone"]));
    }

    #[test]
    fn the_check_lists_every_leader_until_the_groups_barrier_is_up() {
        assert!(handover().writes(false).list_every_leader);
        assert!(!handover().writes(true).list_every_leader);
    }

    #[test]
    fn a_released_leader_needs_no_barrier() {
        let plan = Marking {
            deposed: vec![deposed("gone", false)],
            ..handover()
        };
        let w = plan.writes(true);
        assert!(w.deposed.is_empty() && w.barriers.is_empty(), "{w:?}");
        assert_eq!(w.release, vec![version("gone")]);
    }

    #[test]
    fn every_pod_gets_at_most_one_write_before_the_promotion() {
        for barrier_up in [false, true] {
            let w = handover().writes(barrier_up);
            let mut written: Vec<&str> = w
                .demote
                .iter()
                .map(String::as_str)
                .chain(w.release.iter().map(|r| r.name.as_str()))
                .chain(w.deposed.iter().map(|b| b.pod.as_str()))
                .chain(w.barriers.iter().map(|b| b.pod.as_str()))
                .collect();
            let all = written.len();
            written.sort_unstable();
            written.dedup();
            assert_eq!(written.len(), all, "barrier_up={barrier_up}: {w:?}");
        }
    }
}
