//! The election rules (docs/concepts.md, "How it elects"), one test each, on small fixtures and
//! no cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::*;
use crate::crd::{
    EPOCH_ANNOTATION, GROUP_ANNOTATION, LeaderGroupSpec, PodSelector, ROLE_FOLLOWER, ROLE_LABEL,
    ROLE_LEADER, SelectorOperator, SelectorRequirement,
};
use crate::pod_index::trim_pod;

const GROUP_UID: &str = "uid-pay";
const ME: &str = "op-1";
/// The node controller's grace period the tests' decisions assume: Kubernetes' default.
const NODE_GRACE: Duration = Duration::from_secs(50);

fn t(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

fn now() -> Timestamp {
    t(1000)
}

struct PodFixture {
    pod: Pod,
}

impl PodFixture {
    fn new(name: &str, created: i64) -> Self {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                creation_timestamp: Some(Time(t(created))),
                labels: Some([("app".to_string(), "pay".to_string())].into()),
                resource_version: Some(format!("rv-{name}")),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        };
        PodFixture { pod }
    }
    fn not_ready(mut self) -> Self {
        if let Some(s) = self.pod.status.as_mut() {
            s.conditions = Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..PodCondition::default()
            }]);
        }
        self
    }
    fn phase(mut self, phase: &str) -> Self {
        if let Some(s) = self.pod.status.as_mut() {
            s.phase = Some(phase.into());
        }
        self
    }
    fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.into());
        self
    }
    fn terminating(mut self) -> Self {
        self.pod.metadata.deletion_timestamp = Some(Time(now()));
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }
    fn annotate(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }
    /// The marks the operator puts on a leader.
    fn leader(self, epoch: i64) -> Self {
        self.label(ROLE_LABEL, ROLE_LEADER)
            .annotate(EPOCH_ANNOTATION, &epoch.to_string())
            .annotate(GROUP_ANNOTATION, "pay")
    }
    fn follower(self) -> Self {
        self.label(ROLE_LABEL, ROLE_FOLLOWER)
            .annotate(GROUP_ANNOTATION, "pay")
    }
}

fn group() -> LeaderGroup {
    let mut g = LeaderGroup::new(
        "pay",
        LeaderGroupSpec {
            selector: PodSelector {
                match_labels: [("app".to_string(), "pay".to_string())].into(),
                ..Default::default()
            },
            lease_duration_seconds: 15,
            preferred_leader: None,
            paused: false,
            liveness: Default::default(),
            service: None,
            history_limit: crate::crd::DEFAULT_HISTORY_LIMIT,
        },
    );
    g.metadata.namespace = Some("ns".into());
    g.metadata.uid = Some(GROUP_UID.into());
    g.metadata.generation = Some(1);
    g.metadata.creation_timestamp = Some(Time(t(0)));
    g
}

fn with_status(mut g: LeaderGroup, leader: Option<&str>, epoch: i64) -> LeaderGroup {
    g.status = Some(LeaderGroupStatus {
        leader: leader.map(Into::into),
        epoch,
        ..Default::default()
    });
    g
}

fn lease(holder: Option<&str>, epoch: i64, renewed: i64, arbiter: &str) -> Lease {
    owned(&record(holder, epoch, renewed, arbiter))
}

/// A Lease's content (Readiness mode), acquired at t(0), renewed at t(`renewed`).
fn record(holder: Option<&str>, epoch: i64, renewed: i64, arbiter: &str) -> LeaseRecord {
    LeaseRecord {
        holder: holder.map(Into::into),
        holder_uid: None,
        epoch,
        duration_seconds: 15,
        longest_seconds: None,
        acquire_time: Some(t(0)),
        renew_time: Some(t(renewed)),
        arbiter: Some(arbiter.into()),
        heartbeat: false,
        released_by: None,
        lapsed: None,
        acknowledged: false,
        acknowledged_by: Vec::new(),
        predecessor: None,
    }
}

/// The group's Lease holding `record`, owned by the group.
fn owned(record: &LeaseRecord) -> Lease {
    let owner = OwnerReference {
        kind: "LeaderGroup".into(),
        uid: GROUP_UID.into(),
        name: "pay".into(),
        ..Default::default()
    };
    record.apply_to(None, "leadergroup-pay", "ns", Some("pay"), Some(owner))
}

fn decide_with(group: &LeaderGroup, pods: &[PodFixture], lease: Option<&Lease>) -> Plan {
    decide_full(group, &[], pods, lease, ME)
}

fn decide_full(
    group: &LeaderGroup,
    others: &[&LeaderGroup],
    pods: &[PodFixture],
    lease: Option<&Lease>,
    identity: &str,
) -> Plan {
    decide_seen(group, others, pods, lease, None, identity)
}

/// The decision with what this replica saw of the Lease, on its own clock.
fn decide_seen(
    group: &LeaderGroup,
    others: &[&LeaderGroup],
    pods: &[PodFixture],
    lease: Option<&Lease>,
    lease_seen: Option<LeaseSeen>,
    identity: &str,
) -> Plan {
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| &p.pod).collect();
    let mut groups: Vec<&LeaderGroup> = others.to_vec();
    groups.push(group);
    decide(&Observation {
        group,
        groups: &groups,
        pods: &pod_refs,
        lease,
        services: &[],
        slices: &[],
        lease_seen,
        barrier_up: true,
        retired: &BTreeSet::new(),
        identity,
        node_grace: NODE_GRACE,
        now: now(),
    })
}

/// A plan that elects: neither deferred nor refused.
fn plan(p: Plan) -> Plan {
    assert!(
        p.deferred.is_none() && p.refused.is_none(),
        "expected a plan that elects, got {p:?}"
    );
    p
}

/// The pods that get the group's follower marks before the promotion, with their barrier or
/// without: the old leaders and the strays.
fn demoted(writes: &PodWrites) -> Vec<String> {
    let barred = writes
        .deposed
        .iter()
        .filter(|b| b.with_follower_marks)
        .map(|b| b.pod.clone());
    writes.demote.iter().cloned().chain(barred).collect()
}

