//! `--only e2e`: what a user waits for, on the real cluster, from the fault until the new
//! leader's application learned that it leads; ours against the peers, in one run.
//!
//! The harness starts a real two-node cluster of its own (`controlplane/realcluster.sh up` in
//! `target/bench-e2e-cluster`, as root) and always stops it again ([`RealCluster`]'s Drop, and on
//! SIGINT/SIGTERM). It imports the images, installs the operator with its chart (one replica,
//! bound to `lg-node-2`, so that losing `lg-node-1` measures the groups' failover and not the
//! operator's own), and runs every system's candidates as pods, three per system (one on
//! `lg-node-1`, two on `lg-node-2`):
//!
//! - ours: the web app and the `leadergroup-agent` native sidecar (as
//!   `examples/ledger/manifests/sidecar` has it); the application learns its role from the agent's
//!   `role` file, and the clock stops at that file's mtime when it first reads `leader`;
//! - the peers: client-go's leaderelection (defaults and tuned), kube-leader-election and
//!   kube-lease-manager, the bench's candidates in pods (`images/build.sh client-go rust-peer`);
//!   the clock stops at the timestamp of the new leader's `started` line (its OnStartedLeading),
//!   which it appends to a file in an emptyDir.
//!
//! Both files are read from the host (see [`crate::timeline`]); every node is on this machine,
//! so there is one clock. The scenarios, and where each clock starts, are in [`Scenario`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use leadergroup_operator::crd::LeaderGroup;
use serde::Deserialize;
use serde_json::json;

use crate::e2e_results::{E2eResult, ScenarioResult, SystemResult, render};
use crate::error::{Error, Result};
use crate::markdown::Block;
use crate::results::{Results, Run};
use crate::scenario::{About, Context, Measuring, Outcome, Scenario as BenchScenario, measuring};
use crate::stats::summarize;
use crate::timeline::{
    Exclusion, SYSTEM_LABEL, Tracker, believers_at, first_new_leader, pod_of, split_brains,
};

/// The node that is lost, where every leader sits before the cut, and the other one.
const CUT_NODE: &str = "lg-node-1";
const OTHER_NODE: &str = "lg-node-2";

/// The operator's release, as `make e2e`'s tests install it.
const RELEASE: &str = "leadergroup-operator";
const RELEASE_NS: &str = "leadergroup-system";

/// Candidates per system.
const CANDIDATES: usize = 3;

/// The web app's readiness probe in our pods (what the frozen scenario waits on).
const PROBE: &str = "HTTP GET every 1 s, timeout 1 s, failureThreshold 1";

/// Repetitions of one run.
#[derive(Clone, Debug)]
struct Plan {
    /// Graceful, crash and frozen, per system.
    reps: usize,
    /// Node losses (every system measured in each).
    node_losses: usize,
    /// `--node-monitor-grace-period` of the cluster, seconds.
    grace: u32,
}

/// The systems measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// Ours, Readiness liveness (the default).
    Ours,
    /// Ours, Heartbeat liveness, `leaseDurationSeconds: 5` (node loss only).
    OursHeartbeat,
    ClientGoDefaults,
    ClientGoTuned,
    KubeLeaderElection,
    KubeLeaseManager,
}

const PEERS: [System; 4] = [
    System::ClientGoDefaults,
    System::ClientGoTuned,
    System::KubeLeaderElection,
    System::KubeLeaseManager,
];

/// The Heartbeat group's Lease.
const HEARTBEAT_LEASE_SECONDS: u64 = 5;

