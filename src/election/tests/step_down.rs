//! The predecessor's step-down: a leader deposed at once is named in the Lease, and its successor
//! is labeled only once it no longer reports `Leader`.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};

use super::*;
use crate::lease_record::Predecessor;

/// A group led by `a` at 4 whose member acknowledged its leadership in the Lease.
fn acknowledged(e: i64) -> (LeaderGroup, Vec<PodFixture>, Lease) {
    let (g, pods, _) = converged(e);
    let l = owned(&LeaseRecord {
        acknowledged: true,
        ..record(Some("a"), e, 999, ME)
    });
    (g, pods, l)
}

/// `a` led at 4, acknowledged, and is NotReady; `b` and `c` are candidates.
fn not_ready_leader() -> (LeaderGroup, Vec<PodFixture>, Lease) {
    let (g, mut pods, l) = acknowledged(4);
    pods[0] = PodFixture::new("a", 1).leader(4).not_ready();
    (g, pods, l)
}

/// `first` moved leadership away from `predecessor` at once: the new leader `(pod, epoch)` is not
/// labeled yet, the committed Lease names the predecessor, still to step down, and the group looks
/// again within two thirds of the predecessor's Lease. Once its member has stepped down (in the
/// Lease), the next decision labels the new leader.
#[track_caller]
fn assert_promoted_after_step_down(
    g: &LeaderGroup,
    pods: &[PodFixture],
    first: &Plan,
    predecessor: &str,
    (leader, epoch): (&str, i64),
) {
    assert_eq!(
        first.pods.promote, None,
        "the promotion waits for {predecessor}"
    );
    assert!(first.pods.barriers.is_empty());
    assert!(
        first
            .requeue_after
            .is_some_and(|d| d <= Duration::from_secs(10))
    );
    let mut committed = first.commit.clone().expect("the commit");
    assert_eq!(
        (committed.holder.as_deref(), committed.epoch),
        (Some(leader), epoch)
    );
    let named = committed.predecessor.as_mut().expect("the predecessor");
    assert_eq!((named.pod.as_str(), named.pending()), (predecessor, true));
    let waiting = plan(decide_with(g, pods, Some(&owned(&committed))));
    assert_eq!(
        waiting.pods.promote, None,
        "still waiting for {predecessor}"
    );
    assert_eq!(waiting.commit, None, "nothing to write meanwhile");
    committed.predecessor.as_mut().unwrap().stepped_down = true;
    let next = plan(decide_with(g, pods, Some(&owned(&committed))));
    assert_eq!(
        next.pods.promote.map(|p| (p.pod, p.epoch)),
        Some((leader.to_string(), epoch))
    );
}

/// The pod's containers as the kubelet reports them: each running or terminated.
fn containers(mut fixture: PodFixture, running: &[bool]) -> PodFixture {
    let statuses = running
        .iter()
        .enumerate()
        .map(|(i, &running)| ContainerStatus {
            name: format!("c{i}"),
            state: Some(if running {
                ContainerState {
                    running: Some(Default::default()),
                    ..ContainerState::default()
                }
            } else {
                ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 137,
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }
            }),
            ..ContainerStatus::default()
        })
        .collect();
    fixture.pod.status.as_mut().unwrap().container_statuses = Some(statuses);
    fixture
}

#[test]
fn a_not_ready_leader_that_may_still_run_steps_down_before_its_successor_is_labeled() {
    let (g, pods, l) = not_ready_leader();
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(
        p.transition.as_ref().map(|t| t.reason),
        Some(Reason::LeaderNotReady)
    );
    assert_eq!(demoted(&p.pods), vec!["a".to_string()], "demoted at once");
    assert_promoted_after_step_down(&g, &pods, &p, "a", ("b", 5));
}

