//! The traffic path on real nodes: clients on the host reach the leader through the group's own
//! Service (`spec.service`) by its ClusterIP, through kube-proxy, while the leader is replaced by
//! a rolling update, frozen (its application's container stopped by the cgroup freezer: the
//! agent, a sidecar, answers on), lost with its node (`realcluster.sh cut-node`), deleted, or
//! its application's container killed (the agent answers on). Three routes:
//!
//! - `Label`: the Service selects the leader label;
//! - `EndpointSlice`: the operator writes the Service's one endpoint itself;
//! - `Proxy`: `Label`, with the Service's port on the agent's `--proxy`, which resets its
//!   connections the moment its pod stops leading.
//!
//! What answers is each pod's leadergroup-agent `GET /role` (a keep-alive HTTP server): the answer
//! names the role and the epoch its pod holds, and the agent's incarnation tells the pods apart.
//! Two clients ask every 5 ms during the fault: one opens a new connection per request, one keeps
//! its connection open (and opens another only when it fails). Asserted: the new leader answers
//! new connections, and the keep-alive client through the proxy; once a client has had the new
//! leader's answer, no other pod answers it: new connections on every route
//! ([`deposed_answers`]), and through the proxy both clients (the keep-alive client's answers
//! count from the new leader's first answer to either, [`deposed_kept`]). A keep-alive
//! connection to a deposed leader outside the proxy is kept by conntrack: its answers are
//! printed, not asserted.
//! Each test prints the new-connection client's answers from the fault on, pod by pod.
//!
//! `timings_*` (ignored; `make e2e-traffic-timings`) delete the leader, or kill its application's
//! container, again and again ([`timings`]): the time from each fault to the new leader's first
//! answer for both clients, and the answers a deposed pod gave them, printed and recorded in
//! `bench/results/traffic.json` for the benchmarks page.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::stats::Summary;
use leadergroup_testenv::traffic_timings::{Entry, TrafficTimings};
use leadergroup_testenv::{
    InvariantWatcher, Settled, TestNamespace, Undo, wait_settled, wait_until,
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::agents::{AGENT_IMAGE, MEMBER, agent_env, member_account};
use crate::cluster::{
    APP, CONVERGE, Cluster, PODS, WatchLog, create, node_of, repo_root, wait_pods_ready_where,
    webapp_container,
};

/// The agent's validity is two thirds of it: a cut-off leader's proxy closes within 4 s.
const LEASE_SECONDS: i32 = 6;
/// How often each client asks.
const PACE: Duration = Duration::from_millis(5);
/// A request that has no answer in this time counts as failed (a cut node drops packets).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the clients go on after both saw the new leader: the window in which a deposed
/// leader's answer would show.
const AFTER: Duration = Duration::from_secs(2);
/// How many lines a timeline prints at its start and at its end, at most.
const TIMELINE_ENDS: usize = 30;
/// How long the measured pod deletions leave the cluster without a change of endpoints before
/// each deletion: kube-proxy's rate limit (its min sync period) has refilled, as on a cluster
/// where nothing else moves.
const QUIET: Duration = Duration::from_secs(3);

/// How the Service reaches the leader.
#[derive(Clone, Copy, Debug)]
enum Route {
    Label,
    EndpointSlice,
    Proxy,
}

impl Route {
    fn mode(self) -> &'static str {
        match self {
            Route::Label | Route::Proxy => "Label",
            Route::EndpointSlice => "EndpointSlice",
        }
    }

    /// The Service's targetPort: the agent's container port. A number in the EndpointSlice mode:
    /// the operator resolves a named targetPort among the pod's `containers` only, and the agent
    /// is a native sidecar (an init container), whose port names Kubernetes resolves.
    fn target_port(self) -> serde_json::Value {
        match self {
            Route::Proxy => json!("proxy"),
            Route::Label => json!("role"),
            Route::EndpointSlice => json!(8686),
        }
    }

    /// The agent's flags: its endpoint on the pod's address, or behind its proxy.
    fn agent_args(self) -> Vec<&'static str> {
        match self {
            Route::Proxy => vec![
                "--http-addr",
                "127.0.0.1:8686",
                "--proxy",
                "0.0.0.0:8080=127.0.0.1:8686",
            ],
            Route::Label | Route::EndpointSlice => vec!["--http-addr", "0.0.0.0:8686"],
        }
    }

    /// The agent's port on the pod's address that answers `GET /role`: its endpoint, or its
    /// proxy (which only the leader's accepts).
    fn agent_port(self) -> u16 {
        match self {
            Route::Proxy => 8080,
            Route::Label | Route::EndpointSlice => 8686,
        }
    }

    /// Its name in the timings' table.
    fn name(self) -> &'static str {
        match self {
            Route::Label => "Label",
            Route::EndpointSlice => "EndpointSlice",
            Route::Proxy => "agent proxy",
        }
    }
}

/// The fault that replaces the leader.
#[derive(Clone, Copy, Debug)]
enum Fault {
    RollingUpdate,
    Frozen,
    CutNode,
    PodDeleted,
    /// The application's container killed (SIGKILL through its node's containerd): the pod
    /// turns NotReady once the kubelet sees it dead, and the agent sidecar runs on.
    ContainerKilled,
}

