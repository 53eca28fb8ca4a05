//! The peers: client-go's leaderelection and the Rust crates, each as candidate processes that
//! print a timestamped line when they start or stop leading (bench/peers/).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use leadergroup_testenv::{TestNamespace, wait_until_every};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::candidates::{Candidates, Fault, Leader};
use crate::error::{Error, Result};
use crate::observe::recheck;
use crate::observe::{ProcSample, proc_sample};
use crate::timeline::{Beliefs, one_group};
use leadergroup_testenv::histories::{Span, believers, first_start, system_time, unix_ms};

/// How a system's candidates run.
#[derive(Debug, PartialEq, Eq)]
pub enum Candidate {
    /// client-go's leaderelection (bench/peers/client-go).
    Go,
    /// kube-leader-election or kube-lease-manager (bench/peers/rust).
    Rust,
    /// Ours: the web app with the agent sidecar, in a LeaderGroup of this liveness (end-to-end
    /// only).
    Agent(&'static str),
}

/// One system measured: ours or a peer configuration. A peer runs as candidate processes on the
/// light cluster ([`PeerKind`]), as candidate pods on the real one (the end-to-end run).
#[derive(Debug, PartialEq, Eq)]
pub struct System {
    pub name: &'static str,
    /// Its settings, as the tables show them.
    pub settings: &'static str,
    /// Its pods' label in the end-to-end run: ours, the group's name too; a peer, its Lease's
    /// prefix.
    pub label: &'static str,
    pub candidate: Candidate,
    /// A peer candidate's arguments, separated by spaces.
    pub args: &'static str,
    /// Lease duration, s: the bound on detecting a crash.
    pub lease_seconds: u32,
}

impl System {
    /// Whether the pods labeled `label` are ours (they publish through the agent).
    pub fn is_ours(label: &str) -> bool {
        label.starts_with("ours")
    }

    /// A peer candidate's arguments for the Leases `<prefix>-<i>` of `namespace`.
    pub fn arguments(&self, namespace: &str, prefix: &str) -> Vec<String> {
        let lease = ["--namespace", namespace, "--lease-prefix", prefix];
        let args = self.args.split_whitespace().chain(lease);
        args.map(str::to_owned).collect()
    }
}

/// The four peer configurations.
pub const PEERS: [System; 4] = [
    System {
        name: "client-go (defaults)",
        settings: "LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s, ReleaseOnCancel",
        label: "cgd",
        candidate: Candidate::Go,
        args: "--lease-duration=15s --renew-deadline=10s --retry-period=2s",
        lease_seconds: 15,
    },
    System {
        name: "client-go (tuned)",
        settings: "LeaseDuration 4 s, RenewDeadline 2 s, RetryPeriod 1 s, ReleaseOnCancel",
        label: "cgt",
        candidate: Candidate::Go,
        args: "--lease-duration=4s --renew-deadline=2s --retry-period=1s",
        lease_seconds: 4,
    },
    System {
        name: "kube-leader-election 0.44",
        settings: "lease_ttl 15 s, try_acquire_or_renew every 5 s (a third, as its docs suggest), step_down on SIGTERM",
        label: "kle",
        candidate: Candidate::Rust,
        args: "--lib kle --lease-seconds 15 --renew-seconds 5",
        lease_seconds: 15,
    },
    System {
        name: "kube-lease-manager 0.13.1",
        settings: "duration 15 s, grace 5 s, watch() channel dropped on SIGTERM (releases)",
        label: "klm",
        candidate: Candidate::Rust,
        args: "--lib klm --lease-seconds 15 --renew-seconds 5",
        lease_seconds: 15,
    },
];

/// A peer configuration with its candidate binary on this machine.
#[derive(Clone, Debug)]
pub struct PeerKind {
    pub peer: &'static System,
    program: PathBuf,
}

impl PeerKind {
    /// Its Lease duration.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.peer.lease_seconds.into())
    }
}

/// The four peer configurations, client-go's candidate built (its build.sh prints the binary)
/// and the Rust one checked.
pub async fn build(repo: &Path) -> Result<Vec<PeerKind>> {
    let script = std::process::Command::new(repo.join("bench/peers/client-go/build.sh"));
    let client_go = PathBuf::from(crate::run_command(script).await?);
    let rust_peer = repo.join("target/bench-peers/release/leadergroup-bench-rust-peer");
    if !rust_peer.is_file() {
        return Err(Error::Other(format!(
            "{} is missing: run `cargo build --release --manifest-path bench/peers/rust/Cargo.toml` with CARGO_TARGET_DIR=target/bench-peers (make bench does)",
            rust_peer.display()
        )));
    }
    Ok(PEERS
        .iter()
        .map(|peer| PeerKind {
            peer,
            program: if peer.candidate == Candidate::Go {
                &client_go
            } else {
                &rust_peer
            }
            .clone(),
        })
        .collect())
}

