use std::time::Duration;

use super::*;

const ME: &str = "app-0";
/// This member's name.
const M: &str = "m-me";

fn epoch(n: u32) -> Epoch {
    Epoch::from(n)
}

fn leader_pod(n: u32) -> PodMarks {
    PodMarks {
        leader: true,
        epoch: Some(epoch(n)),
        group: Some("g".to_owned()),
        uid: None,
    }
}

fn follower_pod() -> PodMarks {
    PodMarks {
        leader: false,
        epoch: None,
        group: Some("g".to_owned()),
        uid: None,
    }
}

fn lease(holder: &str, n: u32) -> LeaseMarks {
    LeaseMarks {
        group: Some("g".to_owned()),
        holder: Some(holder.to_owned()),
        holder_uid: None,
        epoch: Some(epoch(n)),
        duration: Some(Duration::from_secs(3)),
        heartbeat: false,
        renewed_since_acquired: false,
        acknowledged: Some(epoch(n)),
        acknowledged_by: vec![M.to_owned()],
        awaited: None,
    }
}

/// Pod and Lease confirmed at `t0`, Lease duration 3 s (validity 2 s).
fn seen(t0: Instant, pod: Option<PodMarks>, lease: Option<LeaseMarks>) -> Observation {
    Observation {
        pod: Some(Confirmed { state: pod, at: t0 }),
        lease: LeaseObservation::Confirmed(Confirmed {
            state: lease,
            at: t0,
        }),
        lease_duration: Duration::from_secs(3),
        renewed: None,
    }
}

#[test]
fn leader_needs_both_marks_and_the_lease_at_the_same_epoch() {
    let t0 = Instant::now();
    let obs = seen(t0, Some(leader_pod(4)), Some(lease(ME, 4)));
    assert_eq!(decide(ME, M, &obs, t0), Role::Leader { epoch: epoch(4) });

    // Each disagreement alone makes a follower.
    for (pod, lease, why) in [
        (
            Some(follower_pod()),
            Some(lease(ME, 4)),
            "pod labeled follower",
        ),
        (
            Some(PodMarks {
                epoch: None,
                ..leader_pod(4)
            }),
            Some(lease(ME, 4)),
            "no epoch annotation on the pod",
        ),
        (
            Some(leader_pod(3)),
            Some(lease(ME, 4)),
            "pod at an older epoch",
        ),
        (
            Some(leader_pod(5)),
            Some(lease(ME, 4)),
            "Lease at an older epoch",
        ),
        (
            Some(leader_pod(4)),
            Some(lease("app-1", 4)),
            "Lease names another pod",
        ),
        (
            Some(leader_pod(4)),
            Some(LeaseMarks {
                holder: None,
                holder_uid: None,
                ..lease(ME, 4)
            }),
            "Lease without holder",
        ),
        (
            Some(leader_pod(4)),
            Some(LeaseMarks {
                epoch: None,
                ..lease(ME, 4)
            }),
            "Lease without epoch annotation",
        ),
        (
            Some(PodMarks {
                group: Some("other".to_owned()),
                ..leader_pod(4)
            }),
            Some(lease(ME, 4)),
            "pod marked by another group",
        ),
        (Some(leader_pod(4)), None, "no Lease"),
        (None, Some(lease(ME, 4)), "pod gone"),
    ] {
        let obs = seen(t0, pod, lease);
        assert_eq!(decide(ME, M, &obs, t0), Role::Follower, "{why}");
    }
}

#[test]
fn unknown_until_both_objects_are_confirmed() {
    let t0 = Instant::now();
    let mut obs = Observation::new(true);
    assert_eq!(decide(ME, M, &obs, t0), Role::Unknown, "nothing seen");
    obs.pod = Some(Confirmed {
        state: Some(leader_pod(4)),
        at: t0,
    });
    assert_eq!(decide(ME, M, &obs, t0), Role::Unknown, "Lease unconfirmed");
    obs.pod = Some(Confirmed {
        state: Some(follower_pod()),
        at: t0,
    });
    assert_eq!(
        decide(ME, M, &obs, t0),
        Role::Unknown,
        "even a follower mark needs the Lease confirmed (403 on the Lease stays Unknown)"
    );
    obs.lease = LeaseObservation::Confirmed(Confirmed {
        state: Some(lease(ME, 4)),
        at: t0,
    });
    assert_eq!(decide(ME, M, &obs, t0), Role::Follower);
}

