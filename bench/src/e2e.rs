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
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use leadergroup_testenv::crd::{leader_group, leader_groups};
use leadergroup_testenv::histories::{Span, believers, first_start, system_time, unix_ms};
use leadergroup_testenv::pods::{container_id, container_running, eligible, node_of, terminating};
use leadergroup_testenv::{
    Frozen, OPERATOR_LEASE, OPERATOR_POD_SELECTOR, RealCluster, kill_container, node_ready,
    settled, wait_until, wait_until_every,
};
use serde::Deserialize;
use serde_json::json;

use crate::candidates::{Candidates, Fault, Handovers, Leader, repeat};
use crate::error::{Error, Result};
use crate::observe::ms_between;
use crate::peers::{Candidate, PEERS, System};
use crate::results::{Record, Results, Run};
use crate::scenario::{Context, Outcome, Scenario as BenchScenario, measuring};
use crate::timeline::{SYSTEM_LABEL, Tracker, one_group, pod_of};

/// The node that is lost, where every leader sits before the cut, and the other one.
const CUT_NODE: &str = "lg-node-1";
const OTHER_NODE: &str = "lg-node-2";

/// Candidates per system.
const CANDIDATES: usize = 3;

/// How long a system may take to be at rest again after a handover.
const AT_REST: Duration = Duration::from_secs(180);

/// How long a container's freezer may take to stop all its processes.
const FREEZE: Duration = Duration::from_secs(5);

/// One end-to-end run: its repetitions, the cluster, the images and the admin client.
struct Bench<'a> {
    /// Graceful, crash and frozen, per system: the fast ones 20 times, enough for a p90.
    reps: [usize; 3],
    /// Node losses (every system measured in each).
    node_losses: usize,
    /// `--node-monitor-grace-period` of the cluster, seconds.
    grace: u32,
    cluster: &'a RealCluster,
    /// The repository (its chart).
    repo: &'a Path,
    /// The image references `images/build.sh` wrote, by image name.
    images: BTreeMap<&'static str, String>,
    client: Client,
}

/// Ours, Readiness liveness (the default), then Heartbeat liveness (node loss only). The web
/// app's readiness probe is what the frozen scenario waits on.
const OURS: [System; 2] = [
    System {
        name: "leadergroup-operator (Readiness)",
        settings: "LeaderGroup leaseDurationSeconds 15, liveness Readiness; agent sidecar; web app readiness probe HTTP GET every 1 s, timeout 1 s, failureThreshold 1",
        label: "ours",
        candidate: Candidate::Agent("Readiness"),
        args: "",
        lease_seconds: 15,
    },
    System {
        name: "leadergroup-operator (Heartbeat)",
        settings: "LeaderGroup leaseDurationSeconds 5, liveness Heartbeat (the leader's agent renews every third); agent sidecar",
        label: "ours-hb",
        candidate: Candidate::Agent("Heartbeat"),
        args: "",
        lease_seconds: 5,
    },
];

/// How long a handover of `system` may take before the repetition counts as failed.
fn bound(system: &System) -> Duration {
    match system.candidate {
        Candidate::Agent(_) => Duration::from_secs(60),
        _ => Duration::from_secs(15 * 3 + 30),
    }
}

/// An end-to-end scenario: its key, its title, where its clock starts, and its fault (none: the
/// node loss, which strikes every system in one cut).
struct Scenario {
    key: &'static str,
    title: &'static str,
    clock_start: &'static str,
    fault: Option<Fault>,
}

/// The scenarios: graceful, crash and frozen run system by system, the node loss last.
const SCENARIOS: [Scenario; 4] = [
    Scenario {
        key: "graceful",
        title: "Graceful: the leader pod deleted, as a rolling update does",
        clock_start: "just before the harness sends DELETE for the leader pod (default grace period: the kubelet sends SIGTERM; ours hands over on the deletionTimestamp, the peers release their Lease on SIGTERM). A replacement pod is created on the same node afterwards, as the ReplicaSet would",
        fault: Some(Fault::Graceful),
    },
    Scenario {
        key: "crash",
        title: "Container crash: the leader's process killed",
        clock_start: "just before SIGKILL to the leader's application container through its node's containerd (`ctr task kill`); the kubelet restarts it. Ours: the web app container (the pod turns NotReady once the kubelet sees it dead); peers: the candidate process. Once the new leader acted, the faulted pod is replaced by a fresh one (no restart back-off builds up over the repetitions)",
        fault: Some(Fault::Crash),
    },
    Scenario {
        key: "frozen",
        title: "Frozen process: the leader's container stopped (SIGSTOP)",
        clock_start: "just before the leader's application container is frozen (cgroup freezer: every process stopped, as SIGSTOP does); thawed 1 s after the new leader acted, then replaced by a fresh pod. Ours: the web app container, whose readiness probe then fails (the agent sidecar runs on); peers: the candidate process, which stops renewing",
        fault: Some(Fault::Frozen),
    },
    Scenario {
        key: "node-loss",
        title: "Node lost: the leader's node cut off",
        clock_start: "the wall clock `realcluster.sh cut-node 1` prints just before node 1's pods lose every packet (its kubelet and containerd were stopped a moment before; the containers run on). Every system's leader is on node 1 and its two other candidates on node 2; all systems are cut in the same cut",
        fault: None,
    },
];