impl Fault {
    /// Its name in the timings' table.
    fn name(self) -> &'static str {
        match self {
            Fault::RollingUpdate => "rolling update",
            Fault::Frozen => "container frozen",
            Fault::CutNode => "node cut off",
            Fault::PodDeleted => "pod deleted",
            Fault::ContainerKilled => "container killed",
        }
    }
}

/// One answer: when its request was sent and when it arrived, the role and epoch the answering
/// pod held, and which agent answered.
#[derive(Clone, Debug)]
struct Answer {
    sent: Instant,
    at: Instant,
    role: String,
    epoch: Option<i64>,
    /// The answering agent's incarnation (its version's first part, its start time): one per
    /// agent process, so it tells the pods apart behind the ClusterIP.
    agent: String,
    /// Whether the keep-alive client heard it.
    kept: bool,
}

impl Answer {
    /// The answer to the request sent at `sent`, arriving now.
    fn parse(body: &str, sent: Instant) -> Option<Answer> {
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        Some(Answer {
            sent,
            at: Instant::now(),
            role: v["role"].as_str()?.to_owned(),
            epoch: v["epoch"].as_i64(),
            agent: v["version"].as_str()?.split('-').next()?.to_owned(),
            kept: false,
        })
    }

    fn leading_in(&self, epoch: i64) -> bool {
        self.role == "leader" && self.epoch == Some(epoch)
    }
}

/// What a client heard: the answers in the order they arrived, and when a request failed and how.
#[derive(Default)]
struct Heard {
    answers: Vec<Answer>,
    failures: Vec<(Instant, &'static str)>,
}

impl Heard {
    fn record(&mut self, asked: Result<Answer, &'static str>) {
        match asked {
            Ok(a) => self.answers.push(a),
            Err(why) => self.failures.push((Instant::now(), why)),
        }
    }
}

/// A client asking `GET /role` at `addr` every [`PACE`] until dropped (its task is aborted).
struct Client {
    heard: Arc<Mutex<Heard>>,
    task: tokio::task::JoinHandle<()>,
}

impl Client {
    /// `keep_alive`: one request at a time on a kept connection. Otherwise a request every
    /// [`PACE`] on a connection of its own, each in a task of its own that does not wait for the
    /// one before: a request that hangs (its SYN lost) does not blind the client for its timeout.
    fn start(addr: SocketAddr, keep_alive: bool) -> Client {
        let heard = Arc::new(Mutex::new(Heard::default()));
        let record = heard.clone();
        let task = tokio::spawn(async move {
            if keep_alive {
                let mut kept: Option<BufReader<TcpStream>> = None;
                loop {
                    let asked = ask_kept(addr, &mut kept)
                        .await
                        .map(|a| Answer { kept: true, ..a })
                        .ok_or("failed");
                    record.lock().unwrap().record(asked);
                    tokio::time::sleep(PACE).await;
                }
            }
            let mut tick = tokio::time::interval(PACE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let record = record.clone();
                tokio::spawn(async move {
                    let asked = ask_new(addr).await;
                    record.lock().unwrap().record(asked);
                });
            }
        });
        Client { heard, task }
    }

    fn answers(&self) -> Vec<Answer> {
        self.heard.lock().unwrap().answers.clone()
    }

    fn failures(&self) -> Vec<(Instant, &'static str)> {
        self.heard.lock().unwrap().failures.clone()
    }

    fn first_leading_in(&self, epoch: i64, after: Instant) -> Option<Instant> {
        self.heard
            .lock()
            .unwrap()
            .answers
            .iter()
            .find(|a| a.at >= after && a.leading_in(epoch))
            .map(|a| a.at)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request on a new connection (`Connection: close`), [`REQUEST_TIMEOUT`] at most; the
/// error says where it failed.
async fn ask_new(addr: SocketAddr) -> Result<Answer, &'static str> {
    let sent = Instant::now();
    let asked = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused",
            std::io::ErrorKind::ConnectionReset => "connection reset",
            _ => "connect failed",
        })?;
        stream
            .write_all(b"GET /role HTTP/1.1\r\nHost: leader\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|_| "write failed")?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .map_err(|_| "read failed")?;
        let (head, body) = response.split_once("\r\n\r\n").ok_or("no answer")?;
        if head.split_whitespace().nth(1) != Some("200") {
            return Err("not 200");
        }
        Answer::parse(body, sent).ok_or("not a role")
    })
    .await;
    asked.unwrap_or(Err("timed out"))
}

/// One request on the kept connection, opened first when there is none; a failed request drops
/// it, so that the next one opens another, as a client's connection pool does.
async fn ask_kept(addr: SocketAddr, kept: &mut Option<BufReader<TcpStream>>) -> Option<Answer> {
    let asked = tokio::time::timeout(REQUEST_TIMEOUT, async {
        if kept.is_none() {
            *kept = Some(BufReader::new(TcpStream::connect(addr).await.ok()?));
        }
        let stream = kept.as_mut()?;
        let sent = Instant::now();
        stream
            .get_mut()
            .write_all(b"GET /role HTTP/1.1\r\nHost: leader\r\n\r\n")
            .await
            .ok()?;
        let mut status = String::new();
        stream.read_line(&mut status).await.ok()?;
        let ok = status.split_whitespace().nth(1) == Some("200");
        let mut length = 0;
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().ok()?;
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.ok()?;
        ok.then(|| Answer::parse(&String::from_utf8_lossy(&body), sent))?
    })
    .await
    .ok()
    .flatten();
    if asked.is_none() {
        *kept = None;
    }
    asked
}