#[test]
fn a_pod_in_no_group_is_a_follower_on_the_pod_alone() {
    let t0 = Instant::now();
    let mut obs = Observation::new(false);
    assert_eq!(decide(ME, M, &obs, t0), Role::Unknown);
    obs.pod = Some(Confirmed {
        state: Some(PodMarks::default()),
        at: t0,
    });
    assert_eq!(decide(ME, M, &obs, t0), Role::Follower);
    // It lapses like any other confirmation (default duration 15 s: 10 s).
    assert_eq!(obs.lapses_at(), Some(t0 + Duration::from_secs(10)));
    assert_eq!(
        decide(ME, M, &obs, t0 + Duration::from_secs(10)),
        Role::Unknown
    );
}

#[test]
fn leadership_lapses_exactly_two_thirds_of_the_duration_after_the_older_confirmation() {
    let t0 = Instant::now();
    let mut obs = seen(t0, Some(leader_pod(4)), Some(lease(ME, 4)));
    // The Lease was confirmed again later; the pod's older confirmation counts.
    if let LeaseObservation::Confirmed(l) = &mut obs.lease {
        l.at = t0 + Duration::from_millis(900);
    }
    assert_eq!(obs.validity(), Duration::from_secs(2));
    assert_eq!(obs.lapses_at(), Some(t0 + Duration::from_secs(2)));
    let just_before = t0 + Duration::from_secs(2) - Duration::from_nanos(1);
    assert_eq!(
        decide(ME, M, &obs, just_before),
        Role::Leader { epoch: epoch(4) }
    );
    assert_eq!(
        decide(ME, M, &obs, t0 + Duration::from_secs(2)),
        Role::Unknown
    );
    // A follower lapses the same way.
    let obs = seen(t0, Some(follower_pod()), Some(lease("app-1", 4)));
    assert_eq!(decide(ME, M, &obs, just_before), Role::Follower);
    assert_eq!(
        decide(ME, M, &obs, t0 + Duration::from_secs(2)),
        Role::Unknown
    );
}

#[test]
fn the_lease_duration_sets_the_validity() {
    let mut obs = Observation::new(true);
    assert_eq!(obs.validity(), Duration::from_secs(10), "default 15 s");
    obs.lease_duration = Duration::from_secs(30);
    assert_eq!(obs.validity(), Duration::from_secs(20));
    obs.lease_duration = Duration::from_secs(1);
    assert_eq!(obs.validity(), Duration::from_nanos(666_666_666));
}

#[test]
fn marks_are_read_from_the_objects() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": ME,
            "labels": {"leadergroup.io/role": "leader"},
            "annotations": {"leadergroup.io/epoch": "12", "leadergroup.io/group": "payments"}
        }
    }))
    .unwrap();
    assert_eq!(
        PodMarks::of(&pod),
        PodMarks {
            leader: true,
            epoch: Some(epoch(12)),
            group: Some("payments".to_owned()),
            uid: None,
        }
    );
    let bad: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "labels": {"leadergroup.io/role": "follower"},
            "annotations": {"leadergroup.io/epoch": "-3"}
        }
    }))
    .unwrap();
    assert_eq!(PodMarks::of(&bad), PodMarks::default());

    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"annotations": {"leadergroup.io/epoch": "12"}},
        "spec": {"holderIdentity": ME, "leaseDurationSeconds": 6, "leaseTransitions": 99}
    }))
    .unwrap();
    assert_eq!(
        LeaseMarks::of(&lease),
        LeaseMarks {
            group: None,
            holder: Some(ME.to_owned()),
            holder_uid: None,
            epoch: Some(epoch(12)),
            duration: Some(Duration::from_secs(6)),
            heartbeat: false,
            renewed_since_acquired: false,
            acknowledged: None,
            acknowledged_by: Vec::new(),
            awaited: None,
        }
    );
    let mut heartbeat = lease.clone();
    heartbeat
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("leadergroup.io/liveness".to_owned(), "Heartbeat".to_owned());
    let marks = LeaseMarks::of(&heartbeat);
    assert!(marks.heartbeat);
    assert_eq!(marks.renewal_asked_of(ME), Some(epoch(12)));
    assert_eq!(marks.renewal_asked_of("app-1"), None);
    assert_eq!(LeaseMarks::of(&lease).renewal_asked_of(ME), None);
    let empty: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 0}
    }))
    .unwrap();
    assert_eq!(LeaseMarks::of(&empty), LeaseMarks::default());
}