/// The operator's own failure, after the others, with the chart's defaults (two replicas, one per
/// node, the operator Lease as long as the shortest group Lease: 5 s here).
const OPERATOR_SCENARIOS: [Scenario; 3] = [
    Scenario {
        key: "node-loss-operator",
        title: "Node lost with the active operator replica on it",
        clock_start: "as for the node lost, with the chart's defaults (two operator replicas, one per node) and the active replica moved to node 1 before each cut (its pod deleted until the replica on node 1 is active): the node takes the leaders and the active replica together. The peers have no operator: their figures are another sample of the node lost",
        fault: None,
    },
    Scenario {
        key: "operator-kill",
        title: "The active operator replica killed (SIGKILL) while the leaders fail",
        clock_start: "just before SIGKILL to the active operator replica's container (`ctr task kill`; the kubelet restarts it, and the process comes back under the pod's name) and, at once, the freeze of each of ours' leaders' web app containers (as in the frozen process; a killed one would be restarted before any operator acts). Both of ours' groups in one namespace (Readiness 15 s, Heartbeat 5 s: the operator Lease lasts 5 s); the active replica on node 1, the standby on node 2",
        fault: None,
    },
    Scenario {
        key: "operator-stop",
        title: "The active operator replica frozen (SIGSTOP) while the leaders fail",
        clock_start: "just before the active operator replica's container is frozen (cgroup freezer, as SIGSTOP) and, at once, each of ours' leaders' web app containers (as in the frozen process); all thawed 1 s after every new leader acted. Both of ours' groups in one namespace (Readiness 15 s, Heartbeat 5 s: the operator Lease lasts 5 s); the active replica on node 1, the standby on node 2",
        fault: None,
    },
];

impl Scenario {
    /// Adds the samples of `system` in it to `record`: its handovers and what its applications'
    /// histories gave.
    fn add(&self, record: &mut Record, system: &System, handovers: Handovers) {
        let (name, key) = (system.name, self.key);
        record.add(name, key, "settings", system.settings);
        record.add(name, key, "ms", handovers.ms);
        record.add(name, key, "app_overlap_ms", handovers.app_overlap_ms);
        record.add(name, key, "app_none_ms", handovers.app_none_ms);
        record.add(name, key, "split_brains", handovers.split_brains);
        record.add(name, key, "overlaps", handovers.overlaps);
        record.add(name, key, "failures", handovers.failures);
    }
}

/// Where every scenario's clock stops.
const CLOCK_STOP: &str = "the new leader's application learns that it leads: ours, the mtime of the new leader pod's agent `role` file when it first reads `leader`; a peer, the timestamp its candidate writes when OnStartedLeading (or the library's equivalent) fires. A peer's new leader may be the crashed pod's own restarted container: a new process with a new identity";

/// The images the run imports into the nodes (`images/build.sh`); the candidates' pods name all
/// but the operator's.
const IMAGES: [&str; 5] = ["webapp", "operator", "agent", "client-go", "rust-peer"];

/// The references `images/build.sh` wrote (`target/images/<name>.ref`) of the candidates' images.
fn read_images(repo: &Path) -> Result<BTreeMap<&'static str, String>> {
    let read = |name: &'static str| {
        let path = repo.join(format!("target/images/{name}.ref"));
        let what = format!(
            "reading {} (build it: images/build.sh {name})",
            path.display()
        );
        let text = std::fs::read_to_string(&path).map_err(Error::io(what))?;
        Ok((name, text.trim().to_owned()))
    };
    IMAGES
        .into_iter()
        .filter(|n| *n != "operator")
        .map(read)
        .collect()
}

/// One namespace of candidates and what watches them.
struct World<'a> {
    bench: &'a Bench<'a>,
    client: Client,
    ns: String,
    pods: Api<Pod>,
    tracker: Tracker,
    next_pod: AtomicUsize,
}