fn three() -> Vec<PodFixture> {
    vec![
        PodFixture::new("a", 1),
        PodFixture::new("b", 2),
        PodFixture::new("c", 3),
    ]
}

/// A group led by `a` at epoch `e`, with every mark and record in place.
fn converged(e: i64) -> (LeaderGroup, Vec<PodFixture>, Lease) {
    let pods = vec![
        PodFixture::new("a", 1).leader(e),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ];
    let g0 = with_status(group(), Some("a"), e);
    let l = lease(Some("a"), e, 999, ME);
    // The status the decision itself would record, so that nothing differs.
    let status = plan(decide_with(&g0, &pods, Some(&l))).status;
    let g = match status {
        Some(s) => LeaderGroup {
            status: Some(s),
            ..g0
        },
        None => g0,
    };
    (g, pods, l)
}

#[test]
fn the_oldest_ready_pod_is_elected_first_at_epoch_one() {
    let p = plan(decide_with(&group(), &three(), None));
    let commit = p.commit.expect("the Lease is created");
    assert_eq!(commit.holder.as_deref(), Some("a"));
    assert_eq!(commit.epoch, 1);
    assert_eq!(commit.arbiter.as_deref(), Some(ME));
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "a".into(),
            uid: None,
            epoch: 1
        })
    );
    let t = p.transition.expect("a transition");
    assert_eq!(
        (t.reason, t.to.as_deref(), t.epoch),
        (Reason::Initial, Some("a"), 1)
    );
    let status = p.status.expect("status recorded");
    assert_eq!(status.leader.as_deref(), Some("a"));
    assert_eq!(status.epoch, 1);
    assert_eq!(status.ready.as_deref(), Some("3/3"));
    assert_eq!(status.succession, vec!["b".to_string(), "c".to_string()]);
    assert_eq!(status.last_transition_reason.as_deref(), Some("Initial"));
    // No Lease names this replica arbiter: an earlier promotion may be in flight, so the
    // others get their follower marks with the group's barrier, before the check.
    let barred: Vec<(&str, i64, bool)> = p
        .pods
        .barriers
        .iter()
        .map(|b| (b.pod.as_str(), b.epoch, b.with_follower_marks))
        .collect();
    assert_eq!(barred, [("b", 1, true), ("c", 1, true)]);
    assert!(p.pods.raises_barrier && p.pods.list_every_leader);
    assert!(p.pods.mark_followers.is_empty());
    assert!(demoted(&p.pods).is_empty());
}

#[test]
fn succession_orders_by_creation_then_name() {
    let pods = vec![
        PodFixture::new("z", 5),
        PodFixture::new("m", 2),
        PodFixture::new("k", 2),
    ];
    let p = plan(decide_with(&group(), &pods, None));
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("k"));
    assert_eq!(
        p.status.unwrap().succession,
        vec!["m".to_string(), "z".to_string()]
    );
}

#[test]
fn only_running_ready_live_pods_are_eligible() {
    let pods = vec![
        PodFixture::new("pending", 1).phase("Pending"),
        PodFixture::new("unready", 2).not_ready(),
        PodFixture::new("dying", 3).terminating(),
        PodFixture::new("ok", 4),
    ];
    let p = plan(decide_with(&group(), &pods, None));
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("ok"));
    let s = p.status.unwrap();
    assert_eq!((s.candidates, s.ready_candidates), (4, 1));
}

#[test]
fn a_converged_group_writes_nothing() {
    let (g, pods, l) = converged(4);
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.commit, None);
    assert_eq!(p.status, None);
    assert!(
        demoted(&p.pods).is_empty()
            && p.pods.promote.is_none()
            && p.pods.mark_followers.is_empty()
            && p.pods.unmark.is_empty()
    );
    assert_eq!(p.transition, None);
    // Renewed 1 s ago, due a third of 15 s after that.
    assert_eq!(p.requeue_after, Some(Duration::from_secs(4)));
}

#[test]
fn the_lease_is_renewed_every_third_of_its_duration() {
    let (g, pods, _) = converged(4);
    let stale = lease(Some("a"), 4, 1000 - 5, ME);
    let p = plan(decide_with(&g, &pods, Some(&stale)));
    let commit = p.commit.expect("renewal");
    assert_eq!(
        (commit.holder.as_deref(), commit.epoch, commit.renew_time),
        (Some("a"), 4, Some(now()))
    );
    assert_eq!(
        commit.acquire_time,
        Some(t(0)),
        "a renewal keeps acquireTime"
    );
    assert!(p.transition.is_none() && p.pods.promote.is_none());
}

#[test]
fn an_eligible_leader_stays_when_an_older_pod_comes_back() {
    // `a` is older but `b` leads: sticky.
    let pods = vec![
        PodFixture::new("a", 1).follower(),
        PodFixture::new("b", 2).leader(2),
        PodFixture::new("c", 3).follower(),
    ];
    let g = with_status(group(), Some("b"), 2);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("b"), 2, 999, ME))));
    assert_eq!(p.transition, None);
    assert_eq!(p.pods.promote, None);
    assert_eq!(p.commit, None);
}

#[test]
fn preferred_leader_takes_over_when_eligible() {
    let (mut g, pods, l) = converged(4);
    g.spec.preferred_leader = Some("c".into());
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(
        p.commit.as_ref().map(|c| (c.holder.as_deref(), c.epoch)),
        Some((Some("c"), 5))
    );
    assert_eq!(
        p.transition.as_ref().map(|t| t.reason),
        Some(Reason::Preferred)
    );
    assert_eq!(demoted(&p.pods), vec!["a".to_string()]);
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "c".into(),
            uid: None,
            epoch: 5
        })
    );
}

#[test]
fn preferred_leader_is_ignored_while_not_eligible() {
    let (mut g, mut pods, l) = converged(4);
    g.spec.preferred_leader = Some("c".into());
    pods[2] = PodFixture::new("c", 3).follower().not_ready();
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.transition, None);
    assert_eq!(p.commit, None);
}

fn handover(pods: Vec<PodFixture>) -> Plan {
    let (g, _, l) = converged(4);
    plan(decide_with(&g, &pods, Some(&l)))
}