/// The answers a client got from a pod other than the newest leader it had already heard from:
/// an answer counts when, before its request was sent, a leader of some epoch had answered, and
/// it comes from another agent and not from a leader of that epoch or a later one. Those are what
/// the goal forbids: the client had reached the new leader, and then a deposed (or never
/// leading) pod answered it.
///
/// Not counted: the newest leader's own answers after it stepped down (no successor had answered
/// yet: they are the handover's window, in which kube-proxy still sends to the pod it knew, and
/// the role they carry lets the application refuse); the successor's answers before its agent
/// learnt that it leads (the slice can list it, and kube-proxy send to it, a few milliseconds
/// before its agent has seen its promotion); and answers to requests sent before the successor's
/// first answer arrived (the new-connection client does not wait for one request before the
/// next: an earlier request on the old rules may arrive later).
fn deposed_answers(answers: &[Answer]) -> Vec<Answer> {
    // The highest epoch each agent ever answered as leader in.
    let mut led: BTreeMap<&str, i64> = BTreeMap::new();
    for a in answers.iter().filter(|a| a.role == "leader") {
        if let Some(e) = a.epoch {
            let highest = led.entry(&a.agent).or_insert(e);
            *highest = (*highest).max(e);
        }
    }
    let mut leaders: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.role == "leader" && a.epoch.is_some())
        .collect();
    leaders.sort_by_key(|a| a.at);
    // The newest leader heard of by each arrival: the leader answers with a new highest epoch.
    let mut newest: Vec<&Answer> = Vec::new();
    for a in leaders {
        if newest.last().is_none_or(|n| a.epoch > n.epoch) {
            newest.push(a);
        }
    }
    answers
        .iter()
        .filter(|a| {
            let heard = newest.partition_point(|n| n.at <= a.sent);
            let Some(n) = heard.checked_sub(1).map(|i| newest[i]) else {
                return false;
            };
            let current = a.role == "leader" && a.epoch >= n.epoch;
            let successor = led
                .get(a.agent.as_str())
                .is_some_and(|e| Some(*e) > n.epoch);
            !current && !successor && a.agent != n.agent
        })
        .cloned()
        .collect()
}

/// The keep-alive client's answers by another pod than the newest leader heard through the
/// Service on either client: [`deposed_answers`] of both clients' answers, the keep-alive
/// client's. Its own connection may stay on a deposed pod (conntrack keeps the flow) after the
/// new-connection client already reached the new leader: those answers count.
fn deposed_kept(fresh: &[Answer], kept: &[Answer]) -> Vec<Answer> {
    let both: Vec<Answer> = fresh.iter().chain(kept).cloned().collect();
    deposed_answers(&both)
        .into_iter()
        .filter(|a| a.kept)
        .collect()
}

/// Which pod each agent is (by its incarnation, [`Answer::agent`]), asked directly at each pod's
/// address: the report names pods rather than incarnations. Through the proxy only the leader
/// answers (the others refuse), so it names fewer pods there.
#[derive(Default)]
struct Census(BTreeMap<String, String>);

impl Census {
    async fn take(&mut self, pods: &Api<Pod>, route: Route) {
        for pod in pods.list(&Default::default()).await.unwrap().items {
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) else {
                continue;
            };
            let Ok(ip) = ip.parse() else { continue };
            if let Ok(a) = ask_new(SocketAddr::new(ip, route.agent_port())).await {
                self.0.insert(a.agent, pod.name_any());
            }
        }
    }

    fn name<'a>(&'a self, agent: &'a str) -> &'a str {
        self.0.get(agent).map_or(agent, String::as_str)
    }

    /// What `client` heard from `from` on, and the changes of the namespace's EndpointSlices
    /// as `slices` watched them, in order of arrival, times in ms from `zero`; consecutive
    /// answers of one pod in one role, or failures of one kind, as one line with their count:
    /// "+120..+480 ms web-x follower epoch None (37)".
    fn timeline(
        &self,
        client: &Client,
        slices: &WatchLog<EndpointSlice>,
        from: Instant,
        zero: Instant,
    ) -> String {
        let answers = client.answers().into_iter().map(|a| {
            let what = format!("{} {} epoch {:?}", self.name(&a.agent), a.role, a.epoch);
            (a.at, what, true)
        });
        let failures = client
            .failures()
            .into_iter()
            .map(|(at, why)| (at, format!("failed: {why}"), true));
        let changes = slices
            .events()
            .into_iter()
            .map(|(at, slice, deleted)| (at, describe_slice(&slice, deleted), false));
        let mut events: Vec<(Instant, String, bool)> = answers
            .chain(failures)
            .chain(changes)
            .filter(|(at, _, _)| *at >= from)
            .collect();
        events.sort_by_key(|(at, _, _)| *at);
        let mut runs: Vec<(Instant, Instant, String, usize)> = Vec::new();
        for (at, what, grouped) in events {
            match runs.last_mut() {
                Some((_, last, run, n)) if grouped && *run == what => {
                    *last = at;
                    *n += 1;
                }
                _ => runs.push((at, at, what, 1)),
            }
        }
        let ms = |t: Instant| {
            let signed = t
                .checked_duration_since(zero)
                .map_or_else(|| -(zero - t).as_secs_f64(), |d| d.as_secs_f64());
            signed * 1e3
        };
        let mut lines: Vec<String> = runs
            .iter()
            .map(|(first, last, what, n)| {
                format!("  {:+.0}..{:+.0} ms {what} ({n})", ms(*first), ms(*last))
            })
            .collect();
        // A cut node alternates refusals and timeouts for seconds: its ends tell the story.
        if lines.len() > 2 * TIMELINE_ENDS {
            let left_out = lines.len() - 2 * TIMELINE_ENDS;
            lines.splice(
                TIMELINE_ENDS..lines.len() - TIMELINE_ENDS,
                [format!("  ({left_out} lines left out)")],
            );
        }
        lines.join("\n")
    }
}