/// How long a struck candidate may take to exit before it is killed.
const STRUCK_EXIT: Duration = Duration::from_secs(20);

/// Three (or more, over time) candidate processes of one peer kind for `groups` Leases, and
/// every change of belief they printed, per Lease.
pub struct PeerGroup {
    kind: PeerKind,
    /// Reads the Leases: the holder they name is the leader to stop.
    client: Client,
    kubeconfig: PathBuf,
    namespace: String,
    groups: usize,
    log_dir: PathBuf,
    candidates: HashMap<String, Child>,
    /// The candidate a handover stopped, until it exits: the task that waits for its exit.
    struck: Option<tokio::task::JoinHandle<()>>,
    next: usize,
    /// Per Lease, every candidate's changes of belief. The one a handover stopped counts until
    /// its process has exited (SIGTERM: it releases, and may print "stopped" only after a
    /// successor started, which is an overlap like any other).
    events: Beliefs,
}

impl PeerGroup {
    /// Starts three candidates of `kind` in `ns` on the light control plane (its `kubeconfig`),
    /// each running for `groups` Leases `bench-0..`, their logs in `log_dir`.
    pub fn start(
        kubeconfig: &std::path::Path,
        log_dir: &std::path::Path,
        kind: &PeerKind,
        ns: &TestNamespace,
        groups: usize,
    ) -> Result<PeerGroup> {
        let mut group = PeerGroup {
            kind: kind.clone(),
            client: ns.client.clone(),
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: ns.name.clone(),
            groups,
            log_dir: log_dir.to_path_buf(),
            candidates: HashMap::new(),
            struck: None,
            next: 0,
            events: Beliefs::default(),
        };
        for _ in 0..3 {
            group.spawn()?;
        }
        Ok(group)
    }

    /// Lease names.
    pub fn lease(i: usize) -> String {
        format!("bench-{i}")
    }