#[test]
fn a_deleted_leader_is_replaced_by_the_next_in_succession() {
    let p = handover(vec![
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ]);
    let t = p.transition.expect("handover");
    assert_eq!(
        (t.from.as_deref(), t.to.as_deref(), t.epoch, t.reason),
        (Some("a"), Some("b"), 5, Reason::LeaderDeleted)
    );
    assert!(demoted(&p.pods).is_empty(), "a deleted pod is not demoted");
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "b".into(),
            uid: None,
            epoch: 5
        })
    );
    // The cache may lag behind a pod created again under the name, with a promotion of it in
    // flight: the name the records hold is barred all the same (a 404 if it is really gone),
    // its marks removed, seen carrying no other group's.
    assert_eq!(
        p.pods.deposed,
        vec![Barrier {
            pod: "a".into(),
            epoch: 5,
            with_follower_marks: false,
            clears_marks: true,
        }]
    );
}

#[test]
fn a_terminating_leader_hands_over_before_it_is_gone() {
    let p = handover(vec![
        PodFixture::new("a", 1).leader(4).terminating(),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ]);
    assert_eq!(
        p.transition.map(|t| t.reason),
        Some(Reason::LeaderTerminating)
    );
    assert_eq!(demoted(&p.pods), vec!["a".to_string()]);
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("b"));
}

#[test]
fn a_leader_deleted_with_no_grace_is_deleted_not_terminating() {
    let mut forced = PodFixture::new("a", 1).leader(4).terminating();
    forced.pod.metadata.deletion_grace_period_seconds = Some(0);
    let p = handover(vec![forced, PodFixture::new("b", 2).follower()]);
    assert_eq!(p.transition.map(|t| t.reason), Some(Reason::LeaderDeleted));
}

#[test]
fn a_not_ready_leader_hands_over() {
    let p = handover(vec![
        PodFixture::new("a", 1).leader(4).not_ready(),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ]);
    assert_eq!(p.transition.map(|t| t.reason), Some(Reason::LeaderNotReady));
    assert_eq!(p.commit.map(|c| c.epoch), Some(5));
}

#[test]
fn a_leader_that_leaves_the_selector_hands_over_and_loses_its_marks() {
    let p = handover(vec![
        PodFixture::new("a", 1).leader(4).label("app", "other"),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ]);
    assert_eq!(
        p.transition.map(|t| t.reason),
        Some(Reason::LeaderLeftGroup)
    );
    assert!(
        demoted(&p.pods).is_empty(),
        "not the group's to label follower"
    );
    assert_eq!(
        p.pods.release,
        vec![seen("a")],
        "released before the promotion, only if unchanged"
    );
    assert!(p.pods.unmark.is_empty(), "released already");
    let status = p.status.unwrap();
    assert_eq!(status.candidates, 2);
}

#[test]
fn a_stray_outside_the_selector_is_released_before_the_promotion() {
    // A group that never led (with a Lease lost after a leader, the promotion would also wait
    // for an unknown predecessor: `step_down::a_lease_deleted_while_a_step_down_is_awaited_...`).
    let g = with_status(group(), None, 0);
    let pods = vec![
        PodFixture::new("a", 1),
        PodFixture::new("gone", 2)
            .label("app", "elsewhere")
            .leader(7),
    ];
    let p = plan(decide_with(&g, &pods, None));
    assert_eq!(
        p.pods.release,
        vec![seen("gone")],
        "step 3, before the promotion of step 5"
    );
    assert!(p.pods.unmark.is_empty());
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "a".into(),
            uid: None,
            epoch: 8
        }),
        "above the stray's token"
    );
}

#[test]
fn a_leader_an_older_group_took_is_never_written() {
    // An older group's selector grew to take "a": it now carries that group's marks.
    let mut older = group();
    older.metadata.name = Some("older".into());
    older.metadata.uid = Some("uid-older".into());
    older.metadata.creation_timestamp = Some(Time(t(-10)));
    let g = with_status(group(), Some("a"), 4);
    let pods = vec![
        PodFixture::new("a", 1)
            .label(ROLE_LABEL, ROLE_LEADER)
            .annotate(EPOCH_ANNOTATION, "1")
            .annotate(GROUP_ANNOTATION, "older"),
        PodFixture::new("b", 2).follower(),
    ];
    let mut only_b = older.clone();
    only_b.spec.selector.match_labels = [("app".to_string(), "pay".to_string())].into();
    let p = plan(decide_full(
        &g,
        &[&only_b],
        &pods,
        Some(&lease(Some("a"), 4, 999, ME)),
        ME,
    ));
    assert!(
        demoted(&p.pods).is_empty() && p.pods.release.is_empty(),
        "{p:?}"
    );
    assert_eq!(
        p.pods.unmark,
        vec![seen("b")],
        "only its own marks go, and only if unchanged"
    );
    assert_eq!(
        p.transition.map(|t| (t.reason, t.to)),
        Some((Reason::NoCandidates, None)),
        "both pods are the older group's: nobody is left to lead"
    );
}

#[test]
fn a_pod_that_left_the_group_is_unmarked_only_if_unchanged() {
    let (g, _, _) = converged(5);
    let pods = vec![
        PodFixture::new("a", 1).follower().label("app", "other"),
        PodFixture::new("b", 2).leader(5),
        PodFixture::new("c", 3).follower(),
    ];
    let g = with_status(g, Some("b"), 5);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("b"), 5, 999, ME))));
    assert_eq!(p.pods.unmark, vec![seen("a")]);
}

#[test]
fn no_eligible_pod_means_no_leader_no_holder_and_the_epoch_stays() {
    let p = handover(vec![
        PodFixture::new("a", 1).leader(4).not_ready(),
        PodFixture::new("b", 2).follower().not_ready(),
    ]);
    let commit = p.commit.expect("the holder is cleared");
    assert_eq!((commit.holder, commit.epoch), (None, 4));
    assert_eq!(p.pods.promote, None);
    assert_eq!(demoted(&p.pods), vec!["a".to_string()]);
    let t = p.transition.unwrap();
    assert_eq!((t.to, t.reason), (None, Reason::NoCandidates));
    let s = p.status.unwrap();
    assert_eq!((s.leader, s.epoch), (None, 4));
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == LEADER_ELECTED)
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NoCandidates")
    );
}

