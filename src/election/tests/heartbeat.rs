//! Heartbeat liveness: the leader renews the Lease itself and the operator times its silence on
//! its own clock.

use super::*;
use crate::crd::Liveness;
use crate::lease_record::Lapsed;

fn heartbeat_group() -> LeaderGroup {
    let mut g = group();
    g.spec.liveness = Liveness::Heartbeat;
    g
}

/// A Lease held by `a` at `epoch` that asks its holder to renew, last renewed (by the holder's
/// clock) at `renewed`, arbitrated by `arbiter`.
fn heartbeat_lease(epoch: i64, renewed: i64, arbiter: &str) -> Lease {
    owned(&LeaseRecord {
        heartbeat: true,
        ..record(Some("a"), epoch, renewed, arbiter)
    })
}

fn seen(written: i64, renewed: Option<i64>) -> Option<LeaseSeen> {
    Some(LeaseSeen {
        written_at: t(written),
        renewed_at: renewed.map(t),
        not_before: None,
    })
}

fn pods(e: i64) -> Vec<PodFixture> {
    vec![
        PodFixture::new("a", 1).leader(e),
        PodFixture::new("b", 2).follower(),
        PodFixture::new("c", 3).follower(),
    ]
}

/// The group led by `a` at epoch 4 with the status the decision itself records for `seen`.
fn recorded(lease: &Lease, seen: Option<LeaseSeen>) -> LeaderGroup {
    let g = with_status(heartbeat_group(), Some("a"), 4);
    let status = plan(decide_seen(&g, &[], &pods(4), Some(lease), seen, ME)).status;
    LeaderGroup { status, ..g }
}

fn heartbeat_condition(status: &LeaderGroupStatus) -> (String, String) {
    let c = status.condition(HEARTBEAT).expect("a Heartbeat condition");
    (c.status.clone(), c.reason.clone())
}

#[test]
fn switching_to_heartbeat_marks_the_lease_and_restarts_the_holders_clock() {
    let (g, pods, l) = converged(4);
    let g = LeaderGroup {
        spec: LeaderGroupSpec {
            liveness: Liveness::Heartbeat,
            ..g.spec
        },
        ..g
    };
    let p = plan(decide_with(&g, &pods, Some(&l)));
    let commit = p.commit.expect("the Lease is told");
    assert!(commit.heartbeat);
    assert_eq!((commit.holder.as_deref(), commit.epoch), (Some("a"), 4));
    assert_eq!(commit.acquire_time, Some(now()));
    assert_eq!(commit.renew_time, Some(now()));
    assert!(p.transition.is_none() && p.pods.promote.is_none());
    let (status, reason) = heartbeat_condition(&p.status.expect("condition added"));
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("Unknown", "AwaitingRenewal")
    );
}

#[test]
fn the_operator_never_renews_a_heartbeat_lease() {
    // Renewed by the holder 14 s ago by its clock, seen 4 s ago: a Readiness renewal would be due.
    let l = heartbeat_lease(4, 986, ME);
    let s = seen(900, Some(996));
    let g = recorded(&l, s);
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&l), s, ME));
    assert_eq!(p.commit, None);
    assert_eq!(p.status, None);
    assert_eq!(p.transition, None);
    // Looks again when the leader's silence would reach a Lease duration.
    assert_eq!(p.requeue_after, Some(Duration::from_secs(11)));
}

#[test]
fn a_leader_silent_for_a_lease_duration_hands_over() {
    let l = heartbeat_lease(4, 980, ME);
    let still = seen(900, Some(986));
    let g = recorded(&l, still);
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&l), still, ME));
    assert!(p.transition.is_none(), "14 s of silence: still leads");

    let silent = seen(900, Some(985));
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&l), silent, ME));
    let t = p.transition.expect("handover");
    assert_eq!(
        (t.from.as_deref(), t.to.as_deref(), t.epoch, t.reason),
        (Some("a"), Some("b"), 5, Reason::LeaderHeartbeatLost)
    );
    let commit = p.commit.expect("commit");
    assert_eq!((commit.holder.as_deref(), commit.epoch), (Some("b"), 5));
    assert!(commit.heartbeat);
    assert_eq!(commit.renew_time, commit.acquire_time);
    assert!(
        commit.predecessor.as_ref().is_none_or(|d| !d.pending()),
        "its own rule stopped the silent leader: no step-down to wait for"
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
    let status = p.status.expect("recorded");
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("LeaderHeartbeatLost")
    );
    assert_eq!(
        status.succession,
        vec!["c".to_string()],
        "the silent pod is not a candidate"
    );
    let (condition, reason) = heartbeat_condition(&status);
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("Unknown", "AwaitingRenewal")
    );
}

