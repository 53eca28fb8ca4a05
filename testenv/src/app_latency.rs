//! How fast the application knows: handovers on the light cluster, timed from the operator's
//! decision to what each candidate's `leadergroup-client` `Membership` and `leadergroup-agent`
//! report. Shared by the test (`tests/it/app_latency.rs`) and the benchmark
//! (`bench/src/app_latency.rs`), so both measure the same way.
//!
//! The clocks, all on this machine's wall clock (the operator, the agents and this process share
//! it):
//! - start: the decision, the Lease's `acquireTime` the operator writes in step 1 of the
//!   transition (the `now` of the decision that picked the new leader, microseconds);
//! - stop, per clock: the instant this process sees the new leader's `Membership` report
//!   `Leader` at the new epoch; the old leader's `Membership` report anything but `Leader`; the new
//!   leader's agent answer a long poll (`GET /role?wait=<version>`) with `leader` at the new epoch;
//!   the old leader's agent answer it with `follower` or `unknown`.
//!
//! Every candidate pod has one in-process `Membership` (authenticated as the pods'
//! ServiceAccount, bound to the Role the crate documents) and one `leadergroup-agent` process
//! (the real binary, with a kubeconfig holding that ServiceAccount's token).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client};
use leadergroup_client::{Membership, Role};
use leadergroup_operator::crd::{LeaderGroup, LeaderGroupSpec, PodSelector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::{Kubelet, MemberRules, TestNamespace, member_account, wait_until};

/// What stops a measurement.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The namespace, the ServiceAccount, the simulated kubelet or a wait failed.
    #[error(transparent)]
    Testenv(#[from] crate::Error),
    /// An API request failed.
    #[error("API request: {0}")]
    Kube(#[from] kube::Error),
    /// A file or a process could not be created.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The simulated kubelet's task ended abnormally.
    #[error("simulated kubelet task: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// One handover failed.
    #[error("handover {index} ({trigger}): {source}")]
    Handover {
        /// Which one, from 0.
        index: usize,
        /// Its trigger's name.
        trigger: &'static str,
        /// Why.
        #[source]
        source: Box<MeasureError>,
    },
}

/// A closure that wraps an I/O error with what was being done.
fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> MeasureError {
    let what = what.to_string();
    move |source| MeasureError::Io { what, source }
}

/// The group measured, its pods' label and their ServiceAccount.
pub const GROUP: &str = "lat";
const APP: &str = "lat";
const ACCOUNT: &str = "lat-member";
/// The group's Lease duration (the CRD's default).
pub const LEASE_SECONDS: i32 = 15;
/// The longest wait for anything that should follow a handover; a liveness bound that declares
/// the run broken, not a speed target.
pub const BOUND: Duration = Duration::from_secs(60);
/// After a deletion, the simulated kubelet removes the pod this much later (as the bench's
/// graceful scenario does).
const KUBELET_FINISH_AFTER: Duration = Duration::from_millis(300);

/// What a candidate reported, as this process saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Leader at this epoch.
    Leader(i64),
    /// Follower.
    Follower,
    /// Unknown.
    Unknown,
}

impl Seen {
    fn of(role: Role) -> Seen {
        match role {
            Role::Leader { epoch } => Seen::Leader(epoch.get()),
            Role::Follower => Seen::Follower,
            Role::Unknown => Seen::Unknown,
        }
    }

    fn of_json(v: &serde_json::Value) -> Option<Seen> {
        match v["role"].as_str()? {
            "leader" => Some(Seen::Leader(v["epoch"].as_i64()?)),
            "follower" => Some(Seen::Follower),
            "unknown" => Some(Seen::Unknown),
            _ => None,
        }
    }

    /// The epoch when leader.
    pub fn leader(self) -> Option<i64> {
        match self {
            Seen::Leader(e) => Some(e),
            Seen::Follower | Seen::Unknown => None,
        }
    }
}

/// Who reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The in-process `Membership` (the crate).
    Crate,
    /// The agent's long poll.
    Agent,
}

/// One report: pod, source, when (ms since the Unix epoch), what.
#[derive(Clone, Debug)]
pub struct Record {
    /// The candidate pod.
    pub pod: String,
    /// Crate or agent.
    pub source: Source,
    /// When this process saw it, ms since the Unix epoch.
    pub at_ms: f64,
    /// The role reported.
    pub seen: Seen,
}