#[test]
fn after_no_candidates_the_next_leader_takes_the_next_epoch() {
    let pods = vec![
        PodFixture::new("a", 1).follower(),
        PodFixture::new("b", 2).follower(),
    ];
    let g = with_status(group(), None, 4);
    let p = plan(decide_with(&g, &pods, Some(&lease(None, 4, 999, ME))));
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "a".into(),
            uid: None,
            epoch: 5
        })
    );
    assert_eq!(p.transition.map(|t| t.reason), Some(Reason::Initial));
}

#[test]
fn a_lease_deleted_by_hand_is_restored_without_a_new_token() {
    let (g, pods, _) = converged(7);
    let p = plan(decide_with(&g, &pods, None));
    let commit = p.commit.expect("re-created");
    assert_eq!((commit.holder.as_deref(), commit.epoch), (Some("a"), 7));
    assert_eq!(p.transition, None);
    assert_eq!(p.pods.promote, None);
}

#[test]
fn a_lease_deleted_by_hand_never_lowers_the_next_epoch() {
    let (g, _, _) = converged(7);
    let pods = vec![
        PodFixture::new("a", 1).leader(7).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let p = plan(decide_with(&g, &pods, None));
    let commit = p.commit.expect("the Lease created again");
    assert_eq!((commit.holder.as_deref(), commit.epoch), (Some("b"), 8));
    // a carried the marks: its member may still report `Leader`, so b waits for it.
    let awaited = commit.predecessor.expect("a is named");
    assert_eq!((awaited.pod.as_str(), awaited.pending()), ("a", true));
    assert_eq!(p.pods.promote, None);
}

#[test]
fn the_next_epoch_is_above_every_durable_record() {
    // The status says 3, the Lease 5, a pod still carries 9 (a status lost, say): 10.
    let pods = vec![
        PodFixture::new("a", 1).leader(9).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let g = with_status(group(), Some("a"), 3);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("a"), 5, 999, ME))));
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "b".into(),
            uid: None,
            epoch: 10
        })
    );
}

#[test]
fn a_commit_never_recorded_is_recorded_without_a_new_token() {
    // Crash between steps 1 and 2: the Lease names b at 5, the status still a at 4.
    let pods = vec![
        PodFixture::new("a", 1).leader(4).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let g = with_status(group(), Some("a"), 4);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("b"), 5, 999, ME))));
    assert_eq!(p.commit, None);
    assert_eq!(
        p.status.as_ref().map(|s| (s.leader.as_deref(), s.epoch)),
        Some((Some("b"), 5))
    );
    assert_eq!(demoted(&p.pods), vec!["a".to_string()]);
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "b".into(),
            uid: None,
            epoch: 5
        })
    );
}

#[test]
fn a_token_already_carried_by_a_pod_is_never_handed_again() {
    // The Lease says b at 5 but some pod already carries 5: mint 6.
    let pods = vec![
        PodFixture::new("a", 1).leader(5).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let g = with_status(group(), Some("a"), 4);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("b"), 5, 999, ME))));
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "b".into(),
            uid: None,
            epoch: 6
        })
    );
}

#[test]
fn a_status_patched_to_name_another_pod_never_hands_it_the_holders_token() {
    // a holds the Lease at 4 and carries 4. Someone patches the status (the ImplausibleEpoch
    // runbook patches status.epoch) so that it names b at 4. a turns NotReady and b is chosen:
    // 4 is a's token, so b gets 5, however the status names it.
    let pods = vec![
        PodFixture::new("a", 1).leader(4).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let g = with_status(group(), Some("b"), 4);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("a"), 4, 999, ME))));
    let commit = p.commit.expect("the commit");
    assert_eq!((commit.holder.as_deref(), commit.epoch), (Some("b"), 5));
    // Without a Lease, a pod other than b carrying the status's epoch gives it away too.
    let p = plan(decide_with(&g, &pods, None));
    let commit = p.commit.expect("the Lease created again");
    assert_eq!((commit.holder.as_deref(), commit.epoch), (Some("b"), 5));
}

#[test]
fn a_lease_the_group_does_not_own_is_never_written() {
    let mut foreign = lease(Some("x"), 1, 999, "someone");
    foreign.metadata.owner_references = None;
    foreign.metadata.labels = None;
    let pods = vec![
        PodFixture::new("a", 1).leader(4),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3),
    ];
    let refusal = decide_with(&group(), &pods, Some(&foreign));
    match (
        refusal.refused.clone(),
        refusal.status.clone(),
        refusal.pods.demote.clone(),
    ) {
        (
            Some(Refused {
                reason: "LeaseNotOwned",
                ..
            }),
            Some(status),
            demote,
        ) => {
            assert_eq!(demote, vec!["a".to_string()], "its leader loses the label");
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == LEADER_ELECTED)
                .unwrap();
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", "LeaseNotOwned")
            );
        }
        other => panic!("expected LeaseNotOwned, got {other:?}"),
    }
}

#[test]
fn a_lease_an_earlier_group_of_the_name_left_is_taken_over_above_its_epoch() {
    let pods = vec![
        PodFixture::new("a", 1).follower(),
        PodFixture::new("b", 2).follower(),
    ];
    // Released by the deleted group's finalizer, and left owned by a deleted group.
    let mut released = owned(&record(None, 6, 990, ME));
    released.metadata.owner_references = None;
    let mut orphaned = owned(&record(Some("a"), 6, 990, ME));
    if let Some(o) = orphaned.metadata.owner_references.as_mut() {
        o[0].uid = "uid-of-the-deleted-group".into();
    }
    for left in [released, orphaned] {
        let p = plan(decide_with(&group(), &pods, Some(&left)));
        assert_eq!(
            p.pods.promote,
            Some(Promotion {
                pod: "a".into(),
                uid: None,
                epoch: 7
            }),
            "{left:?}"
        );
        assert_eq!(p.commit.map(|c| c.epoch), Some(7));
    }
}

