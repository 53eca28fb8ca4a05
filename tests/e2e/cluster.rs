//! Support for the end-to-end tests: the real cluster (`make e2e`), the operator installed with its
//! chart, the example web application with its LeaderGroup and leader Service, a log of every pod
//! state a watch delivers, and the node-level faults (a container killed or frozen, a node
//! stopped).
//!
//! The tests run one at a time ([`Cluster::get`] takes a lock that lives as long as the test):
//! they share two nodes and one operator, and some of them stop a node or the operator.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use leadergroup_operator::crd::{
    LeaderGroup, LeaderGroupSpec, PodSelector, ROLE_LABEL, ROLE_LEADER,
};
pub use leadergroup_testenv::Settled;
use leadergroup_testenv::pods::{container_id, is_leader};
pub use leadergroup_testenv::pods::{container_running, ready as is_ready, restarts, role};
use leadergroup_testenv::{
    ControlPlane, Frozen, InvariantWatcher, RealCluster, Seen, TestNamespace, Undo, Watched,
    e2e_cluster, run_ok, wait_until,
};
use serde_json::json;

/// Bound for what the operator and the cluster do "at once" here: two nodes on two shared cores.
pub const CONVERGE: Duration = Duration::from_secs(60);
/// Bound for pods to start, roll or stop.
pub const PODS: Duration = Duration::from_secs(120);

/// The chart's release, as a user installs it with the default values.
pub use leadergroup_testenv::{
    OPERATOR_LEASE, OPERATOR_NAMESPACE as RELEASE_NS, OPERATOR_POD_SELECTOR,
    OPERATOR_RELEASE as RELEASE,
};

/// The web application built by `images/build.sh webapp`.
pub const WEBAPP_IMAGE: &str = "localhost/leadergroup/webapp:1";

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The real cluster, held by one test at a time.
pub struct Cluster {
    pub cp: &'static ControlPlane,
    pub client: Client,
    /// Its nodes, through `realcluster.sh`.
    pub real: RealCluster,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    /// Waits for the other tests to finish with the cluster, then connects to it. Fails when the
    /// tests were not started by `make e2e` (or with `LEADERGROUP_E2E_KUBECONFIG`).
    pub async fn get() -> Cluster {
        let serial = SERIAL.lock().await;
        let cp = e2e_cluster().await.unwrap_or_else(|e| panic!("{e}"));
        let client = cp.client().await.unwrap();
        Cluster {
            cp,
            client,
            real: RealCluster::at(cp.dir()),
            _serial: serial,
        }
    }

    /// The cluster folder (`realcluster.sh --dir`).
    pub fn dir(&self) -> &Path {
        self.cp.dir()
    }

    /// Installs the chart with the default values unless its release is deployed, and waits until
    /// one operator replica is active. The tests that need an operator call this.
    pub async fn ensure_operator(&self) {
        let mut status = self.cp.helm();
        status.args(["status", RELEASE, "--namespace", RELEASE_NS]);
        let (deployed, _, _) = leadergroup_testenv::run_tool(status).await;
        if !deployed {
            run_ok(self.helm_install()).await;
        }
        self.wait_operator_active(None).await;
    }

    /// `helm install` of the chart into [`RELEASE_NS`], with the default values but one: the
    /// operator is told this cluster's node grace period, as a user is asked to.
    pub fn helm_install(&self) -> std::process::Command {
        let mut install = RealCluster::helm_install(self.cp);
        let grace = self.node_monitor_grace_period().as_secs();
        install.args(["--set", &format!("nodeMonitorGracePeriodSeconds={grace}")]);
        install
    }

