//! A leader deposed at once must stop reporting `Leader` before its successor starts: its member
//! acknowledged its leadership in the Lease, so the operator labels the successor only once the
//! old member has stepped down in the Lease, or, if it cannot hear the API server, once its
//! confirmation has lapsed. Two pods each run the client's `Membership`; the leader's goes
//! through a proxy that the test cuts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use leadergroup_client::wire::{
    ACKNOWLEDGED_BY_ANNOTATION, PREDECESSOR_MEMBERS_ANNOTATION, STEPPED_DOWN_BY_ANNOTATION,
};
use leadergroup_client::{Membership, Role};
use leadergroup_operator::crd::{
    ACKNOWLEDGED_BY_EPOCH_ANNOTATION, PREDECESSOR_ANNOTATION, STEPPED_DOWN_BY_EPOCH_ANNOTATION,
    lease_name_for,
};
use leadergroup_testenv::{
    MemberRules, Proxy, api_server_addr, control_plane, member_account, pods as pod_marks,
    wait_for_object,
};
use serde_json::json;
use tokio::time::Instant;

use crate::common::{InvariantWatcher, Operator, World, group};

/// The Lease duration: a member's confirmation holds for 2 s.
const DURATION_SECS: i32 = 3;
const VALIDITY: Duration = Duration::from_secs(2);

/// Every role a member reported, with when.
#[derive(Clone, Default)]
struct Roles(Arc<Mutex<Vec<(Instant, Role)>>>);