/// What this replica saw of a Readiness-mode Lease: its last write at t(`written`), its last
/// renewal at t(`renewed`).
fn seen_at(written: i64, renewed: Option<i64>) -> Option<LeaseSeen> {
    Some(LeaseSeen {
        written_at: t(written),
        renewed_at: renewed.map(t),
        not_before: None,
    })
}

#[test]
fn another_replicas_fresh_lease_is_left_alone_until_it_runs_out() {
    let (g, pods, _) = converged(4);
    let theirs = lease(Some("a"), 4, 995, "op-2");
    // Its last renewal was seen at 995: fresh for a duration from then.
    assert_eq!(
        decide_seen(&g, &[], &pods, Some(&theirs), seen_at(980, Some(995)), ME).deferred,
        Some(Deferred {
            arbiter: "op-2".into(),
            until: t(1010)
        })
    );
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&theirs),
        seen_at(980, Some(985)),
        ME,
    ));
    let commit = p.commit.expect("takes over arbitration");
    assert_eq!(
        (
            commit.holder.as_deref(),
            commit.epoch,
            commit.arbiter.as_deref()
        ),
        (Some("a"), 4, Some(ME))
    );
}

#[test]
fn another_replicas_lease_is_timed_by_this_replicas_sightings_not_its_renew_time() {
    let (g, pods, _) = converged(4);
    // op-2's clock runs an hour behind: its renewTime says long expired, but this replica saw it
    // renew a second ago, so op-2 lives and still arbitrates.
    let behind = lease(Some("a"), 4, 1000 - 3600, "op-2");
    assert_eq!(
        decide_seen(&g, &[], &pods, Some(&behind), seen_at(900, Some(999)), ME).deferred,
        Some(Deferred {
            arbiter: "op-2".into(),
            until: t(1014)
        })
    );
    // op-2's clock runs an hour ahead and it stopped: its renewTime says fresh for an hour, but
    // nothing changed for longer than a duration since this replica first saw it.
    let ahead = lease(Some("a"), 4, 1000 + 3600, "op-2");
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&ahead),
        seen_at(984, None),
        ME,
    ));
    assert_eq!(
        p.commit.and_then(|c| c.arbiter).as_deref(),
        Some(ME),
        "taken over a duration after the last sighting"
    );
}

#[test]
fn a_lease_of_a_replica_that_stopped_on_purpose_is_taken_over_at_once() {
    let (g, pods, _) = converged(4);
    let theirs = lease(Some("a"), 4, 995, "op-2");
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| &p.pod).collect();
    let retired = BTreeSet::from(["op-2".to_string()]);
    let d = decide(&Observation {
        group: &g,
        groups: &[&g],
        pods: &pod_refs,
        lease: Some(&theirs),
        services: &[],
        slices: &[],
        lease_seen: None,
        barrier_up: true,
        retired: &retired,
        identity: ME,
        node_grace: NODE_GRACE,
        now: now(),
    });
    let commit = plan(d).commit.expect("takes over arbitration at once");
    assert_eq!(
        (
            commit.holder.as_deref(),
            commit.epoch,
            commit.arbiter.as_deref()
        ),
        (Some("a"), 4, Some(ME))
    );
}

#[test]
fn paused_groups_make_no_transition_and_touch_no_pod() {
    let (mut g, _, l) = converged(4);
    g.spec.paused = true;
    let pods = vec![
        PodFixture::new("a", 1).leader(4).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.transition, None);
    assert!(
        p.commit.is_none()
            && p.pods.promote.is_none()
            && demoted(&p.pods).is_empty()
            && p.pods.mark_followers.is_empty()
    );
    let c = p
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == LEADER_ELECTED)
        .unwrap();
    assert_eq!(c.reason, "Paused");
}

/// A group `name` created before [`group`], selecting the pods labeled `tier=<tier>`.
fn older_group(name: &str, tier: &str) -> LeaderGroup {
    let mut older = group();
    older.metadata.name = Some(name.into());
    older.metadata.uid = Some(format!("uid-{name}"));
    older.metadata.creation_timestamp = Some(Time(t(-10)));
    older.spec.selector = PodSelector {
        match_labels: [("tier".to_string(), tier.to_string())].into(),
        ..Default::default()
    };
    older
}

#[test]
fn the_older_group_keeps_an_overlapping_pod() {
    let older = older_group("old", "x");
    let pods = vec![
        PodFixture::new("a", 1).label("tier", "x"),
        PodFixture::new("b", 2),
    ];
    let p = plan(decide_full(&group(), &[&older], &pods, None, ME));
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("b"));
    assert!(
        !p.pods.mark_followers.contains(&"a".to_string()),
        "the older group's pod is not touched"
    );
    let s = p.status.unwrap();
    assert_eq!((s.candidates, s.ready_candidates), (2, 1));
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == OVERLAPPING)
        .expect("Overlapping condition");
    assert!(
        c.message.contains("a") && c.message.contains("old"),
        "{}",
        c.message
    );
    // And the older group itself sees no overlap.
    let p_old = plan(decide_full(&older, &[&group()], &pods, None, ME));
    assert_eq!(p_old.pods.promote.map(|p| p.pod).as_deref(), Some("a"));
    assert!(
        p_old
            .status
            .unwrap()
            .conditions
            .iter()
            .all(|c| c.type_ != OVERLAPPING)
    );
}

#[test]
fn a_stray_leader_label_is_demoted() {
    let (g, mut pods, l) = converged(4);
    pods[1] = PodFixture::new("b", 2).leader(3);
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(demoted(&p.pods), vec!["b".to_string()]);
    assert_eq!(p.transition, None);
}

#[test]
fn match_expressions_select_pods() {
    let mut g = group();
    g.spec.selector = PodSelector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![SelectorRequirement {
            key: "app".into(),
            operator: SelectorOperator::In,
            values: vec!["pay".into()],
        }],
    };
    let pods = vec![
        PodFixture::new("a", 1),
        PodFixture::new("x", 0).label("app", "other"),
    ];
    let p = plan(decide_with(&g, &pods, None));
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("a"));
    assert_eq!(p.status.unwrap().candidates, 1);
}

