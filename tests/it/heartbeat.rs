//! Heartbeat liveness on the light cluster, with faults at exact points: the leader's
//! `Membership` renews the Lease through a proxy that the test cuts (the leader's node lost, as
//! far as the API server can tell, while its pod stays Ready), then releases, so that the renewals
//! it held land late; and renewals written by the test with a holder's clock seconds off the
//! operator's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use leadergroup_client::{Epoch, Membership, Role};
use leadergroup_operator::crd::{LeaderGroup, LeaderGroupStatus, Liveness, lease_name_for};
use leadergroup_operator::election::{HEARTBEAT, LEADER_ELECTED};
use leadergroup_operator::lease_record::{Lapsed, LeaseRecord};
use leadergroup_testenv::{
    InvariantWatcher, MemberRules, Proxy, api_server_addr, control_plane, member_account,
    wait_until,
};
use tokio::time::Instant;

use crate::common::{Operator, World, group};

/// The groups' Lease duration: renewals every second, the leader Unknown after 2 s of silence,
/// a handover after 3 s.
const DURATION_SECS: i32 = 3;
const DURATION: Duration = Duration::from_secs(3);
/// What a handover may take beyond the Lease duration: one reconcile, and the commit, record,
/// demote, check and promote steps on a shared 2-core machine.
const ONE_RECONCILE: Duration = Duration::from_millis(1500);

fn heartbeat_group(name: &str, app: &str) -> LeaderGroup {
    let mut g = group(name, app);
    g.spec.lease_duration_seconds = DURATION_SECS;
    g.spec.liveness = Liveness::Heartbeat;
    g
}

/// Every state of a group's Lease, with the instant this test saw it.
#[derive(Clone)]
struct LeaseLog(Arc<Mutex<Vec<(Instant, LeaseRecord)>>>);

impl LeaseLog {
    fn start(client: &Client, ns: &str, group: &str) -> LeaseLog {
        let log = LeaseLog(Arc::new(Mutex::new(Vec::new())));
        let api: Api<Lease> = Api::namespaced(client.clone(), ns);
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", lease_name_for(group)));
        let sink = log.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, config).applied_objects());
            while let Some(Ok(lease)) = events.next().await {
                let record = LeaseRecord::from_lease(&lease);
                sink.0.lock().unwrap().push((Instant::now(), record));
            }
        });
        log
    }

    fn entries(&self) -> Vec<(Instant, LeaseRecord)> {
        self.0.lock().unwrap().clone()
    }

    /// When this test last saw the Lease change while `holder` held it at `epoch`, before `until`:
    /// its last renewal.
    fn last_renewal(&self, holder: &str, epoch: i64, until: Instant) -> Instant {
        self.entries()
            .iter()
            .rev()
            .find(|(at, r)| *at <= until && r.holder.as_deref() == Some(holder) && r.epoch == epoch)
            .map(|(at, _)| *at)
            .expect("the holder's Lease was seen")
    }
}

/// Waits until `rx` shows `want`; returns when.
async fn wait_role(rx: &mut tokio::sync::watch::Receiver<Role>, want: Role, what: &str) -> Instant {
    let reached = tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|r| *r == want))
        .await
        .is_ok_and(|r| r.is_ok());
    assert!(
        reached,
        "{what}: role {want} not reached; it is {}",
        *rx.borrow()
    );
    Instant::now()
}

fn heartbeat_condition(status: &LeaderGroupStatus) -> Option<&str> {
    status.condition(HEARTBEAT).map(|c| c.reason.as_str())
}

/// The members of `group`, one per pod, with the documented rights: the first pod's reaches the
/// API server through the returned proxy (the test cuts it: its node lost, as far as the API
/// server can tell, while its pod stays Ready), the others directly.
async fn members(w: &World, pods: &[String], group: &str) -> (Proxy, Vec<Membership>) {
    let cp = control_plane().await.unwrap();
    let token = member_account(&w.ns, "member", group, MemberRules::DOCUMENTED)
        .await
        .unwrap();
    let proxy = Proxy::start(api_server_addr().await.unwrap())
        .await
        .unwrap();
    let mut members = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let via = (i == 0).then_some(proxy.addr);
        let client = cp.client_with_token_via(&token, via).await.unwrap();
        members.push(Membership::start(
            client,
            &w.ns.name,
            pod,
            Some(group.into()),
        ));
    }
    (proxy, members)
}