type Log = Arc<Mutex<Vec<Record>>>;

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn push(log: &Log, record: Record) {
    if let Ok(mut l) = log.lock() {
        l.push(record);
    }
}

fn records(log: &Log) -> Vec<Record> {
    log.lock().map(|l| l.clone()).unwrap_or_default()
}

/// How the leader stopped being eligible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// DELETE of the leader pod (graceful: deletionTimestamp; the simulated kubelet removes it
    /// 300 ms later); a replacement pod joins afterwards.
    Deletion,
    /// The leader pod reported NotReady through pods/status; Ready again afterwards.
    NotReady,
}

impl Trigger {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Deletion => "deletion",
            Trigger::NotReady => "NotReady",
        }
    }
}

/// One handover, its four latencies in ms from the decision.
#[derive(Clone, Debug)]
pub struct Handover {
    /// What triggered it.
    pub trigger: Trigger,
    /// The leader before, and its epoch.
    pub old: (String, i64),
    /// The leader after, and its epoch.
    pub new: (String, i64),
    /// The decision: the Lease's acquireTime, ms since the Unix epoch.
    pub decided_ms: f64,
    /// When the trigger was sent, ms since the Unix epoch.
    pub triggered_ms: f64,
    /// Decision to the new leader's `Membership` reporting `Leader` at the new epoch.
    pub crate_new_leader_ms: f64,
    /// Decision to the old leader's `Membership` reporting `Follower` or `Unknown`.
    pub crate_old_not_leader_ms: f64,
    /// Decision to the new leader's agent long poll returning `leader` at the new epoch.
    pub agent_new_leader_ms: f64,
    /// Decision to the old leader's agent long poll returning `follower` or `unknown`.
    pub agent_old_not_leader_ms: f64,
}

/// What a run produced.
#[derive(Debug, Default)]
pub struct Report {
    /// Every handover, in order.
    pub handovers: Vec<Handover>,
    /// Every report of every candidate, crate and agent.
    pub records: Vec<Record>,
}

impl Report {
    /// What the docs guarantee the application, checked over every report of the run; empty
    /// when all holds. It makes no claim about speed.
    ///
    /// - a token is never held by two pods: every `Leader` report at an epoch, crate or agent,
    ///   comes from one pod;
    /// - each new leader's `Membership` and agent report `Leader` at the epoch the Lease holds
    ///   (one more than the old leader's), and the old leader's stop reporting `Leader`;
    /// - nobody reports the new state before the operator decided it: every stop instant is at
    ///   or after the Lease's `acquireTime` (the role follows the Lease, which carries the
    ///   decision).
    ///
    /// Not checked, because not guaranteed: that the old leader's report changes before the
    /// new leader's does. They are two processes with their own watches; for the moment both
    /// may believe they lead (at different epochs), fencing makes the old one harmless.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut holders: BTreeMap<i64, String> = BTreeMap::new();
        for r in &self.records {
            if let Seen::Leader(e) = r.seen {
                match holders.get(&e) {
                    Some(p) if *p != r.pod => out.push(format!(
                        "epoch {e} reported Leader by both {p} and {} ({:?})",
                        r.pod, r.source
                    )),
                    Some(_) => {}
                    None => {
                        holders.insert(e, r.pod.clone());
                    }
                }
            }
        }
        for (i, h) in self.handovers.iter().enumerate() {
            if h.new.1 != h.old.1 + 1 || h.new.0 == h.old.0 {
                out.push(format!(
                    "handover {i}: {:?} -> {:?}: expected another pod at the next epoch",
                    h.old, h.new
                ));
            }
            for (clock, ms) in [
                ("crate new Leader", h.crate_new_leader_ms),
                ("crate old not Leader", h.crate_old_not_leader_ms),
                ("agent new leader", h.agent_new_leader_ms),
                ("agent old not leader", h.agent_old_not_leader_ms),
            ] {
                // acquireTime is truncated to the microsecond: allow that much.
                if !ms.is_finite() || ms < -0.001 {
                    out.push(format!(
                        "handover {i} ({}): {clock} at {ms} ms from the decision",
                        h.trigger.name()
                    ));
                }
            }
        }
        out
    }
}

/// A candidate: its `Membership`, its agent, and the tasks recording both.
struct Candidate {
    /// Kept alive while the pod is a candidate; its reports reach the log through a task.
    _membership: Membership,
    agent: Child,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.agent.start_kill();
    }
}