impl System {
    /// The pods' label value, and the prefix of the peer's Lease and of the pod names.
    pub fn label(self) -> &'static str {
        match self {
            System::Ours => "ours",
            System::OursHeartbeat => "ours-hb",
            System::ClientGoDefaults => "cgd",
            System::ClientGoTuned => "cgt",
            System::KubeLeaderElection => "kle",
            System::KubeLeaseManager => "klm",
        }
    }

    fn is_ours(label: &str) -> bool {
        label == "ours" || label == "ours-hb"
    }

    /// The name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            System::Ours => "leadergroup-operator (Readiness)",
            System::OursHeartbeat => "leadergroup-operator (Heartbeat)",
            System::ClientGoDefaults => "client-go (defaults)",
            System::ClientGoTuned => "client-go (tuned)",
            System::KubeLeaderElection => "kube-leader-election 0.44",
            System::KubeLeaseManager => "kube-lease-manager 0.13.1",
        }
    }

    fn settings(self) -> String {
        match self {
            System::Ours => format!(
                "LeaderGroup leaseDurationSeconds 15, liveness Readiness; agent sidecar; web app readiness probe {PROBE}"
            ),
            System::OursHeartbeat => format!(
                "LeaderGroup leaseDurationSeconds {HEARTBEAT_LEASE_SECONDS}, liveness Heartbeat (the leader's agent renews every third); agent sidecar"
            ),
            System::ClientGoDefaults => {
                "LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s, ReleaseOnCancel".into()
            }
            System::ClientGoTuned => {
                "LeaseDuration 4 s, RenewDeadline 2 s, RetryPeriod 1 s, ReleaseOnCancel".into()
            }
            System::KubeLeaderElection => {
                "lease_ttl 15 s, try_acquire_or_renew every 5 s, step_down on SIGTERM".into()
            }
            System::KubeLeaseManager => {
                "duration 15 s, grace 5 s, watch() channel dropped on SIGTERM (releases)".into()
            }
        }
    }

    /// The peer's Lease (the bench's candidates name it `<prefix>-0`).
    fn peer_lease(self) -> String {
        format!("{}-0", self.label())
    }

    /// How long a handover may take before the repetition counts as failed.
    fn bound(self) -> Duration {
        match self {
            System::Ours | System::OursHeartbeat => Duration::from_secs(60),
            _ => Duration::from_secs(15 * 3 + 30),
        }
    }

    /// The container a crash kills and a freeze stops.
    fn app_container(self) -> &'static str {
        if Self::is_ours(self.label()) {
            "web"
        } else {
            "candidate"
        }
    }

    fn peer_args(self) -> Vec<&'static str> {
        let go = |d, r, p| {
            vec![
                "--lease-duration",
                d,
                "--renew-deadline",
                r,
                "--retry-period",
                p,
            ]
        };
        let rust = |lib| {
            vec![
                "--lib",
                lib,
                "--lease-seconds",
                "15",
                "--renew-seconds",
                "5",
            ]
        };
        match self {
            System::ClientGoDefaults => go("15s", "10s", "2s"),
            System::ClientGoTuned => go("4s", "2s", "1s"),
            System::KubeLeaderElection => rust("kle"),
            System::KubeLeaseManager => rust("klm"),
            System::Ours | System::OursHeartbeat => Vec::new(),
        }
    }
}

/// The scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Graceful,
    Crash,
    Frozen,
    NodeLoss,
}

impl Scenario {
    fn key(self) -> &'static str {
        match self {
            Scenario::Graceful => "graceful",
            Scenario::Crash => "crash",
            Scenario::Frozen => "frozen",
            Scenario::NodeLoss => "node-loss",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Scenario::Graceful => "Graceful: the leader pod deleted, as a rolling update does",
            Scenario::Crash => "Container crash: the leader's process killed",
            Scenario::Frozen => "Frozen process: the leader's container stopped (SIGSTOP)",
            Scenario::NodeLoss => "Node lost: the leader's node cut off",
        }
    }

    fn start(self) -> &'static str {
        match self {
            Scenario::Graceful => {
                "just before the harness sends DELETE for the leader pod (default grace period: the kubelet sends SIGTERM; ours hands over on the deletionTimestamp, the peers release their Lease on SIGTERM). A replacement pod is created on the same node afterwards, as the ReplicaSet would"
            }
            Scenario::Crash => {
                "just before SIGKILL to the leader's application container through its node's containerd (`ctr task kill`); the kubelet restarts it. Ours: the web app container (the pod turns NotReady once the kubelet sees it dead); peers: the candidate process. Once the new leader acted, the faulted pod is replaced by a fresh one (no restart back-off builds up over the repetitions)"
            }
            Scenario::Frozen => {
                "just before the leader's application container is frozen (cgroup freezer: every process stopped, as SIGSTOP does); thawed 1 s after the new leader acted, then replaced by a fresh pod. Ours: the web app container, whose readiness probe then fails (the agent sidecar runs on); peers: the candidate process, which stops renewing"
            }
            Scenario::NodeLoss => {
                "the wall clock `realcluster.sh cut-node 1` prints just before node 1's pods lose every packet (its kubelet and containerd were stopped a moment before; the containers run on). Every system's leader is on node 1 and its two other candidates on node 2; all systems are cut in the same cut"
            }
        }
    }

    fn stop(self) -> &'static str {
        "the new leader's application learns that it leads: ours, the mtime of the new leader pod's agent `role` file when it first reads `leader`; a peer, the timestamp its candidate writes when OnStartedLeading (or the library's equivalent) fires. A peer's new leader may be the crashed pod's own restarted container: a new process with a new identity"
    }
}

/// The real cluster of this run: stopped (`realcluster.sh down`) when dropped, however the run
/// ends.
struct RealCluster {
    script: PathBuf,
    dir: PathBuf,
}

