//! What the status tells people and tools: the history of changes, why each pod may or may not
//! lead, and the `Ready` condition with the generation it was set for.

use super::*;
use crate::crd::HistoryEntry;

fn condition<'a>(
    s: &'a LeaderGroupStatus,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    s.condition(type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {s:?}"))
}

fn entry(epoch: i64, from: Option<&str>, to: Option<&str>, reason: &str) -> HistoryEntry {
    HistoryEntry {
        epoch,
        from: from.map(Into::into),
        to: to.map(Into::into),
        reason: reason.into(),
        time: Time(t(0)),
        leaderless_seconds: None,
    }
}

#[test]
fn the_first_leader_starts_the_history_with_the_time_since_creation() {
    let s = plan(decide_with(&group(), &three(), None)).status.unwrap();
    assert_eq!(
        s.history,
        vec![HistoryEntry {
            epoch: 1,
            from: None,
            to: Some("a".into()),
            reason: "Initial".into(),
            time: Time(now()),
            leaderless_seconds: Some(1000),
        }]
    );
}

#[test]
fn a_handover_goes_in_front_and_has_no_time_without_a_leader() {
    let (mut g, mut pods, l) = converged(4);
    if let Some(s) = g.status.as_mut() {
        s.history = vec![entry(4, None, Some("a"), "Initial")];
    }
    pods[0] = PodFixture::new("a", 1).leader(4).not_ready();
    let s = plan(decide_with(&g, &pods, Some(&l))).status.unwrap();
    assert_eq!(s.history.len(), 2);
    assert_eq!(
        s.history[0],
        HistoryEntry {
            epoch: 5,
            from: Some("a".into()),
            to: Some("b".into()),
            reason: "LeaderNotReady".into(),
            time: Time(now()),
            leaderless_seconds: None,
        }
    );
    assert_eq!(s.history[1], entry(4, None, Some("a"), "Initial"));
}

#[test]
fn a_leader_after_none_says_how_long_the_group_had_none() {
    let mut g = with_status(group(), None, 4);
    if let Some(s) = g.status.as_mut() {
        s.last_transition_time = Some(Time(t(940)));
        s.last_transition_reason = Some("NoCandidates".into());
    }
    let pods = vec![PodFixture::new("a", 1).follower()];
    let s = plan(decide_with(&g, &pods, Some(&lease(None, 4, 999, ME))))
        .status
        .unwrap();
    assert_eq!(s.history[0].leaderless_seconds, Some(60));
    assert_eq!(
        (s.history[0].from.as_deref(), s.history[0].to.as_deref()),
        (None, Some("a"))
    );
}

#[test]
fn the_history_keeps_at_most_the_limit_newest_first() {
    let (mut g, mut pods, l) = converged(4);
    g.spec.history_limit = 3;
    if let Some(s) = g.status.as_mut() {
        s.history = (1..=4)
            .rev()
            .map(|e| entry(e, None, Some("a"), "Initial"))
            .collect();
    }
    pods[0] = PodFixture::new("a", 1).leader(4).terminating();
    let s = plan(decide_with(&g, &pods, Some(&l))).status.unwrap();
    let epochs: Vec<i64> = s.history.iter().map(|h| h.epoch).collect();
    assert_eq!(epochs, vec![5, 4, 3]);

    g.spec.history_limit = 0;
    let s = plan(decide_with(&g, &pods, Some(&l))).status.unwrap();
    assert!(s.history.is_empty(), "{:?}", s.history);
}