/// What the run needs.
pub struct Setup<'a> {
    /// The namespace (its client is an admin's); the LeaderGroup CRD must be installed.
    pub ns: &'a TestNamespace,
    /// The admin kubeconfig, for the operator.
    pub kubeconfig: &'a Path,
    /// The control plane (for the ServiceAccount's kubeconfig).
    pub cp: &'a crate::ControlPlane,
    /// The operator binary.
    pub operator_bin: PathBuf,
    /// The agent binary.
    pub agent_bin: PathBuf,
    /// Where the operator's and the agents' logs go.
    pub log_dir: PathBuf,
    /// Handovers, alternating deletion and NotReady (deletion first).
    pub handovers: usize,
}

/// The run: the world it built, killed on drop.
pub struct Run {
    operator: Child,
    candidates: BTreeMap<String, Candidate>,
    log: Log,
    kubelet: Kubelet,
    member_client: Client,
    agent_kubeconfig: PathBuf,
    leases: Api<Lease>,
    next_pod: usize,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.operator.start_kill();
    }
}

/// Runs `setup.handovers` handovers; returns the report, or what broke.
pub async fn run(setup: &Setup<'_>) -> Result<Report, MeasureError> {
    std::fs::create_dir_all(&setup.log_dir).map_err(io(setup.log_dir.display()))?;
    let ns = setup.ns;
    let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
    kubelet.ensure_node().await?;
    let member_client = member_account_client(ns).await?;
    let token = ns.service_account_token(ACCOUNT).await?;
    let agent_kubeconfig = setup.log_dir.join(format!("{}-member.kubeconfig", ns.name));
    std::fs::write(&agent_kubeconfig, setup.cp.token_kubeconfig(&token))
        .map_err(io(format!("writing {}", agent_kubeconfig.display())))?;
    let operator_log = setup.log_dir.join(format!("{}-operator.log", ns.name));
    let file = std::fs::File::create(&operator_log).map_err(io(operator_log.display()))?;
    let http = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io("binding a free port"))?;
    let operator = Command::new(&setup.operator_bin)
        .arg("--kubeconfig")
        .arg(setup.kubeconfig)
        .args(["--namespace", &ns.name, "--identity", "app-latency"])
        .args(["--http-addr", &http.to_string()])
        .env("RUST_LOG", "info,kube=warn")
        .stdout(file.try_clone().map_err(io(operator_log.display()))?)
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .map_err(io(format!("starting {}", setup.operator_bin.display())))?;
    let mut world = Run {
        operator,
        candidates: BTreeMap::new(),
        log: Arc::new(Mutex::new(Vec::new())),
        kubelet,
        member_client,
        agent_kubeconfig,
        leases: ns.api(),
        next_pod: 0,
    };
    for _ in 0..3 {
        world.add_candidate(setup).await?;
    }
    let spec = LeaderGroupSpec {
        selector: PodSelector {
            match_labels: BTreeMap::from([("app".to_owned(), APP.to_owned())]),
            match_expressions: Vec::new(),
        },
        lease_duration_seconds: LEASE_SECONDS,
        preferred_leader: None,
        paused: false,
        liveness: Default::default(),
        service: None,
        history_limit: leadergroup_operator::crd::DEFAULT_HISTORY_LIMIT,
    };
    ns.api::<LeaderGroup>()
        .create(&PostParams::default(), &LeaderGroup::new(GROUP, spec))
        .await?;

    let mut report = Report::default();
    for i in 0..setup.handovers {
        let trigger = if i % 2 == 0 {
            Trigger::Deletion
        } else {
            Trigger::NotReady
        };
        let h = world
            .handover(setup, trigger)
            .await
            .map_err(|e| MeasureError::Handover {
                index: i,
                trigger: trigger.name(),
                source: Box::new(e),
            })?;
        report.handovers.push(h);
    }
    report.records = records(&world.log);
    Ok(report)
}

/// The pods' ServiceAccount, bound to exactly the Role the crate documents (testenv's
/// [`member_account`]); a client as it.
async fn member_account_client(ns: &TestNamespace) -> Result<Client, MeasureError> {
    member_account(ns, ACCOUNT, GROUP, MemberRules::DOCUMENTED).await?;
    Ok(ns.service_account_client(ACCOUNT).await?)
}

