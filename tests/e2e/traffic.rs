//! The traffic path on real nodes: clients on the host reach the leader through the group's own
//! Service (`spec.service`) by its ClusterIP, through kube-proxy, while the leader is replaced by
//! a rolling update, frozen (its application's container stopped by the cgroup freezer), or lost
//! with its node (`realcluster.sh cut-node`). Three routes:
//!
//! - `Label`: the Service selects the leader label;
//! - `EndpointSlice`: the operator writes the Service's one endpoint itself;
//! - `Proxy`: `Label`, with the Service's port on the agent's `--proxy`, which resets its
//!   connections the moment its pod stops leading.
//!
//! What answers is each pod's leadergroup-agent `GET /role` (a keep-alive HTTP server): the answer
//! names the role and the epoch its pod holds, so an answer from a deposed leader shows as an
//! epoch older than one already answered, or as a pod that is not leading. Two clients ask every
//! 5 ms during the fault: one opens a new connection per request, one keeps its connection open
//! (and opens another only when it fails). Asserted: the new leader answers new connections, and
//! the keep-alive client through the proxy; no deposed leader answers after the new leader did, through the proxy (both clients) and through the
//! EndpointSlice mode for new connections. A keep-alive connection to a deposed leader outside
//! the proxy is kept by conntrack: its answers are printed, not asserted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::{InvariantWatcher, Settled, TestNamespace, wait_settled, wait_until};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::agents::{AGENT_IMAGE, MEMBER, agent_env, member_account};
use crate::cluster::{
    APP, CONVERGE, Cluster, PODS, create, node_of, wait_pods_ready_where, webapp_container,
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
}

/// The fault that replaces the leader.
#[derive(Clone, Copy, Debug)]
enum Fault {
    RollingUpdate,
    Frozen,
    CutNode,
}

/// One answer: when, and the role and epoch the answering pod held.
#[derive(Clone, Debug)]
struct Answer {
    at: Instant,
    role: String,
    epoch: Option<i64>,
}

impl Answer {
    fn parse(body: &str, at: Instant) -> Option<Answer> {
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        Some(Answer {
            at,
            role: v["role"].as_str()?.to_owned(),
            epoch: v["epoch"].as_i64(),
        })
    }

    fn leading_in(&self, epoch: i64) -> bool {
        self.role == "leader" && self.epoch == Some(epoch)
    }
}

type Answers = Arc<Mutex<Vec<Answer>>>;

/// A client asking `GET /role` at `addr` every [`PACE`] until dropped (its task is aborted).
struct Client {
    answers: Answers,
    task: tokio::task::JoinHandle<()>,
}

impl Client {
    fn start(addr: SocketAddr, keep_alive: bool) -> Client {
        let answers = Answers::default();
        let record = answers.clone();
        let task = tokio::spawn(async move {
            let mut kept: Option<BufReader<TcpStream>> = None;
            loop {
                let answer = if keep_alive {
                    ask_kept(addr, &mut kept).await
                } else {
                    ask_new(addr).await
                };
                if let Some(a) = answer {
                    record.lock().unwrap().push(a);
                }
                tokio::time::sleep(PACE).await;
            }
        });
        Client { answers, task }
    }

    fn answers(&self) -> Vec<Answer> {
        self.answers.lock().unwrap().clone()
    }