#[test]
fn a_leader_whose_containers_all_stopped_is_not_waited_for() {
    let (g, mut pods, l) = not_ready_leader();
    pods[0] = containers(
        PodFixture::new("a", 1).leader(4).not_ready(),
        &[false, false],
    );
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "b".into(),
            uid: None,
            epoch: 5
        })
    );
    let predecessor = p.commit.and_then(|c| c.predecessor).expect("named");
    assert_eq!(
        (predecessor.pod.as_str(), predecessor.pending()),
        ("a", false)
    );

    // One container still runs (its agent, say): it may still report Leader.
    pods[0] = containers(
        PodFixture::new("a", 1).leader(4).not_ready(),
        &[false, true],
    );
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.pods.promote, None);
}

/// The rule reads the pods as the watch cache holds them, trimmed ([`trim_pod`]): what it reads
/// of the containers must survive the trim, or a stopped leader is waited for all the same.
#[test]
fn a_leader_whose_containers_all_stopped_is_not_waited_for_as_the_pod_cache_holds_it() {
    let (g, mut pods, l) = not_ready_leader();
    let cached = |running: &[bool]| {
        let mut fixture = containers(PodFixture::new("a", 1).leader(4).not_ready(), running);
        trim_pod(&mut fixture.pod);
        fixture
    };
    pods[0] = cached(&[false, false]);
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "b".into(),
            uid: None,
            epoch: 5
        }),
        "a stopped leader, trimmed, is not waited for"
    );
    pods[0] = cached(&[false, true]);
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.pods.promote, None, "one container still runs");
}

#[test]
fn once_the_predecessors_confirmation_has_lapsed_the_operator_steps_it_down_itself() {
    let (g, pods, l) = not_ready_leader();
    let first = plan(decide_with(&g, &pods, Some(&l)));
    let committed = owned(&first.commit.expect("the commit"));
    // Seen 9 s ago (of a 15 s Lease's 10 s validity): still waiting, and back in a second.
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&committed),
        seen_at(991, None),
        ME,
    ));
    assert_eq!(p.pods.promote, None);
    assert_eq!(p.requeue_after, Some(Duration::from_secs(1)));
    // Seen 10 s ago: it no longer reports Leader. The Lease says so, then the successor is
    // labeled, in that order (the plan's commit comes first).
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&committed),
        seen_at(990, None),
        ME,
    ));
    let predecessor = p.commit.and_then(|c| c.predecessor).expect("named");
    assert!(!predecessor.pending());
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("b"));
}

#[test]
fn the_validity_is_that_of_the_lease_the_predecessor_saw_not_a_shorter_one_since() {
    let (mut g, pods, l) = not_ready_leader();
    g.spec.lease_duration_seconds = 3;
    let first = plan(decide_with(&g, &pods, Some(&l)));
    let committed = first.commit.expect("the commit");
    assert_eq!(committed.duration_seconds, 3);
    let predecessor = committed.predecessor.as_ref().expect("named");
    assert_eq!(
        predecessor.validity(),
        Duration::from_secs(10),
        "15 s Lease"
    );
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&owned(&committed)),
        seen_at(995, None),
        ME,
    ));
    assert_eq!(p.pods.promote, None, "5 s: a's 10 s have not passed");
}

#[test]
fn a_predecessor_deposed_for_no_candidate_is_still_waited_for_by_the_next_leader() {
    // a is NotReady and nobody else is a candidate: nobody leads, and a is named.
    let (g, _, l) = acknowledged(4);
    let alone = vec![PodFixture::new("a", 1).leader(4).not_ready()];
    let p = plan(decide_with(&g, &alone, Some(&l)));
    let released = p.commit.expect("the Lease released");
    assert_eq!(released.holder, None);
    assert_eq!(
        released
            .predecessor
            .as_ref()
            .map(|p| (p.pod.as_str(), p.pending())),
        Some(("a", true))
    );
    // b turns Ready a second later: it is committed, and labeled only once a has stepped down.
    let pods = vec![
        PodFixture::new("a", 1).follower().not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let released = owned(&released);
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&released),
        seen_at(999, None),
        ME,
    ));
    let committed = p.commit.as_ref().expect("b committed");
    assert_eq!(committed.holder.as_deref(), Some("b"));
    assert_eq!(p.pods.promote, None);
    // Long after the release was seen, a's confirmation has lapsed: b is labeled at once.
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&released),
        seen_at(980, None),
        ME,
    ));
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("b"));
}