    /// The running operator pods.
    pub async fn operator_pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), RELEASE_NS)
            .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
            .await
            .unwrap()
            .items
    }

    /// The holder of the operator's Lease, if any.
    pub async fn operator_lease_holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), RELEASE_NS)
            .get_opt(OPERATOR_LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// Waits until the operator's Lease is held by a Ready operator pod (other than `not`), and
    /// returns that pod's name.
    pub async fn wait_operator_active(&self, not: Option<&str>) -> String {
        self.wait_operator_active_where(|p| Some(p.name_any().as_str()) != not)
            .await
    }

    /// Moves the active operator replica off node `node` (every replica there deleted, the node
    /// cordoned until a replica elsewhere is active, so that no replacement there takes over) and
    /// returns that replica: a test that then loses `node` measures the groups' handovers, not the
    /// operator's own failover.
    pub async fn operator_off(&self, node: &str) -> String {
        let _cordoned = self.cordon(node).await;
        let pods = Api::<Pod>::namespaced(self.client.clone(), RELEASE_NS);
        for p in self.operator_pods().await {
            if node_of(&p) == node {
                pods.delete(&p.name_any(), &DeleteParams::default())
                    .await
                    .unwrap();
            }
        }
        self.wait_operator_active_where(|p| node_of(p) != node)
            .await
    }

    /// Makes the replica on node `node` the active one, with the standby on another node, and
    /// returns it: a replica that must move is deleted while the node it must avoid is cordoned
    /// (a deleted active replica releases the operator Lease on SIGTERM: the standby takes over
    /// at once). A test that then loses `node` measures the operator's failover with the groups'.
    pub async fn operator_on(&self, node: &str) -> String {
        for _ in 0..6 {
            let active = self.wait_operator_active(None).await;
            let replicas = self.two_replicas_ready().await;
            let standby = replicas.iter().find(|p| p.name_any() != active);
            let active_on_node = replicas
                .iter()
                .any(|p| p.name_any() == active && node_of(p) == node);
            let standby_on_node = standby.is_some_and(|p| node_of(p) == node);
            let (delete, avoid) = match (active_on_node, standby_on_node) {
                (true, false) => return active,
                // Both on `node`: the standby moves away.
                (true, true) => (standby.map(ResourceExt::name_any), node.to_owned()),
                // The standby on `node` takes over; the active's replacement goes elsewhere.
                (false, true) => (Some(active.clone()), node.to_owned()),
                // Neither on `node`: the standby moves there, away from the active's node.
                (false, false) => {
                    let elsewhere = replicas
                        .iter()
                        .find(|p| p.name_any() == active)
                        .map_or(String::new(), |p| node_of(p).to_owned());
                    (standby.map(ResourceExt::name_any), elsewhere)
                }
            };
            let _cordoned = self.cordon(&avoid).await;
            if let Some(pod) = delete {
                Api::<Pod>::namespaced(self.client.clone(), RELEASE_NS)
                    .delete(&pod, &DeleteParams::default())
                    .await
                    .unwrap();
                self.wait_gone(&pod).await;
            }
            self.two_replicas_ready().await;
        }
        panic!(
            "the active operator replica could not be moved to {node}: {:#?}",
            pod_summary(&self.operator_pods().await)
        )
    }

    /// The two operator replicas, once both run Ready and neither is terminating.
    async fn two_replicas_ready(&self) -> Vec<Pod> {
        let ready = wait_until("two operator replicas Ready", PODS, || async {
            let pods = self.operator_pods().await;
            let live: Vec<Pod> = pods
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let both = live.len() == 2 && live.iter().all(is_ready);
            Ok::<_, String>(both.then_some(live))
        })
        .await;
        match ready {
            Ok(pods) => pods,
            Err(e) => panic!("{e}\n{:#?}", pod_summary(&self.operator_pods().await)),
        }
    }

    /// Waits until operator pod `pod` is gone.
    async fn wait_gone(&self, pod: &str) {
        let gone = wait_until(&format!("operator pod {pod} gone"), PODS, || async {
            let pods = self.operator_pods().await;
            Ok::<_, String>((!pods.iter().any(|p| p.name_any() == pod)).then_some(()))
        })
        .await;
        gone.unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits until the operator's Lease is held by a Ready operator pod that `which` accepts, and
    /// returns that pod's name.
    async fn wait_operator_active_where(&self, which: impl Fn(&Pod) -> bool) -> String {
        let active = wait_until("an active operator replica", PODS, || async {
            let Some(holder) = self.operator_lease_holder().await else {
                return Ok::<_, String>(None);
            };
            let ready = self.operator_pods().await.iter().any(|p| {
                p.name_any() == holder
                    && is_ready(p)
                    && p.metadata.deletion_timestamp.is_none()
                    && which(p)
            });
            Ok(ready.then_some(holder))
        })
        .await;
        match active {
            Ok(holder) => holder,
            Err(e) => panic!(
                "{e}\noperator pods: {:#?}\nnodes: {:?}",
                pod_summary(&self.operator_pods().await),
                node_summary(&self.client).await
            ),
        }
    }

    /// The node's number (1, 2) from its name (`lg-node-<N>`).
    pub fn node_number(node: &str) -> &str {
        RealCluster::node_number(node).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Node `name`'s containerd socket.
    pub fn containerd_socket(&self, node: &str) -> PathBuf {
        self.real.containerd_socket(node).unwrap()
    }

    /// Sends SIGKILL to the main process of pod `pod`'s first container, through its node's
    /// containerd (what an OOM kill or a crash does; the kubelet restarts it).
    pub async fn kill_container(&self, pod: &Pod) {
        let (node, id) = container_of(pod);
        leadergroup_testenv::kill_container(&self.containerd_socket(&node), &id)
            .await
            .unwrap();
    }

    /// Freezes pod `pod`'s first container through the cgroup v1 freezer (every process of it
    /// stops, as in a long GC pause or a stuck disk); thawed when the guard drops.
    pub fn freeze_container(&self, pod: &Pod) -> Frozen {
        let (node, id) = container_of(pod);
        Frozen::freeze_now(&node, &id).unwrap()
    }

    /// The node's Ready condition status ("True", "False", "Unknown").
    pub async fn node_ready(&self, node: &str) -> String {
        leadergroup_testenv::node_ready(&self.client, node)
            .await
            .unwrap()
    }

    /// Waits up to `within` until node `node` reports Ready (after a stop or a cut was undone).
    pub async fn wait_node_ready(&self, node: &str, within: Duration) {
        let back = wait_until(&format!("{node} Ready again"), within, || async {
            Ok::<_, String>((self.node_ready(node).await == "True").then_some(()))
        })
        .await;
        if let Err(e) = back {
            panic!("{e}\n{:?}", node_summary(&self.client).await);
        }
    }
}

impl Cluster {
    /// Stops node `node`'s kubelet and containerd (`realcluster.sh stop-node`); the guard starts
    /// them again when it drops.
    pub async fn stop_node(&self, node: &str) -> Undo {
        self.real.stop_node(node).await.unwrap()
    }

    /// Loses node `node` (`realcluster.sh cut-node`): its kubelet and containerd stop, and its pods
    /// lose every packet to and from the host (the API server) and the other node, while their
    /// containers run on. Returns the guard, which lets the packets through and starts the node
    /// again when it drops, and the wall clock of the cut.
    pub async fn cut_node(&self, node: &str) -> (Undo, SystemTime) {
        self.real.cut_node(node).await.unwrap()
    }

    /// Marks node `node` unschedulable (`kubectl cordon`) until the guard drops.
    pub async fn cordon(&self, node: &str) -> Undo {
        let mut cordon = self.cp.kubectl();
        cordon.args(["cordon", node]);
        run_ok(cordon).await;
        let mut uncordon = self.cp.kubectl();
        uncordon.args(["uncordon", node]);
        Undo::new(uncordon)
    }

    /// Deletes namespace `ns` when the guard drops (`kubectl delete --wait=false`).
    pub fn namespace_guard(&self, ns: &str) -> Undo {
        let mut delete = self.cp.kubectl();
        delete.args(["delete", "namespace", ns, "--wait=false"]);
        Undo::new(delete)
    }

    /// The node controller's `--node-monitor-grace-period` in this cluster: what
    /// `realcluster.sh up` was given (its `env` file), else Kubernetes' default, 50 s.
    pub fn node_monitor_grace_period(&self) -> Duration {
        self.real.node_monitor_grace_period().unwrap()
    }
}

/// The node the pod is bound to.
pub fn node_of(pod: &Pod) -> &str {
    leadergroup_testenv::pods::node_of(pod).expect("pod on a node")
}

/// (node, container id) of the pod's first container.
fn container_of(pod: &Pod) -> (String, String) {
    let id = container_id(pod).expect("a started container");
    (node_of(pod).to_string(), id)
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Each node's conditions that are not as they should be, and its taints: for failure messages.
pub async fn node_summary(client: &Client) -> Vec<String> {
    let Ok(nodes) = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
    else {
        return vec!["(nodes not listed)".to_string()];
    };
    nodes
        .items
        .iter()
        .map(|n| {
            let status = n.status.clone().unwrap_or_default();
            let conditions: Vec<String> = status
                .conditions
                .unwrap_or_default()
                .iter()
                .filter(|c| (c.type_ == "Ready") != (c.status == "True"))
                .map(|c| {
                    format!(
                        "{}={} ({})",
                        c.type_,
                        c.status,
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            let taints: Vec<String> = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            format!("{}: {conditions:?} taints {taints:?}", n.name_any())
        })
        .collect()
}

/// name, node, ready, role: for failure messages.
pub fn pod_summary(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| {
            format!(
                "{} on {} phase={} {} ready={} role={:?} deleting={}",
                p.name_any(),
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .unwrap_or("-"),
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or("-"),
                p.status
                    .as_ref()
                    .and_then(|s| s.reason.as_deref())
                    .unwrap_or(""),
                is_ready(p),
                role(p),
                p.metadata.deletion_timestamp.is_some()
            )
        })
        .collect()
}

/// The example application of one test: a Deployment of the web app in a namespace of its own,
/// a LeaderGroup selecting its pods and a Service selecting the leader.
pub struct App {
    pub ns: TestNamespace,
    pub pods: Api<Pod>,
    pub groups: Api<LeaderGroup>,
    pub deployments: Api<Deployment>,
    /// The leader Service's ClusterIP and port.
    pub service: SocketAddr,
}

/// The Deployment, the LeaderGroup, the pods' label.
pub const APP: &str = "web";

/// The web app's container (named [`APP`]): it serves its pod's name on port 8080 and is Ready
/// while it serves (probed every second). `stop_delay`: seconds it drains after SIGTERM.
pub fn webapp_container(stop_delay: u32) -> serde_json::Value {
    json!({
        "name": APP,
        "image": WEBAPP_IMAGE,
        "imagePullPolicy": "Never",
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "STOP_DELAY", "value": stop_delay.to_string()},
        ],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080},
            "periodSeconds": 1, "timeoutSeconds": 1,
            "failureThreshold": 1, "successThreshold": 1,
        },
    })
}

impl App {
    /// Creates the application with `replicas` pods spread over both nodes (at most one more on
    /// either), waits until they are Ready and the group has settled on a leader.
    /// `stop_delay`: seconds the app drains after SIGTERM before it stops.
    pub async fn start(cluster: &Cluster, prefix: &str, replicas: i32, stop_delay: u32) -> App {
        let ns = leadergroup_testenv::namespace_in(cluster.client.clone(), prefix)
            .await
            .unwrap();
        let app = App {
            pods: ns.api(),
            groups: ns.api(),
            deployments: ns.api(),
            service: "0.0.0.0:0".parse().unwrap(),
            ns,
        };
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": APP},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": APP}},
                "template": {
                    "metadata": {"labels": {"app": APP}},
                    "spec": {
                        "terminationGracePeriodSeconds": stop_delay + 5,
                        "topologySpreadConstraints": [{
                            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": APP}},
                        }],
                        "containers": [webapp_container(stop_delay)],
                    },
                },
            },
        }))
        .unwrap();
        app.deployments
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();
        let group = LeaderGroup::new(
            APP,
            LeaderGroupSpec {
                selector: PodSelector {
                    match_labels: [("app".to_string(), APP.to_string())].into(),
                    ..Default::default()
                },
                lease_duration_seconds: 15,
                preferred_leader: None,
                paused: false,
                liveness: Default::default(),
                service: None,
                history_limit: leadergroup_operator::crd::DEFAULT_HISTORY_LIMIT,
            },
        );
        app.groups
            .create(&PostParams::default(), &group)
            .await
            .unwrap();
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "web-leader"},
            "spec": {
                "selector": {"app": APP, ROLE_LABEL: ROLE_LEADER},
                "ports": [{"port": 80, "targetPort": 8080}],
            },
        }))
        .unwrap();
        let service = app
            .ns
            .api::<Service>()
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
        let ip = service
            .spec
            .and_then(|s| s.cluster_ip)
            .expect("a ClusterIP");
        let app = App {
            service: format!("{ip}:80").parse().unwrap(),
            ..app
        };
        app.wait_pods_ready(replicas as usize).await;
        app
    }

    /// Waits until `n` pods of the app run Ready (none terminating).
    pub async fn wait_pods_ready(&self, n: usize) -> Vec<Pod> {
        let pods = wait_until(&format!("{n} Ready pods of {APP}"), PODS, || async {
            let pods = self.list().await;
            let ready = pods
                .iter()
                .filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
                .count();
            Ok::<_, String>((ready == n && pods.len() == n).then_some(pods))
        })
        .await;
        match pods {
            Ok(pods) => pods,
            Err(e) => panic!("{e}\n{}", self.summary().await),
        }
    }

    pub async fn list(&self) -> Vec<Pod> {
        self.pods.list(&ListParams::default()).await.unwrap().items
    }

    /// The group's status, the pods and the nodes, for failure messages.
    pub async fn summary(&self) -> String {
        let status = self.groups.get(APP).await.ok().and_then(|g| g.status);
        format!(
            "status: {status:?}\npods: {:#?}\nnodes: {:?}",
            pod_summary(&self.list().await),
            node_summary(&self.ns.client).await
        )
    }

    /// The pod, as the API server has it now.
    pub async fn pod(&self, name: &str) -> Pod {
        self.pods.get(name).await.unwrap()
    }

    /// The settled state of the group (I2, [`leadergroup_testenv::judge_settled`]), if it is
    /// settled now.
    pub async fn settled(&self) -> Option<Settled> {
        leadergroup_testenv::settled(&self.ns.client, &self.ns.name, APP)
            .await
            .ok()?
            .ok()
    }

    /// Waits until the group has settled on a leader satisfying `cond`.
    pub async fn wait_settled(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&Settled) -> bool,
    ) -> Settled {
        let settled = wait_until(what, timeout, || async {
            Ok::<_, String>(self.settled().await.filter(|s| cond(s)))
        })
        .await;
        match settled {
            Ok(s) => s,
            Err(e) => panic!("{e}\n{}", self.summary().await),
        }
    }

    /// Waits until the group has settled on a leader other than `from`'s; checks that it took
    /// the next epoch and that the status gives one of `reasons` for the move.
    pub async fn wait_handover(
        &self,
        from: &Settled,
        reasons: &[&str],
        timeout: Duration,
    ) -> Settled {
        let what = format!("a leader other than {} ({reasons:?})", from.leader);
        let next = self
            .wait_settled(&what, timeout, |s| s.leader != from.leader)
            .await;
        assert_eq!(next.epoch, from.epoch + 1, "one epoch per change of leader");
        let status = self.groups.get(APP).await.unwrap().status.unwrap();
        let reason = status.last_transition_reason.unwrap_or_default();
        assert!(
            reasons.contains(&reason.as_str()),
            "reason {reason}, expected one of {reasons:?}"
        );
        next
    }

    /// One request through the leader Service's ClusterIP: the name of the pod that answered.
    pub async fn ask(&self) -> Option<String> {
        let (code, body) = leadergroup_testenv::http_get(self.service, "/").await?;
        (code == 200).then(|| body.trim().to_string())
    }

    /// `n` requests through the ClusterIP, each on a new connection: who answered each.
    pub async fn ask_many(&self, n: usize) -> Vec<Option<String>> {
        let mut answers = Vec::new();
        for _ in 0..n {
            answers.push(self.ask().await);
        }
        answers
    }

    /// Polls the Service every 20 ms until `pod` answers; returns when it first did.
    pub async fn first_answer_from(&self, pod: &str) -> Instant {
        wait_until(
            &format!("{pod} answering through the leader Service"),
            CONVERGE,
            || async {
                let answer = self.ask().await;
                if answer.as_deref() == Some(pod) {
                    return Ok::<_, String>(Some(Instant::now()));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err(format!("last answer: {answer:?}"))
            },
        )
        .await
        .unwrap()
    }

    /// Deletes the namespace (pods, group, Service); does not wait.
    pub async fn delete(self) {
        let _ = Api::<Namespace>::all(self.ns.client.clone())
            .delete(&self.ns.name, &DeleteParams::background())
            .await;
    }
}