/// Heartbeat mode: the Lease asks its holder to renew it.
fn heartbeat_lease(holder: &str, n: u32) -> LeaseMarks {
    LeaseMarks {
        heartbeat: true,
        ..lease(holder, n)
    }
}

#[test]
fn in_heartbeat_mode_a_leader_needs_a_renewal_within_two_thirds() {
    let t0 = Instant::now();
    let mut obs = seen(t0, Some(leader_pod(4)), Some(heartbeat_lease(ME, 4)));
    assert_eq!(
        decide(ME, M, &obs, t0),
        Role::Unknown,
        "nothing to start from"
    );

    obs.renewed = Some(Renewed {
        epoch: epoch(4),
        at: t0,
    });
    assert_eq!(decide(ME, M, &obs, t0), Role::Leader { epoch: epoch(4) });

    // Pod and Lease confirmed again later, yet no renewal landed: Unknown at two thirds of 3 s.
    let later = t0 + Duration::from_millis(1500);
    obs.pod = Some(Confirmed {
        state: Some(leader_pod(4)),
        at: later,
    });
    obs.lease = LeaseObservation::Confirmed(Confirmed {
        state: Some(heartbeat_lease(ME, 4)),
        at: later,
    });
    assert_eq!(obs.lapses_at(), Some(t0 + Duration::from_secs(2)));
    assert_eq!(
        decide(ME, M, &obs, t0 + Duration::from_millis(1999)),
        Role::Leader { epoch: epoch(4) }
    );
    assert_eq!(
        decide(ME, M, &obs, t0 + Duration::from_secs(2)),
        Role::Unknown
    );

    // A renewal at an older epoch counts for nothing.
    obs.renewed = Some(Renewed {
        epoch: epoch(3),
        at: later,
    });
    assert_eq!(decide(ME, M, &obs, later), Role::Unknown);
}

#[test]
fn renewals_matter_only_in_heartbeat_mode_and_only_to_the_leader() {
    let t0 = Instant::now();
    let readiness = seen(t0, Some(leader_pod(4)), Some(lease(ME, 4)));
    assert_eq!(
        decide(ME, M, &readiness, t0),
        Role::Leader { epoch: epoch(4) }
    );
    let follower = seen(t0, Some(follower_pod()), Some(heartbeat_lease("app-1", 4)));
    assert_eq!(decide(ME, M, &follower, t0), Role::Follower);
}

#[test]
fn a_pod_created_again_under_the_leaders_name_is_not_the_leader() {
    let mut lease = lease(ME, 3);
    lease.holder_uid = Some("uid-old".into());
    let mut pod = leader_pod(3);
    pod.uid = Some("uid-new".into());
    let now = Instant::now();
    let observed = |pod: PodMarks, lease: LeaseMarks| seen(now, Some(pod), Some(lease));
    assert_eq!(
        decide(ME, M, &observed(pod.clone(), lease.clone()), now),
        Role::Follower,
        "another incarnation never reports its predecessor's epoch"
    );
    pod.uid = Some("uid-old".into());
    assert_eq!(
        decide(ME, M, &observed(pod, lease), now),
        Role::Leader { epoch: epoch(3) }
    );
}