/// "slice web-leader: web-x ready" (or "none"), each endpoint's pod and conditions.
fn describe_slice(slice: &EndpointSlice, deleted: bool) -> String {
    let endpoints: Vec<String> = slice
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let pod = e.target_ref.as_ref().and_then(|r| r.name.clone());
            let c = e.conditions.clone().unwrap_or_default();
            let flags = [
                (c.ready, "ready"),
                (c.serving, "serving"),
                (c.terminating, "terminating"),
            ]
            .iter()
            .filter(|(on, _)| *on == Some(true))
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join(",");
            format!("{} {flags}", pod.unwrap_or_default())
        })
        .collect();
    let name = slice.name_any();
    match (deleted, endpoints.is_empty()) {
        (true, _) => format!("watch: slice {name} deleted"),
        (false, true) => format!("watch: slice {name}: none"),
        (false, false) => format!("watch: slice {name}: {}", endpoints.join("; ")),
    }
}

/// The RBAC of the agents (their pods and the group's Lease), the Deployment of three pods (the
/// web app, whose readiness is the pod's, with the agent as a native sidecar) spread over both
/// nodes, and the group with its Service.
async fn deploy(ns: &TestNamespace, route: Route) {
    member_account(ns, MEMBER, APP, &[]).await;
    let agent = json!({
        "name": "agent",
        "image": AGENT_IMAGE,
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",
        "args": route.agent_args(),
        "env": agent_env(APP),
        "ports": [{"name": "role", "containerPort": 8686}, {"name": "proxy", "containerPort": 8080}],
        "volumeMounts": [{"name": "run", "mountPath": "/var/run/leadergroup"}],
    });
    // The web app's own port moves aside: the agent's proxy takes 8080 in the Proxy route.
    let mut app = webapp_container(3);
    app["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "PORT", "value": "8081"}));
    app["ports"] = json!([{"name": "http", "containerPort": 8081}]);
    app["readinessProbe"]["httpGet"]["port"] = json!(8081);
    let _: Deployment = create(
        ns,
        json!({
            "metadata": {"name": APP},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": APP}},
                "template": {
                    "metadata": {"labels": {"app": APP}},
                    "spec": {
                        "serviceAccountName": MEMBER,
                        "terminationGracePeriodSeconds": 8,
                        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
                        "topologySpreadConstraints": [{
                            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": APP}},
                        }],
                        "initContainers": [agent],
                        "containers": [app],
                        "volumes": [{"name": "run", "emptyDir": {"medium": "Memory"}}],
                    },
                },
            },
        }),
    )
    .await;
    let _: LeaderGroup = create(
        ns,
        json!({
            "apiVersion": "leadergroup.io/v1alpha1", "kind": "LeaderGroup",
            "metadata": {"name": APP},
            "spec": {
                "selector": {"matchLabels": {"app": APP}},
                "leaseDurationSeconds": LEASE_SECONDS,
                "service": {"mode": route.mode(),
                            "ports": [{"port": 80, "targetPort": route.target_port()}]},
            },
        }),
    )
    .await;
}

/// The ClusterIP and port of the group's Service, once the operator made it.
async fn service_addr(ns: &TestNamespace) -> SocketAddr {
    let services: Api<Service> = ns.api();
    let name = format!("{APP}-leader");
    wait_until("the group's Service with a ClusterIP", CONVERGE, || async {
        let ip = services
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .and_then(|s| s.spec)
            .and_then(|s| s.cluster_ip)
            .filter(|ip| ip != "None");
        Ok::<_, String>(ip.map(|ip| SocketAddr::new(ip.parse().unwrap(), 80)))
    })
    .await
    .unwrap()
}

/// A group deployed with its Service, its leader answering both clients through the ClusterIP.
struct Traffic {
    c: Cluster,
    ns: TestNamespace,
    _ns_guard: Undo,
    watch: InvariantWatcher,
    pods: Api<Pod>,
    /// The Service's ClusterIP and port.
    addr: SocketAddr,
    fresh: Client,
    kept: Client,
    census: Census,
    slices: WatchLog<EndpointSlice>,
}