#[test]
fn selector_operators_follow_kubernetes_semantics() {
    let labels: BTreeMap<String, String> = [("app".to_string(), "pay".to_string())].into();
    let req = |operator, values: &[&str]| PodSelector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![SelectorRequirement {
            key: "app".into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
    };
    assert!(req(SelectorOperator::In, &["pay", "x"]).matches(&labels));
    assert!(!req(SelectorOperator::In, &["x"]).matches(&labels));
    assert!(!req(SelectorOperator::NotIn, &["pay"]).matches(&labels));
    assert!(req(SelectorOperator::NotIn, &["x"]).matches(&BTreeMap::new()));
    assert!(req(SelectorOperator::Exists, &[]).matches(&labels));
    assert!(req(SelectorOperator::DoesNotExist, &[]).matches(&BTreeMap::new()));
    assert!(
        !PodSelector::default().matches(&labels),
        "an empty selector matches nothing"
    );
}

#[test]
fn an_empty_selector_is_refused_rather_than_selecting_everything() {
    let mut g = group();
    g.spec.selector = PodSelector::default();
    let p = decide_with(&g, &three(), None);
    assert_eq!(p.refused.map(|r| r.reason), Some("InvalidSelector"));
}

#[test]
fn conditions_keep_their_transition_time_while_unchanged() {
    let (g, pods, l) = converged(4);
    let before = g.status.clone().unwrap();
    let mut pods2 = pods;
    pods2.push(PodFixture::new("d", 4).follower());
    let p = plan(decide_with(&g, &pods2, Some(&l)));
    let after = p.status.expect("counts changed");
    let since = |s: &LeaderGroupStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == LEADER_ELECTED)
            .map(|c| c.last_transition_time.clone())
    };
    assert_eq!(since(&before), since(&after));
    assert_eq!(after.ready.as_deref(), Some("4/4"));
}

/// Pods of another group sharing the namespace: its leader, a follower and an unmarked pod.
fn another_groups_pods() -> Vec<PodFixture> {
    let shop = |name: &str, created: i64| {
        PodFixture::new(name, created)
            .label("app", "shop")
            .annotate(GROUP_ANNOTATION, "shop")
    };
    vec![
        shop("s1", 0)
            .label(ROLE_LABEL, ROLE_LEADER)
            .annotate(EPOCH_ANNOTATION, "9"),
        shop("s2", 1).label(ROLE_LABEL, ROLE_FOLLOWER),
        PodFixture::new("s3", 2).label("app", "shop"),
    ]
}

/// A decision's inputs: a name, the group, the namespace's pods and the Lease.
type Case = (&'static str, LeaderGroup, Vec<PodFixture>, Option<Lease>);

/// Groups in the situations where a pod outside the selector still matters, each in a namespace
/// shared with another group.
fn shared_namespace_cases() -> Vec<Case> {
    let (g, pods, l) = converged(4);
    let cases: Vec<Case> = vec![
        ("converged", g.clone(), pods, Some(l.clone())),
        ("first election", group(), three(), None),
        (
            // Out of the selector, but still marked: it must be demoted and unmarked.
            "leader left the selector",
            g.clone(),
            vec![
                PodFixture::new("a", 1).leader(4).label("app", "other"),
                PodFixture::new("b", 2).follower(),
            ],
            Some(l.clone()),
        ),
        (
            // Neither selected nor marked: found only as the leader the status and Lease name.
            "leader lost its marks and its labels",
            g.clone(),
            vec![
                PodFixture::new("a", 1).label("app", "other"),
                PodFixture::new("b", 2).follower(),
            ],
            Some(l.clone()),
        ),
        (
            "the Lease names a pod the status does not",
            with_status(group(), Some("b"), 3),
            vec![
                PodFixture::new("a", 1).leader(4).label("app", "other"),
                PodFixture::new("b", 2).follower().label("app", "other"),
                PodFixture::new("c", 3),
            ],
            Some(l),
        ),
    ];
    cases
        .into_iter()
        .map(|(case, group, mut pods, lease)| {
            pods.extend(another_groups_pods());
            (case, group, pods, lease)
        })
        .collect()
}

#[test]
fn the_pods_a_group_does_not_concern_never_change_its_decision() {
    for (case, group, pods, lease) in shared_namespace_cases() {
        let all = decide_with(&group, &pods, lease.as_ref());
        let concerned: Vec<PodFixture> = pods
            .into_iter()
            .filter(|p| concerns(&group, lease.as_ref(), &p.pod))
            .collect();
        let names: Vec<&str> = concerned
            .iter()
            .filter_map(|p| p.pod.metadata.name.as_deref())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with('s')),
            "{case}: another group's pods are not concerned: {names:?}"
        );
        assert_eq!(
            decide_with(&group, &concerned, lease.as_ref()),
            all,
            "{case}"
        );
    }
}

#[test]
fn trimmed_pods_decide_as_the_whole_pods_do() {
    for (case, group, pods, lease) in shared_namespace_cases() {
        let noisy: Vec<PodFixture> = pods
            .into_iter()
            .map(|p| {
                let mut f = p.annotate("kubectl.kubernetes.io/last-applied-configuration", "{}");
                f.pod.metadata.owner_references = Some(vec![OwnerReference::default()]);
                if let Some(s) = f.pod.status.as_mut() {
                    s.pod_ip = Some("10.0.0.1".into());
                    s.host_ip = Some("10.0.1.1".into());
                    s.conditions
                        .get_or_insert_with(Vec::new)
                        .push(PodCondition {
                            type_: "PodScheduled".into(),
                            status: "True".into(),
                            ..PodCondition::default()
                        });
                }
                f
            })
            .collect();
        let whole = decide_with(&group, &noisy, lease.as_ref());
        let trimmed: Vec<PodFixture> = noisy
            .iter()
            .map(|f| {
                let mut pod = f.pod.clone();
                trim_pod(&mut pod);
                PodFixture { pod }
            })
            .collect();
        for f in &trimmed {
            let m = &f.pod.metadata;
            assert!(m.owner_references.is_none(), "{case}");
            assert!(
                m.annotations
                    .iter()
                    .flatten()
                    .all(|(k, _)| k.starts_with("leadergroup.io/")),
                "{case}: {:?}",
                m.annotations
            );
            let status = f.pod.status.as_ref().expect("status kept");
            assert_eq!(status.host_ip, None, "{case}");
            // The address stays: the leader's EndpointSlice is made of it.
            assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"), "{case}");
            assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1), "{case}");
        }
        assert_eq!(
            decide_with(&group, &trimmed, lease.as_ref()),
            whole,
            "{case}"
        );
    }
}