/// One test's world: the cluster (taken for the test), the operator running, the app (three
/// replicas) with its group settled on a first leader, and the watches started before anything
/// moves: the invariant watcher (I1, I3, the order of the writes) and the log of pod states.
pub struct Scene {
    pub c: Cluster,
    pub app: App,
    pub watch: InvariantWatcher,
    pub log: PodLog,
    pub first: Settled,
}

impl Scene {
    /// `stop_delay`: seconds the app drains after SIGTERM.
    pub async fn start(prefix: &str, stop_delay: u32) -> Scene {
        let c = Cluster::get().await;
        c.ensure_operator().await;
        let app = App::start(&c, prefix, 3, stop_delay).await;
        let watch = InvariantWatcher::start(&c.client, &app.ns.name).await;
        let log = PodLog::start(app.pods.clone()).await;
        let first = app.wait_settled("a leader", CONVERGE, |_| true).await;
        Scene {
            c,
            app,
            watch,
            log,
            first,
        }
    }

    /// The leaders the watch saw, in order, checked: I1, I3 and the order of the writes held,
    /// and each change of leader took the next epoch.
    pub async fn leaders(&self) -> Vec<(String, i64)> {
        let leaders = self.watch.assert_held().await;
        for pair in leaders.windows(2) {
            assert_eq!(
                pair[1].1,
                pair[0].1 + 1,
                "one epoch per change of leader: {leaders:?}"
            );
        }
        leaders
    }

