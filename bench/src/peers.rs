//! The peers: client-go's leaderelection and the Rust crates, each as candidate processes that
//! print a timestamped line when they start or stop leading (bench/peers/).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
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

/// The four peer configurations, client-go's candidate built (its build.sh prints the binary)
/// and the Rust one checked.
pub async fn build(repo: &Path) -> Result<Vec<PeerKind>> {
    let script = repo.join("bench/peers/client-go/build.sh");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .await
        .map_err(Error::io(format!("running {}", script.display())))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "{} failed: {}",
            script.display(),
            out.status
        )));
    }
    let client_go = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let rust_peer = repo.join("target/bench-peers/release/leadergroup-bench-rust-peer");
    if !rust_peer.is_file() {
        return Err(Error::Other(format!(
            "{} is missing: run `cargo build --release --manifest-path bench/peers/rust/Cargo.toml` with CARGO_TARGET_DIR=target/bench-peers (make bench does)",
            rust_peer.display()
        )));
    }
    Ok(kinds(&client_go, &rust_peer))
}

/// The four peer configurations.
fn kinds(client_go: &Path, rust_peer: &Path) -> Vec<PeerKind> {
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
    /// lease -> the candidates that printed "started" and not "stopped" since: those that
    /// believe they lead. More than one is a split brain (a library that writes the Lease
    /// without a resourceVersion precondition lets two candidates both acquire it).
    believers: HashMap<String, Vec<Started>>,
    /// How often a candidate started leading while another still believed it led.
    overlaps: u64,
}

/// Three (or more, over time) candidate processes of one peer kind for `groups` Leases.
pub struct PeerGroup {
    kind: PeerKind,
    /// Reads the Leases: the holder they name is the leader to stop.
    client: Client,
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
        client: &Client,
        kubeconfig: &Path,
        namespace: &str,
        groups: usize,
        log_dir: &Path,
    ) -> Result<PeerGroup> {
        let (changed, _) = watch::channel(0);
        let mut group = PeerGroup {
            kind: kind.clone(),
            client: client.clone(),
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
                    let believers = s.believers.entry((*lease).to_owned()).or_default();
                    believers.retain(|b| b.identity != *identity);
                    if *event == "started" {
                        believers.push(Started {
                            identity: (*identity).to_owned(),
                            at,
                        });
                        if believers.len() > 1 {
                            s.overlaps += 1;
                        }
                    }
                }
                changed.send_modify(|n| *n += 1);
            }
        });
        self.candidates.insert(identity, child);
        Ok(())
    }

    /// The candidates that believe they lead `lease`.
    fn believers(&self, lease: &str) -> Vec<Started> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.believers.get(lease).cloned())
            .unwrap_or_default()
    }

    /// How often two candidates believed they led one Lease at the same time.
    pub fn overlaps(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.overlaps)
    }

    /// The candidate the Lease names as its holder, once it is the only one that believes it
    /// leads. A library without a resourceVersion precondition can let two candidates acquire
    /// at once; the loser believes it leads until its next renewal shows it the holder. Were the
    /// holder stopped meanwhile, the loser would take the released Lease over without a new
    /// OnStartedLeading (it never stopped leading), and no handover could be timed.
    async fn holder(&self, lease: &str) -> Result<Started> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let deadline = tokio::time::Instant::now() + self.kind.lease * 3;
        loop {
            let holder = api
                .get_opt(lease)
                .await?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity);
            if let [sole] = self.believers(lease).as_slice()
                && Some(&sole.identity) == holder.as_ref()
            {
                return Ok(sole.clone());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Other(format!(
                    "{}: the holder of Lease {lease} ({holder:?}) is not the one candidate that believes it leads",
                    self.kind.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
                let first = s
                    .believers
                    .get(&Self::lease(i))?
                    .iter()
                    .map(|b| b.at)
                    .min()?;
                last = last.max(first);
            }
            Some(last)
        })
        .await
    }

    /// Stops the leader of Lease 0, the candidate its holderIdentity names (`kill`: SIGKILL;
    /// otherwise SIGTERM), and returns the milliseconds until another candidate printed
    /// OnStartedLeading. The stopped candidate is replaced by a new process, as a Deployment
    /// would replace it.
    pub async fn handover(&mut self, kill: bool) -> Result<f64> {
        let lease = Self::lease(0);
        let old = self.holder(&lease).await?;
        let mut child = self
            .candidates
            .remove(&old.identity)
            .ok_or_else(|| Error::Other(format!("no process for {}", old.identity)))?;
        // From the signal on, the old leader is going (SIGTERM: it releases, and may print
        // "stopped" only after a successor started) or gone (SIGKILL: it prints nothing more):
        // its belief no longer counts, so only two live candidates make a split brain.
        if let Ok(mut s) = self.state.lock()
            && let Some(believers) = s.believers.get_mut(&lease)
        {
            believers.retain(|b| b.identity != old.identity);
        }
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
                self.believers(&lease)
                    .into_iter()
                    .find(|b| b.identity != old.identity && b.at >= t0)
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