#[test]
fn the_same_pod_elected_again_does_not_wait_for_itself() {
    // a flapped NotReady and back with nobody else eligible: released, then a again at 5.
    let (g, _, l) = acknowledged(4);
    let alone = vec![PodFixture::new("a", 1).leader(4).not_ready()];
    let first = plan(decide_with(&g, &alone, Some(&l)));
    let released = owned(&first.commit.unwrap());
    let g = LeaderGroup {
        status: first.status,
        ..g
    };
    let back = vec![PodFixture::new("a", 1).follower()];
    let p = plan(decide_with(&g, &back, Some(&released)));
    assert_eq!(
        p.pods.promote,
        Some(Promotion {
            pod: "a".into(),
            uid: None,
            epoch: 5
        })
    );
}

#[test]
fn a_first_leader_has_no_predecessor_to_wait_for() {
    let g = group();
    let p = plan(decide_with(&g, &three(), None));
    assert_eq!(p.commit.as_ref().and_then(|c| c.predecessor.clone()), None);
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("a"));
}

#[test]
fn a_leader_without_a_member_is_not_waited_for_and_an_earlier_predecessor_still_is() {
    // a never acknowledged (no agent, no client): nothing of it reports Leader.
    let (g, mut pods, l) = converged(4);
    pods[0] = PodFixture::new("a", 1).leader(4).not_ready();
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.pods.promote.map(|p| p.pod).as_deref(), Some("b"));
    assert_eq!(p.commit.and_then(|c| c.predecessor), None);

    // An acknowledged predecessor z still to step down, then a holder b without a member deposed
    // at once: z is still waited for.
    let z = pending_z();
    let l = owned(&LeaseRecord {
        predecessor: Some(z.clone()),
        ..record(Some("a"), 4, 999, ME)
    });
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.pods.promote, None);
    assert_eq!(p.commit.and_then(|c| c.predecessor), Some(z));
}

#[test]
fn a_holder_that_acknowledged_before_its_label_does_not_replace_a_predecessor_still_waited_for() {
    // z is still to step down; a holds the Lease at 4, never labeled (its label waited for z),
    // and its member acknowledged all the same. a turns NotReady: b is committed, and the Lease
    // still waits for z, the one that may report `Leader`.
    let z = pending_z();
    let (g, _, _) = converged(4);
    let pods = vec![
        PodFixture::new("a", 1).follower().not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let l = owned(&LeaseRecord {
        acknowledged: true,
        predecessor: Some(z.clone()),
        ..record(Some("a"), 4, 999, ME)
    });
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.pods.promote, None, "b waits for z");
    let commit = p.commit.expect("b committed");
    assert_eq!(commit.holder.as_deref(), Some("b"));
    assert_eq!(commit.predecessor, Some(z));
}

#[test]
fn a_pod_created_again_under_the_predecessors_name_waits_for_the_old_incarnation() {
    // a led at 4 as uid-a-1 and acknowledged; its pod was deleted at once (forced), and a new pod
    // a, uid-a-2, is the only candidate. The old incarnation's process may still run: the new one
    // is labeled only once it has stepped down.
    let mut g = with_status(group(), Some("a"), 4);
    if let Some(s) = g.status.as_mut() {
        s.leader_uid = Some("uid-a-1".into());
    }
    let l = owned(&LeaseRecord {
        acknowledged: true,
        holder_uid: Some("uid-a-1".into()),
        ..record(Some("a"), 4, 999, ME)
    });
    let pods = vec![PodFixture::new("a", 1).uid("uid-a-2")];
    let first = plan(decide_with(&g, &pods, Some(&l)));
    let g = LeaderGroup {
        status: first.status.clone(),
        ..g
    };
    assert_promoted_after_step_down(&g, &pods, &first, "a", ("a", 5));
}