impl Traffic {
    /// Deploys the group routed by `route`, starts both clients and waits until its first leader,
    /// returned, answers them.
    async fn start(route: Route, fault: Fault) -> (Traffic, Settled) {
        let c = Cluster::get().await;
        c.ensure_operator().await;
        let prefix = format!("e2e-traffic-{route:?}-{fault:?}").to_lowercase();
        let ns = leadergroup_testenv::namespace_in(c.client.clone(), &prefix)
            .await
            .unwrap();
        let ns_guard = c.namespace_guard(&ns.name);
        let watch = InvariantWatcher::start(&c.client, &ns.name).await;
        let slices = WatchLog::start(ns.api()).await;
        deploy(&ns, route).await;
        let pods: Api<Pod> = ns.api();
        wait_pods_ready_where(&pods, 3, "3 Ready pods", |p| {
            p.metadata.deletion_timestamp.is_none()
        })
        .await;
        let addr = service_addr(&ns).await;
        let t = Traffic {
            fresh: Client::start(addr, false),
            kept: Client::start(addr, true),
            addr,
            c,
            ns,
            _ns_guard: ns_guard,
            watch,
            pods,
            census: Census::default(),
            slices,
        };
        let first = t.settled("a leader", |_| true).await;
        let started = Instant::now();
        wait_until(
            "the first leader answering both clients",
            CONVERGE,
            || async {
                Ok::<_, String>(
                    (t.fresh.first_leading_in(first.epoch, started).is_some()
                        && t.kept.first_leading_in(first.epoch, started).is_some())
                    .then_some(()),
                )
            },
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}: new {:?}, kept {:?}",
                t.fresh.answers(),
                t.kept.answers()
            )
        });
        (t, first)
    }

    async fn settled(
        &self,
        what: &str,
        accept: impl Fn(&Settled) -> bool + Send + Sync + 'static,
    ) -> Settled {
        wait_settled(
            &self.c.client,
            &self.ns.name,
            APP,
            what,
            PODS,
            Box::new(accept),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Deletes the leader `from` (the pod's default grace period: its app drains) and waits
    /// until another pod leads. The clock starts just before the delete request is sent.
    async fn delete_leader(&self, from: &str) -> (Instant, Settled) {
        let at = Instant::now();
        self.pods
            .delete(from, &DeleteParams::default())
            .await
            .unwrap();
        let from = from.to_owned();
        let next = self
            .settled("another leader", move |s| s.leader != from)
            .await;
        (at, next)
    }

    /// Kills the leader `from`'s application container and waits until another pod leads. The
    /// clock starts just before the kill.
    async fn kill_leader(&self, from: &str) -> (Instant, Settled) {
        let pod = self.pods.get(from).await.unwrap();
        let at = Instant::now();
        self.c.kill_container(&pod).await;
        let from = from.to_owned();
        let next = self
            .settled("another leader", move |s| s.leader != from)
            .await;
        (at, next)
    }

    /// When the new-connection client first got an answer of the leader at `epoch` after `since`
    /// (and the keep-alive client, when it did), waiting for the first; `with_kept`: for both.
    async fn answered(
        &self,
        epoch: i64,
        since: Instant,
        with_kept: bool,
    ) -> (Instant, Option<Instant>) {
        wait_until("the new leader answering the clients", CONVERGE, || async {
            let kept_moved = self.kept.first_leading_in(epoch, since);
            Ok::<_, String>(
                self.fresh
                    .first_leading_in(epoch, since)
                    .filter(|_| !with_kept || kept_moved.is_some())
                    .map(|t| (t, kept_moved)),
            )
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}: new {:?}\nkept {:?}",
                self.fresh.answers().last(),
                self.kept.answers().last()
            )
        })
    }
}