mod heartbeat;
mod status;
mod step_down;
mod unchecked;

/// A pod by name as its fixture is seen (resourceVersion `rv-<name>`).
fn seen(name: &str) -> PodVersion {
    PodVersion {
        name: name.to_string(),
        resource_version: format!("rv-{name}"),
    }
}

#[test]
fn a_forged_epoch_at_the_top_of_the_range_elects_nobody_new() {
    let top = i64::MAX;
    let g = with_status(group(), Some("a"), top);
    let pods = vec![
        PodFixture::new("a", 1).leader(top).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let refusal = decide_with(&g, &pods, Some(&lease(Some("a"), top, 999, ME)));
    match (
        refusal.refused.clone(),
        refusal.status.clone(),
        refusal.pods.demote.clone(),
    ) {
        (
            Some(Refused {
                reason: "TokensExhausted",
                message,
            }),
            Some(status),
            _,
        ) => {
            assert!(message.contains("9223372036854775807"), "{message}");
            assert_eq!(status.leader.as_deref(), Some("a"), "the leader is kept");
            assert_eq!(status.epoch, top);
            let c = status.condition(LEADER_ELECTED).unwrap();
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", "TokensExhausted")
            );
        }
        other => panic!("b must not get a's token: {other:?}"),
    }
}

#[test]
fn a_leader_created_again_under_its_name_is_a_new_candidate_with_a_new_token() {
    // a led at epoch 4 as incarnation uid-a-1; the pod called a now is uid-a-2, unmarked.
    let mut g = with_status(group(), Some("a"), 4);
    if let Some(s) = g.status.as_mut() {
        s.leader_uid = Some("uid-a-1".into());
    }
    let mut old = record(Some("a"), 4, 999, ME);
    old.holder_uid = Some("uid-a-1".into());
    let mut a = PodFixture::new("a", 1);
    a.pod.metadata.uid = Some("uid-a-2".into());
    let mut b = PodFixture::new("b", 2).follower();
    b.pod.metadata.uid = Some("uid-b".into());
    let p = plan(decide_with(&g, &[a, b], Some(&owned(&old))));
    let t = p
        .transition
        .expect("a change of incarnation is a transition");
    assert_eq!(t.reason, Reason::LeaderReplaced);
    assert_eq!((t.from.as_deref(), t.to.as_deref()), (Some("a"), Some("a")));
    assert_eq!(
        t.epoch, 5,
        "the new incarnation never holds its predecessor's token"
    );
    let commit = p.commit.expect("the Lease names the new incarnation");
    assert_eq!(
        (
            commit.holder.as_deref(),
            commit.holder_uid.as_deref(),
            commit.epoch
        ),
        (Some("a"), Some("uid-a-2"), 5)
    );
    let status = p.status.expect("status");
    assert_eq!(status.leader_uid.as_deref(), Some("uid-a-2"));
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("LeaderReplaced")
    );
    assert_eq!(
        p.pods.promote.map(|p| (p.pod, p.epoch)),
        Some(("a".to_string(), 5))
    );
}

#[test]
fn the_same_incarnation_keeps_its_token() {
    let mut g = with_status(group(), Some("a"), 4);
    if let Some(s) = g.status.as_mut() {
        s.leader_uid = Some("uid-a-1".into());
    }
    let mut same = record(Some("a"), 4, 999, ME);
    same.holder_uid = Some("uid-a-1".into());
    let mut a = PodFixture::new("a", 1).leader(4);
    a.pod.metadata.uid = Some("uid-a-1".into());
    let p = plan(decide_with(&g, &[a], Some(&owned(&same))));
    assert!(p.transition.is_none(), "{p:?}");
    assert!(p.pods.promote.is_none());
}

#[test]
fn a_lease_epoch_far_above_the_records_is_neither_adopted_nor_overwritten() {
    let g = with_status(group(), Some("a"), 1);
    let pods = vec![
        PodFixture::new("a", 1).leader(1).not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let refusal = decide_with(&g, &pods, Some(&lease(Some("a"), i64::MAX, 999, ME)));
    match (
        refusal.refused.clone(),
        refusal.status.clone(),
        refusal.pods.demote.clone(),
    ) {
        (
            Some(Refused {
                reason: "ImplausibleEpoch",
                message,
            }),
            Some(status),
            _,
        ) => {
            for named in [
                "Lease leadergroup-pay",
                "metadata.annotations[leadergroup.io/epoch]",
                "is 9223372036854775807",
                "is 1:",
                "delete the Lease",
            ] {
                assert!(message.contains(named), "{named:?} in {message}");
            }
            assert_eq!(status.leader.as_deref(), Some("a"), "the leader is kept");
            assert_eq!(status.epoch, 1, "the recorded token is kept");
            let c = status.condition(LEADER_ELECTED).unwrap();
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", "ImplausibleEpoch")
            );
        }
        other => panic!("the forged epoch was acted on: {other:?}"),
    }
}

#[test]
fn a_lease_epoch_within_the_unrecorded_commits_is_adopted() {
    // Committed for a at 3 by a pass that crashed before recording it: a keeps that token.
    let g = with_status(group(), Some("a"), 1);
    let pods = vec![
        PodFixture::new("a", 1).leader(1),
        PodFixture::new("b", 2).follower(),
    ];
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("a"), 3, 999, ME))));
    assert_eq!(p.status.map(|s| s.epoch), Some(3));
    assert_eq!(
        p.pods.promote.map(|p| (p.pod, p.epoch)),
        Some(("a".to_string(), 3))
    );
}