impl<'a> World<'a> {
    /// A namespace with the RBAC of our members and of the peers, and our groups: Readiness,
    /// and Heartbeat when `heartbeat`.
    async fn create(bench: &'a Bench<'a>, prefix: &str, heartbeat: bool) -> Result<World<'a>> {
        let ns = leadergroup_testenv::namespace_in(bench.client.clone(), prefix).await?;
        create_rbac(&ns.client, &ns.name).await?;
        for system in &OURS[..1 + usize::from(heartbeat)] {
            let label = system.label;
            let mut group = leader_group(label, SYSTEM_LABEL, label, system.lease_seconds)?;
            if let Candidate::Agent(liveness) = system.candidate {
                group.data["spec"]["liveness"] = json!(liveness);
            }
            leader_groups(&ns.client, &ns.name)
                .create(&PostParams::default(), &group)
                .await?;
        }
        let pods: Api<Pod> = ns.api();
        let cluster = bench.cluster.dir().to_owned();
        let tracker = Tracker::start(pods.clone(), cluster, System::is_ours);
        Ok(World {
            bench,
            client: ns.client,
            ns: ns.name,
            pods,
            tracker,
            next_pod: AtomicUsize::new(1),
        })
    }

    /// Creates `count` candidates of `system` on `node`.
    async fn add_pods(&self, system: &System, node: &str, count: usize) -> Result<()> {
        for _ in 0..count {
            let n = self.next_pod.fetch_add(1, Ordering::Relaxed);
            let pod = self.pod(system, &format!("{}-{n}", system.label), node)?;
            self.pods.create(&PostParams::default(), &pod).await?;
        }
        Ok(())
    }

    /// The pod of a candidate of `system`, from bench/manifests.
    fn pod(&self, system: &System, name: &str, node: &str) -> Result<Pod> {
        let common = [("NAME", name), ("SYSTEM", system.label), ("NODE", node)];
        let (image, binary) = match system.candidate {
            Candidate::Agent(_) => {
                let images = [
                    ("AGENT_IMAGE", self.bench.image("agent")),
                    ("WEBAPP_IMAGE", self.bench.image("webapp")),
                ];
                return manifest(OURS_POD, &[&common[..], &images].concat());
            }
            Candidate::Go => ("client-go", "leadergroup-bench-client-go"),
            Candidate::Rust => ("rust-peer", "leadergroup-bench-rust-peer"),
        };
        let binary = format!("/usr/local/bin/{binary}");
        let values = [("IMAGE", self.bench.image(image)), ("BINARY", &binary)];
        let mut pod: Pod = manifest(PEER_POD, &[&common[..], &values].concat())?;
        if let Some(command) = pod
            .spec
            .as_mut()
            .and_then(|s| s.containers.first_mut())
            .and_then(|c| c.command.as_mut())
        {
            command.extend(system.arguments("$(POD_NAMESPACE)", system.label));
        }
        Ok(pod)
    }

    /// The leader, when the system is at rest: `pods` candidates eligible (Running, Ready, not
    /// terminating), exactly one believer, and the API agreeing (ours: the group settled on its
    /// pod, I2; a peer: its Lease's holder is that identity).
    async fn at_rest(&self, system: &System, pods: usize) -> Result<Option<Leader>> {
        let params = ListParams::default().labels(&format!("{SYSTEM_LABEL}={}", system.label));
        let listed = self.pods.list(&params).await?.items;
        let live: Vec<&Pod> = listed.iter().filter(|p| !terminating(p)).collect();
        if live.len() != pods || !live.iter().all(|p| eligible(p)) {
            return Ok(None);
        }
        let members = self.tracker.members(system.label);
        let believers = believers(&members, unix_ms(SystemTime::now()));
        let [sole] = believers.as_slice() else {
            return Ok(None);
        };
        let (sole, pod) = (sole.to_string(), pod_of(sole).to_owned());
        if !live.iter().any(|p| p.name_any() == pod) {
            return Ok(None);
        }
        let agrees = match system.candidate {
            Candidate::Agent(_) => settled(&self.client, &self.ns, system.label)
                .await?
                .is_ok_and(|s| s.leader == pod),
            _ => Api::<Lease>::namespaced(self.client.clone(), &self.ns)
                .get_opt(&format!("{}-0", system.label))
                .await?
                .and_then(|l| l.spec?.holder_identity)
                .is_some_and(|h| h == sole),
        };
        Ok(agrees.then_some(Leader {
            identity: sole,
            pod,
        }))
    }

    async fn wait_at_rest(&self, system: &System, pods: usize) -> Result<Leader> {
        let what = format!(
            "{} at rest with {pods} Ready candidates and one leader",
            system.name
        );
        let every = Duration::from_millis(200);
        wait_until_every(&what, AT_REST, every, || self.at_rest(system, pods))
            .await
            .map_err(|e| {
                let members = self.tracker.members(system.label);
                Error::Other(format!("{e} (members: {members:?})"))
            })
    }

    /// Waits for the first candidate other than `old` to start leading at or after `t0`.
    async fn wait_new_leader(
        &self,
        system: &System,
        old: &str,
        t0: SystemTime,
        bound: Duration,
    ) -> Result<SystemTime> {
        let what = format!("{}: a leader other than {old}", system.name);
        let every = Duration::from_millis(20);
        Ok(wait_until_every(&what, bound, every, || async {
            let members = self.tracker.members(system.label);
            let new = first_start(&members, old, unix_ms(t0));
            Ok::<_, Error>(new.map(|(_, at)| system_time(at)))
        })
        .await?)
    }

    /// Waits (up to its Lease and 10 s) until `identity`, thawed, no longer believes it leads:
    /// a peer says so once its library noticed; ours' files said so while it was frozen. What
    /// it believed meanwhile is in its history.
    async fn wait_believes_not(&self, system: &System, identity: &str) {
        let bound = Duration::from_secs(u64::from(system.lease_seconds) + 10);
        let what = format!(
            "{}: {identity} thawed no longer believing it leads",
            system.name
        );
        let every = Duration::from_millis(20);
        let stopped = wait_until_every(&what, bound, every, || async {
            let members = self.tracker.members(system.label);
            let now = unix_ms(SystemTime::now());
            let believes = members
                .iter()
                .any(|m| m.name == identity && m.believes_at(now));
            Ok::<_, Error>((!believes).then_some(()))
        });
        if let Err(e) = stopped.await {
            tracing::info!("e2e: {e}");
        }
    }

    /// Adds to `result` what the histories of `system` gave in each repetition: from each
    /// strike in `strikes` to the next, the last until `end`.
    fn judge(
        &self,
        system: &System,
        strikes: &[SystemTime],
        end: SystemTime,
        result: &mut Handovers,
    ) {
        let histories = one_group(system.label, self.tracker.members(system.label));
        let ends = strikes.iter().skip(1).copied().chain([end]);
        for (t0, to) in strikes.iter().zip(ends) {
            let window = Span {
                from_ms: unix_ms(*t0),
                to_ms: Some(unix_ms(to)),
            };
            result.judged(*t0, &histories.check(window));
        }
    }
}