impl Roles {
    fn follow(membership: &Membership) -> Roles {
        let roles = Roles::default();
        let sink = roles.clone();
        let mut rx = membership.subscribe();
        tokio::spawn(async move {
            loop {
                let role = *rx.borrow_and_update();
                sink.0.lock().unwrap().push((Instant::now(), role));
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        roles
    }

    /// The intervals during which it reported `Leader`, the last one open until `now`.
    fn leading(&self, now: Instant) -> Vec<(Instant, Instant, Role)> {
        let log = self.0.lock().unwrap().clone();
        let mut spans = Vec::new();
        for (i, (from, role)) in log.iter().enumerate() {
            if role.is_leader() {
                let until = log.get(i + 1).map_or(now, |(t, _)| *t);
                spans.push((*from, until, *role));
            }
        }
        spans
    }

    /// When it first reported `want` since `since`, waiting for it.
    async fn reached(&self, want: Role, since: Instant, what: &str) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.0.lock().unwrap().clone();
            if let Some((at, _)) = log.iter().find(|(at, r)| *r == want && *at >= since) {
                return *at;
            }
            assert!(Instant::now() < deadline, "{what}: never reported {want}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// No instant at which both reported `Leader`.
#[track_caller]
fn never_both(a: &Roles, b: &Roles) {
    let now = Instant::now();
    for (a_from, a_until, a_role) in a.leading(now) {
        for (b_from, b_until, b_role) in b.leading(now) {
            let overlap = a_until
                .min(b_until)
                .saturating_duration_since(a_from.max(b_from));
            assert!(
                overlap.is_zero(),
                "both reported Leader for {overlap:?}: {a_role} and {b_role}"
            );
        }
    }
}

/// Polls the group's Lease and `pod` until `stop`, and returns the acknowledgements at `epoch`
/// that were in the Lease while `pod` did not carry the leader's marks at that epoch. The Lease
/// is read before the pod, and the label comes before the acknowledgement, so an
/// acknowledgement after the label is never counted.
async fn acknowledged_unlabeled(
    leases: Api<Lease>,
    pods: Api<Pod>,
    pod: String,
    epoch: i64,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> usize {
    let mut early = 0;
    loop {
        let lease = leases.get(&lease_name_for("sd")).await.unwrap();
        let acknowledged = lease
            .metadata
            .annotations
            .unwrap_or_default()
            .get(ACKNOWLEDGED_BY_EPOCH_ANNOTATION)
            .cloned();
        let marks = pods.get(&pod).await.unwrap();
        let labeled = pod_marks::is_leader(&marks) && pod_marks::epoch(&marks) == Some(epoch);
        if acknowledged == Some(epoch.to_string()) && !labeled {
            early += 1;
        }
        tokio::select! {
            _ = &mut stop => return early,
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

fn leader(epoch: u32) -> Role {
    Role::Leader {
        epoch: epoch.into(),
    }
}

/// Two pods in group `sd`, each running `Membership` (the first through a proxy the test cuts),
/// the operator, and the first pod leading at 1.
struct Switchover {
    w: World,
    pods: Vec<String>,
    proxy: Proxy,
    /// The members' ServiceAccount token, for more members.
    token: String,
    _members: (Membership, Membership),
    roles: (Roles, Roles),
    invariants: InvariantWatcher,
    _operator: Operator,
}

impl Switchover {
    async fn start(name: &str) -> Switchover {
        let w = World::new(name).await;
        let pods = w.ordered_ready_pods("app", 2, "sd").await;
        let cp = control_plane().await.unwrap();
        let token = member_account(&w.ns, "member", "sd", MemberRules::DOCUMENTED)
            .await
            .unwrap();
        let proxy = Proxy::start(api_server_addr().await.unwrap())
            .await
            .unwrap();
        let via_proxy = cp
            .client_with_token_via(&token, Some(proxy.addr))
            .await
            .unwrap();
        let direct = cp.client_with_token(&token).await.unwrap();
        let m0 = Membership::start(via_proxy, &w.ns.name, &pods[0], Some("sd".into()));
        let m1 = Membership::start(direct, &w.ns.name, &pods[1], Some("sd".into()));
        let roles = (Roles::follow(&m0), Roles::follow(&m1));
        let invariants = InvariantWatcher::start(&w.ns.client, &w.ns.name).await;
        let operator = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
        let mut g = group("sd", "sd");
        g.spec.lease_duration_seconds = DURATION_SECS;
        w.groups.create(&Default::default(), &g).await.unwrap();
        let start = Instant::now();
        roles.0.reached(leader(1), start, "the first leader").await;
        Switchover {
            w,
            pods,
            proxy,
            token,
            _members: (m0, m1),
            roles,
            invariants,
            _operator: operator,
        }
    }

    /// Sets `spec.preferredLeader`, and returns when.
    async fn prefer(&self, pod: &str) -> Instant {
        self.w
            .patch_spec("sd", json!({"preferredLeader": pod}))
            .await;
        Instant::now()
    }
}

#[tokio::test]
async fn a_switchover_waits_for_the_old_leaders_step_down_or_for_its_confirmation_to_lapse() {
    let s = Switchover::start("step-down").await;
    let (w, pods, proxy) = (&s.w, &s.pods, &s.proxy);
    let (r0, r1) = (&s.roles.0, &s.roles.1);
    // The leader cannot hear the API server when it is switched over: its successor starts only
    // once its confirmation has lapsed, and the operator says so in the Lease for it.
    // The successor, committed in the Lease but not labeled, does not acknowledge yet: deposed
    // before its label, it would otherwise take the place of the predecessor still waited for.
    proxy.cut();
    let cut = Instant::now();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let early = tokio::spawn(acknowledged_unlabeled(
        w.ns.api(),
        w.ns.api(),
        pods[1].clone(),
        2,
        stopped,
    ));
    let edited = s.prefer(&pods[1]).await;
    let successor = r1.reached(leader(2), edited, "the successor").await;
    stop.send(()).unwrap();
    assert_eq!(
        early.await.unwrap(),
        0,
        "the successor acknowledged before its pod was labeled"
    );
    let lapsed = r0.reached(Role::Unknown, cut, "the cut-off leader").await;
    eprintln!(
        "step-down: cut-off leader Unknown {:?} after the cut; successor Leader {:?} after the edit",
        lapsed - cut,
        successor - edited
    );
    assert!(
        lapsed <= successor,
        "the successor led {:?} before the old leader stopped",
        lapsed - successor
    );
    assert!(successor - edited >= VALIDITY - Duration::from_millis(300));
    never_both(r0, r1);
    let leases: Api<Lease> = w.ns.api();
    let lease = leases.get(&lease_name_for("sd")).await.unwrap();
    let annotations = lease.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get(PREDECESSOR_ANNOTATION), Some(&pods[0]));
    assert_eq!(
        annotations
            .get(STEPPED_DOWN_BY_EPOCH_ANNOTATION)
            .map(String::as_str),
        Some("1")
    );

    // Both hear the API server: the switchover back waits only for the old leader's word.
    let healed = Instant::now();
    proxy.heal();
    r0.reached(Role::Follower, healed, "the old leader, reconnected")
        .await;
    let edited = s.prefer(&pods[0]).await;
    let back = r0
        .reached(leader(3), edited, "the first leader again")
        .await;
    eprintln!(
        "step-down: switchover with both members answering: {:?}",
        back - edited
    );
    assert!(
        back - edited < VALIDITY,
        "waited {:?}: as long as a lapse",
        back - edited
    );
    never_both(r0, r1);
    s.invariants.assert_held().await;
}

/// The Lease is deleted by hand while the successor waits for the cut-off leader's step-down,
/// and the predecessor it named goes with it: created again, the Lease still keeps the successor
/// from being labeled until the old leader's confirmation has lapsed.
#[tokio::test]
async fn a_lease_deleted_while_the_successor_waits_keeps_it_waiting() {
    let s = Switchover::start("step-down-deleted").await;
    let (r0, r1) = (&s.roles.0, &s.roles.1);
    let leases: Api<Lease> = s.w.ns.api();
    s.proxy.cut();
    let cut = Instant::now();
    let edited = s.prefer(&s.pods[1]).await;
    wait_for_object(
        &leases,
        &lease_name_for("sd"),
        "the successor committed",
        Duration::from_secs(10),
        |lease: Option<&Lease>| {
            lease
                .and_then(|l| l.spec.as_ref()?.holder_identity.as_ref())
                .is_some_and(|holder| *holder == s.pods[1])
        },
    )
    .await
    .unwrap();
    leases
        .delete(&lease_name_for("sd"), &Default::default())
        .await
        .unwrap();
    let successor = r1.reached(leader(2), edited, "the successor").await;
    let lapsed = r0.reached(Role::Unknown, cut, "the cut-off leader").await;
    assert!(
        lapsed <= successor,
        "the successor led {:?} before the old leader stopped",
        lapsed - successor
    );
    never_both(r0, r1);
    s.invariants.assert_held().await;
}

/// Two members in the leader's pod (an agent beside the application's own `Membership`), each on
/// a connection of its own. The second is cut off: the first, which hears the API server, steps
/// down at once on a switchover, and the successor still starts only once the second's
/// confirmation has lapsed. Each member acknowledged under its own name, and each is waited for.
#[tokio::test]
async fn two_members_of_one_pod_are_each_waited_for() {
    let s = Switchover::start("step-down-two").await;
    let cp = control_plane().await.unwrap();
    let second_proxy = Proxy::start(api_server_addr().await.unwrap())
        .await
        .unwrap();
    let client = cp
        .client_with_token_via(&s.token, Some(second_proxy.addr))
        .await
        .unwrap();
    let second = Membership::start(client, &s.w.ns.name, &s.pods[0], Some("sd".into()));
    let r0b = Roles::follow(&second);
    let started = Instant::now();
    r0b.reached(leader(1), started, "the pod's second member")
        .await;
    // Each member acknowledged under a name of its own: two names, not one written twice.
    let leases: Api<Lease> = s.w.ns.api();
    let lease = leases.get(&lease_name_for("sd")).await.unwrap();
    assert_eq!(
        annotation(&lease, ACKNOWLEDGED_BY_EPOCH_ANNOTATION),
        Some("1")
    );
    let acknowledged = listed(&lease, ACKNOWLEDGED_BY_ANNOTATION);
    assert_eq!(
        acknowledged.len(),
        2,
        "both members of the leader's pod acknowledged, each under its own name: {acknowledged:?}"
    );
    let said = SteppedDownBy::record(&leases).await;
    second_proxy.cut();
    let cut = Instant::now();
    let edited = s.prefer(&s.pods[1]).await;
    let (r0, r1) = (&s.roles.0, &s.roles.1);
    let first_down = r0
        .reached(
            Role::Follower,
            edited,
            "the member that hears the API server",
        )
        .await;
    let successor = r1.reached(leader(2), edited, "the successor").await;
    let lapsed = r0b.reached(Role::Unknown, cut, "the cut-off member").await;
    eprintln!(
        "two members: the connected one stepped down {:?} after the edit, the cut-off one lapsed \
         {:?} after the cut, the successor led {:?} after the edit",
        first_down - edited,
        lapsed - cut,
        successor - edited
    );
    assert!(
        lapsed <= successor,
        "the successor led {:?} before the pod's second member stopped",
        lapsed - successor
    );
    never_both(&r0b, r1);
    never_both(r0, r1);

    // The deposal named both as the members to wait for. The one that hears the API server said
    // it stepped down under its own name, alone, before the lapse of the cut-off one; then, once
    // it lapsed, the operator said so for the other name too.
    let lease = leases.get(&lease_name_for("sd")).await.unwrap();
    assert_eq!(
        listed(&lease, PREDECESSOR_MEMBERS_ANNOTATION),
        acknowledged,
        "the members waited for"
    );
    assert_eq!(
        listed(&lease, STEPPED_DOWN_BY_ANNOTATION),
        acknowledged,
        "both members stepped down after the deposal"
    );
    let said = said.stop();
    eprintln!("two members: stepped-down-by went through {said:?}");
    let first = said.iter().find(|by| !by.is_empty());
    assert!(
        first.is_some_and(|by| by.len() == 1 && acknowledged.contains(&by[0])),
        "the connected member's own step-down, one name that acknowledged, came first: {said:?}"
    );
    drop(second);
    s.invariants.assert_held().await;
}

/// The annotation `key` of `lease`.
fn annotation<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The members the annotation `key` of `lease` lists, sorted, with any repeat kept (so that two
/// members writing one name shows).
fn listed(lease: &Lease, key: &str) -> Vec<String> {
    let mut members: Vec<String> = annotation(lease, key)
        .unwrap_or_default()
        .split(',')
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect();
    members.sort();
    members
}

/// Every value the group's Lease's `stepped-down-by` goes through, from a watch.
struct SteppedDownBy {
    seen: Arc<Mutex<Vec<Vec<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SteppedDownBy {
    /// Starts recording, and returns once it has read the Lease a first time.
    async fn record(leases: &Api<Lease>) -> SteppedDownBy {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
        let sink = seen.clone();
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", lease_name_for("sd")));
        let leases = leases.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(leases, config).applied_objects());
            while let Some(Ok(lease)) = events.next().await {
                let by = listed(&lease, STEPPED_DOWN_BY_ANNOTATION);
                let mut seen = sink.lock().unwrap();
                if seen.last() != Some(&by) {
                    seen.push(by);
                }
            }
        });
        while seen.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        SteppedDownBy { seen, task }
    }

    /// Stops recording; what it saw, in order.
    fn stop(self) -> Vec<Vec<String>> {
        self.task.abort();
        self.seen.lock().unwrap().clone()
    }
}