#[test]
fn a_lease_epoch_below_the_records_is_written_back_up() {
    let g = with_status(group(), Some("a"), 4);
    let pods = vec![
        PodFixture::new("a", 1).leader(4),
        PodFixture::new("b", 2).follower(),
    ];
    for forged in [-1, 0, 2] {
        let p = plan(decide_with(
            &g,
            &pods,
            Some(&lease(Some("a"), forged, 999, ME)),
        ));
        assert_eq!(
            p.commit.map(|c| (c.holder, c.epoch)),
            Some((Some("a".to_string()), 4)),
            "the Lease at {forged} is written back to the recorded token"
        );
        assert!(
            p.transition.is_none() && p.pods.promote.is_none(),
            "{forged}: {:?}",
            p.pods.promote
        );
    }
}

#[test]
fn a_promotion_is_committed_only_in_a_lease_naming_its_pod_at_its_epoch() {
    let promotion = Promotion {
        pod: "pay-1".into(),
        uid: None,
        epoch: 4,
    };
    let holds = lease(Some("pay-1"), 4, 0, "op-a");
    assert!(promotion.is_committed_in(Some(&holds)));
    let moved_on = lease(Some("pay-2"), 5, 0, "op-a");
    assert!(!promotion.is_committed_in(Some(&moved_on)));
    let older = lease(Some("pay-1"), 3, 0, "op-a");
    assert!(!promotion.is_committed_in(Some(&older)));
    assert!(!promotion.is_committed_in(None));
}

/// A promotion retried after its commit (the Lease names `a` at 5, its pod not labeled yet) is
/// for the incarnation the Lease names: `a` created again under its name since (its new
/// incarnation gets a new epoch) must not be labeled at 5, which its members would refuse to
/// lead at.
#[test]
fn a_retried_promotion_is_committed_only_for_the_incarnation_the_lease_names() {
    let mut g = with_status(group(), Some("a"), 5);
    if let Some(s) = g.status.as_mut() {
        s.leader_uid = Some("uid-a-1".into());
    }
    let committed = LeaseRecord {
        holder_uid: Some("uid-a-1".into()),
        ..record(Some("a"), 5, 999, ME)
    };
    let pods = vec![
        PodFixture::new("a", 1).uid("uid-a-1").follower(),
        PodFixture::new("b", 2).uid("uid-b").follower(),
    ];
    let p = plan(decide_with(&g, &pods, Some(&owned(&committed))));
    let promotion = p.pods.promote.expect("the promotion is retried");
    assert_eq!((promotion.pod.as_str(), promotion.epoch), ("a", 5));
    assert!(promotion.is_committed_in(Some(&owned(&committed))));
    let another = LeaseRecord {
        holder_uid: Some("uid-a-2".into()),
        ..committed.clone()
    };
    assert!(
        !promotion.is_committed_in(Some(&owned(&another))),
        "the Lease names another incarnation of a at 5"
    );
    // The pod read afresh beside the Lease: the incarnation decided on, or `a` created again.
    assert!(promotion.is_incarnation(&pods[0].pod));
    let recreated = PodFixture::new("a", 7).uid("uid-a-2");
    assert!(
        !promotion.is_incarnation(&recreated.pod),
        "a created again is not the incarnation the Lease names at 5"
    );
}

#[test]
fn the_groups_barrier_goes_up_unless_this_replica_remembers_it_up_and_arbitrates() {
    // `a` leads; the user prefers `c`: its promotion is planned.
    let (mut g, pods, _) = converged(4);
    g.spec.preferred_leader = Some("c".into());
    let retired = BTreeSet::from(["op-2".to_string()]);
    let decide_for = |arbiter: &str, barrier_up: bool| {
        let lease = lease(Some("a"), 4, 999, arbiter);
        let pod_refs: Vec<&Pod> = pods.iter().map(|p| &p.pod).collect();
        plan(decide(&Observation {
            group: &g,
            groups: &[&g],
            pods: &pod_refs,
            lease: Some(&lease),
            services: &[],
            slices: &[],
            lease_seen: None,
            barrier_up,
            retired: &retired,
            identity: ME,
            node_grace: NODE_GRACE,
            now: now(),
        }))
    };
    let barred =
        |p: &Plan| -> Vec<String> { p.pods.barriers.iter().map(|b| b.pod.clone()).collect() };
    let up = decide_for(ME, true);
    assert_eq!(up.pods.promote.as_ref().map(|p| p.pod.as_str()), Some("c"));
    assert!(!up.pods.raises_barrier && !up.pods.list_every_leader);
    assert!(barred(&up).is_empty(), "{up:?}");
    // The pass commits `c` and the barrier is up: step 4 reads nothing, the promotion is
    // conditional on `c` as observed.
    assert_eq!(up.pods.unchecked_version.as_deref(), Some("rv-c"));
    // Remembered down (a restart, an abandoned request, a failed pass): `b` is barred.
    let down = decide_for(ME, false);
    assert!(down.pods.raises_barrier && down.pods.list_every_leader);
    assert_eq!(barred(&down), ["b"]);
    assert_eq!(down.pods.unchecked_version, None, "checked afresh");
    // Remembered up, but the Lease names another arbiter (taken back from a retired replica):
    // its promotions may be in flight, so the barrier goes up again.
    let taken_back = decide_for("op-2", true);
    assert!(taken_back.pods.raises_barrier && taken_back.pods.list_every_leader);
    assert_eq!(barred(&taken_back), ["b"]);
    assert_eq!(taken_back.pods.unchecked_version, None);
}

#[test]
fn a_promotion_this_pass_did_not_commit_is_checked_afresh() {
    // The Lease names `b` at 5 (committed by an earlier pass, or another replica), `b` carries
    // no leader marks yet: the promotion goes out without a commit, on records from the cache.
    let pods = vec![
        PodFixture::new("a", 1).follower(),
        PodFixture::new("b", 2).follower(),
    ];
    let g = with_status(group(), Some("b"), 5);
    let p = plan(decide_with(&g, &pods, Some(&lease(Some("b"), 5, 999, ME))));
    assert_eq!(
        p.commit.as_ref().map(|c| c.holder.clone()),
        None::<Option<String>>
    );
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "b".into(),
            uid: None,
            epoch: 5
        })
    );
    assert_eq!(p.pods.unchecked_version, None, "the Lease is read afresh");
}