/// One system's candidates in a [`World`], as a handover drives them. The fault strikes the
/// leader pod's app container, its only one (ours: the web app, the agent being a native
/// sidecar; a peer: its candidate); the clock stops when the new leader's application acts.
/// The struck application counts as any other, except while its process verifiably does not
/// run: from its kill (until ours' container runs again; a peer's next process is another
/// identity) or its confirmed freeze until its thaw.
struct InWorld<'a> {
    world: &'a World<'a>,
    system: &'a System,
    /// The struck pod's node, and its container while frozen.
    node: String,
    frozen: Option<Frozen>,
    /// The container killed, and when the kill was done.
    killed: Option<(String, SystemTime)>,
    /// When each repetition struck.
    strikes: Vec<SystemTime>,
}

impl Candidates for InWorld<'_> {
    async fn leader(&mut self) -> Result<Leader> {
        self.world.wait_at_rest(self.system, CANDIDATES).await
    }

    async fn strike(&mut self, old: &Leader, fault: Fault) -> Result<SystemTime> {
        let world = self.world;
        let pod = world.pods.get(&old.pod).await?;
        let (Some(node), Some(id)) = (node_of(&pod), container_id(&pod)) else {
            return Err(Error::Other(format!("{}: no started container", old.pod)));
        };
        self.node = node.to_owned();
        self.frozen = match fault {
            Fault::Frozen => Some(Frozen::locate(node, &id)?),
            _ => None,
        };
        let t0 = SystemTime::now();
        self.strikes.push(t0);
        let not_running = &world.tracker.not_running;
        match (fault, &self.frozen) {
            // Its process runs on through its grace period: it counts until its pod is gone.
            (Fault::Graceful, _) => drop(world.pods.delete(&old.pod, &Default::default()).await?),
            (Fault::Crash, _) => {
                kill_container(&world.bench.cluster.containerd_socket(node)?, &id).await?;
                let killed = SystemTime::now();
                not_running.stopped(&old.identity, killed);
                self.killed = Some((id, killed));
            }
            (_, Some(frozen)) => {
                frozen.freeze()?;
                not_running.stopped(&old.identity, frozen.confirmed(FREEZE).await?);
            }
            (_, None) => {}
        }
        Ok(t0)
    }

    async fn new_leader(&mut self, old: &Leader, t0: SystemTime) -> Result<SystemTime> {
        let bound = bound(self.system);
        self.world
            .wait_new_leader(self.system, &old.identity, t0, bound)
            .await
    }

    async fn recover(&mut self, old: Leader, fault: Fault, handed_over: bool) -> Result<()> {
        let world = self.world;
        if let Some(frozen) = self.frozen.take() {
            if handed_over {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            world
                .tracker
                .not_running
                .running(&old.identity, SystemTime::now());
            frozen.thaw()?;
            // Thawed, it runs: what it believes before its pod is replaced is a finding.
            world.wait_believes_not(self.system, &old.identity).await;
        }
        if let (Some((id, killed)), Candidate::Agent(_)) =
            (self.killed.take(), &self.system.candidate)
        {
            // Ours' member is the pod, whose web app the kubelet restarts: it counts again from
            // the restarted container's start (or from now, not knowing it).
            let pod = world.pods.get_opt(&old.pod).await?;
            let restarted = pod
                .as_ref()
                .filter(|p| container_running(p) && container_id(p).is_some_and(|c| c != id))
                .and_then(started_at);
            let at = restarted.map_or_else(SystemTime::now, |at| at.max(killed));
            world.tracker.not_running.running(&old.identity, at);
        }
        if fault != Fault::Graceful {
            // The faulted pod is replaced by a fresh one once the handover is measured: the
            // kubelet restarts a killed or exited container with a back-off that doubles at each
            // restart, which over the repetitions would only lengthen the waits between them.
            world
                .pods
                .delete(&old.pod, &DeleteParams::default())
                .await?;
        }
        world.add_pods(self.system, &self.node, 1).await
    }
}

/// When the pod's first container, running, started (the API's second: at or before it).
fn started_at(pod: &Pod) -> Option<SystemTime> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let started = status
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()?;
    Some(SystemTime::from(started.0))
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