    /// Checks the leaders (see [`Scene::leaders`]) and deletes the app's namespace.
    pub async fn finish(self) {
        self.leaders().await;
        self.app.delete().await;
    }
}

/// A change of leader as a watch showed it.
#[derive(Debug)]
pub struct Move {
    /// The previous leader as the watch last showed it at that moment (None for the first).
    pub old: Option<Pod>,
    /// Whether the previous leader still existed then (its deletion not yet seen).
    pub old_present: bool,
    pub new: String,
    pub at: Instant,
}

/// Every state of a kind of object a watch delivered, in order, with the moment it arrived
/// (and whether it was a deletion).
pub struct WatchLog<K: Send + 'static>(Watched<Vec<(Instant, K, bool)>>);

/// Every pod state a watch of a namespace delivered.
pub type PodLog = WatchLog<Pod>;

impl<K> WatchLog<K>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    /// Starts watching; returns once the first list arrived.
    pub async fn start(api: Api<K>) -> WatchLog<K> {
        let log = Watched::new(Vec::new()).watch(api, watcher::Config::default(), |log, seen| {
            let now = Instant::now();
            match seen {
                Seen::Listed(all) => log.extend(all.into_iter().map(|o| (now, o, false))),
                Seen::Applied(o) => log.push((now, o, false)),
                Seen::Deleted(o) => log.push((now, o, true)),
                Seen::Relisting | Seen::Failed => {}
            }
        });
        let (log, synced) = log.synced(CONVERGE).await;
        assert!(synced, "the watch delivered its first list");
        WatchLog(log)
    }

    /// Waits until the watch has shown what the API server holds now (a test that saw a write
    /// by a read must not read a log that does not have it yet); fails the test after 40 s.
    pub async fn caught_up(&self) {
        if let Err(behind) = self.0.caught_up().await {
            panic!("{behind}");
        }
    }

    /// Every state the watch delivered, with its arrival and whether it was a deletion.
    pub fn events(&self) -> Vec<(Instant, K, bool)> {
        self.0.lock().clone()
    }

    /// Every state of `name` the watch delivered (deletions left out), with its arrival.
    pub fn states_of(&self, name: &str) -> Vec<(Instant, K)> {
        self.0
            .lock()
            .iter()
            .filter(|(_, o, deleted)| !deleted && o.meta().name.as_deref() == Some(name))
            .map(|(t, o, _)| (*t, o.clone()))
            .collect()
    }
}