#[test]
fn each_pod_says_why_it_may_or_may_not_lead() {
    let pods = vec![
        PodFixture::new("pending", 1).phase("Pending"),
        PodFixture::new("unready", 2).not_ready(),
        PodFixture::new("dying", 3).terminating(),
        PodFixture::new("ok", 4),
        PodFixture::new("next", 5),
    ];
    let s = plan(decide_with(&group(), &pods, None)).status.unwrap();
    let seen: Vec<(&str, bool, &str, Option<&str>)> = s
        .eligibility
        .iter()
        .map(|e| {
            (
                e.pod.as_str(),
                e.eligible,
                e.reason.as_str(),
                e.message.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("ok", true, "Leader", None),
            ("next", true, "Eligible", None),
            ("pending", false, "NotRunning", Some("phase Pending")),
            ("unready", false, "NotReady", None),
            ("dying", false, "Terminating", None),
        ]
    );
}

#[test]
fn a_pod_an_older_group_holds_names_that_group_and_the_list_is_bounded() {
    let older = older_group("older", "db");
    let mut pods = vec![PodFixture::new("held", 0).label("tier", "db")];
    pods.extend((1..=30).map(|i| PodFixture::new(&format!("p{i:02}"), i)));
    let s = plan(decide_full(&group(), &[&older], &pods, None, ME))
        .status
        .unwrap();
    assert_eq!(s.candidates, 31);
    assert_eq!(s.eligibility.len(), crate::crd::MAX_ELIGIBILITY_ENTRIES);
    assert_eq!(s.eligibility[0].reason, "Leader");
    let held = crate::crd::PodEligibility {
        pod: "held".into(),
        eligible: false,
        reason: "HeldByOlderGroup".into(),
        message: Some("the older group older selects it too and holds it".into()),
    };
    let few = vec![
        PodFixture::new("held", 0).label("tier", "db"),
        PodFixture::new("p01", 1),
    ];
    let s = plan(decide_full(&group(), &[&older], &few, None, ME))
        .status
        .unwrap();
    assert_eq!(s.eligibility.last(), Some(&held));
}

#[test]
fn ready_follows_the_leader_and_every_condition_carries_the_generation() {
    let mut g = group();
    g.metadata.generation = Some(3);
    let s = plan(decide_with(&g, &three(), None)).status.unwrap();
    let ready = condition(&s, READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Elected")
    );
    assert!(
        s.conditions
            .iter()
            .all(|c| c.observed_generation == Some(3)),
        "{:?}",
        s.conditions
    );

    let nobody = vec![PodFixture::new("a", 1).not_ready()];
    let s = plan(decide_with(&g, &nobody, None)).status.unwrap();
    let ready = condition(&s, READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NoCandidates")
    );
}

#[test]
fn a_refusal_makes_the_group_not_ready_until_a_reconcile_succeeds() {
    let (g, _, _) = converged(4);
    let current = g.status.clone().unwrap();
    assert_eq!(condition(&current, READY).status, "True");
    let refused = api_refused(
        &current,
        Some(2),
        "Forbidden",
        "no update on leases",
        t(1001),
    )
    .expect("a new refusal is written");
    let ready = condition(&refused, READY);
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.observed_generation
        ),
        ("False", "Forbidden", Some(2))
    );
    assert_eq!(condition(&refused, RECONCILED).observed_generation, Some(2));
    assert_eq!(
        api_refused(
            &refused,
            Some(2),
            "Forbidden",
            "no update on leases",
            t(1002)
        ),
        None,
        "the same refusal for the same generation is written once"
    );
    assert!(
        api_refused(
            &refused,
            Some(3),
            "Forbidden",
            "no update on leases",
            t(1002)
        )
        .is_some()
    );

    let accepted = api_accepted(&refused, Some(2), t(1003)).expect("the refusal is cleared");
    assert!(accepted.condition(RECONCILED).is_none());
    let ready = condition(&accepted, READY);
    assert_eq!(
        (ready.status.as_str(), ready.last_transition_time.clone()),
        ("True", Time(t(1003)))
    );
}

/// The decision for `g` with the pods of [`three`] and no Lease, where the node controller's grace
/// period is `grace_seconds`.
fn status_with_node_grace(g: &LeaderGroup, grace_seconds: u64) -> LeaderGroupStatus {
    let pods = three();
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| &p.pod).collect();
    let d = decide(&Observation {
        group: g,
        groups: &[g],
        pods: &pod_refs,
        lease: None,
        services: &[],
        slices: &[],
        lease_seen: None,
        barrier_up: true,
        retired: &BTreeSet::new(),
        identity: ME,
        node_grace: Duration::from_secs(grace_seconds),
        now: now(),
    });
    plan(d).status.expect("a first election records a status")
}

#[test]
fn a_lease_too_long_for_the_node_grace_period_says_a_cut_off_leader_may_step_down_late() {
    // Two thirds of 15 s is 10 s: a leader cut off with its node believes it leads for 10 s,
    // and its successor may be chosen after a 10 s grace period (make e2e's cluster).
    let s = status_with_node_grace(&group(), 10);
    let c = condition(&s, LATE_STEP_DOWN);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "LeaseOutlastsNodeGrace")
    );
    for figure in [
        "up to 10.0 s",
        "leaseDurationSeconds 15",
        "grace period of 10 s",
        "below 15",
    ] {
        assert!(c.message.contains(figure), "{figure:?} in {}", c.message);
    }
    // It holds for Kubernetes' default 50 s, and for anything above 10 s.
    for grace in [50, 11] {
        let s = status_with_node_grace(&group(), grace);
        assert!(s.condition(LATE_STEP_DOWN).is_none(), "{grace}: {s:?}");
    }
    // Heartbeat mode hands over a whole Lease after the last renewal: the leader stops first.
    let mut heartbeat = group();
    heartbeat.spec.liveness = crate::crd::Liveness::Heartbeat;
    let s = status_with_node_grace(&heartbeat, 10);
    assert!(s.condition(LATE_STEP_DOWN).is_none(), "{s:?}");
}