impl World<'_> {
    /// ours' leaders freeze (their web app containers, as in the frozen process) as the active
    /// operator replica is killed, or frozen when `freeze`; everything thawed 1 s after every new
    /// leader acted. Adds each system's milliseconds to its entry of `results`.
    async fn operator_fault(&self, freeze: bool, results: &mut [Handovers]) -> Result<()> {
        let mut leaders = Vec::new();
        for s in &OURS {
            let leader = self.wait_at_rest(s, CANDIDATES).await?;
            let pod = self.pods.get(&leader.pod).await?;
            let (Some(node), Some(id)) = (node_of(&pod).map(str::to_owned), container_id(&pod))
            else {
                return Err(Error::Other(format!(
                    "{}: no started container",
                    leader.pod
                )));
            };
            leaders.push((leader, node, id));
        }
        let operator = self.bench.active_replica().await?;
        let (Some(op_node), Some(op_id)) = (
            node_of(&operator).map(str::to_owned),
            container_id(&operator),
        ) else {
            return Err(Error::Other(format!(
                "{}: no started container",
                operator.name_any()
            )));
        };
        let frozen = if freeze {
            Some(Frozen::locate(&op_node, &op_id)?)
        } else {
            None
        };
        let cluster = self.bench.cluster;
        let t0 = SystemTime::now();
        match &frozen {
            Some(f) => f.freeze()?,
            None => kill_container(&cluster.containerd_socket(&op_node)?, &op_id).await?,
        }
        // The leaders frozen, not killed: the kubelet restarts a killed container within a
        // second, often before any operator acts, and the old leader leads on.
        let mut leaders_frozen = Vec::new();
        for (leader, node, id) in &leaders {
            let frozen = Frozen::freeze_now(node, id)?;
            let at = frozen.confirmed(FREEZE).await?;
            self.tracker.not_running.stopped(&leader.identity, at);
            leaders_frozen.push(frozen);
        }
        let waits = OURS
            .iter()
            .zip(&leaders)
            .map(|(s, (leader, _, _))| self.wait_new_leader(s, &leader.identity, t0, bound(s)));
        let moved = futures::future::join_all(waits).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The kubelet may have restarted the frozen replica (its liveness probe): no cgroup left.
        if let Some(Err(e)) = frozen.map(|f| f.thaw()) {
            tracing::info!("e2e: the frozen operator replica: {e}");
        }
        let thawing = SystemTime::now();
        for (leader, _, _) in &leaders {
            self.tracker.not_running.running(&leader.identity, thawing);
        }
        for f in leaders_frozen {
            f.thaw()?;
        }
        for (s, (leader, _, _)) in OURS.iter().zip(&leaders) {
            self.wait_believes_not(s, &leader.identity).await;
        }
        for ((s, (leader, node, _)), (at, result)) in OURS
            .iter()
            .zip(&leaders)
            .zip(moved.into_iter().zip(results.iter_mut()))
        {
            result.add(
                &format!(
                    "e2e: operator {}: {}",
                    if freeze { "frozen" } else { "killed" },
                    s.name
                ),
                at.map(|at| ms_between(t0, at)),
            );
            self.pods
                .delete(&leader.pod, &DeleteParams::default())
                .await?;
            self.add_pods(s, node, 1).await?;
        }
        for s in &OURS {
            self.wait_at_rest(s, CANDIDATES).await?;
        }
        let end = SystemTime::now();
        for (s, result) in OURS.iter().zip(results.iter_mut()) {
            self.judge(s, &[t0], end, result);
        }
        Ok(())
    }

    /// Graceful, crash and frozen on one system, `reps` times (a failed repetition ends
    /// that scenario's); per scenario with a fault, and what its histories gave in each
    /// repetition.
    async fn handovers(&self, system: &System, reps: [usize; 3]) -> [Handovers; 3] {
        let mut out = [(); 3].map(|()| Handovers::default());
        let mut candidates = InWorld {
            world: self,
            system,
            node: String::new(),
            frozen: None,
            killed: None,
            strikes: Vec::new(),
        };
        let what = format!("e2e: {}", system.name);
        for ((scenario, result), reps) in SCENARIOS.iter().zip(&mut out).zip(reps) {
            let first = candidates.strikes.len();
            if let Some(fault) = scenario.fault {
                repeat(&mut candidates, fault, reps, &what, result).await;
            }
            // The last handover's other candidates have settled once the system is at rest again.
            let _ = self.wait_at_rest(system, CANDIDATES).await;
            let strikes = &candidates.strikes[first..];
            self.judge(system, strikes, SystemTime::now(), result);
        }
        out
    }

    /// Deletes the namespace, not waiting.
    async fn delete(self) {
        let namespaces = Api::<Namespace>::all(self.bench.client.clone());
        let _ = namespaces
            .delete(&self.ns, &DeleteParams::background())
            .await;
    }
}