    fn first_leading_in(&self, epoch: i64, after: Instant) -> Option<Instant> {
        self.answers()
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

/// One request on a new connection (`Connection: close`).
async fn ask_new(addr: SocketAddr) -> Option<Answer> {
    let (code, body) = leadergroup_testenv::http_get(addr, "/role").await?;
    (code == 200).then(|| Answer::parse(&body, Instant::now()))?
}

/// One request on the kept connection, opened first when there is none; a failed request drops
/// it, so that the next one opens another, as a client's connection pool does.
async fn ask_kept(addr: SocketAddr, kept: &mut Option<BufReader<TcpStream>>) -> Option<Answer> {
    let asked = tokio::time::timeout(REQUEST_TIMEOUT, async {
        if kept.is_none() {
            *kept = Some(BufReader::new(TcpStream::connect(addr).await.ok()?));
        }
        let stream = kept.as_mut()?;
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
        ok.then(|| Answer::parse(&String::from_utf8_lossy(&body), Instant::now()))?
    })
    .await
    .ok()
    .flatten();
    if asked.is_none() {
        *kept = None;
    }
    asked
}

/// The answers after the first one by a leader of some epoch that do not come from a leader of
/// that epoch or a later one: answers by a deposed leader (or by a pod that does not lead).
fn deposed_answers(answers: &[Answer]) -> Vec<Answer> {
    let mut highest: Option<i64> = None;
    let mut deposed = Vec::new();
    for a in answers {
        match (highest, a.role == "leader", a.epoch) {
            (_, true, Some(e)) if highest.is_none_or(|h| e >= h) => highest = Some(e),
            (Some(_), _, _) => deposed.push(a.clone()),
            (None, _, _) => {}
        }
    }
    deposed
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

/// Runs `fault` against the leader with the Service routed by `route`, both clients asking.
async fn scenario(route: Route, fault: Fault) {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let prefix = format!("e2e-traffic-{route:?}-{fault:?}").to_lowercase();
    let ns = leadergroup_testenv::namespace_in(c.client.clone(), &prefix)
        .await
        .unwrap();
    let _ns_guard = c.namespace_guard(&ns.name);
    let watch = InvariantWatcher::start(&c.client, &ns.name).await;
    deploy(&ns, route).await;
    let pods: Api<Pod> = ns.api();
    wait_pods_ready_where(&pods, 3, "3 Ready pods", |p| {
        p.metadata.deletion_timestamp.is_none()
    })
    .await;
    let settled = |what: &str, accept: Box<dyn Fn(&Settled) -> bool + Send + Sync>| {
        let (client, ns) = (c.client.clone(), ns.name.clone());
        let what = what.to_owned();
        async move {
            wait_settled(&client, &ns, APP, &what, PODS, accept)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let first = settled("a leader", Box::new(|_| true)).await;
    let addr = service_addr(&ns).await;
    let fresh = Client::start(addr, false);
    let kept = Client::start(addr, true);
    let started = Instant::now();
    wait_until(
        "the first leader answering both clients",
        CONVERGE,
        || async {
            Ok::<_, String>(
                (fresh.first_leading_in(first.epoch, started).is_some()
                    && kept.first_leading_in(first.epoch, started).is_some())
                .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: new {:?}, kept {:?}", fresh.answers(), kept.answers()));
    let leader_pod = pods.get(&first.leader).await.unwrap();
    let node = node_of(&leader_pod).to_owned();

    let mut undo = None;
    let mut frozen = None;
    if matches!(fault, Fault::CutNode) {
        c.operator_off(&node).await;
    }
    let fault_at = Instant::now();
    let last = match fault {
        Fault::RollingUpdate => {
            let old_pods: Vec<String> = pods
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| p.name_any())
                .collect();
            let change =
                json!({"spec": {"template": {"metadata": {"annotations": {"version": "2"}}}}});
            Api::<Deployment>::namespaced(c.client.clone(), &ns.name)
                .patch(APP, &PatchParams::default(), &Patch::Strategic(&change))
                .await
                .unwrap();
            wait_pods_ready_where(&pods, 3, "3 Ready pods", |p| {
                p.metadata.deletion_timestamp.is_none() && !old_pods.contains(&p.name_any())
            })
            .await;
            let old = old_pods.clone();
            settled(
                "a new pod leads",
                Box::new(move |s| !old.contains(&s.leader)),
            )
            .await
        }
        Fault::Frozen => {
            frozen = Some(c.freeze_container(&leader_pod));
            let from = first.leader.clone();
            settled("another leader", Box::new(move |s| s.leader != from)).await
        }
        Fault::CutNode => {
            let (guard, _) = c.cut_node(&node).await;
            undo = Some(guard);
            let from = first.leader.clone();
            settled("another leader", Box::new(move |s| s.leader != from)).await
        }
    };
    // A keep-alive connection outside the proxy may stay on the deposed leader for as long as it
    // answers (conntrack keeps the flow): only the proxy's is awaited on the new leader.
    let fenced = matches!(route, Route::Proxy);
    let answered = wait_until("the new leader answering the clients", CONVERGE, || async {
        let kept_moved = kept.first_leading_in(last.epoch, fault_at);
        Ok::<_, String>(
            fresh
                .first_leading_in(last.epoch, fault_at)
                .filter(|_| !fenced || kept_moved.is_some())
                .map(|t| (t, kept_moved)),
        )
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}: new {:?}\nkept {:?}",
            fresh.answers().last(),
            kept.answers().last()
        )
    });
    tokio::time::sleep(AFTER).await;
    let (fresh_answers, kept_answers) = (fresh.answers(), kept.answers());
    drop((fresh, kept));
    let deposed_fresh = deposed_answers(&fresh_answers);
    let deposed_kept = deposed_answers(&kept_answers);
    println!(
        "traffic {route:?} {fault:?}: {} -> {} (epoch {} -> {}); fault -> first answer by the new \
         leader: new connections {:.0} ms, keep-alive {:.0} ms (NaN: still on the deposed pod); answers by a deposed or \
         non-leading pod after a leader's: new connections {} of {}, keep-alive {} of {}",
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
    );
    if matches!(route, Route::Proxy | Route::EndpointSlice) {
        assert!(
            deposed_fresh.is_empty(),
            "{route:?}: new connections answered by a deposed leader: {deposed_fresh:?}"
        );
    }
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
    let leaders = watch.assert_held().await;
    assert!(
        leaders.windows(2).all(|p| p[1].1 == p[0].1 + 1),
        "one epoch per change of leader: {leaders:?}"
    );
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
