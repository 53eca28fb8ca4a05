//! The operator under test: its release binary as a child process, groups of simulated pods, and
//! the scenarios measured on it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use leadergroup_operator::crd::{LeaderGroup, LeaderGroupSpec, PodSelector};
use leadergroup_testenv::Kubelet;
use tokio::process::{Child, Command};

use crate::error::{Error, Result};
use crate::observe::{LeaderWatch, ProcSample, ms_between, proc_sample};

/// How long anything "at once" may take before the run is declared broken.
pub const BOUND: Duration = Duration::from_secs(120);
/// How long every group of a scale step may take to be led.
pub const ALL_LED_BOUND: Duration = Duration::from_secs(240);
/// Requests in flight while a scenario's objects are created.
const CREATE_CONCURRENCY: usize = 24;
/// The Lease duration of every benchmarked group (the CRD's default).
pub const LEASE_SECONDS: i32 = 15;
/// How long after the deletion request the simulated kubelet removes the pod (its container
/// exits on SIGTERM at once; the grace period is an upper bound, not a wait).
const KUBELET_FINISH_AFTER: Duration = Duration::from_millis(300);

/// Installs the LeaderGroup CRD with server-side apply and waits until it is served.
pub async fn install_crd(client: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = LeaderGroup::crd();
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("leadergroup-bench").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let groups: Api<LeaderGroup> = Api::all(client.clone());
    let deadline = Instant::now() + BOUND;
    // Established is not enough: the first requests for a new resource can 404 for a moment.
    while groups.list(&Default::default()).await.is_err() {
        if Instant::now() > deadline {
            return Err(Error::Timeout("LeaderGroups to be served".into()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The operator binary measured, and the kubeconfig of the control plane it runs against.
pub struct Operator {
    /// The release binary.
    pub binary: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
}

/// The operator's release binary, running as a child process watching one namespace.
pub struct OperatorProcess {
    child: Child,
    /// Its process id.
    pub pid: u32,
    /// When it was spawned.
    pub started: Instant,
    /// Where it serves /readyz and /metrics.
    pub http: std::net::SocketAddr,
}

impl OperatorProcess {
    /// Starts `operator`, watching `namespace`, or every namespace when None; its log goes to
    /// `log`.
    pub async fn start(
        operator: &Operator,
        namespace: Option<&str>,
        log: &Path,
    ) -> Result<OperatorProcess> {
        let binary = &operator.binary;
        let http = crate::observe::free_port()?;
        let file =
            std::fs::File::create(log).map_err(Error::io(format!("creating {}", log.display())))?;
        let started = Instant::now();
        let mut command = Command::new(binary);
        command.arg("--kubeconfig").arg(&operator.kubeconfig);
        if let Some(namespace) = namespace {
            command.args(["--namespace", namespace]);
        }
        let child = command
            .args(["--identity", "bench-operator"])
            .args(["--http-addr", &http.to_string()])
            // BENCH_OPERATOR_LOG=info: each handover's step timings in target/bench-logs.
            .env(
                "RUST_LOG",
                std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
            )
            // The operator logs to stdout.
            .stdout(
                file.try_clone()
                    .map_err(Error::io(format!("opening {}", log.display())))?,
            )
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .map_err(Error::io(format!("starting {}", binary.display())))?;
        let pid = child
            .id()
            .ok_or_else(|| Error::Other("the operator exited at once".into()))?;
        Ok(OperatorProcess {
            child,
            pid,
            started,
            http,
        })
    }

    /// GET `path` of its HTTP endpoint: the status code and the body (None while it does not
    /// answer yet).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.http).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.http);
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    }

    /// Its reconciles so far (`leadergroup_reconcile_seconds_count`), None while it does not
    /// answer.
    pub async fn reconciles(&self) -> Option<u64> {
        let (_, body) = self.get("/metrics").await?;
        body.lines()
            .find_map(|l| l.strip_prefix("leadergroup_reconcile_seconds_count "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    }

    /// Its CPU time and memory now.
    pub fn sample(&self, ticks: f64) -> ProcSample {
        proc_sample(self.pid, ticks).unwrap_or_default()
    }

    /// SIGKILL and reap (the bench has what it needs; nothing to release).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The release binary `name` (its package's name too), next to the bench's own.
pub fn release_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(Error::io("locating the bench binary"))?;
    let path = exe
        .parent()
        .map(|d| d.join(name))
        .ok_or_else(|| Error::Other("the bench binary has no folder".into()))?;
    if !path.is_file() {
        return Err(Error::Other(format!(
            "{} is missing: run `cargo build --release -p {name}` (make bench does)",
            path.display()
        )));
    }
    Ok(path)
}

/// Groups `g-<i>` of three pods each (`g-<i>-<j>`, label `app=g-<i>`) in one namespace.
pub struct Groups {
    /// The namespace.
    pub namespace: String,
    /// Its admin client.
    pub client: Client,
    /// The simulated kubelet of the namespace.
    pub kubelet: Kubelet,
    /// The group names.
    pub names: Vec<String>,
    next_pod: std::sync::atomic::AtomicUsize,
}

impl Groups {
    /// Creates `count` groups of three Ready pods in a fresh namespace.
    pub async fn create(prefix: &str, count: usize) -> Result<Groups> {
        Self::create_with(prefix, count, CREATE_CONCURRENCY, LEASE_SECONDS).await
    }

    /// [`Groups::create`] with `concurrency` creations in flight and a Lease duration of
    /// `lease_seconds`.
    pub async fn create_with(
        prefix: &str,
        count: usize,
        concurrency: usize,
        lease_seconds: i32,
    ) -> Result<Groups> {
        let ns = leadergroup_testenv::namespace(prefix).await?;
        let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
        kubelet.ensure_node().await?;
        let names: Vec<String> = (0..count).map(|i| format!("g-{i}")).collect();
        let api: Api<LeaderGroup> = Api::namespaced(ns.client.clone(), &ns.name);
        futures::stream::iter(names.iter().flat_map(|g| (0..3).map(move |j| (g, j))))
            .map(|(g, j)| {
                let kubelet = kubelet.clone();
                async move {
                    kubelet
                        .create_ready_pod(&format!("{g}-{j}"), &[("app", g)])
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<()>>()
            .await?;
        futures::stream::iter(names.iter())
            .map(|g| {
                let api = api.clone();
                async move {
                    let spec = LeaderGroupSpec {
                        selector: PodSelector {
                            match_labels: BTreeMap::from([("app".to_owned(), g.clone())]),
                            match_expressions: Vec::new(),
                        },
                        lease_duration_seconds: lease_seconds,
                        preferred_leader: None,
                        paused: false,
                        liveness: Default::default(),
                    };
                    api.create(&PostParams::default(), &LeaderGroup::new(g, spec))
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(Groups {
            namespace: ns.name,
            client: ns.client,
            kubelet,
            names,
            next_pod: std::sync::atomic::AtomicUsize::new(3),
        })
    }

    /// Waits until the watcher sees every group led.
    pub async fn wait_all_led(&self, watch: &LeaderWatch) -> Result<SystemTime> {
        self.wait_all_led_within(watch, ALL_LED_BOUND).await
    }

    /// [`Groups::wait_all_led`], for at most `bound`.
    pub async fn wait_all_led_within(
        &self,
        watch: &LeaderWatch,
        bound: Duration,
    ) -> Result<SystemTime> {
        watch
            .wait("every group led", bound, || {
                self.names
                    .iter()
                    .all(|g| watch.leader(g).is_some())
                    .then(SystemTime::now)
            })
            .await
    }

    /// Crash: the leader of `group` turns NotReady; milliseconds until the watcher sees another
    /// pod labeled leader. The pod is made Ready again afterwards (it stays a follower).
    pub async fn not_ready_handover(&self, watch: &LeaderWatch, group: &str) -> Result<f64> {
        let old = watch
            .leader(group)
            .ok_or_else(|| Error::Other(format!("{group} has no leader")))?;
        let t0 = SystemTime::now();
        self.kubelet.set_ready(&old.pod, false).await?;
        let new = watch.wait_new_leader(group, Some(&old.pod), BOUND).await?;
        let ms = ms_between(t0, new.at);
        self.kubelet.set_ready(&old.pod, true).await?;
        Ok(ms)
    }

    /// Graceful termination: delete the leader pod of `group` (deletionTimestamp; the simulated
    /// kubelet removes it shortly after); milliseconds until the watcher sees another leader.
    /// A replacement pod is created afterwards, as its ReplicaSet would.
    pub async fn deletion_handover(&self, watch: &LeaderWatch, group: &str) -> Result<f64> {
        let old = watch
            .leader(group)
            .ok_or_else(|| Error::Other(format!("{group} has no leader")))?;
        let t0 = SystemTime::now();
        self.kubelet.begin_termination(&old.pod).await?;
        let finish = {
            let kubelet = self.kubelet.clone();
            let pod = old.pod.clone();
            tokio::spawn(async move {
                tokio::time::sleep(KUBELET_FINISH_AFTER).await;
                kubelet.finish_termination(&pod).await
            })
        };
        let new = watch.wait_new_leader(group, Some(&old.pod), BOUND).await?;
        let ms = ms_between(t0, new.at);
        finish
            .await
            .map_err(|e| Error::Other(format!("simulated kubelet task: {e}")))??;
        let n = self
            .next_pod
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.kubelet
            .create_ready_pod(&format!("{group}-{n}"), &[("app", group)])
            .await?;
        Ok(ms)
    }
}