    fn spawn(&mut self) -> Result<()> {
        let identity = format!("cand-{}", self.next);
        self.next += 1;
        let stderr = std::fs::File::create(
            self.log_dir
                .join(format!("{}-{}-{identity}.log", self.namespace, self.groups)),
        )
        .map_err(Error::io("creating a peer log"))?;
        let mut cmd = Command::new(&self.kind.program);
        cmd.args(self.kind.peer.arguments(&self.namespace, "bench"))
            .args([
                "--groups",
                &self.groups.to_string(),
                "--identity",
                &identity,
            ])
            .env("KUBECONFIG", &self.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        if self.kind.peer.candidate == Candidate::Go {
            // One client per process for all its electors: lift client-go's 5 QPS default so
            // a many-group process is not throttled where one-group replicas would not be.
            cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                .arg(format!("--qps={}", 10 * self.groups.max(1)));
        }
        let mut child = cmd.spawn().map_err(Error::io(format!(
            "starting {}",
            self.kind.program.display()
        )))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Other("peer without stdout".into()))?;
        let events = self.events.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                events.push_line(&line);
            }
        });
        self.candidates.insert(identity, child);
        Ok(())
    }

    /// How often a candidate started leading a Lease while another still believed it led (a
    /// library that writes the Lease without a resourceVersion precondition lets two candidates
    /// both acquire it).
    pub fn overlaps(&self) -> u64 {
        let all = Span {
            from_ms: 0.0,
            to_ms: Some(unix_ms(SystemTime::now())),
        };
        let overlaps = (0..self.groups).map(|i| {
            let lease = Self::lease(i);
            let report = one_group(&lease, self.events.members(&lease)).check(all);
            report.overlaps().count() as u64
        });
        overlaps.sum()
    }

    /// How often a candidate started leading at or after `from`, over every Lease.
    pub fn starts_since(&self, from: SystemTime) -> u64 {
        let from = unix_ms(from);
        let starts = (0..self.groups).map(|i| {
            let members = self.events.members(&Self::lease(i));
            let changes = members.iter().flat_map(|m| &m.changes);
            changes.filter(|c| c.leader && c.at_ms >= from).count() as u64
        });
        starts.sum()
    }

    /// The candidate the Lease names as its holder, once it is the only one that believes it
    /// leads. A library without a resourceVersion precondition can let two candidates acquire
    /// at once; the loser believes it leads until its next renewal shows it the holder. Were the
    /// holder stopped meanwhile, the loser would take the released Lease over without a new
    /// OnStartedLeading (it never stopped leading), and no handover could be timed.
    async fn holder(&self, lease: &str) -> Result<String> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let what = format!(
            "{}: the holder of Lease {lease} to be the one candidate that believes it leads",
            self.kind.peer.name
        );
        let within = self.kind.lease() * 3;
        let every = Duration::from_millis(100);
        let holder = wait_until_every(&what, within, every, || async {
            let holder = api
                .get_opt(lease)
                .await?
                .and_then(|l| l.spec?.holder_identity);
            let members = self.events.members(lease);
            let believers = believers(&members, unix_ms(SystemTime::now()));
            Ok::<_, kube::Error>(holder.filter(|h| believers == [h.as_str()]))
        });
        Ok(holder.await?)
    }

    /// Waits until every Lease has a leader; returns when the last one started.
    pub async fn wait_all_led(&self, timeout: Duration) -> Result<SystemTime> {
        let what = format!("{} every Lease led", self.kind.peer.name);
        recheck(&what, timeout, || {
            (0..self.groups).try_fold(UNIX_EPOCH, |last, i| {
                let members = self.events.members(&Self::lease(i));
                let starts = members.iter().flat_map(|m| &m.changes).filter(|c| c.leader);
                let first = starts.map(|c| c.at_ms).reduce(f64::min)?;
                let first = system_time(first);
                Some(last.max(first))
            })
        })
        .await
    }

    /// The three processes' summed CPU time and memory.
    pub fn sample(&self, ticks: f64) -> ProcSample {
        let mut sum = ProcSample::default();
        for child in self.candidates.values() {
            if let Some(s) = child.id().and_then(|pid| proc_sample(pid, ticks)) {
                sum.cpu_seconds += s.cpu_seconds;
                sum.rss_mib += s.rss_mib;
                sum.peak_rss_mib += s.peak_rss_mib;
            }
        }
        sum
    }

    /// Stops every candidate with SIGKILL.
    pub async fn stop(mut self) {
        for (_, mut child) in self.candidates.drain() {
            let _ = child.kill().await;
        }
    }
}

/// Lease 0's candidates: its leader is the candidate its holderIdentity names; a crash stops it
/// with SIGKILL, a graceful exit with SIGTERM; the timer stops when another candidate prints
/// OnStartedLeading; the stopped candidate is replaced by a new process, as a Deployment would
/// replace it.
impl Candidates for PeerGroup {
    async fn leader(&mut self) -> Result<Leader> {
        let identity = self.holder(&Self::lease(0)).await?;
        let pod = identity.clone();
        Ok(Leader { identity, pod })
    }

    async fn strike(&mut self, leader: &Leader, fault: Fault) -> Result<SystemTime> {
        let old = &leader.identity;
        let mut child = self
            .candidates
            .remove(old)
            .ok_or_else(|| Error::Other(format!("no process for {old}")))?;
        let t0 = SystemTime::now();
        if fault == Fault::Crash {
            let _ = child.start_kill();
        } else if let Some(pid) = child.id() {
            std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .map_err(Error::io("kill -TERM"))?;
        }
        // It counts until its exit is seen, however long the handover takes to measure.
        let (not_running, old) = (self.events.not_running.clone(), old.clone());
        self.struck = Some(tokio::spawn(async move {
            if tokio::time::timeout(STRUCK_EXIT, child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            not_running.stopped(&old, SystemTime::now());
        }));
        Ok(t0)
    }

    async fn new_leader(&mut self, leader: &Leader, t0: SystemTime) -> Result<SystemTime> {
        let (lease, old) = (Self::lease(0), &leader.identity);
        let bound = self.kind.lease() * 3 + Duration::from_secs(10);
        let what = format!("{} a new leader of Lease 0", self.kind.peer.name);
        let new = recheck(&what, bound, || {
            let members = self.events.members(&lease);
            first_start(&members, old, unix_ms(t0)).map(|(_, at)| at)
        });
        Ok(system_time(new.await?))
    }

    async fn recover(&mut self, _: Leader, _: Fault, _: bool) -> Result<()> {
        if let Some(exited) = self.struck.take() {
            let _ = exited.await;
        }
        self.spawn()
    }
}