#[tokio::test]
async fn a_silent_leader_hands_over_after_the_lease_and_its_late_renewals_are_refused() {
    let w = World::new("hb-silent").await;
    let pods = w.ordered_ready_pods("app", 2, "hb").await;
    let cp = control_plane().await.unwrap();
    // The leader reaches the API server through the proxy; the follower directly.
    let (proxy, mut members) = members(&w, &pods, "hb").await;
    let (new, old) = (members.pop().unwrap(), members.pop().unwrap());
    let mut old_errors = old.errors();
    let refusals = tokio::spawn(async move {
        let mut seen = Vec::new();
        while old_errors.changed().await.is_ok() {
            if let Some(e) = old_errors.borrow_and_update().clone() {
                seen.push(e.to_string());
            }
        }
        seen
    });

    let invariants = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let leases = LeaseLog::start(&w.ns.client, &w.ns.name, "hb");
    let _operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &heartbeat_group("hb", "hb"))
        .await
        .unwrap();
    let first = Role::Leader {
        epoch: Epoch::from(1u32),
    };
    let mut old_role = old.subscribe();
    let mut new_role = new.subscribe();
    wait_role(&mut old_role, first, "the first leader").await;
    // The operator saw the leader renew: the renewals land and it stopped renewing itself.
    w.wait_status("hb", "the Heartbeat condition Renewing", |s| {
        heartbeat_condition(s) == Some("Renewing")
    })
    .await;
    let lease = leases.entries().last().unwrap().1.clone();
    assert!(lease.heartbeat, "the Lease asks its holder to renew");
    assert_eq!(lease.arbiter.as_deref(), Some("op-1"));

    // The leader's node is lost to the API server: its renewals are held in the proxy.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let cut_at = Instant::now();
    proxy.cut();
    let unknown_at = wait_role(&mut old_role, Role::Unknown, "the cut-off leader").await;
    let second = Role::Leader {
        epoch: Epoch::from(2u32),
    };
    let new_leader_at = wait_role(&mut new_role, second, "the successor").await;
    let status = w
        .wait_status("hb", "the successor recorded", |s| {
            s.leader.as_deref() == Some(&pods[1])
        })
        .await;
    let handover = leases
        .entries()
        .iter()
        .find(|(_, r)| r.holder.as_deref() == Some(&pods[1]))
        .map(|(at, _)| *at)
        .expect("the Lease names the successor");
    // A renewal sent just before the cut may land and be answered after it: the last renewal is
    // the last before the handover, not before the cut (nothing passes the proxy after it).
    let last_renewal = leases.last_renewal(&pods[0], 1, handover);
    assert!(
        last_renewal >= cut_at - Duration::from_millis(1500),
        "no renewal seen in the second before the cut"
    );
    let silent_for = handover - last_renewal;
    eprintln!(
        "heartbeat: last renewal seen → Unknown {:?}, → new holder {:?}, → successor's Role::Leader {:?} (Lease {DURATION:?})",
        unknown_at - last_renewal,
        silent_for,
        new_leader_at - last_renewal
    );
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("LeaderHeartbeatLost")
    );
    assert_eq!(status.epoch, 2);
    // Never before a whole Lease duration of silence (the old leader acts until two thirds of
    // it), and within one reconcile after it. The test saw the renewal no earlier than the
    // operator did, give or take a watch's delivery.
    assert!(
        silent_for >= DURATION - Duration::from_millis(150),
        "handed over after only {silent_for:?} of silence"
    );
    assert!(
        silent_for <= DURATION + ONE_RECONCILE,
        "handed over only after {silent_for:?} of silence"
    );
    assert!(
        unknown_at < handover,
        "the cut-off leader turned Unknown {:?} after its successor was committed",
        unknown_at - handover
    );
    assert!(unknown_at - last_renewal <= DURATION * 2 / 3 + Duration::from_millis(400));

    // The held renewals land now, late: each is conditional on the Lease it read, so none of
    // them takes the Lease back.
    let released_at = Instant::now();
    proxy.release();
    wait_role(
        &mut old_role,
        Role::Follower,
        "the deposed leader, reconnected",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: Vec<LeaseRecord> = leases
        .entries()
        .into_iter()
        .filter(|(at, _)| *at >= released_at)
        .map(|(_, r)| r)
        .collect();
    assert!(
        after
            .iter()
            .all(|r| r.holder.as_deref() == Some(&pods[1]) && r.epoch == 2),
        "a late renewal overwrote the Lease: {after:?}"
    );
    assert_eq!(
        LeaseRecord::from_lease(
            &Api::<Lease>::namespaced(w.ns.client.clone(), &w.ns.name)
                .get("leadergroup-hb")
                .await
                .unwrap()
        )
        .holder
        .as_deref(),
        Some(pods[1].as_str())
    );
    assert!(old_role.borrow().leader_epoch().is_none());
    drop(old);
    let errors = refusals.await.unwrap();
    eprintln!("heartbeat: the deposed leader's failed requests: {errors:#?}");
    invariants.assert_held().await;
    drop(new);
}