#[test]
fn the_holders_renew_time_is_never_compared_with_this_clock() {
    // The holder's clock is an hour behind: by renewTime the Lease ran out long ago.
    let behind = heartbeat_lease(4, 1000 - 3600, ME);
    let s = seen(900, Some(999));
    let g = recorded(&behind, s);
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&behind), s, ME));
    assert!(p.transition.is_none() && p.commit.is_none());
    // An hour ahead: by renewTime it would last another hour.
    let ahead = heartbeat_lease(4, 1000 + 3600, ME);
    let s = seen(900, Some(985));
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&ahead), s, ME));
    assert_eq!(
        p.transition.map(|t| t.reason),
        Some(Reason::LeaderHeartbeatLost)
    );
}

#[test]
fn a_leader_that_never_renews_keeps_leading_and_is_reported() {
    let l = heartbeat_lease(4, 0, ME);
    let fresh = seen(990, None);
    let g = recorded(&l, fresh);
    let (condition, reason) = heartbeat_condition(g.status.as_ref().unwrap());
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("Unknown", "AwaitingRenewal")
    );

    let overdue = seen(985, None);
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&l), overdue, ME));
    assert!(p.transition.is_none() && p.commit.is_none() && p.pods.promote.is_none());
    let status = p.status.expect("the condition changes");
    let (condition, reason) = heartbeat_condition(&status);
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("False", "NoRenewal")
    );
    let message = &status.condition(HEARTBEAT).unwrap().message;
    assert!(
        message.contains("leadergroup-agent") && message.contains("leadergroup-pay"),
        "{message}"
    );
    // Nothing left to time: looks again at the usual pace, not in a loop.
    assert_eq!(p.requeue_after, Some(Duration::from_secs(5)));

    // Readiness still applies to it.
    let mut not_ready = pods(4);
    not_ready[0] = PodFixture::new("a", 1).leader(4).not_ready();
    let p = plan(decide_seen(&g, &[], &not_ready, Some(&l), overdue, ME));
    assert_eq!(p.transition.map(|t| t.reason), Some(Reason::LeaderNotReady));
}

#[test]
fn a_renewing_leader_is_reported_renewing() {
    let l = heartbeat_lease(4, 998, ME);
    let g = recorded(&l, seen(900, Some(999)));
    let (condition, reason) = heartbeat_condition(g.status.as_ref().unwrap());
    assert_eq!((condition.as_str(), reason.as_str()), ("True", "Renewing"));
}

#[test]
fn another_replicas_heartbeat_lease_is_left_alone_for_a_duration_from_its_sighting() {
    // Renewed by the holder a moment ago: fresh by renewTime whether or not op-2 lives.
    let theirs = heartbeat_lease(4, 999, "op-2");
    let g = recorded(&heartbeat_lease(4, 999, ME), seen(990, Some(999)));
    assert_eq!(
        decide_seen(&g, &[], &pods(4), Some(&theirs), seen(990, Some(999)), ME).deferred,
        Some(Deferred {
            arbiter: "op-2".into(),
            until: t(1005)
        })
    );
    let p = plan(decide_seen(
        &g,
        &[],
        &pods(4),
        Some(&theirs),
        seen(985, Some(999)),
        ME,
    ));
    let commit = p.commit.expect("takes over arbitration");
    assert_eq!(commit.arbiter.as_deref(), Some(ME));
    assert_eq!(
        (commit.acquire_time, commit.renew_time),
        (Some(t(0)), Some(t(999))),
        "keeps the holder's renewal"
    );
}

#[test]
fn a_paused_group_keeps_a_silent_leader() {
    let l = heartbeat_lease(4, 980, ME);
    let mut g = recorded(&l, seen(900, Some(999)));
    g.spec.paused = true;
    let p = plan(decide_seen(
        &g,
        &[],
        &pods(4),
        Some(&l),
        seen(900, Some(980)),
        ME,
    ));
    assert!(p.transition.is_none() && p.pods.promote.is_none());
    assert!(
        p.requeue_after
            .is_some_and(|d| d >= Duration::from_millis(100))
    );
}