impl RealCluster {
    /// `realcluster.sh up`; the guard exists before the command runs, so a half-started cluster
    /// is stopped too.
    async fn up(repo: &Path, dir: PathBuf, grace: u32) -> Result<RealCluster> {
        let cluster = RealCluster {
            script: repo.join("controlplane/realcluster.sh"),
            dir,
        };
        let grace = grace.to_string();
        cluster
            .run(&["up", "--node-monitor-grace-period", &grace])
            .await?;
        Ok(cluster)
    }

    /// `realcluster.sh ARGS --dir DIR`; its stdout.
    async fn run(&self, args: &[&str]) -> Result<String> {
        let out = tokio::process::Command::new(&self.script)
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .stderr(std::process::Stdio::inherit())
            .output()
            .await
            .map_err(Error::io(format!("running {}", self.script.display())))?;
        if !out.status.success() {
            return Err(Error::Other(format!(
                "realcluster.sh {} failed: {}",
                args.join(" "),
                out.status
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    fn socket(&self, node: &str) -> PathBuf {
        let n = node.strip_prefix("lg-node-").unwrap_or(node);
        self.dir.join(format!("node{n}/containerd.sock"))
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        tracing::info!("e2e: stopping the real cluster in {}", self.dir.display());
        let status = std::process::Command::new(&self.script)
            .arg("down")
            .arg("--dir")
            .arg(&self.dir)
            .status();
        match status {
            Ok(s) if s.success() => {}
            other => tracing::warn!(
                "e2e: realcluster.sh down failed ({other:?}): run `controlplane/realcluster.sh down --dir {}`",
                self.dir.display()
            ),
        }
    }
}

/// The image references `images/build.sh` wrote (`target/images/<name>.ref`).
struct Images {
    webapp: String,
    agent: String,
    client_go: String,
    rust_peer: String,
}

impl Images {
    fn read(repo: &Path) -> Result<Images> {
        let read = |name: &str| {
            let path = repo.join(format!("target/images/{name}.ref"));
            std::fs::read_to_string(&path)
                .map(|s| s.trim().to_owned())
                .map_err(Error::io(format!(
                    "reading {} (build it: images/build.sh {name})",
                    path.display()
                )))
        };
        Ok(Images {
            webapp: read("webapp")?,
            agent: read("agent")?,
            client_go: read("client-go")?,
            rust_peer: read("rust-peer")?,
        })
    }
}

/// The leader of a system at rest.
#[derive(Clone, Debug)]
struct Leader {
    identity: String,
    pod: String,
}

/// One namespace of candidates and what watches them.
struct World<'a> {
    cluster: &'a RealCluster,
    images: &'a Images,
    client: Client,
    ns: String,
    pods: Api<Pod>,
    tracker: Tracker,
    exclusions: Mutex<BTreeMap<&'static str, Vec<Exclusion>>>,
    next_pod: AtomicUsize,
}

impl<'a> World<'a> {
    /// A namespace with the RBAC of our members and of the peers, and our groups.
    async fn create(
        cluster: &'a RealCluster,
        images: &'a Images,
        client: &Client,
        prefix: &str,
        heartbeat: bool,
    ) -> Result<World<'a>> {
        let ns = leadergroup_testenv::namespace_in(client.clone(), prefix).await?;
        create_rbac(&ns.client, &ns.name).await?;
        let groups: Api<LeaderGroup> = ns.api();
        let mut wanted = vec![(System::Ours, 15, "Readiness")];
        if heartbeat {
            wanted.push((System::OursHeartbeat, HEARTBEAT_LEASE_SECONDS, "Heartbeat"));
        }
        for (system, lease, liveness) in wanted {
            let group: LeaderGroup = serde_json::from_value(json!({
                "apiVersion": "leadergroup.io/v1alpha1",
                "kind": "LeaderGroup",
                "metadata": {"name": system.label()},
                "spec": {
                    "selector": {"matchLabels": {SYSTEM_LABEL: system.label()}},
                    "leaseDurationSeconds": lease,
                    "liveness": liveness,
                },
            }))?;
            groups.create(&PostParams::default(), &group).await?;
        }
        let pods: Api<Pod> = ns.api();
        let tracker = Tracker::start(pods.clone(), cluster.dir.clone(), System::is_ours);
        Ok(World {
            cluster,
            images,
            client: ns.client.clone(),
            ns: ns.name,
            pods,
            tracker,
            exclusions: Mutex::default(),
            next_pod: AtomicUsize::new(1),
        })
    }

    /// Creates a candidate of `system` on `node`.
    async fn add_pod(&self, system: System, node: &str) -> Result<String> {
        let name = format!(
            "{}-{}",
            system.label(),
            self.next_pod.fetch_add(1, Ordering::Relaxed)
        );
        let pod = self.pod(system, &name, node)?;
        self.pods.create(&PostParams::default(), &pod).await?;
        Ok(name)
    }

    /// The pod of a candidate of `system`, from bench/manifests.
    fn pod(&self, system: System, name: &str, node: &str) -> Result<Pod> {
        let common = [("NAME", name), ("SYSTEM", system.label()), ("NODE", node)];
        if System::is_ours(system.label()) {
            let images = [
                ("AGENT_IMAGE", self.images.agent.as_str()),
                ("WEBAPP_IMAGE", &self.images.webapp),
            ];
            return manifest(OURS_POD, &[&common[..], &images].concat());
        }
        let (image, binary) = match system {
            System::ClientGoDefaults | System::ClientGoTuned => (
                &self.images.client_go,
                "/usr/local/bin/leadergroup-bench-client-go",
            ),
            _ => (
                &self.images.rust_peer,
                "/usr/local/bin/leadergroup-bench-rust-peer",
            ),
        };
        let binary = [("IMAGE", image.as_str()), ("BINARY", binary)];
        let mut pod: Pod = manifest(PEER_POD, &[&common[..], &binary].concat())?;
        let prefix = [
            "--namespace",
            "$(POD_NAMESPACE)",
            "--lease-prefix",
            system.label(),
        ];
        if let Some(command) = pod
            .spec
            .as_mut()
            .and_then(|s| s.containers.first_mut())
            .and_then(|c| c.command.as_mut())
        {
            command.extend(
                system
                    .peer_args()
                    .into_iter()
                    .chain(prefix)
                    .map(str::to_owned),
            );
        }
        Ok(pod)
    }

    fn exclusions(&self, system: System) -> Vec<Exclusion> {
        self.exclusions
            .lock()
            .ok()
            .and_then(|x| x.get(system.label()).cloned())
            .unwrap_or_default()
    }

    fn exclude(&self, system: System, identity: &str, from: SystemTime) {
        if let Ok(mut x) = self.exclusions.lock() {
            x.entry(system.label()).or_default().push(Exclusion {
                identity: identity.to_owned(),
                from,
                until: None,
            });
        }
    }

    fn end_exclusion(&self, system: System, identity: &str, until: SystemTime) {
        if let Ok(mut x) = self.exclusions.lock()
            && let Some(list) = x.get_mut(system.label())
        {
            for e in list
                .iter_mut()
                .filter(|e| e.identity == identity && e.until.is_none())
            {
                e.until = Some(until);
            }
        }
    }

    /// The system's live candidate pods (no deletionTimestamp).
    async fn live_pods(&self, system: System) -> Result<Vec<Pod>> {
        let params = ListParams::default().labels(&format!("{SYSTEM_LABEL}={}", system.label()));
        Ok(self
            .pods
            .list(&params)
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// The leader, when the system is at rest: `pods` candidates Running and Ready, exactly one
    /// believer, and the API agreeing (ours: the group's status names its pod; a peer: its
    /// Lease's holder is that identity).
    async fn at_rest(&self, system: System, pods: usize) -> Result<Option<Leader>> {
        let live = self.live_pods(system).await?;
        if live.len() != pods || !live.iter().all(ready) {
            return Ok(None);
        }
        let events = self.tracker.events(system.label());
        let believers = believers_at(&events, SystemTime::now(), &self.exclusions(system));
        let [sole] = believers.as_slice() else {
            return Ok(None);
        };
        let pod = pod_of(sole).to_owned();
        if !live.iter().any(|p| p.name_any() == pod) {
            return Ok(None);
        }
        let agrees = if System::is_ours(system.label()) {
            let groups: Api<LeaderGroup> = Api::namespaced(self.client.clone(), &self.ns);
            groups
                .get_opt(system.label())
                .await?
                .and_then(|g| g.status)
                .and_then(|s| s.leader)
                .is_some_and(|l| l == pod)
        } else {
            let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
            leases
                .get_opt(&system.peer_lease())
                .await?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .is_some_and(|h| h == *sole)
        };
        Ok(agrees.then(|| Leader {
            identity: sole.clone(),
            pod,
        }))
    }

    async fn wait_at_rest(&self, system: System, pods: usize) -> Result<Leader> {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(l) = self.at_rest(system, pods).await? {
                return Ok(l);
            }
            if Instant::now() > deadline {
                let events = self.tracker.events(system.label());
                return Err(Error::Timeout(format!(
                    "{} at rest with {pods} Ready candidates and one leader (events: {events:?})",
                    system.name()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits for the first candidate other than `old` to start leading at or after `t0`.
    async fn wait_new_leader(
        &self,
        system: System,
        old: &str,
        t0: SystemTime,
        bound: Duration,
    ) -> Result<SystemTime> {
        let deadline = Instant::now() + bound;
        loop {
            let events = self.tracker.events(system.label());
            if let Some(e) = first_new_leader(&events, old, t0) {
                return Ok(e.at);
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "{}: a leader other than {old} within {} s",
                    system.name(),
                    bound.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The pod's `container`'s containerd id and its node.
    async fn container(&self, pod: &str, container: &str) -> Result<(String, String)> {
        let p = self.pods.get(pod).await?;
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .ok_or_else(|| Error::Other(format!("{pod} is on no node")))?;
        let id = p
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == container)
            .and_then(|c| c.container_id)
            .ok_or_else(|| Error::Other(format!("{pod}: no started container {container}")))?;
        let id = id
            .strip_prefix("containerd://")
            .map_or(id.clone(), str::to_owned);
        Ok((node, id))
    }

    /// One repetition of `scenario` (not node loss) on `system`: milliseconds from the fault to
    /// the new leader's application acting.
    async fn repetition(&self, system: System, scenario: Scenario) -> Result<f64> {
        let old = self.wait_at_rest(system, CANDIDATES).await?;
        let old_node = self
            .pods
            .get(&old.pod)
            .await?
            .spec
            .and_then(|s| s.node_name)
            .ok_or_else(|| Error::Other(format!("{} is on no node", old.pod)))?;
        let t0;
        let mut frozen: Option<PathBuf> = None;
        match scenario {
            Scenario::Graceful => {
                t0 = SystemTime::now();
                self.exclude(system, &old.identity, t0);
                self.pods.delete(&old.pod, &DeleteParams::default()).await?;
            }
            Scenario::Crash => {
                let (node, id) = self.container(&old.pod, system.app_container()).await?;
                t0 = SystemTime::now();
                self.exclude(system, &old.identity, t0);
                leadergroup_testenv::kill_container(&self.cluster.socket(&node), &id).await?;
            }
            Scenario::Frozen => {
                let (node, id) = self.container(&old.pod, system.app_container()).await?;
                let state = leadergroup_testenv::freezer_state(&node, &id)?;
                t0 = SystemTime::now();
                self.exclude(system, &old.identity, t0);
                std::fs::write(&state, "FROZEN").map_err(Error::io("freezing a container"))?;
                frozen = Some(state);
            }
            Scenario::NodeLoss => {
                return Err(Error::Other(
                    "node loss runs for all systems at once".into(),
                ));
            }
        }
        let new = self
            .wait_new_leader(system, &old.identity, t0, system.bound())
            .await;
        if let Some(state) = frozen {
            if new.is_ok() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            std::fs::write(&state, "THAWED").map_err(Error::io("thawing a container"))?;
            self.end_exclusion(system, &old.identity, SystemTime::now());
        }
        if scenario != Scenario::Graceful {
            // The faulted pod is replaced by a fresh one once the handover is measured: the
            // kubelet restarts a killed or exited container with a back-off that doubles at each
            // restart, which over the repetitions would only lengthen the waits between them.
            self.pods.delete(&old.pod, &DeleteParams::default()).await?;
        }
        self.add_pod(system, &old_node).await?;
        let new = new?;
        Ok(crate::observe::ms_between(t0, new))
    }
}

/// A pod Running with Ready=True.
fn ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && leadergroup_testenv::invariants::ready(pod)
}

/// The candidates' pods and RBAC (bench/manifests).
const OURS_POD: &str = include_str!("../manifests/e2e-ours-pod.yaml");
const PEER_POD: &str = include_str!("../manifests/e2e-peer-pod.yaml");
const RBAC: &str = include_str!("../manifests/e2e-rbac.yaml");

/// `template` with every `__KEY__` replaced by its value, parsed.
fn manifest<T: serde::de::DeserializeOwned>(template: &str, values: &[(&str, &str)]) -> Result<T> {
    let text = values.iter().fold(template.to_owned(), |t, (k, v)| {
        t.replace(&format!("__{k}__"), v)
    });
    Ok(serde_yaml_ng::from_str(&text)?)
}

/// Creates the RBAC of our members and of the peers in `ns`.
async fn create_rbac(client: &Client, ns: &str) -> Result<()> {
    for document in serde_yaml_ng::Deserializer::from_str(RBAC) {
        let object = DynamicObject::deserialize(document)?;
        let types = object.types.clone().unwrap_or_default();
        let gvk = GroupVersionKind::try_from(&types)
            .map_err(|e| Error::Other(format!("bench/manifests/e2e-rbac.yaml: {e}")))?;
        let resource = ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        api.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

/// Node `node`'s Ready condition is True.
async fn node_ready(client: &Client, node: &str) -> Result<bool> {
    let n = Api::<Node>::all(client.clone()).get(node).await?;
    Ok(n.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Deletes a namespace, not waiting.
async fn delete_namespace(client: &Client, ns: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await;
}

/// Collects one system's samples of one scenario.
#[derive(Default)]
struct Collected {
    samples: Vec<f64>,
    failures: Vec<String>,
    split_brains: u64,
}

/// Graceful, crash and frozen on one system, `reps` times each; per scenario.
async fn handovers(world: &World<'_>, system: System, reps: usize) -> Vec<Collected> {
    let mut out = Vec::new();
    for scenario in [Scenario::Graceful, Scenario::Crash, Scenario::Frozen] {
        let from = SystemTime::now();
        let mut c = Collected::default();
        for i in 0..reps {
            match world.repetition(system, scenario).await {
                Ok(ms) => {
                    tracing::info!(
                        "e2e: {} {} #{}: {ms:.0} ms",
                        system.name(),
                        scenario.key(),
                        i + 1
                    );
                    c.samples.push(ms);
                }
                Err(e) => {
                    tracing::info!("e2e: {} {} #{}: {e}", system.name(), scenario.key(), i + 1);
                    c.failures.push(e.to_string());
                    break;
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        // The last handover's other candidates have settled once the system is at rest again.
        let _ = world.wait_at_rest(system, CANDIDATES).await;
        c.split_brains = split_brains(
            &world.tracker.events(system.label()),
            from,
            SystemTime::now(),
            &world.exclusions(system),
        );
        out.push(c);
    }
    out
}

/// One node loss: a fresh namespace, every system's first candidate on node 1 (so it leads),
/// two more on node 2, node 1 cut, every system's new leader awaited, node 1 back.
async fn node_loss(
    cluster: &RealCluster,
    images: &Images,
    client: &Client,
    systems: &[System],
    grace: u32,
) -> Result<BTreeMap<&'static str, (Result<f64>, u64)>> {
    let world = World::create(cluster, images, client, "e2e-node-loss", true).await?;
    for &s in systems {
        world.add_pod(s, CUT_NODE).await?;
    }
    for &s in systems {
        world.wait_at_rest(s, 1).await?;
    }
    for &s in systems {
        for _ in 1..CANDIDATES {
            world.add_pod(s, OTHER_NODE).await?;
        }
    }
    let mut old = BTreeMap::new();
    for &s in systems {
        let leader = world.wait_at_rest(s, CANDIDATES).await?;
        old.insert(s.label(), leader);
    }
    // The Heartbeat leader's agent renews every third of 5 s: let it do so a few times.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let from = SystemTime::now();
    let printed = cluster.run(&["cut-node", "1"]).await?;
    let secs: f64 = printed
        .parse()
        .map_err(|e| Error::Other(format!("cut-node printed {printed:?}: {e}")))?;
    let t0 = UNIX_EPOCH + Duration::from_secs_f64(secs);
    tracing::info!("e2e: node loss: {CUT_NODE} cut");
    let bound = Duration::from_secs(u64::from(grace)) + Duration::from_secs(90);
    let waits = systems.iter().map(|&s| {
        let world = &world;
        let old = old
            .get(s.label())
            .map(|l| l.identity.clone())
            .unwrap_or_default();
        async move { (s, world.wait_new_leader(s, &old, t0, bound).await) }
    });
    let moved = futures::future::join_all(waits).await;
    // The node back, whatever happened: its cut-off candidates then say what they believed.
    let uncut = cluster.run(&["uncut-node", "1"]).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !node_ready(client, CUT_NODE).await.unwrap_or(false) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut out = BTreeMap::new();
    for (s, r) in moved {
        let events = world.tracker.events(s.label());
        let brains = split_brains(&events, from, SystemTime::now(), &[]);
        let ms = r.map(|at| crate::observe::ms_between(t0, at));
        match &ms {
            Ok(ms) => tracing::info!("e2e: node loss: {}: {ms:.0} ms", s.name()),
            Err(e) => tracing::info!("e2e: node loss: {}: {e}", s.name()),
        }
        out.insert(s.label(), (ms, brains));
    }
    delete_namespace(client, &world.ns).await;
    uncut?;
    Ok(out)
}

/// Installs the chart (one replica, on node 2) and waits until its operator is Ready.
async fn install_operator(cp: &leadergroup_testenv::ControlPlane, repo: &Path) -> Result<()> {
    let mut helm = tokio::process::Command::from(cp.helm());
    helm.args(["install", RELEASE])
        .arg(repo.join("charts/leadergroup-operator"))
        .args([
            "--namespace",
            RELEASE_NS,
            "--create-namespace",
            "--set",
            "replicas=1",
            "--set",
            &format!("nodeSelector.kubernetes\\.io/hostname={OTHER_NODE}"),
            "--wait",
            "--timeout",
            "180s",
        ]);
    let status = helm
        .status()
        .await
        .map_err(Error::io("running helm install"))?;
    if !status.success() {
        return Err(Error::Other(format!("helm install: {status}")));
    }
    Ok(())
}

/// The scenario.
pub struct E2e;

impl BenchScenario for E2e {
    fn about(&self) -> About {
        About::alone(
            "e2e",
            "The end-to-end scenarios on a real cluster of their own (as root)",
        )
    }

    fn measure<'a>(&'a self, ctx: &'a Context) -> Measuring<'a> {
        measuring(run_e2e(ctx))
    }

    fn render(&self, results: &Results) -> Result<Vec<Block>> {
        Ok(results
            .read_opt::<E2eResult>("e2e")?
            .map(|r| render(&r))
            .unwrap_or_default())
    }
}

async fn run_e2e(ctx: &Context) -> Result<E2eResult> {
    let started = Instant::now();
    let plan = Plan {
        reps: ctx.pick(5, 1),
        node_losses: ctx.pick(3, 1),
        grace: ctx.options.grace.unwrap_or(ctx.pick(50, 10)),
    };
    let repo = &ctx.repo;
    let images = Images::read(repo)?;
    tracing::info!(
        "e2e: the real cluster (node-monitor-grace-period {} s)",
        plan.grace
    );
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(Error::io("installing a SIGTERM handler"))?;
    // The cluster guard lives in this block: stopped on return, on error, and when a
    // signal ends the run (the measuring future is dropped first).
    let dir = repo.join("target/bench-e2e-cluster");
    let cluster = RealCluster::up(repo, dir, plan.grace).await?;
    let mut result = tokio::select! {
        r = measure(&plan, repo, &cluster, &images, ctx.options.quick) => r,
        _ = tokio::signal::ctrl_c() => Err(Error::Other("interrupted (SIGINT)".into())),
        _ = sigterm.recv() => Err(Error::Other("interrupted (SIGTERM)".into())),
    }?;
    drop(cluster);
    result.run.duration_s = started.elapsed().as_secs_f64();
    Ok(result)
}

impl Outcome for E2eResult {
    /// Its run is the real cluster's, which it described itself, not the light one's.
    fn write(&mut self, _light: &Run, results: &Results) -> Result<()> {
        results.write("e2e", self)
    }
}

async fn measure(
    plan: &Plan,
    repo: &Path,
    cluster: &RealCluster,
    images: &Images,
    quick: bool,
) -> Result<E2eResult> {
    let t = Instant::now();
    let mut import = tokio::process::Command::new(repo.join("images/build.sh"));
    import.arg("--import").arg(&cluster.dir).args([
        "--no-build",
        "webapp",
        "operator",
        "agent",
        "client-go",
        "rust-peer",
    ]);
    let status = import
        .status()
        .await
        .map_err(Error::io("running images/build.sh --import"))?;
    if !status.success() {
        return Err(Error::Other(format!("images/build.sh --import: {status}")));
    }
    tracing::info!("e2e: images imported in {:.0} s", t.elapsed().as_secs_f64());
    let cp = leadergroup_testenv::attach(cluster.dir.join("kubeconfig")).await?;
    let client = cp.client().await?;
    install_operator(&cp, repo).await?;
    tracing::info!("e2e: operator installed (one replica, on lg-node-2)");
    let mut run = Run::describe(&client, repo, &cp, quick).await?;
    run.command = format!(
        "make bench-e2e (leadergroup-bench --only e2e{})",
        if quick { " --quick" } else { "" }
    );
    run.control_plane = format!(
        "the real cluster: controlplane/realcluster.sh up --node-monitor-grace-period {} in {} (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, two kubelets with containerd 1.6 and runc, kube-proxy; all on this machine)",
        plan.grace,
        cluster.dir.display()
    );

    // Graceful, crash and frozen: ours alone first (its figures are the small ones), then the
    // four peers side by side.
    let world = World::create(cluster, images, &client, "e2e-bench", false).await?;
    let mut all = vec![System::Ours];
    all.extend(PEERS);
    for &s in &all {
        world.add_pod(s, CUT_NODE).await?;
        for _ in 1..CANDIDATES {
            world.add_pod(s, OTHER_NODE).await?;
        }
    }
    for &s in &all {
        world.wait_at_rest(s, CANDIDATES).await?;
    }
    tracing::info!(
        "e2e: every system at rest; graceful, crash, frozen x {} (ours alone, then the peers side by side)",
        plan.reps
    );
    let mut per_system: Vec<(System, Vec<Collected>)> = Vec::new();
    per_system.push((
        System::Ours,
        handovers(&world, System::Ours, plan.reps).await,
    ));
    let peers = futures::future::join_all(PEERS.iter().map(|&s| {
        let world = &world;
        async move { (s, handovers(world, s, plan.reps).await) }
    }))
    .await;
    per_system.extend(peers);
    delete_namespace(&client, &world.ns).await;
    drop(world);

    let mut scenarios: Vec<ScenarioResult> = Vec::new();
    for (i, scenario) in [Scenario::Graceful, Scenario::Crash, Scenario::Frozen]
        .into_iter()
        .enumerate()
    {
        let systems = per_system
            .iter()
            .map(|(s, collected)| {
                let c = collected.get(i);
                let samples = c.map(|c| c.samples.clone()).unwrap_or_default();
                SystemResult {
                    system: s.name().into(),
                    settings: s.settings(),
                    summary: summarize(&samples),
                    samples_ms: samples,
                    split_brains: c.map_or(0, |c| c.split_brains),
                    failures: c.map(|c| c.failures.clone()).unwrap_or_default(),
                }
            })
            .collect();
        scenarios.push(scenario_result(scenario, systems));
    }

    // Node loss: every system in each cut.
    let mut losses = vec![System::Ours, System::OursHeartbeat];
    losses.extend(PEERS);
    let mut collected: BTreeMap<&'static str, Collected> = BTreeMap::new();
    for i in 0..plan.node_losses {
        tracing::info!("e2e: node loss {} of {}", i + 1, plan.node_losses);
        let out = node_loss(cluster, images, &client, &losses, plan.grace).await?;
        for (label, (ms, brains)) in out {
            let c = collected.entry(label).or_default();
            c.split_brains += brains;
            match ms {
                Ok(ms) => c.samples.push(ms),
                Err(e) => c.failures.push(e.to_string()),
            }
        }
    }
    let systems = losses
        .iter()
        .map(|s| {
            let c = collected.remove(s.label()).unwrap_or_default();
            SystemResult {
                system: s.name().into(),
                settings: s.settings(),
                summary: summarize(&c.samples),
                samples_ms: c.samples,
                split_brains: c.split_brains,
                failures: c.failures,
            }
        })
        .collect();
    scenarios.push(scenario_result(Scenario::NodeLoss, systems));

    Ok(E2eResult {
        run,
        node_monitor_grace_period_s: plan.grace,
        setup: format!(
            "Two nodes on this machine (lg-node-1, lg-node-2). Per system {CANDIDATES} candidates in pods, one on lg-node-1 and two on lg-node-2 (bare pods bound to their node; the harness creates a replacement after a deletion, as a ReplicaSet would). The operator: the chart with one replica on lg-node-2. Ours: the web app with the leadergroup-agent native sidecar; the peers: the bench's candidate processes, each its own pod. Graceful, crash and frozen: {} repetitions per system, ours alone first, then the four peers side by side; node loss: {} cuts of lg-node-1 with every system measured in each.",
            plan.reps, plan.node_losses
        ),
        scenarios,
    })
}

fn scenario_result(scenario: Scenario, systems: Vec<SystemResult>) -> ScenarioResult {
    ScenarioResult {
        scenario: scenario.key().into(),
        title: scenario.title().into(),
        clock_start: scenario.start().into(),
        clock_stop: scenario.stop().into(),
        systems,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_manifests_parse_with_their_values() {
        let values = [("NAME", "cgd-1"), ("SYSTEM", "cgd"), ("NODE", "lg-node-1")];
        let images = [("AGENT_IMAGE", "agent:1"), ("WEBAPP_IMAGE", "web:1")];
        let ours: Pod = manifest(OURS_POD, &[&values[..], &images].concat()).unwrap();
        let peer = [("IMAGE", "peer:1"), ("BINARY", "/bin/peer")];
        let peer: Pod = manifest(PEER_POD, &[&values[..], &peer].concat()).unwrap();
        for pod in [&ours, &peer] {
            let text = serde_json::to_string(pod).unwrap();
            assert!(!text.contains("__"), "{text}");
            assert_eq!(
                pod.labels().get(SYSTEM_LABEL).map(String::as_str),
                Some("cgd")
            );
        }
        let command = peer.spec.unwrap().containers[0].command.clone().unwrap();
        assert_eq!(command.last().map(String::as_str), Some("/bin/peer"));
        let kinds: Vec<String> = serde_yaml_ng::Deserializer::from_str(RBAC)
            .map(|d| DynamicObject::deserialize(d).unwrap().types.unwrap().kind)
            .collect();
        assert_eq!(kinds.len(), 6);
    }
}