pub const E2E: BenchScenario = BenchScenario {
    name: "e2e",
    help: "The end-to-end scenarios on a real cluster of their own (as root)",
    files: &["e2e"],
    in_full_run: false,
    measure: |ctx| measuring(run_e2e(ctx)),
    render: |records| crate::e2e_tables::blocks(&records[0]),
};

/// `e2e.json` as measured, with the record of its own run (the real cluster's), not the light
/// one's.
struct OwnRun(Record);

impl Outcome for OwnRun {
    fn write(&mut self, _light: &Run, results: &Results) -> Result<()> {
        results.write("e2e", &self.0)
    }
}

async fn run_e2e(ctx: &Context) -> Result<OwnRun> {
    // The run is the invocation's: it started before the cluster, the build already done.
    let (start, started) = (&ctx.start, ctx.started());
    let grace = ctx.options.grace.unwrap_or(ctx.pick(50, 10));
    let repo = &ctx.repo;
    let images = read_images(repo)?;
    tracing::info!("e2e: the real cluster (node-monitor-grace-period {grace} s)");
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(Error::io("installing a SIGTERM handler"))?;
    // The cluster guard lives in this block: stopped on return, on error, and when a
    // signal ends the run (the measuring future is dropped first).
    let cluster = RealCluster::up(repo.join("target/bench-e2e-cluster"), grace).await?;
    let measured = async {
        let cp = install(repo, &cluster).await?;
        let reps = [ctx.pick(20, 1), ctx.pick(20, 1), ctx.pick(10, 1)];
        let node_losses = ctx.pick(3, 1);
        let client = cp.client().await?;
        let bench = Bench {
            reps,
            node_losses,
            grace,
            cluster: &cluster,
            repo,
            images,
            client,
        };
        let mut run = Run::describe(&bench.client, start, &cp, ctx.options.quick).await?;
        bench.describe(&mut run, ctx.options.quick);
        let mut record = bench.measure().await?;
        record.run = run;
        Ok(record)
    };
    let mut result = tokio::select! {
        r = measured => r,
        _ = tokio::signal::ctrl_c() => Err(Error::Other("interrupted (SIGINT)".into())),
        _ = sigterm.recv() => Err(Error::Other("interrupted (SIGTERM)".into())),
    }?;
    drop(cluster);
    result.run.finish(started);
    Ok(OwnRun(result))
}

/// Imports the images into the cluster's nodes and installs the operator with its chart: one
/// replica on node 2, so that losing node 1 measures the groups' failover, not the operator's own.
async fn install(repo: &Path, cluster: &RealCluster) -> Result<leadergroup_testenv::ControlPlane> {
    let t = Instant::now();
    let mut import = std::process::Command::new(repo.join("images/build.sh"));
    import
        .arg("--import")
        .arg(cluster.dir())
        .arg("--no-build")
        .args(IMAGES);
    crate::run_command(import).await?;
    tracing::info!("e2e: images imported in {:.0} s", t.elapsed().as_secs_f64());
    let cp = leadergroup_testenv::attach(cluster.dir().join("kubeconfig")).await?;
    let mut helm = RealCluster::helm_install(&cp);
    helm.args(["--set", "replicas=1", "--set"])
        .arg(format!(
            "nodeSelector.kubernetes\\.io/hostname={OTHER_NODE}"
        ))
        .args(["--wait", "--timeout", "180s"]);
    crate::run_command(helm).await?;
    tracing::info!("e2e: operator installed (one replica, on {OTHER_NODE})");
    Ok(cp)
}