impl PodLog {
    /// When the watch first showed `pod` labeled leader after `after`.
    pub fn leader_seen(&self, pod: &str, after: Instant) -> Option<Instant> {
        self.0
            .lock()
            .iter()
            .find(|(t, p, deleted)| *t >= after && !deleted && p.name_any() == pod && is_leader(p))
            .map(|(t, _, _)| *t)
    }

    /// Every change of leader the watch showed, in order.
    pub fn moves(&self) -> Vec<Move> {
        let events = self.0.lock();
        let mut latest: std::collections::BTreeMap<String, Pod> = Default::default();
        let mut gone: std::collections::BTreeMap<String, Pod> = Default::default();
        let mut leader: Option<String> = None;
        let mut moves = Vec::new();
        for (t, pod, deleted) in events.iter() {
            let name = pod.name_any();
            if *deleted {
                latest.remove(&name);
                gone.insert(name, pod.clone());
                continue;
            }
            latest.insert(name.clone(), pod.clone());
            if is_leader(pod) && leader.as_deref() != Some(name.as_str()) {
                let old = leader.as_ref().and_then(|l| {
                    let present = latest.get(l).map(|p| (p.clone(), true));
                    present.or_else(|| gone.get(l).map(|p| (p.clone(), false)))
                });
                moves.push(Move {
                    old: old.as_ref().map(|(p, _)| p.clone()),
                    old_present: old.is_some_and(|(_, present)| present),
                    new: name.clone(),
                    at: *t,
                });
                leader = Some(name);
            }
        }
        moves
    }
}