/// Renews `group`'s Lease the way its holder would (a CAS on the version read), stamping
/// `renewTime` with a clock `skew` off this machine's.
async fn renew_as_holder(api: &Api<Lease>, group: &str, skew: SignedDuration) {
    let name = lease_name_for(group);
    loop {
        let mut lease = api.get(&name).await.unwrap();
        lease.spec.get_or_insert_default().renew_time =
            Some(MicroTime(Timestamp::now().checked_add(skew).unwrap()));
        match api.replace(&name, &PostParams::default(), &lease).await {
            Ok(_) => return,
            // The operator wrote it in between (its status-only passes never touch the Lease, but
            // a takeover or a mode switch does): read again.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("renewing {name}: {e}"),
        }
    }
}

#[tokio::test]
async fn the_holders_clock_does_not_move_the_handover() {
    const SKEWS: [(&str, i64); 3] = [("behind", -5), ("even", 0), ("ahead", 5)];
    let w = World::new("hb-skew").await;
    let cp = control_plane().await.unwrap();
    let mut leaders = Vec::new();
    for (name, _) in SKEWS {
        let pods = w.ordered_ready_pods(name, 2, name).await;
        w.groups
            .create(&PostParams::default(), &heartbeat_group(name, name))
            .await
            .unwrap();
        leaders.push(pods[0].clone());
    }
    let invariants = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let _operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    for ((name, _), leader) in SKEWS.iter().zip(&leaders) {
        w.wait_status(name, "the first leader", |s| {
            s.leader.as_ref() == Some(leader)
        })
        .await;
    }
    let leases: Api<Lease> = Api::namespaced(w.ns.client.clone(), &w.ns.name);
    let logs: Vec<LeaseLog> = SKEWS
        .iter()
        .map(|(name, _)| LeaseLog::start(&w.ns.client, &w.ns.name, name))
        .collect();

    // Renew every third of the duration for longer than a duration: with the holder's clock 5 s
    // behind, its renewTime says the Lease ran out 2 s before it was written.
    let renewing_until = Instant::now() + DURATION + Duration::from_secs(1);
    while Instant::now() < renewing_until {
        // Together, so that one slow answer (the suite loads the API server) delays no other
        // group's renewal.
        futures::future::join_all(
            SKEWS.iter().map(|(name, skew)| {
                renew_as_holder(&leases, name, SignedDuration::from_secs(*skew))
            }),
        )
        .await;
        tokio::time::sleep(DURATION / 3).await;
    }
    for ((name, _), leader) in SKEWS.iter().zip(&leaders) {
        let status = w.groups.get_status(name).await.unwrap().status.unwrap();
        assert_eq!(
            status.leader.as_ref(),
            Some(leader),
            "{name}: handed over while its leader renewed"
        );
        assert_eq!(heartbeat_condition(&status), Some("Renewing"), "{name}");
    }

    // The renewals stop together: each group hands over a Lease duration after the last one the
    // operator saw, whatever renewTime said.
    let stopped = Instant::now();
    let mut after = Vec::new();
    for (((name, skew), leader), log) in SKEWS.iter().zip(&leaders).zip(&logs) {
        w.wait_status(name, "the successor", |s| {
            s.leader.as_ref().is_some_and(|l| l != leader)
        })
        .await;
        let last = log.last_renewal(leader, 1, stopped);
        let handover = log
            .entries()
            .iter()
            .find(|(_, r)| r.holder.as_deref() != Some(leader.as_str()) && r.holder.is_some())
            .map(|(at, _)| *at)
            .expect("a new holder");
        let silent_for = handover - last;
        eprintln!(
            "heartbeat skew {skew:+} s ({name}): handover {silent_for:?} after the last renewal"
        );
        assert!(
            silent_for >= DURATION - Duration::from_millis(150)
                && silent_for <= DURATION + ONE_RECONCILE,
            "{name} (holder's clock {skew:+} s): handed over {silent_for:?} after the last renewal"
        );
        after.push(silent_for);
    }
    let spread = after
        .iter()
        .max()
        .unwrap()
        .saturating_sub(*after.iter().min().unwrap());
    assert!(
        spread < Duration::from_secs(1),
        "the holder's clock moved the handover: {after:?}"
    );
    invariants.assert_held().await;
}