/// An acknowledged predecessor `z`, at 3, still to step down.
fn pending_z() -> Predecessor {
    Predecessor {
        pod: "z".into(),
        uid: None,
        epoch: leadergroup_client::Epoch::from(3u32),
        lease_seconds: 15,
        members: Vec::new(),
        stepped_down_by: Vec::new(),
        stepped_down: false,
    }
}

#[test]
fn a_lease_deleted_while_a_step_down_is_awaited_is_created_again_still_waiting() {
    // b was committed at 5 and not labeled yet (it waited for a's step-down) when the Lease was
    // deleted by hand, and the predecessor with it: the Lease comes back naming an unknown
    // predecessor, and b is labeled only once a confirmation has lapsed.
    let g = with_status(group(), Some("b"), 5);
    let pods = vec![
        PodFixture::new("a", 1).follower().not_ready(),
        PodFixture::new("b", 2).follower(),
    ];
    let p = plan(decide_with(&g, &pods, None));
    assert_eq!(p.pods.promote, None, "b waits");
    let created = p.commit.expect("the Lease created again");
    let unknown = created.predecessor.clone().expect("a predecessor");
    assert_eq!(
        (unknown.pod.as_str(), unknown.pending()),
        (crate::lease_record::UNKNOWN_PREDECESSOR, true)
    );
    // Two thirds of the Lease after this replica saw it created, b is labeled.
    let g = LeaderGroup {
        status: p.status.or(g.status),
        ..g
    };
    let created = owned(&created);
    let later = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&created),
        seen_at(980, None),
        ME,
    ));
    assert_eq!(
        later.pods.promote.map(|p| p.pod).as_deref(),
        Some(created_holder(&created))
    );
}

#[test]
fn a_lease_deleted_under_a_labeled_leader_is_created_again_still_naming_it() {
    // a leads at 4, labeled, and its member acknowledged in the Lease. The Lease is deleted by
    // hand while a's member is cut off: it never saw the deletion and still reports `Leader`.
    // The Lease comes back naming a as holder and as the predecessor to wait for: a handover
    // away from it waits for its step-down, not for nobody.
    let (g, mut pods, _) = converged(4);
    let p = plan(decide_with(&g, &pods, None));
    let created = p.commit.expect("the Lease created again");
    assert_eq!((created.holder.as_deref(), created.epoch), (Some("a"), 4));
    assert_eq!(
        p.pods.promote, None,
        "a keeps its label, nothing to promote"
    );
    let named = created.predecessor.clone().expect("a is named");
    assert_eq!((named.pod.as_str(), named.pending()), ("a", true));
    // Still a's tenure: it is not asked to wait for itself.
    let again = plan(decide_with(&g, &pods, Some(&owned(&created))));
    assert_eq!(again.commit, None, "nothing more to write");
    // a turns NotReady: b is committed, and labeled only after a's step-down.
    pods[0] = PodFixture::new("a", 1).leader(4).not_ready();
    let p = plan(decide_with(&g, &pods, Some(&owned(&created))));
    assert_promoted_after_step_down(&g, &pods, &p, "a", ("b", 5));
}