/// Creates `object` (JSON of a `K`) in `ns`.
pub async fn create<K>(ns: &TestNamespace, object: serde_json::Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let object: K = serde_json::from_value(object).unwrap();
    ns.api::<K>()
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

/// Waits until `n` pods of `pods`' namespace are Ready.
pub async fn wait_pods_ready(pods: &Api<Pod>, n: usize) {
    wait_pods_ready_where(pods, n, &format!("{n} pods Ready"), |_| true).await;
}

/// Waits until `n` of the pods of `pods`' namespace that `counted` keeps are Ready; `what` names
/// the wait in its failure.
pub async fn wait_pods_ready_where(
    pods: &Api<Pod>,
    n: usize,
    what: &str,
    counted: impl Fn(&Pod) -> bool,
) {
    wait_until(what, PODS, || async {
        let list = pods
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let ready = list
            .items
            .iter()
            .filter(|p| is_ready(p) && counted(p))
            .count();
        Ok::<_, String>((ready == n).then_some(()))
    })
    .await
    .unwrap();
}

/// A scraper of the operator's secure /metrics: ServiceAccount `name` of `ns` bound (a
/// ClusterRoleBinding named `<ns>-<name>`) to the chart's reader ClusterRole, as a user binds a
/// Prometheus, and a TokenRequest token of it. [`MetricsReader::remove`] deletes the binding.
pub struct MetricsReader {
    /// The token, for `Authorization: Bearer`.
    pub token: String,
    client: Client,
    binding: String,
}

/// The chart's ClusterRole that may get /metrics (`<fullname>-metrics-reader.<release ns>`).
pub const METRICS_READER_ROLE: &str = "leadergroup-operator-metrics-reader.leadergroup-system";
/// The operator pods' secure /metrics port (the chart's metrics.securePort), by its name.
pub const METRICS_PORT_NAME: &str = "https-metrics";

impl MetricsReader {
    pub async fn create(ns: &TestNamespace, name: &str) -> MetricsReader {
        use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
        ns.create_service_account(name).await.unwrap();
        let binding = format!("{}-{name}", ns.name);
        let object: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns.name}],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(ns.client.clone())
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        MetricsReader {
            token: ns.service_account_token(name).await.unwrap(),
            client: ns.client.clone(),
            binding,
        }
    }

    /// Deletes the binding (the ServiceAccount goes with its namespace).
    pub async fn remove(self) {
        use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
        let _ = Api::<ClusterRoleBinding>::all(self.client)
            .delete(&self.binding, &DeleteParams::default())
            .await;
    }
}