#[test]
fn in_readiness_mode_a_leader_reports_leader_only_once_it_has_acknowledged_at_its_epoch() {
    let t0 = Instant::now();
    let marks = leader_pod(4);
    for (acknowledged, role) in [
        (None, Role::Unknown),
        (Some(epoch(3)), Role::Unknown),
        (Some(epoch(4)), Role::Leader { epoch: epoch(4) }),
    ] {
        let lease = LeaseMarks {
            acknowledged,
            ..lease(ME, 4)
        };
        assert_eq!(
            lease.acknowledgement_asked_of(ME, None, M),
            (role == Role::Unknown).then_some(epoch(4)),
            "acknowledged at {acknowledged:?}"
        );
        let obs = seen(t0, Some(marks.clone()), Some(lease));
        assert_eq!(
            decide(ME, M, &obs, t0),
            role,
            "acknowledged at {acknowledged:?}"
        );
    }
    // Only the holder is asked, and in Heartbeat mode its renewals acknowledge: until one has,
    // the Lease's first sighting (which starts the renewal clock) does not make it leader.
    let unacknowledged = LeaseMarks {
        acknowledged: None,
        ..lease(ME, 4)
    };
    assert_eq!(
        unacknowledged.acknowledgement_asked_of("other", None, M),
        None
    );
    let heartbeat = LeaseMarks {
        heartbeat: true,
        ..unacknowledged
    };
    assert_eq!(heartbeat.acknowledgement_asked_of(ME, None, M), None);
    let mut belief = crate::belief::Belief::new(ME, M, true);
    belief.pod_seen(Some(marks.clone()), t0);
    belief.lease_seen(Some(heartbeat.clone()), t0);
    assert_eq!(belief.role(t0), Role::Unknown, "not renewed yet");
    let acknowledged = LeaseMarks {
        acknowledged: Some(epoch(4)),
        ..heartbeat
    };
    belief.lease_seen(Some(acknowledged), t0);
    assert_eq!(belief.role(t0), Role::Leader { epoch: epoch(4) });
}

#[test]
fn a_member_owes_its_acknowledgement_and_renewals_only_once_its_pod_carries_the_marks() {
    let t0 = Instant::now();
    let readiness = LeaseMarks {
        acknowledged: None,
        ..lease(ME, 4)
    };
    let heartbeat = LeaseMarks {
        heartbeat: true,
        ..readiness.clone()
    };
    // Committed in the Lease, the pod not labeled yet (its predecessor is still awaited), or
    // labeled at an older epoch: nothing owed.
    for pod in [follower_pod(), leader_pod(3)] {
        let obs = seen(t0, Some(pod.clone()), Some(readiness.clone()));
        assert_eq!(obs.acknowledgement_owed(ME, M), None, "{pod:?}");
        let obs = seen(t0, Some(pod.clone()), Some(heartbeat.clone()));
        assert_eq!(obs.renewal_owed(ME), None, "{pod:?}");
    }
    // Labeled at the Lease's epoch: owed.
    let obs = seen(t0, Some(leader_pod(4)), Some(readiness));
    assert_eq!(obs.acknowledgement_owed(ME, M), Some(epoch(4)));
    assert_eq!(
        obs.renewal_owed(ME),
        None,
        "renewals only in Heartbeat mode"
    );
    let obs = seen(t0, Some(leader_pod(4)), Some(heartbeat));
    assert_eq!(obs.renewal_owed(ME), Some(epoch(4)));
    assert_eq!(
        obs.acknowledgement_owed(ME, M),
        None,
        "its renewals acknowledge"
    );
}

#[test]
fn a_member_never_leads_for_a_pod_created_again_under_its_name() {
    // This process followed its pod (UID old). The pod is deleted and created again under the
    // name (UID new); the operator elects the new incarnation at epoch 5. A process of the old
    // one that can still reach the API server must not report `Leader` for it.
    let t0 = Instant::now();
    let of = |uid: &str, marks: PodMarks| PodMarks {
        uid: Some(uid.to_owned()),
        ..marks
    };
    let new_lease = LeaseMarks {
        holder_uid: Some("new".to_owned()),
        ..lease(ME, 5)
    };
    for mut belief in [
        crate::belief::Belief::new(ME, M, true),
        crate::belief::Belief::new(ME, M, true).of_incarnation(Some("old".to_owned())),
    ] {
        belief.pod_seen(Some(of("old", follower_pod())), t0);
        belief.pod_seen(Some(of("new", leader_pod(5))), t0);
        belief.lease_seen(Some(new_lease.clone()), t0);
        assert_eq!(belief.role(t0), Role::Follower);
        assert_eq!(belief.observation().acknowledgement_owed(ME, M), None);
    }
    // Given its UID, a process started after the re-creation does not adopt it either.
    let mut late = crate::belief::Belief::new(ME, M, true).of_incarnation(Some("old".to_owned()));
    late.pod_seen(Some(of("new", leader_pod(5))), t0);
    late.lease_seen(Some(new_lease.clone()), t0);
    assert_eq!(late.role(t0), Role::Follower);
    // The new incarnation's own member leads.
    let mut own = crate::belief::Belief::new(ME, M, true);
    own.pod_seen(Some(of("new", leader_pod(5))), t0);
    own.lease_seen(Some(new_lease), t0);
    assert_eq!(own.role(t0), Role::Leader { epoch: epoch(5) });
}