/// Runs `fault` against the leader with the Service routed by `route`, both clients asking.
async fn scenario(route: Route, fault: Fault) {
    let (mut t, first) = Traffic::start(route, fault).await;
    t.census.take(&t.pods, route).await;
    let leader_pod = t.pods.get(&first.leader).await.unwrap();
    let node = node_of(&leader_pod).to_owned();

    let mut undo = None;
    let mut frozen = None;
    if matches!(fault, Fault::CutNode) {
        t.c.operator_off(&node).await;
    }
    let mut fault_at = Instant::now();
    let last = match fault {
        Fault::RollingUpdate => {
            let old_pods: Vec<String> = t
                .pods
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| p.name_any())
                .collect();
            let change =
                json!({"spec": {"template": {"metadata": {"annotations": {"version": "2"}}}}});
            Api::<Deployment>::namespaced(t.c.client.clone(), &t.ns.name)
                .patch(APP, &PatchParams::default(), &Patch::Strategic(&change))
                .await
                .unwrap();
            wait_pods_ready_where(&t.pods, 3, "3 Ready pods", |p| {
                p.metadata.deletion_timestamp.is_none() && !old_pods.contains(&p.name_any())
            })
            .await;
            let old = old_pods.clone();
            t.settled("a new pod leads", move |s| !old.contains(&s.leader))
                .await
        }
        Fault::Frozen => {
            frozen = Some(t.c.freeze_container(&leader_pod));
            let from = first.leader.clone();
            t.settled("another leader", move |s| s.leader != from).await
        }
        Fault::CutNode => {
            let (guard, _) = t.c.cut_node(&node).await;
            undo = Some(guard);
            let from = first.leader.clone();
            t.settled("another leader", move |s| s.leader != from).await
        }
        Fault::PodDeleted => {
            let (at, next) = t.delete_leader(&first.leader).await;
            fault_at = at;
            next
        }
        Fault::ContainerKilled => {
            let (at, next) = t.kill_leader(&first.leader).await;
            fault_at = at;
            next
        }
    };
    // A keep-alive connection outside the proxy may stay on the deposed leader for as long as it
    // answers (conntrack keeps the flow): only the proxy's is awaited on the new leader.
    let fenced = matches!(route, Route::Proxy);
    let answered = t.answered(last.epoch, fault_at, fenced).await;
    tokio::time::sleep(AFTER).await;
    t.census.take(&t.pods, route).await;
    let (fresh_answers, kept_answers) = (t.fresh.answers(), t.kept.answers());
    let deposed_fresh = deposed_answers(&fresh_answers);
    let deposed_kept = deposed_kept(&fresh_answers, &kept_answers);
    println!(
        "traffic {route:?} {fault:?}: {} -> {} (epoch {} -> {}); fault -> first answer by the new \
         leader: new connections {:.0} ms, keep-alive {:.0} ms (NaN: still on the deposed pod); \
         answers by another pod after the newest leader's first through the Service: new \
         connections {} of {}, keep-alive {} of {}\nnew connections from the fault (ms from the new leader's first answer):\n{}",
        first.leader,
        last.leader,
        first.epoch,
        last.epoch,
        (answered.0 - fault_at).as_secs_f64() * 1e3,
        answered
            .1
            .map_or(f64::NAN, |t| (t - fault_at).as_secs_f64() * 1e3),
        deposed_fresh.len(),
        fresh_answers.len(),
        deposed_kept.len(),
        kept_answers.len(),
        t.census.timeline(&t.fresh, &t.slices, fault_at, answered.0),
    );
    // Every route, `Label` too: its Service's endpoints lose the deposed leader (demoted first)
    // before they gain the new one (labeled after the step-down).
    assert!(
        deposed_fresh.is_empty(),
        "{route:?}: new connections answered by a deposed leader: {deposed_fresh:?}"
    );
    if matches!(route, Route::Proxy) {
        assert!(
            deposed_kept.is_empty(),
            "{route:?}: a kept connection answered by a deposed leader: {deposed_kept:?}"
        );
    }
    if let Some(frozen) = frozen {
        frozen.thaw().unwrap();
    }
    drop(undo);
    let leaders = t.watch.assert_held().await;
    // Epochs grow with each change of leader; one may be skipped: a successor committed at an
    // epoch and deposed before its label (its predecessor's step-down still awaited) never
    // carries it.
    assert!(
        leaders.windows(2).all(|p| p[1].1 > p[0].1),
        "epochs grow with each change of leader: {leaders:?}"
    );
}

/// How many rounds [`timings`] makes.
const ROUNDS_ENV: &str = "LEADERGROUP_TRAFFIC_ROUNDS";
/// How long after the fault [`timings`] waits for the keep-alive client to reach the new leader:
/// past the deleted pod's drain (its agent, a sidecar, stops after the application).
const KEEP_ALIVE_BOUND: Duration = Duration::from_secs(6);