/// The holder a Lease names.
fn created_holder(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

#[test]
fn a_labeled_leader_whose_lease_someone_else_rewrote_steps_down_before_its_successor_is_labeled() {
    // a leads at 4, labeled, its member acknowledged. Someone else rewrites the Lease: another
    // holder, epoch 6, so the acknowledgement is no longer at the Lease's epoch. a turns NotReady:
    // a's member may still report `Leader`, so b waits for a's step-down.
    let (g, mut pods, _) = acknowledged(4);
    pods[0] = PodFixture::new("a", 1).leader(4).not_ready();
    let rewritten = owned(&record(Some("intruder"), 6, 999, ME));
    let p = plan(decide_with(&g, &pods, Some(&rewritten)));
    assert_promoted_after_step_down(&g, &pods, &p, "a", ("b", 7));
}

#[test]
fn a_lease_shortened_before_the_handover_is_waited_for_as_long_as_the_longest_the_leader_saw() {
    // a leads at 4 on a 30 s Lease and acknowledged it. The user shortens it to 3 s: the commit
    // rewrites the duration and keeps the acknowledgement. a, cut off, never saw the rewrite and
    // times its confirmation by the 30 s it saw (20 s). Then a turns NotReady.
    let (mut g, mut pods, _) = acknowledged(4);
    g.spec.lease_duration_seconds = 30;
    let long = owned(&LeaseRecord {
        acknowledged: true,
        duration_seconds: 30,
        ..record(Some("a"), 4, 999, ME)
    });
    g.spec.lease_duration_seconds = 3;
    let shortened = plan(decide_with(&g, &pods, Some(&long)))
        .commit
        .expect("the new duration is written");
    assert_eq!(
        (shortened.duration_seconds, shortened.acknowledged),
        (3, true)
    );
    pods[0] = PodFixture::new("a", 1).leader(4).not_ready();
    let p = plan(decide_with(&g, &pods, Some(&owned(&shortened))));
    let predecessor = p.commit.and_then(|c| c.predecessor).expect("a is named");
    assert_eq!(
        (predecessor.pod.as_str(), predecessor.validity()),
        ("a", Duration::from_secs(20)),
        "two thirds of the 30 s Lease a saw, not of the 3 s one it never saw"
    );
}

#[test]
fn a_shortened_lease_deleted_during_the_wait_is_created_again_with_the_longest_duration() {
    // As above (a 30 s Lease shortened to 3 s under a, cut off, then a NotReady and b
    // committed), then the Lease is deleted by hand while b waits for a: the Lease's longest
    // duration goes with it, the status's stays, and the Lease created again times a by it.
    let (mut g, mut pods, _) = acknowledged(4);
    let long = owned(&LeaseRecord {
        acknowledged: true,
        duration_seconds: 30,
        ..record(Some("a"), 4, 999, ME)
    });
    g.spec.lease_duration_seconds = 3;
    let p = plan(decide_with(&g, &pods, Some(&long)));
    let shortened = p.commit.expect("the new duration is written");
    g.status = Some(p.status.expect("the status records the longest"));
    pods[0] = PodFixture::new("a", 1).leader(4).not_ready();
    let p = plan(decide_with(&g, &pods, Some(&owned(&shortened))));
    assert_eq!(p.pods.promote, None, "b waits for a");
    g.status = Some(p.status.expect("b is recorded"));
    assert_eq!(
        g.status.as_ref().and_then(|s| s.longest_lease_seconds),
        Some(30)
    );
    let p = plan(decide_with(&g, &pods, None));
    assert_eq!(p.pods.promote, None, "b still waits for a");
    let predecessor = p.commit.and_then(|c| c.predecessor).expect("a is named");
    assert_eq!(
        (predecessor.pending(), predecessor.validity()),
        (true, Duration::from_secs(20)),
        "two thirds of the 30 s Lease a saw, kept by the status"
    );
}

#[test]
fn a_leader_that_the_pod_gc_marked_failed_while_its_containers_run_is_waited_for() {
    // The pod GC sets `Failed` on the pods of a deleted node (or one tainted out-of-service)
    // while their containers may still run there: the phase says nothing of the processes.
    let (g, mut pods, l) = not_ready_leader();
    pods[0] = containers(
        PodFixture::new("a", 1)
            .leader(4)
            .not_ready()
            .phase("Failed"),
        &[true, true],
    );
    let p = plan(decide_with(&g, &pods, Some(&l)));
    assert_eq!(p.pods.promote, None, "a's member may still report Leader");
    let predecessor = p.commit.and_then(|c| c.predecessor).expect("named");
    assert_eq!(
        (predecessor.pod.as_str(), predecessor.pending()),
        ("a", true)
    );
    // Failed without any container reported: still waited for.
    pods[0] = PodFixture::new("a", 1)
        .leader(4)
        .not_ready()
        .phase("Failed");
    assert_eq!(plan(decide_with(&g, &pods, Some(&l))).pods.promote, None);
}
