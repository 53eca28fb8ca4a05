//! Which pod gets which write in one pass of the protocol: the plan says what the marks should
//! become; [`Plan::writes`] says how to get there given whether an earlier promotion in the group
//! may still be in flight. Pure, so that the controller only sends what it is given, and the
//! choice is tested (and model-checked) without a cluster.

use super::{Plan, PodVersion, Promotion};

/// A write that changes a pod's resourceVersion so that a promotion of it decided earlier, and
/// still in flight, fails its precondition (see [`crate::barrier`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Barrier {
    /// The pod.
    pub pod: String,
    /// The same write also gives it the group's follower marks: a candidate about to be demoted
    /// or marked follower anyway is written once, not twice.
    pub with_follower_marks: bool,
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
    /// Step 4, before the check: the barrier writes.
    pub barriers: Vec<Barrier>,
    /// Step 5: the leader's marks, conditional on a fresh read of the pod.
    pub promote: Option<Promotion>,
    /// The pods whose leader label the check's list may still show without it being a stray:
    /// the leader to promote, and the old leaders that step 3 or a barrier is writing.
    pub expected_leaders: Vec<String>,
    /// Whether the promotion, once it lands, leaves the group with no earlier promotion in
    /// flight: the barrier went up in this pass (it may be empty: nobody else to bar).
    pub raises_barrier: bool,
    /// After step 6: follower marks for the other candidates not barred.
    pub mark_followers: Vec<String>,
    /// After step 6: all of the group's marks off pods that left it, only if unchanged.
    pub unmark: Vec<PodVersion>,
}

impl Plan {
    /// The writes of this plan. `barrier_up`: the group is known to have no earlier promotion in
    /// flight, so the barrier is not needed again.
    ///
    /// The barrier covers [`Plan::barrier_candidates`] but the released pods: a release removes
    /// their marks only if they are unchanged, a change of resourceVersion as good as a barrier
    /// (racing it, a barrier would fail the release's precondition). The demoted ones take their
    /// follower marks with the barrier instead: a demotion of a pod that carries no leader label
    /// changes nothing, not even its version.
    pub fn writes(&self, barrier_up: bool) -> PodWrites {
        let released = |pod: &str| self.release.iter().any(|r| r.name == pod);
        let raises_barrier = self.promote.is_some() && !barrier_up;
        let barriers: Vec<Barrier> = if raises_barrier {
            self.barrier_candidates
                .iter()
                .filter(|pod| !released(pod))
                .map(|pod| Barrier {
                    pod: pod.clone(),
                    with_follower_marks: self.demote.contains(pod)
                        || self.mark_followers.contains(pod),
                })
                .collect()
        } else {
            Vec::new()
        };
        let barred = |pod: &String| barriers.iter().any(|b| b.pod == *pod);
        let unbarred = |pods: &[String]| -> Vec<String> {
            pods.iter().filter(|pod| !barred(pod)).cloned().collect()
        };
        let expected_leaders = self
            .promote
            .iter()
            .map(|p| p.pod.clone())
            .chain(self.demote.iter().cloned())
            .chain(self.release.iter().map(|r| r.name.clone()))
            .collect();
        PodWrites {
            demote: unbarred(&self.demote),
            release: self.release.clone(),
            promote: self.promote.clone(),
            expected_leaders,
            raises_barrier,
            mark_followers: unbarred(&self.mark_followers),
            unmark: self.unmark.clone(),
            barriers,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn names(pods: &[&str]) -> Vec<String> {
        pods.iter().map(|p| p.to_string()).collect()
    }

    fn version(pod: &str) -> PodVersion {
        PodVersion {
            name: pod.to_string(),
            resource_version: format!("rv-{pod}"),
        }
    }

    /// `old` leads and is demoted, `gone` left the selector and is released, `new` is promoted,
    /// `c` is a candidate not yet marked, `d` is already a follower.
    fn handover() -> Plan {
        Plan {
            commit: None,
            status: None,
            demote: names(&["old"]),
            release: vec![version("gone")],
            promote: Some(Promotion {
                pod: "new".to_string(),
                epoch: 7,
            }),
            transition: None,
            barrier_candidates: names(&["old", "gone", "c", "d"]),
            mark_followers: names(&["c"]),
            unmark: vec![version("left")],
            requeue_after: Duration::from_secs(5),
        }
    }

    #[test]
    fn a_first_promotion_bars_every_candidate_but_the_released() {
        let w = handover().writes(false);
        assert!(w.raises_barrier);
        assert_eq!(
            w.barriers,
            vec![
                Barrier {
                    pod: "old".to_string(),
                    with_follower_marks: true
                },
                Barrier {
                    pod: "c".to_string(),
                    with_follower_marks: true
                },
                Barrier {
                    pod: "d".to_string(),
                    with_follower_marks: false
                },
            ]
        );
        assert!(w.demote.is_empty(), "old is demoted by its barrier");
        assert!(w.mark_followers.is_empty(), "c is marked by its barrier");
        assert_eq!(w.release, vec![version("gone")]);
        assert_eq!(w.unmark, vec![version("left")]);
        assert_eq!(w.expected_leaders, names(&["new", "old", "gone"]));
    }

    #[test]
    fn a_group_with_its_barrier_up_is_written_without_one() {
        let w = handover().writes(true);
        assert!(!w.raises_barrier);
        assert!(w.barriers.is_empty());
        assert_eq!(w.demote, names(&["old"]));
        assert_eq!(w.mark_followers, names(&["c"]));
        assert_eq!(w.promote.map(|p| p.pod), Some("new".to_string()));
    }

    #[test]
    fn no_promotion_raises_no_barrier() {
        let plan = Plan {
            promote: None,
            ..handover()
        };
        let w = plan.writes(false);
        assert!(!w.raises_barrier);
        assert!(w.barriers.is_empty());
        assert_eq!(w.demote, names(&["old"]));
        assert_eq!(w.expected_leaders, names(&["old", "gone"]));
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
                .chain(w.barriers.iter().map(|b| b.pod.as_str()))
                .collect();
            let all = written.len();
            written.sort_unstable();
            written.dedup();
            assert_eq!(written.len(), all, "barrier_up={barrier_up}: {w:?}");
        }
    }
}