#[tokio::test]
async fn a_leader_that_never_renews_keeps_leading_and_is_reported() {
    let w = World::new("hb-never").await;
    let pods = w.ordered_ready_pods("app", 2, "never").await;
    let cp = control_plane().await.unwrap();
    let _operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &heartbeat_group("never", "never"))
        .await
        .unwrap();
    let status = w
        .wait_status("never", "the NoRenewal condition", |s| {
            heartbeat_condition(s) == Some("NoRenewal")
        })
        .await;
    assert_eq!(status.leader.as_ref(), Some(&pods[0]));
    assert_eq!(status.epoch, 1);
    let message = &status.condition(HEARTBEAT).unwrap().message;
    assert!(message.contains("leadergroup-agent"), "{message}");
    // It stays leader past further durations, and Readiness still moves leadership.
    tokio::time::sleep(DURATION * 2).await;
    let status = w.groups.get_status("never").await.unwrap().status.unwrap();
    assert_eq!((status.leader.as_ref(), status.epoch), (Some(&pods[0]), 1));
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    let status = w
        .wait_status("never", "the handover on NotReady", |s| {
            s.leader.as_ref() == Some(&pods[1])
        })
        .await;
    assert_eq!(
        status.last_transition_reason.as_deref(),
        Some("LeaderNotReady")
    );
}

/// A leader's member restarts (its process, or its agent's): the Lease already names its pod,
/// renewed by the previous process, and the operator counts the silence from that renewal. The
/// new process must not report `Leader` on its first look: only once a renewal of its own has
/// landed. Here the first restart cannot renew at all (no `update` on the Lease), and must never
/// report `Leader`; the second can, and does.
#[tokio::test]
async fn a_restarted_member_reports_leader_only_after_its_own_renewal() {
    let w = World::new("hb-restart").await;
    let pods = w.ordered_ready_pods("app", 2, "hbr").await;
    let cp = control_plane().await.unwrap();
    let token = member_account(&w.ns, "member", "hbr", MemberRules::DOCUMENTED)
        .await
        .unwrap();
    let reader = member_account(&w.ns, "reader", "hbr", MemberRules::NO_RENEWAL)
        .await
        .unwrap();
    let member = |token: String| {
        let ns = w.ns.name.clone();
        let pod = pods[0].clone();
        async move {
            let client = cp.client_with_token(&token).await.unwrap();
            Membership::start(client, &ns, &pod, Some("hbr".into()))
        }
    };
    let _operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    let mut g = heartbeat_group("hbr", "hbr");
    // Long enough for two restarts without a handover.
    g.spec.lease_duration_seconds = 12;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    let first = member(token.clone()).await;
    let leader = Role::Leader {
        epoch: Epoch::from(1u32),
    };
    wait_role(&mut first.subscribe(), leader, "the first process").await;
    let leases: Api<Lease> = w.ns.api();
    let renewed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let l = LeaseRecord::from_lease(&leases.get(&lease_name_for("hbr")).await.unwrap());
            if l.renew_time != l.acquire_time {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(renewed.is_ok(), "the first process renewed the Lease");
    drop(first);

    // Restarted without the right to renew: it reads everything, and never leads.
    let blind = member(reader).await;
    let mut roles = blind.subscribe();
    let mut seen = vec![*roles.borrow_and_update()];
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        while roles.changed().await.is_ok() {
            seen.push(*roles.borrow_and_update());
        }
    })
    .await;
    assert!(
        !seen.iter().any(|r| matches!(r, Role::Leader { .. })),
        "a restarted member reported Leader before any renewal of its own landed: {seen:?}"
    );
    drop(blind);

    // Restarted with it: leads again once its renewal lands.
    let again = member(token).await;
    wait_role(&mut again.subscribe(), leader, "the restarted process").await;
}