#[test]
fn each_member_of_a_pod_acknowledges_and_steps_down_under_its_own_name() {
    // Two members of one pod, an agent and the application's `Membership`: the agent's
    // acknowledgement is not the application's.
    let t0 = Instant::now();
    let agent_only = LeaseMarks {
        acknowledged_by: vec!["agent".to_owned()],
        ..lease(ME, 4)
    };
    let obs = seen(t0, Some(leader_pod(4)), Some(agent_only.clone()));
    assert_eq!(
        decide(ME, "agent", &obs, t0),
        Role::Leader { epoch: epoch(4) }
    );
    assert_eq!(decide(ME, M, &obs, t0), Role::Unknown, "not its own");
    assert_eq!(obs.acknowledgement_owed(ME, M), Some(epoch(4)));
    assert_eq!(obs.acknowledgement_owed(ME, "agent"), None);
    // Deposed: each of the two is asked to step down until it has said so.
    let mut lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"annotations": {
            "leadergroup.io/epoch": "5",
            "leadergroup.io/predecessor": ME,
            "leadergroup.io/predecessor-epoch": "4",
            "leadergroup.io/predecessor-members": format!("agent,{M}"),
            "leadergroup.io/stepped-down-by-epoch": "4",
            "leadergroup.io/stepped-down-by": "agent",
        }},
        "spec": {"holderIdentity": "app-1", "leaseDurationSeconds": 3}
    }))
    .unwrap();
    let marks = LeaseMarks::of(&lease);
    assert_eq!(marks.step_down_asked_of(ME, None, M), Some(epoch(4)));
    assert_eq!(marks.step_down_asked_of(ME, None, "agent"), None, "said so");
    lease.metadata.annotations.as_mut().unwrap().insert(
        "leadergroup.io/stepped-down-by".into(),
        format!("agent,{M}"),
    );
    assert_eq!(LeaseMarks::of(&lease).awaited, None, "both said so");
}

/// Safety round five, finding 4: a member of 0.2.0 beside one of this version in a pod. The 0.2.0
/// member reports `Leader` once `leadergroup.io/acknowledged` says its epoch, whoever wrote it,
/// and says no name: members of this version must never write that key, and a predecessor whose
/// unnamed member acknowledged is awaited until `leadergroup.io/stepped-down` says its epoch,
/// whatever the named ones said.
#[test]
fn a_member_of_0_2_0_never_leads_on_a_named_acknowledgement_and_is_awaited() {
    // The named handshake of this version: its own keys.
    let named: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"annotations": {
            "leadergroup.io/epoch": "4",
            "leadergroup.io/acknowledged-by-epoch": "4",
            "leadergroup.io/acknowledged-by": M,
        }},
        "spec": {"holderIdentity": ME, "leaseDurationSeconds": 3}
    }))
    .unwrap();
    let annotations = named.metadata.annotations.as_ref().unwrap();
    assert!(
        !annotations.contains_key(crate::wire::ACKNOWLEDGED_ANNOTATION),
        "what a 0.2.0 member reads"
    );
    let marks = LeaseMarks::of(&named);
    assert!(marks.acknowledged_by(M, epoch(4)));
    // Deposed with both awaited: the named member's step-down is not the unnamed one's.
    let mut deposed: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"annotations": {
            "leadergroup.io/epoch": "5",
            "leadergroup.io/predecessor": ME,
            "leadergroup.io/predecessor-epoch": "4",
            "leadergroup.io/predecessor-members": format!("-,{M}"),
            "leadergroup.io/stepped-down-by-epoch": "4",
            "leadergroup.io/stepped-down-by": M,
        }},
        "spec": {"holderIdentity": "app-1", "leaseDurationSeconds": 3}
    }))
    .unwrap();
    let awaited = LeaseMarks::of(&deposed)
        .awaited
        .expect("the unnamed member is awaited");
    assert_eq!(awaited.stepped_down_by, [M.to_owned()]);
    assert_eq!(
        LeaseMarks::of(&deposed).step_down_asked_of(ME, None, M),
        None,
        "said so"
    );
    // The 0.2.0 member's own step-down ends the wait.
    deposed
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(crate::wire::STEPPED_DOWN_ANNOTATION.into(), "4".into());
    assert_eq!(LeaseMarks::of(&deposed).awaited, None, "both said so");
}