/// A fault again and again (the pod deleted, or its application's container killed), with both
/// clients asking: the time from the fault to the new leader's first answer through the
/// ClusterIP on a new connection, and on a keep-alive connection opened to the leader before the
/// fault; and the answers another pod gave each client after the new leader's first through the
/// Service ([`deposed_answers`], [`deposed_kept`]). Before each round the faulted pod's
/// replacement is Ready (a killed container's pod is deleted: no restart back-off builds up), the
/// cluster has been left without a change of endpoints for [`QUIET`], and the keep-alive
/// client's connection is a new one to the current leader. The clocks start just before the
/// delete request leaves the test, or just before the kill; they stop when a client has read the
/// new leader's answer (role leader at the new epoch). Prints each round and the medians,
/// records them in `bench/results/traffic.json` ([`TrafficTimings::record`]) under the cluster's
/// kube-proxy setting, and asserts the same as [`scenario`] on every round.
async fn timings(route: Route, fault: Fault) {
    let rounds: usize = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let (mut t, mut leader) = Traffic::start(route, fault).await;
    let (kube_proxy, cluster_args) = kube_proxy_setting(t.c.dir());
    let mut entry = Entry {
        fault: fault.name().into(),
        kube_proxy,
        route: route.name().into(),
        started_at: jiff::Timestamp::now()
            .strftime("%Y-%m-%d %H:%M UTC")
            .to_string(),
        command: format!("make e2e-traffic-timings {cluster_args}")
            .trim_end()
            .to_owned(),
        commit: leadergroup_testenv::record::checkout(&repo_root()).0,
        keep_alive_bound_ms: KEEP_ALIVE_BOUND.as_secs_f64() * 1e3,
        ..Entry::default()
    };
    for round in 0..rounds {
        tokio::time::sleep(QUIET).await;
        t.kept = Client::start(t.addr, true);
        let opened = Instant::now();
        wait_until("the keep-alive client on the leader", CONVERGE, || async {
            Ok::<_, String>(t.kept.first_leading_in(leader.epoch, opened))
        })
        .await
        .unwrap();
        entry.load_average.push(load_average());
        let (at, next) = match fault {
            Fault::ContainerKilled => t.kill_leader(&leader.leader).await,
            _ => t.delete_leader(&leader.leader).await,
        };
        let (answered, _) = t.answered(next.epoch, at, false).await;
        let kept_at = wait_until(
            "the keep-alive client on the new leader",
            KEEP_ALIVE_BOUND.saturating_sub(at.elapsed()),
            || async { Ok::<_, String>(t.kept.first_leading_in(next.epoch, at)) },
        )
        .await
        .ok();
        let window_end = at + KEEP_ALIVE_BOUND;
        tokio::time::sleep_until(window_end.into()).await;
        let (fresh, kept) = (t.fresh.answers(), t.kept.answers());
        let in_round = |a: &Answer| a.sent >= at && a.sent < window_end;
        let deposed: Vec<_> = deposed_answers(&fresh)
            .into_iter()
            .filter(in_round)
            .collect();
        let deposed_on_kept: Vec<_> = deposed_kept(&fresh, &kept)
            .into_iter()
            .filter(in_round)
            .collect();
        let ms = |t: Instant| (t - at).as_secs_f64() * 1e3;
        entry.new_connection_ms.push(ms(answered));
        entry.keep_alive_ms.push(kept_at.map(ms));
        entry.deposed_new_connection.push(deposed.len());
        entry.deposed_keep_alive.push(deposed_on_kept.len());
        if matches!(fault, Fault::ContainerKilled) {
            t.pods
                .delete(&leader.leader, &DeleteParams::default())
                .await
                .unwrap();
        }
        wait_pods_ready_where(&t.pods, 3, "3 Ready pods", |p| {
            p.metadata.deletion_timestamp.is_none()
        })
        .await;
        t.census.take(&t.pods, route).await;
        println!(
            "traffic {route:?} {fault:?} round {round}: {} -> {} (epoch {} -> {}): new \
             connections {:.0} ms, keep-alive {:.0} ms (NaN: still on the deposed pod after {} \
             s); answers by another pod after the new leader's first: new connections {}, \
             keep-alive {}\n{}",
            leader.leader,
            next.leader,
            leader.epoch,
            next.epoch,
            ms(answered),
            kept_at.map_or(f64::NAN, ms),
            KEEP_ALIVE_BOUND.as_secs(),
            deposed.len(),
            deposed_on_kept.len(),
            t.census.timeline(&t.fresh, &t.slices, at, answered),
        );
        assert!(
            deposed.is_empty(),
            "{route:?}: new connections answered by a deposed leader: {deposed:?}"
        );
        if matches!(route, Route::Proxy) {
            assert!(
                deposed_on_kept.is_empty(),
                "{route:?}: a kept connection answered by a deposed leader: {deposed_on_kept:?}"
            );
        }
        leader = next;
    }
    println!(
        "traffic {route:?} {fault:?} under kube-proxy {}: fault -> the new leader's first answer \
         through the ClusterIP: new connections {}; keep-alive {:?}",
        entry.kube_proxy,
        Summary::describe(&entry.new_connection_ms),
        entry.keep_alive_ms,
    );
    entry.finished_at = jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string();
    let results = repo_root().join("bench/results/traffic.json");
    TrafficTimings::record(&results, entry).unwrap();
    let leaders = t.watch.assert_held().await;
    // Epochs grow with each change of leader; one may be skipped: a successor committed at an
    // epoch and deposed before its label (its predecessor's step-down still awaited) never
    // carries it.
    assert!(
        leaders.windows(2).all(|p| p[1].1 > p[0].1),
        "epochs grow with each change of leader: {leaders:?}"
    );
}

/// The cluster's kube-proxy setting as the timings' table names it, and the `realcluster.sh up`
/// arguments that gave it (`E2E_CLUSTER_ARGS`), from the `PROXY=MODE [MIN_SYNC]` line the script
/// writes to the cluster's `env` file.
fn kube_proxy_setting(dir: &std::path::Path) -> (String, String) {
    let env = std::fs::read_to_string(dir.join("env")).unwrap_or_default();
    let proxy = env
        .lines()
        .find_map(|l| l.strip_prefix("PROXY="))
        .unwrap_or("iptables");
    let mut words = proxy.split_whitespace();
    let mode = words.next().unwrap_or("iptables");
    let mut args = Vec::new();
    if mode != "iptables" {
        args.push(format!("--proxy-mode {mode}"));
    }
    let setting = match words.next() {
        Some(period) => {
            args.push(format!("--proxy-min-sync-period {period}"));
            format!("{mode}, minSyncPeriod {period}")
        }
        None => format!("{mode}, default"),
    };
    let args = match args.is_empty() {
        true => String::new(),
        false => format!("E2E_CLUSTER_ARGS='{}'", args.join(" ")),
    };
    (setting, args)
}