fn leader_elected_reason(status: &LeaderGroupStatus) -> Option<&str> {
    status.condition(LEADER_ELECTED).map(|c| c.reason.as_str())
}

async fn lease_record(w: &World, group: &str) -> LeaseRecord {
    let leases: Api<Lease> = w.ns.api();
    LeaseRecord::from_lease(&leases.get(&lease_name_for(group)).await.unwrap())
}

/// The leader's renewals stop (its connection to the API server is cut) while its pod stays
/// Ready: its successor takes over. When the successor fails in turn, the lapsed pod, still
/// Ready, is not elected again: nobody leads, and the status says why, until its pod turns
/// NotReady and Ready again. The Lease remembers the lapse (its pod's UID and epoch).
#[tokio::test]
async fn a_lapsed_leader_that_still_shows_ready_is_not_elected_again() {
    let w = World::new("hb-lapse").await;
    let pods = w.ordered_ready_pods("app", 2, "lapse").await;
    let cp = control_plane().await.unwrap();
    let (proxy, mut members) = members(&w, &pods, "lapse").await;
    let (new, old) = (members.pop().unwrap(), members.pop().unwrap());
    let invariants = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let _operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &heartbeat_group("lapse", "lapse"))
        .await
        .unwrap();
    let first = Role::Leader {
        epoch: Epoch::from(1u32),
    };
    wait_role(&mut old.subscribe(), first, "the first leader").await;
    w.wait_status("lapse", "the Heartbeat condition Renewing", |s| {
        heartbeat_condition(s) == Some("Renewing")
    })
    .await;

    proxy.cut();
    let second = Role::Leader {
        epoch: Epoch::from(2u32),
    };
    wait_role(&mut new.subscribe(), second, "the successor").await;
    // The successor fails; the lapsed pod still shows Ready.
    w.kubelet.set_ready(&pods[1], false).await.unwrap();
    let status = w
        .wait_status("lapse", "nobody leads", |s| s.leader.is_none())
        .await;
    assert_eq!(status.epoch, 2);
    assert_eq!(leader_elected_reason(&status), Some("NoCandidates"));
    let lapsed = status
        .eligibility
        .iter()
        .find(|e| e.pod == pods[0])
        .expect("the lapsed pod's eligibility");
    assert_eq!(
        (lapsed.eligible, lapsed.reason.as_str()),
        (false, "HeartbeatLost")
    );
    // And it stays so.
    tokio::time::sleep(DURATION * 2).await;
    let status = w.groups.get_status("lapse").await.unwrap().status.unwrap();
    assert_eq!((status.leader, status.epoch), (None, 2));
    assert_eq!(w.labeled_leaders("lapse").await, vec![]);
    let uid = w.pods.get(&pods[0]).await.unwrap().metadata.uid.unwrap();
    assert_eq!(
        lease_record(&w, "lapse").await.lapsed,
        Some(Lapsed { uid, epoch: 1 }),
        "the Lease remembers the lapsed incarnation and its epoch"
    );

    // Its pod turns NotReady, and once the operator has seen it so, Ready again: it may lead.
    w.kubelet.set_ready(&pods[0], false).await.unwrap();
    wait_until("the lapse forgotten", Duration::from_secs(30), || async {
        Ok::<_, String>(
            lease_record(&w, "lapse")
                .await
                .lapsed
                .is_none()
                .then_some(()),
        )
    })
    .await
    .unwrap();
    w.kubelet.set_ready(&pods[0], true).await.unwrap();
    let status = w
        .wait_status("lapse", "the pod back from NotReady leads", |s| {
            s.leader.as_ref() == Some(&pods[0])
        })
        .await;
    assert_eq!(status.epoch, 3);
    invariants.assert_held().await;
    drop((old, new));
}