#[test]
fn a_rewrite_of_the_holders_lease_never_brings_its_deadline_forward() {
    // The Lease was shortened to 3 s (and so rewritten) at 995, after the holder's last renewal
    // seen at 986: by the new duration the holder is silent since 998, but the deadline its old
    // 15 s Lease gave it, 1001, is not yet past.
    let l = owned(&LeaseRecord {
        heartbeat: true,
        duration_seconds: 3,
        ..record(Some("a"), 4, 980, ME)
    });
    let rewritten = Some(LeaseSeen {
        not_before: Some(t(1001)),
        ..seen(995, Some(995)).unwrap()
    });
    let g = with_status(heartbeat_group(), Some("a"), 4);
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&l), rewritten, ME));
    assert!(
        p.transition.is_none(),
        "the holder keeps its old deadline, whatever the new duration says"
    );
    let past = Some(LeaseSeen {
        not_before: Some(t(999)),
        ..seen(980, Some(985)).unwrap()
    });
    let p = plan(decide_seen(&g, &[], &pods(4), Some(&l), past, ME));
    assert_eq!(
        p.transition.map(|t| t.reason),
        Some(Reason::LeaderHeartbeatLost)
    );
}

/// `a` (UID `uid-a`) led at epoch 4 and lapsed; `b` leads at 5 and the Lease remembers the lapse.
fn after_the_lapse(lapsed: Option<Lapsed>) -> (LeaderGroup, Lease) {
    let l = owned(&LeaseRecord {
        heartbeat: true,
        holder_uid: Some("uid-b".into()),
        lapsed,
        ..record(Some("b"), 5, 990, ME)
    });
    (with_status(heartbeat_group(), Some("b"), 5), l)
}

fn lapsed_a() -> Option<Lapsed> {
    Some(Lapsed {
        uid: "uid-a".into(),
        epoch: 4,
    })
}

fn eligibility_of<'s>(status: &'s LeaderGroupStatus, pod: &str) -> &'s crate::crd::PodEligibility {
    status
        .eligibility
        .iter()
        .find(|e| e.pod == pod)
        .expect("the pod's eligibility")
}

#[test]
fn a_lapsed_leader_is_remembered_in_the_lease_with_its_incarnation_and_epoch() {
    let l = owned(&LeaseRecord {
        heartbeat: true,
        holder_uid: Some("uid-a".into()),
        ..record(Some("a"), 4, 980, ME)
    });
    let pods = vec![
        PodFixture::new("a", 1).uid("uid-a").leader(4),
        PodFixture::new("b", 2).uid("uid-b").follower(),
    ];
    let g = with_status(heartbeat_group(), Some("a"), 4);
    let p = plan(decide_seen(
        &g,
        &[],
        &pods,
        Some(&l),
        seen(900, Some(985)),
        ME,
    ));
    let commit = p.commit.expect("handover");
    assert_eq!((commit.holder.as_deref(), commit.epoch), (Some("b"), 5));
    assert_eq!(commit.lapsed, lapsed_a());
}

#[test]
fn a_lapsed_leader_that_still_shows_ready_is_not_elected_again() {
    let (g, l) = after_the_lapse(lapsed_a());
    // The successor fails; the lapsed pod, older, still shows Ready.
    let pods = vec![
        PodFixture::new("a", 1).uid("uid-a").follower(),
        PodFixture::new("b", 2).uid("uid-b").leader(5).not_ready(),
        PodFixture::new("c", 3).uid("uid-c").follower(),
    ];
    let s = seen(990, Some(999));
    let p = plan(decide_seen(&g, &[], &pods, Some(&l), s, ME));
    let t = p.transition.expect("handover");
    assert_eq!(
        (t.to.as_deref(), t.epoch),
        (Some("c"), 6),
        "not the lapsed a"
    );
    assert_eq!(
        p.commit.expect("commit").lapsed,
        lapsed_a(),
        "still remembered"
    );
    let status = p.status.expect("recorded");
    let a = eligibility_of(&status, "a");
    assert_eq!((a.eligible, a.reason.as_str()), (false, "HeartbeatLost"));

    // With nobody else eligible: nobody leads.
    let mut alone = pods;
    alone[2] = PodFixture::new("c", 3).uid("uid-c").follower().not_ready();
    let p = plan(decide_seen(&g, &[], &alone, Some(&l), s, ME));
    let t = p.transition.expect("the leader goes");
    assert_eq!((t.to, t.reason), (None, Reason::NoCandidates));
    assert_eq!(p.pods.promote, None);
    let commit = p.commit.expect("released");
    assert_eq!((commit.holder, commit.lapsed), (None, lapsed_a()));
}