impl Bench<'_> {
    /// The reference of image `name` (one of [`IMAGES`]).
    fn image(&self, name: &str) -> &str {
        self.images.get(name).map_or("", String::as_str)
    }

    /// The run's command and control plane.
    fn describe(&self, run: &mut Run, quick: bool) {
        run.command = format!(
            "make bench-e2e (leadergroup-bench --only e2e{})",
            if quick { " --quick" } else { "" }
        );
        run.control_plane = format!(
            "the real cluster: controlplane/realcluster.sh up --node-monitor-grace-period {} in {} (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, two kubelets with containerd 1.6 and runc, kube-proxy; all on this machine)",
            self.grace,
            crate::results::in_repo(self.cluster.dir()).display()
        );
    }

    /// Graceful, crash and frozen, every system side by side (the same conditions for all);
    /// then the node losses.
    async fn measure(&self) -> Result<Record> {
        let mut record = Record::default();
        record.add("", "", "node_monitor_grace_period_s", self.grace);
        record.add("", "", "setup", format!(
            "Two nodes on this machine (lg-node-1, lg-node-2). Per system {CANDIDATES} candidates in pods, one on lg-node-1 and two on lg-node-2 (bare pods bound to their node; the harness creates a replacement after a deletion, as a ReplicaSet would). The operator: the chart with one replica on lg-node-2. Ours: the web app with the leadergroup-agent native sidecar; the peers: the bench's candidate processes, each its own pod. Graceful, crash and frozen: {} / {} / {} repetitions per system, every system side by side (ours and the four peers at once, the same conditions for all); node loss: {} cuts of lg-node-1 with every system measured in each.",
            self.reps[0], self.reps[1], self.reps[2], self.node_losses
        ));
        record.add("", "", "clock_stop", CLOCK_STOP);
        for scenario in SCENARIOS.iter().chain(&OPERATOR_SCENARIOS) {
            record.add("", scenario.key, "title", scenario.title);
            record.add("", scenario.key, "clock_start", scenario.clock_start);
        }
        let systems = OURS[..1].iter().chain(&PEERS);
        for (system, results) in systems.zip(self.handover_runs().await?) {
            for (scenario, result) in SCENARIOS.iter().zip(results) {
                scenario.add(&mut record, system, result);
            }
        }
        // The node losses, every system measured in each cut.
        let losses: Vec<&System> = OURS.iter().chain(&PEERS).collect();
        let mut results = vec![Handovers::default(); losses.len()];
        for i in 0..self.node_losses {
            tracing::info!("e2e: node loss {} of {}", i + 1, self.node_losses);
            self.node_loss(&losses, &mut results).await?;
        }
        for (system, result) in losses.iter().zip(results) {
            SCENARIOS[3].add(&mut record, system, result);
        }
        self.operator_runs(&losses, &mut record).await?;
        Ok(record)
    }

    /// The operator's own failure: the chart's defaults back (two replicas, one per node), then
    /// the node losses with the active replica on the cut node, then SIGKILL and SIGSTOP of the
    /// active replica while ours' leaders freeze.
    async fn operator_runs(&self, losses: &[&System], record: &mut Record) -> Result<()> {
        let cp = leadergroup_testenv::attach(self.cluster.dir().join("kubeconfig")).await?;
        let mut helm = cp.helm();
        helm.args(["upgrade", leadergroup_testenv::OPERATOR_RELEASE])
            .arg(self.repo.join("charts/leadergroup-operator"))
            .args(["--namespace", leadergroup_testenv::OPERATOR_NAMESPACE])
            .args(["--reset-values", "--wait", "--timeout", "180s"]);
        crate::run_command(helm).await?;
        tracing::info!("e2e: operator back to the chart's defaults (two replicas)");
        let mut results = vec![Handovers::default(); losses.len()];
        for i in 0..self.node_losses {
            tracing::info!(
                "e2e: node loss with the active operator replica {} of {}",
                i + 1,
                self.node_losses
            );
            self.active_on(CUT_NODE).await?;
            self.node_loss(losses, &mut results).await?;
        }
        for (system, result) in losses.iter().zip(results) {
            OPERATOR_SCENARIOS[0].add(record, system, result);
        }
        for (scenario, freeze) in OPERATOR_SCENARIOS[1..].iter().zip([false, true]) {
            let mut results = vec![Handovers::default(); OURS.len()];
            let world = World::create(self, "e2e-operator", true).await?;
            for s in &OURS {
                world.add_pods(s, CUT_NODE, 1).await?;
                world.add_pods(s, OTHER_NODE, CANDIDATES - 1).await?;
            }
            for i in 0..self.node_losses {
                tracing::info!("e2e: {} {} of {}", scenario.key, i + 1, self.node_losses);
                self.active_on(CUT_NODE).await?;
                world.operator_fault(freeze, &mut results).await?;
            }
            world.delete().await;
            for (system, result) in OURS.iter().zip(results) {
                scenario.add(record, system, result);
            }
        }
        Ok(())
    }

    /// The active operator replica's pod, once one is active, Ready and not terminating.
    async fn active_replica(&self) -> Result<Pod> {
        let pods: Api<Pod> =
            Api::namespaced(self.client.clone(), leadergroup_testenv::OPERATOR_NAMESPACE);
        let leases: Api<Lease> =
            Api::namespaced(self.client.clone(), leadergroup_testenv::OPERATOR_NAMESPACE);
        wait_until_every(
            "an active operator replica, both Ready",
            AT_REST,
            Duration::from_millis(200),
            || async {
                let holder = leases
                    .get_opt(OPERATOR_LEASE)
                    .await?
                    .and_then(|l| l.spec?.holder_identity)
                    .unwrap_or_default();
                let listed = pods
                    .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
                    .await?
                    .items;
                let both = listed.len() == 2 && listed.iter().all(eligible);
                Ok::<_, Error>(listed.into_iter().find(|p| both && p.name_any() == holder))
            },
        )
        .await
        .map_err(Error::from)
    }

    /// Makes the replica on `node` the active one, with the other replica on another node: the
    /// active replica elsewhere is deleted (it releases the operator Lease on SIGTERM), and a
    /// replica replaced is rescheduled with the node it must avoid cordoned.
    async fn active_on(&self, node: &str) -> Result<Pod> {
        let pods: Api<Pod> =
            Api::namespaced(self.client.clone(), leadergroup_testenv::OPERATOR_NAMESPACE);
        self.keep_operator_logs(&pods).await;
        for _ in 0..6 {
            let active = self.active_replica().await?;
            let listed = pods
                .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
                .await?
                .items;
            let other = listed.iter().find(|p| p.name_any() != active.name_any());
            let (active_node, other_node) = (node_of(&active), other.and_then(node_of));
            let (replace, avoid) = match (active_node == Some(node), other_node == Some(node)) {
                (true, false) => return Ok(active),
                // Both on `node`: the standby moves away.
                (true, true) => (other.map(ResourceExt::name_any), node),
                // The standby on `node`: the active one goes, and comes back elsewhere.
                (false, true) => (Some(active.name_any()), node),
                // Neither: the standby moves onto `node`.
                (false, false) => (
                    other.map(ResourceExt::name_any),
                    other_node.unwrap_or(OTHER_NODE),
                ),
            };
            let Some(replace) = replace else { continue };
            self.schedulable(avoid, false).await?;
            let replaced = async {
                pods.delete(&replace, &DeleteParams::default()).await?;
                wait_until("the replaced operator replica gone", AT_REST, || async {
                    Ok::<_, Error>(pods.get_opt(&replace).await?.is_none().then_some(()))
                })
                .await?;
                // Its replacement scheduled (and Ready) before the node is uncordoned.
                self.active_replica().await
            }
            .await;
            self.schedulable(avoid, true).await?;
            replaced?;
        }
        Err(Error::Other(format!(
            "no operator replica on {node} became active with a standby elsewhere"
        )))
    }

    /// Writes each operator replica's log to `target/bench-logs/e2e-operator/<pod>.log` before a
    /// replica may be replaced: what an outlier of the operator's scenarios needs explaining.
    async fn keep_operator_logs(&self, pods: &Api<Pod>) {
        let dir = self.repo.join("target/bench-logs/e2e-operator");
        let Ok(listed) = pods
            .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
            .await
        else {
            return;
        };
        let _ = std::fs::create_dir_all(&dir);
        for pod in listed.items {
            let name = pod.name_any();
            if let Ok(log) = pods.logs(&name, &Default::default()).await {
                let _ = std::fs::write(dir.join(format!("{name}.log")), log);
            }
        }
    }

    /// Uncordons `node`, or cordons it.
    async fn schedulable(&self, node: &str, schedulable: bool) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"unschedulable": !schedulable}});
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Graceful, crash and frozen on every system but Heartbeat, in a namespace of their own
    /// (deleted, its tracker stopped, before the node losses).
    async fn handover_runs(&self) -> Result<Vec<[Handovers; 3]>> {
        let world = World::create(self, "e2e-bench", false).await?;
        let all: Vec<&System> = OURS[..1].iter().chain(&PEERS).collect();
        for s in &all {
            world.add_pods(s, CUT_NODE, 1).await?;
            world.add_pods(s, OTHER_NODE, CANDIDATES - 1).await?;
        }
        for s in &all {
            world.wait_at_rest(s, CANDIDATES).await?;
        }
        tracing::info!(
            "e2e: every system at rest; graceful, crash, frozen x {:?}, every system side by side",
            self.reps
        );
        let per_system =
            futures::future::join_all(all.iter().map(|s| world.handovers(s, self.reps))).await;
        world.delete().await;
        Ok(per_system)
    }

    /// One node loss: a fresh namespace, every system's first candidate on node 1 (so it leads),
    /// two more on node 2, node 1 cut, every system's new leader awaited, node 1 back. Adds each
    /// system's milliseconds (or why not) and split brains to its entry of `results`.
    async fn node_loss(&self, systems: &[&System], results: &mut [Handovers]) -> Result<()> {
        let world = World::create(self, "e2e-node-loss", true).await?;
        for s in systems {
            world.add_pods(s, CUT_NODE, 1).await?;
        }
        for s in systems {
            world.wait_at_rest(s, 1).await?;
        }
        for s in systems {
            world.add_pods(s, OTHER_NODE, CANDIDATES - 1).await?;
        }
        let mut old = Vec::new();
        for s in systems {
            old.push(world.wait_at_rest(s, CANDIDATES).await?.identity);
        }
        // The Heartbeat leader's agent renews every third of 5 s: let it do so a few times.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let from = SystemTime::now();
        let (uncut, t0) = self.cluster.cut_node(CUT_NODE).await?;
        tracing::info!("e2e: node loss: {CUT_NODE} cut");
        let bound = Duration::from_secs(u64::from(self.grace) + 90);
        let moved = systems.iter().zip(&old).map(|(s, old)| {
            let world = &world;
            async move { world.wait_new_leader(s, old, t0, bound).await }
        });
        let moved = futures::future::join_all(moved).await;
        // The node back, whatever happened: its cut-off candidates then say what they believed.
        drop(uncut);
        let back = wait_until(
            "lg-node-1 Ready again",
            Duration::from_secs(120),
            || async {
                Ok::<_, leadergroup_testenv::Error>(
                    (node_ready(&self.client, CUT_NODE).await? == "True").then_some(()),
                )
            },
        );
        if let Err(e) = back.await {
            tracing::warn!("e2e: node loss: {e}");
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let end = SystemTime::now();
        for ((s, at), result) in systems.iter().zip(moved).zip(results) {
            world.judge(s, &[from], end, result);
            result.add(
                &format!("e2e: node loss: {}", s.name),
                at.map(|at| ms_between(t0, at)),
            );
        }
        world.delete().await;
        Ok(())
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