/// The machine's one-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

#[tokio::test]
async fn traffic_label_rolling_update() {
    scenario(Route::Label, Fault::RollingUpdate).await;
}

#[tokio::test]
async fn traffic_endpointslice_rolling_update() {
    scenario(Route::EndpointSlice, Fault::RollingUpdate).await;
}

#[tokio::test]
async fn traffic_proxy_rolling_update() {
    scenario(Route::Proxy, Fault::RollingUpdate).await;
}

#[tokio::test]
async fn traffic_label_frozen_leader() {
    scenario(Route::Label, Fault::Frozen).await;
}

#[tokio::test]
async fn traffic_endpointslice_frozen_leader() {
    scenario(Route::EndpointSlice, Fault::Frozen).await;
}

#[tokio::test]
async fn traffic_proxy_frozen_leader() {
    scenario(Route::Proxy, Fault::Frozen).await;
}

#[tokio::test]
async fn traffic_label_cut_node() {
    scenario(Route::Label, Fault::CutNode).await;
}

#[tokio::test]
async fn traffic_endpointslice_cut_node() {
    scenario(Route::EndpointSlice, Fault::CutNode).await;
}

#[tokio::test]
async fn traffic_proxy_cut_node() {
    scenario(Route::Proxy, Fault::CutNode).await;
}

#[tokio::test]
async fn traffic_label_pod_deleted() {
    scenario(Route::Label, Fault::PodDeleted).await;
}

#[tokio::test]
async fn traffic_endpointslice_pod_deleted() {
    scenario(Route::EndpointSlice, Fault::PodDeleted).await;
}

#[tokio::test]
async fn traffic_proxy_pod_deleted() {
    scenario(Route::Proxy, Fault::PodDeleted).await;
}

#[tokio::test]
async fn traffic_label_container_killed() {
    scenario(Route::Label, Fault::ContainerKilled).await;
}

#[tokio::test]
async fn traffic_endpointslice_container_killed() {
    scenario(Route::EndpointSlice, Fault::ContainerKilled).await;
}

#[tokio::test]
async fn traffic_proxy_container_killed() {
    scenario(Route::Proxy, Fault::ContainerKilled).await;
}

/// `make e2e-traffic-timings`: the pod-deleted and container-killed faults measured
/// ([`timings`]).
#[tokio::test]
#[ignore = "a measurement: make e2e-traffic-timings"]
async fn timings_label_pod_deleted() {
    timings(Route::Label, Fault::PodDeleted).await;
}

#[tokio::test]
#[ignore = "a measurement: make e2e-traffic-timings"]
async fn timings_endpointslice_pod_deleted() {
    timings(Route::EndpointSlice, Fault::PodDeleted).await;
}

#[tokio::test]
#[ignore = "a measurement: make e2e-traffic-timings"]
async fn timings_proxy_pod_deleted() {
    timings(Route::Proxy, Fault::PodDeleted).await;
}

#[tokio::test]
#[ignore = "a measurement: make e2e-traffic-timings"]
async fn timings_label_container_killed() {
    timings(Route::Label, Fault::ContainerKilled).await;
}

#[tokio::test]
#[ignore = "a measurement: make e2e-traffic-timings"]
async fn timings_endpointslice_container_killed() {
    timings(Route::EndpointSlice, Fault::ContainerKilled).await;
}

#[tokio::test]
#[ignore = "a measurement: make e2e-traffic-timings"]
async fn timings_proxy_container_killed() {
    timings(Route::Proxy, Fault::ContainerKilled).await;
}

/// The count of answers by a deposed pod, without a cluster: the old leader's answers to requests
/// sent once its successor had answered count; its "follower" answers while kube-proxy still
/// sends to it before the successor answered do not, nor the successor's "follower" before its
/// agent learnt it leads, nor an answer to a request sent before the successor's first answer
/// arrived that arrives after it.
#[test]
fn deposed_answers_count_from_the_successors_first_answer() {
    let zero = Instant::now();
    let answer = |sent, at, agent: &str, role: &str, epoch| Answer {
        sent: zero + Duration::from_millis(sent),
        at: zero + Duration::from_millis(at),
        role: role.into(),
        epoch,
        agent: agent.into(),
        kept: false,
    };
    let answers = [
        answer(0, 1, "old", "leader", Some(1)),
        answer(10, 11, "old", "follower", None),
        answer(12, 13, "new", "follower", None),
        answer(19, 20, "new", "leader", Some(2)),
        answer(15, 21, "old", "follower", None),
        answer(30, 31, "old", "follower", None),
        answer(40, 41, "new", "leader", Some(2)),
        answer(50, 51, "old", "leader", Some(1)),
        answer(60, 61, "new", "follower", None),
        answer(70, 71, "third", "leader", Some(3)),
    ];
    let counted: Vec<u128> = deposed_answers(&answers)
        .iter()
        .map(|a| (a.sent - zero).as_millis())
        .collect();
    assert_eq!(counted, [30, 50]);
}
