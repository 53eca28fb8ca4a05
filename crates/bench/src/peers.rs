//! The peers: client-go's leaderelection and the Rust crates, each as candidate processes that
//! print a timestamped line when they start or stop leading (bench/peers/).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::observe::{ProcSample, proc_sample};

/// One peer system and its settings.
#[derive(Clone, Debug)]
pub struct PeerKind {
    /// Name in the tables.
    pub name: &'static str,
    /// Its settings, as the tables show them.
    pub settings: &'static str,
    program: PathBuf,
    args: Vec<String>,
    /// Lease duration: the bound on detecting a crash.
    pub lease: Duration,
}

/// The four peer configurations.
pub fn kinds(client_go: &Path, rust_peer: &Path) -> Vec<PeerKind> {
    let go = |name, settings, d: &str, r: &str, p: &str, lease| PeerKind {
        name,
        settings,
        program: client_go.to_path_buf(),
        args: vec![
            format!("--lease-duration={d}"),
            format!("--renew-deadline={r}"),
            format!("--retry-period={p}"),
        ],
        lease: Duration::from_secs(lease),
    };
    let rust = |name, settings, lib: &str, renew: &str| PeerKind {
        name,
        settings,
        program: rust_peer.to_path_buf(),
        args: [
            "--lib",
            lib,
            "--lease-seconds",
            "15",
            "--renew-seconds",
            renew,
        ]
        .map(String::from)
        .to_vec(),
        lease: Duration::from_secs(15),
    };
    vec![
        go(
            "client-go (defaults)",
            "LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s, ReleaseOnCancel",
            "15s",
            "10s",
            "2s",
            15,
        ),
        go(
            "client-go (tuned)",
            "LeaseDuration 4 s, RenewDeadline 2 s, RetryPeriod 1 s, ReleaseOnCancel",
            "4s",
            "2s",
            "1s",
            4,
        ),
        rust(
            "kube-leader-election 0.44",
            "lease_ttl 15 s, try_acquire_or_renew every 5 s (a third, as its docs suggest), step_down on SIGTERM",
            "kle",
            "5",
        ),
        rust(
            "kube-lease-manager 0.13.1",
            "duration 15 s, grace 5 s, watch() channel dropped on SIGTERM (releases)",
            "klm",
            "5",
        ),
    ]
}

/// A leadership event a candidate printed.
#[derive(Clone, Debug)]
struct Started {
    identity: String,
    at: SystemTime,
}

#[derive(Default)]
struct State {
    /// lease -> the last "started" line (the current leader, as it believes).
    leaders: HashMap<String, Started>,
}

/// Three (or more, over time) candidate processes of one peer kind for `groups` Leases.
pub struct PeerGroup {
    kind: PeerKind,
    kubeconfig: PathBuf,
    namespace: String,
    groups: usize,
    log_dir: PathBuf,
    candidates: HashMap<String, Child>,
    next: usize,
    state: Arc<Mutex<State>>,
    changed: watch::Sender<u64>,
}

impl PeerGroup {
    /// Starts three candidates of `kind` in `namespace`, each running for `groups` Leases
    /// `bench-0..`.
    pub async fn start(
        kind: &PeerKind,
        kubeconfig: &Path,
        namespace: &str,
        groups: usize,
        log_dir: &Path,
    ) -> Result<PeerGroup> {
        let (changed, _) = watch::channel(0);
        let mut group = PeerGroup {
            kind: kind.clone(),
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: namespace.to_owned(),
            groups,
            log_dir: log_dir.to_path_buf(),
            candidates: HashMap::new(),
            next: 0,
            state: Arc::new(Mutex::new(State::default())),
            changed,
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
        cmd.args(&self.kind.args)
            .args(["--namespace", &self.namespace, "--lease-prefix", "bench"])
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
        if self.kind.program.ends_with("leadergroup-bench-client-go") {
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
        let (state, changed) = (self.state.clone(), self.changed.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parts: Vec<&str> = line.split_whitespace().collect();
                let [ts, event, lease, identity] = parts.as_slice() else {
                    continue;
                };
                let Ok(nanos) = ts.parse::<u64>() else {
                    continue;
                };
                let at = UNIX_EPOCH + Duration::from_nanos(nanos);
                if let Ok(mut s) = state.lock() {
                    if *event == "started" {
                        s.leaders.insert(
                            (*lease).to_owned(),
                            Started {
                                identity: (*identity).to_owned(),
                                at,
                            },
                        );
                    } else if s.leaders.get(*lease).map(|l| l.identity.as_str()) == Some(identity) {
                        s.leaders.remove(*lease);
                    }
                }
                changed.send_modify(|n| *n += 1);
            }
        });
        self.candidates.insert(identity, child);
        Ok(())
    }

    fn leader(&self, lease: &str) -> Option<Started> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.leaders.get(lease).cloned())
    }

    async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        crate::observe::wait_for_change(&self.changed, timeout, check, || {
            (
                format!("peer output ended: {what}"),
                format!("{} {what}", self.kind.name),
            )
        })
        .await
    }

    /// Waits until every Lease has a leader; returns when the last one started.
    pub async fn wait_all_led(&self, timeout: Duration) -> Result<SystemTime> {
        self.wait("every Lease led", timeout, || {
            let s = self.state.lock().ok()?;
            let mut last = UNIX_EPOCH;
            for i in 0..self.groups {
                last = last.max(s.leaders.get(&Self::lease(i))?.at);
            }
            Some(last)
        })
        .await
    }

    /// Stops the leader of Lease 0 (`kill`: SIGKILL; otherwise SIGTERM) and returns the
    /// milliseconds until another candidate printed OnStartedLeading. The stopped candidate is
    /// replaced by a new process, as a Deployment would replace it.
    pub async fn handover(&mut self, kill: bool) -> Result<f64> {
        let lease = Self::lease(0);
        let old = self
            .wait("a leader of Lease 0", self.kind.lease * 3, || {
                self.leader(&lease)
            })
            .await?;
        let mut child = self
            .candidates
            .remove(&old.identity)
            .ok_or_else(|| Error::Other(format!("no process for {}", old.identity)))?;
        let t0 = SystemTime::now();
        if kill {
            let _ = child.start_kill();
        } else if let Some(pid) = child.id() {
            std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .map_err(Error::io("kill -TERM"))?;
        }
        let bound = self.kind.lease * 3 + Duration::from_secs(10);
        let new = self
            .wait("a new leader of Lease 0", bound, || {
                self.leader(&lease)
                    .filter(|l| l.identity != old.identity && l.at > old.at)
            })
            .await?;
        let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
        self.spawn()?;
        Ok(crate::observe::ms_between(t0, new.at))
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