/// A group's only pod stops renewing while it stays Ready: nobody else may lead, so it keeps the
/// Lease and its epoch, its member reports no role, and the status says nobody leads and why.
/// The operator is restarted meanwhile (killed, another replica started), which knows nothing of
/// the silence but what the Lease says. Once its renewals get through again it leads again at the
/// same epoch (no new token, since nobody else had one). Before, the Lease was released and the
/// same incarnation elected again at once with the next epoch: two epochs in a row.
#[tokio::test]
async fn a_lone_lapsed_leader_keeps_its_epoch_across_an_operator_restart_until_it_renews() {
    let w = World::new("hb-alone").await;
    let pods = w.ordered_ready_pods("app", 1, "alone").await;
    let cp = control_plane().await.unwrap();
    let (proxy, mut members) = members(&w, &pods, "alone").await;
    let member = members.pop().unwrap();
    let invariants = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
    let mut operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    w.groups
        .create(&PostParams::default(), &heartbeat_group("alone", "alone"))
        .await
        .unwrap();
    let leader = Role::Leader {
        epoch: Epoch::from(1u32),
    };
    let mut role = member.subscribe();
    wait_role(&mut role, leader, "the leader").await;
    w.wait_status("alone", "the Heartbeat condition Renewing", |s| {
        heartbeat_condition(s) == Some("Renewing")
    })
    .await;

    proxy.cut();
    wait_role(&mut role, Role::Unknown, "the cut-off leader").await;
    let status = w
        .wait_status("alone", "LeaderElected False, HeartbeatLost", |s| {
            leader_elected_reason(s) == Some("HeartbeatLost")
        })
        .await;
    assert_eq!(status.epoch, 1);
    assert_eq!(heartbeat_condition(&status), Some("Lapsed"));
    // The operator restarts; durations pass: no new token for it, nor a release of the Lease.
    operator.kill().await;
    let _restarted = Operator::start(cp, &w.ns.name, "op-2", &[]).await;
    wait_until(
        "the restarted operator arbitrates",
        Duration::from_secs(30),
        || async {
            let arbiter = lease_record(&w, "alone").await.arbiter;
            Ok::<_, String>((arbiter.as_deref() == Some("op-2")).then_some(()))
        },
    )
    .await
    .unwrap();
    let status = w.groups.get_status("alone").await.unwrap().status.unwrap();
    assert_eq!(
        leader_elected_reason(&status),
        Some("HeartbeatLost"),
        "the restarted operator takes its first look at the Lease for no renewal"
    );
    tokio::time::sleep(DURATION * 3).await;
    let status = w.groups.get_status("alone").await.unwrap().status.unwrap();
    assert_eq!(
        (leader_elected_reason(&status), status.epoch),
        (Some("HeartbeatLost"), 1)
    );
    let lease = lease_record(&w, "alone").await;
    assert_eq!(
        (lease.holder.as_deref(), lease.epoch),
        (Some(pods[0].as_str()), 1)
    );

    // Its connection is back: it renews, and leads again at epoch 1.
    proxy.heal();
    wait_role(&mut role, leader, "the leader, renewing again").await;
    let status = w
        .wait_status("alone", "LeaderElected True again", |s| {
            leader_elected_reason(s) == Some("Elected")
        })
        .await;
    assert_eq!((status.leader.as_ref(), status.epoch), (Some(&pods[0]), 1));
    assert_eq!(lease_record(&w, "alone").await.lapsed, None);
    invariants.assert_held().await;
    drop(member);
}