#[test]
fn a_lapse_is_forgotten_once_its_pod_turns_not_ready_or_is_created_again() {
    let (g, l) = after_the_lapse(lapsed_a());
    let s = seen(990, Some(999));
    let not_ready = vec![
        PodFixture::new("a", 1).uid("uid-a").follower().not_ready(),
        PodFixture::new("b", 2).uid("uid-b").leader(5),
    ];
    let p = plan(decide_seen(&g, &[], &not_ready, Some(&l), s, ME));
    assert_eq!(p.commit.expect("the record goes").lapsed, None);

    let created_again = vec![
        PodFixture::new("a", 1).uid("uid-a2").follower(),
        PodFixture::new("b", 2).uid("uid-b").leader(5).not_ready(),
    ];
    let p = plan(decide_seen(&g, &[], &created_again, Some(&l), s, ME));
    let t = p.transition.expect("handover");
    assert_eq!(
        t.to.as_deref(),
        Some("a"),
        "a new incarnation is a new candidate"
    );
    assert_eq!(p.commit.expect("commit").lapsed, None);
}

#[test]
fn a_lapsed_leader_with_no_successor_keeps_the_lease_and_its_token_until_it_renews() {
    let l = owned(&LeaseRecord {
        heartbeat: true,
        holder_uid: Some("uid-a".into()),
        ..record(Some("a"), 4, 980, ME)
    });
    let alone = vec![PodFixture::new("a", 1).uid("uid-a").leader(4)];
    let g = with_status(heartbeat_group(), Some("a"), 4);
    let silent = seen(900, Some(985));
    let p = plan(decide_seen(&g, &[], &alone, Some(&l), silent, ME));
    assert_eq!(p.transition, None, "no new token for the same incarnation");
    assert_eq!((p.pods.promote.clone(), demoted(&p.pods)), (None, vec![]));
    let commit = p.commit.expect("the lapse is recorded");
    assert_eq!(
        (
            commit.holder.as_deref(),
            commit.epoch,
            commit.lapsed.clone()
        ),
        (Some("a"), 4, lapsed_a())
    );
    assert_eq!(
        (commit.acquire_time, commit.renew_time),
        (Some(t(0)), Some(t(980))),
        "the holder's own renewal is kept"
    );
    let status = p.status.expect("recorded");
    let elected = status.condition(LEADER_ELECTED).expect("LeaderElected");
    assert_eq!(
        (elected.status.as_str(), elected.reason.as_str()),
        ("False", "HeartbeatLost")
    );
    assert_eq!(
        heartbeat_condition(&status),
        ("False".to_string(), "Lapsed".to_string())
    );
    let g = LeaderGroup {
        status: Some(status),
        ..g
    };
    let remembered = owned(&LeaseRecord {
        heartbeat: true,
        holder_uid: Some("uid-a".into()),
        lapsed: lapsed_a(),
        ..record(Some("a"), 4, 980, ME)
    });

    // An operator restarted since takes the Lease in at its first look: not a renewal.
    let first_look = seen(999, Some(999));
    let p = plan(decide_seen(
        &g,
        &[],
        &alone,
        Some(&remembered),
        first_look,
        ME,
    ));
    assert_eq!((p.transition, p.commit, p.status), (None, None, None));

    // It renews: it leads again, at the same epoch.
    let renewed = seen(900, Some(999));
    let p = plan(decide_seen(&g, &[], &alone, Some(&remembered), renewed, ME));
    assert_eq!((p.transition, p.pods.promote), (None, None));
    assert_eq!(p.commit.expect("the record goes").lapsed, None);
    let status = p.status.expect("recorded");
    let elected = status.condition(LEADER_ELECTED).expect("LeaderElected");
    assert_eq!((elected.status.as_str(), status.epoch), ("True", 4));
}