impl Run {
    /// A new Ready pod `lat-<n>`, its `Membership` and its agent, each recorded.
    async fn add_candidate(&mut self, setup: &Setup<'_>) -> Result<String, MeasureError> {
        let pod = format!("{APP}-{}", self.next_pod);
        self.next_pod += 1;
        self.kubelet.create_ready_pod(&pod, &[("app", APP)]).await?;
        let ns = &setup.ns.name;
        let membership = Membership::start(
            self.member_client.clone(),
            ns.clone(),
            pod.clone(),
            Some(GROUP.to_owned()),
        );
        let mut roles = membership.subscribe();
        let (log, name) = (Arc::clone(&self.log), pod.clone());
        let crate_task = tokio::spawn(async move {
            loop {
                let seen = Seen::of(*roles.borrow_and_update());
                push(
                    &log,
                    Record {
                        pod: name.clone(),
                        source: Source::Crate,
                        at_ms: now_ms(),
                        seen,
                    },
                );
                if roles.changed().await.is_err() {
                    return;
                }
            }
        });
        let agent_log = setup.log_dir.join(format!("{ns}-{pod}-agent.log"));
        let file = std::fs::File::create(&agent_log).map_err(io(agent_log.display()))?;
        let agent = Command::new(&setup.agent_bin)
            .arg("--dir")
            .arg(setup.log_dir.join(format!("{ns}-{pod}-run")))
            .args(["--http-addr", "127.0.0.1:0", "--log-format", "json"])
            .args(["--group", GROUP])
            .env("KUBECONFIG", &self.agent_kubeconfig)
            .env("POD_NAME", &pod)
            .env("POD_NAMESPACE", ns)
            .env("RUST_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone().map_err(io(agent_log.display()))?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(format!("starting {}", setup.agent_bin.display())))?;
        let mut candidate = Candidate {
            _membership: membership,
            agent,
            tasks: vec![crate_task],
        };
        let waiting = format!("the agent to log its address in {}", agent_log.display());
        let addr = wait_until(&waiting, BOUND, || {
            let text = std::fs::read_to_string(&agent_log).unwrap_or_default();
            async move { Ok::<_, MeasureError>(bound_addr(&text)) }
        })
        .await?;
        let (log, name) = (Arc::clone(&self.log), pod.clone());
        candidate.tasks.push(tokio::spawn(async move {
            let mut version = String::new();
            // A leader's answers move with its validity: only a change of what it says counts.
            let mut said = None;
            loop {
                let path = if version.is_empty() {
                    "/role".to_owned()
                } else {
                    format!("/role?wait={version}&timeoutSeconds=30")
                };
                let Some(body) = http_get(addr, &path).await else {
                    return;
                };
                let Ok(json) = serde_json::from_str::<serde_json::Value>(&body) else {
                    return;
                };
                let at_ms = now_ms();
                let Some(seen) = Seen::of_json(&json) else {
                    return;
                };
                let next = json["version"].as_str().unwrap_or_default().to_owned();
                if said != Some(seen) {
                    said = Some(seen);
                    push(
                        &log,
                        Record {
                            pod: name.clone(),
                            source: Source::Agent,
                            at_ms,
                            seen,
                        },
                    );
                }
                version = next;
            }
        }));
        self.candidates.insert(pod.clone(), candidate);
        Ok(pod)
    }

    /// The last report of `pod` by `source`.
    fn last(&self, pod: &str, source: Source) -> Option<Seen> {
        records(&self.log)
            .iter()
            .rev()
            .find(|r| r.pod == pod && r.source == source)
            .map(|r| r.seen)
    }

    /// Waits until the group is settled as every candidate sees it: the Lease's holder is
    /// reported `Leader` at the Lease's epoch by its crate and its agent, every other candidate
    /// `Follower` by both. Returns (leader, epoch).
    async fn wait_settled(&self) -> Result<(String, i64), MeasureError> {
        let settled = wait_until("every candidate agrees on the leader", BOUND, || async {
            let Some((holder, epoch, _)) = self.lease().await? else {
                return Ok(None);
            };
            let agreed = self.candidates.keys().all(|pod| {
                let want = if *pod == holder {
                    Seen::Leader(epoch)
                } else {
                    Seen::Follower
                };
                [Source::Crate, Source::Agent]
                    .iter()
                    .all(|s| self.last(pod, *s) == Some(want))
            });
            Ok::<_, MeasureError>(agreed.then_some((holder, epoch)))
        })
        .await?;
        Ok(settled)
    }

    /// The Lease's holder, epoch and acquireTime (ms since the Unix epoch).
    async fn lease(&self) -> Result<Option<(String, i64, f64)>, MeasureError> {
        let lease = self.leases.get_opt(&format!("leadergroup-{GROUP}")).await?;
        Ok(lease.and_then(|l| {
            let epoch = l
                .metadata
                .annotations
                .as_ref()?
                .get(leadergroup_client::EPOCH_ANNOTATION)?
                .parse()
                .ok()?;
            let spec = l.spec?;
            let acquired = spec.acquire_time?.0.as_microsecond() as f64 / 1000.0;
            Some((spec.holder_identity?, epoch, acquired))
        }))
    }

    /// The first report of `pod` by `source` after `since_ms` that satisfies `cond`.
    async fn wait_report(
        &self,
        pod: &str,
        source: Source,
        since_ms: f64,
        what: &str,
        cond: impl Fn(Seen) -> bool,
    ) -> Result<f64, MeasureError> {
        let at_ms = wait_until(what, BOUND, || async {
            Ok::<_, MeasureError>(
                records(&self.log)
                    .iter()
                    .find(|r| {
                        r.pod == pod && r.source == source && r.at_ms >= since_ms && cond(r.seen)
                    })
                    .map(|r| r.at_ms),
            )
        })
        .await?;
        Ok(at_ms)
    }

    async fn handover(
        &mut self,
        setup: &Setup<'_>,
        trigger: Trigger,
    ) -> Result<Handover, MeasureError> {
        let (old, old_epoch) = self.wait_settled().await?;
        // Let the previous handover's stragglers (a replacement joining, a pod Ready again) pass.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let triggered_ms = now_ms();
        let finish = match trigger {
            Trigger::Deletion => {
                self.kubelet.begin_termination(&old).await?;
                let kubelet = self.kubelet.clone();
                let pod = old.clone();
                Some(tokio::spawn(async move {
                    tokio::time::sleep(KUBELET_FINISH_AFTER).await;
                    kubelet.finish_termination(&pod).await
                }))
            }
            Trigger::NotReady => {
                self.kubelet.set_ready(&old, false).await?;
                None
            }
        };
        let (new, new_epoch, decided_ms) =
            wait_until("the Lease moves to another pod", BOUND, || async {
                Ok::<_, MeasureError>(
                    self.lease()
                        .await?
                        .filter(|(h, e, _)| *h != old && *e > old_epoch),
                )
            })
            .await?;
        let new_leader = |s: Seen| s == Seen::Leader(new_epoch);
        let not_leader = |s: Seen| s.leader().is_none();
        let since = triggered_ms;
        let crate_new = self
            .wait_report(
                &new,
                Source::Crate,
                since,
                "new leader's Membership: Leader",
                new_leader,
            )
            .await?;
        let agent_new = self
            .wait_report(
                &new,
                Source::Agent,
                since,
                "new leader's agent: leader",
                new_leader,
            )
            .await?;
        let crate_old = self
            .wait_report(
                &old,
                Source::Crate,
                since,
                "old leader's Membership: not Leader",
                not_leader,
            )
            .await?;
        let agent_old = self
            .wait_report(
                &old,
                Source::Agent,
                since,
                "old leader's agent: not leader",
                not_leader,
            )
            .await?;
        match finish {
            Some(task) => {
                task.await??;
                // The old pod is gone: its Membership and agent go with it, and a replacement
                // joins, as its ReplicaSet would make.
                // (Dropping a candidate stops its recording before its Membership, so the
                // Unknown of the shutdown is not recorded as a report.)
                drop(self.candidates.remove(&old));
                self.add_candidate(setup).await?;
            }
            None => {
                self.kubelet.set_ready(&old, true).await?;
            }
        }
        Ok(Handover {
            trigger,
            old: (old, old_epoch),
            new: (new, new_epoch),
            decided_ms,
            triggered_ms,
            crate_new_leader_ms: crate_new - decided_ms,
            crate_old_not_leader_ms: crate_old - decided_ms,
            agent_new_leader_ms: agent_new - decided_ms,
            agent_old_not_leader_ms: agent_old - decided_ms,
        })
    }
}

/// The address in the agent's JSON log line "serving GET /role and /healthz".
fn bound_addr(log: &str) -> Option<std::net::SocketAddr> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["addr"].as_str().and_then(|a| a.parse().ok()))
}

/// A bare HTTP/1.1 GET (`Connection: close`); the body of a 200, else `None`.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}
