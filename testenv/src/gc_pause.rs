//! The GC-pause scenario on the light cluster, shared by the test (`tests/it/gc_pause.rs`) and
//! `make demo` (`examples/demo.rs`), so the demo shows exactly what the test checks. Behind the
//! feature `gc-pause` (it reads the ledger table with tokio-postgres).
//!
//! A private PostgreSQL, the operator binary, three simulated pods (`ledger-0..2`, Ready through
//! the simulated kubelet) and three ledger writers, local processes standing for the pods'
//! containers (`POD_NAME` of one pod each, `KUBECONFIG` of the light cluster). Then:
//!
//! 1. the leader's process is frozen with SIGSTOP (the GC pause), and its pod reported NotReady
//!    (as its readiness probe would fail while the process does not answer);
//! 2. the operator moves leadership; the new leader's writer learns it and writes at epoch e+1;
//! 3. the old process is thawed with SIGCONT. The ledger runs with `--write-through-pause`: a
//!    writer that finds it was frozen completes the write it had checked before the freeze, with
//!    the epoch it held then, before looking at its role again. That is the lesson's case, a
//!    pause landing between "am I the leader?" and the write, made to happen on every run instead
//!    of by chance: the old writer still believes it leads, and only the fence in PostgreSQL
//!    stands between its stale epoch and the ledger.
//!
//! Every process started here is stopped when the [`Scenario`] drops, the frozen one included
//! (SIGCONT, then SIGKILL).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kube::api::PostParams;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, Command},
};

use crate::crd::{leader_group, leader_groups};
use crate::histories::{Accepted, fence_regressions};
use crate::{Error, Kubelet, OperatorLaunch, OperatorProcess, Postgres, Result, TestNamespace};

/// The group, and the fence row's name.
pub const GROUP: &str = "ledger";
/// The label selecting the group's pods, and its value.
const APP: (&str, &str) = ("app", "ledger");
/// The group's Lease duration.
const LEASE_SECONDS: u32 = 15;
/// How long the leader stays frozen at least: longer than the ledger's pause detection (1 s
/// plus an interval), shorter than two thirds of the Lease duration (10 s), so the thawed writer
/// still holds a role it believes confirmed.
const FREEZE_AT_LEAST: Duration = Duration::from_millis(2500);
const WAIT: Duration = Duration::from_secs(30);

/// What the scenario needs from its caller: the cluster, a namespace with the CRD installed, the
/// two binaries, a folder for the logs, and where to tell the story.
pub struct Setup<'a> {
    pub kubeconfig: &'a Path,
    pub ns: &'a TestNamespace,
    pub operator_bin: PathBuf,
    pub ledger_bin: PathBuf,
    pub log_dir: PathBuf,
    pub narrate: &'a (dyn Fn(&str) + Sync),
}

/// An accepted write: a row of the ledger table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub id: i64,
    pub epoch: i64,
    pub writer: String,
}

/// A write PostgreSQL refused, as its writer reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub writer: String,
    pub presented: i64,
    pub fence: i64,
}

/// Everything observed.
#[derive(Debug, Default)]
pub struct Report {
    /// The ledger table in id order (commit order: the fence row is locked from the fence to the
    /// commit, so fenced inserts take their ids one transaction at a time).
    pub rows: Vec<Row>,
    /// Every write a writer reported as accepted (`wrote` lines): each must be a row.
    pub reported: Vec<Row>,
    pub refusals: Vec<Refusal>,
    /// Writes that failed for another reason (a session PostgreSQL ended, a lost connection).
    pub failed: usize,
    /// The frozen leader and its epoch; the next leader and its epoch.
    pub old: (String, i64),
    pub new: (String, i64),
    pub frozen_for: Duration,
    /// From the freeze to the new leader's first accepted write.
    pub freeze_to_new_write: Duration,
    /// From the thaw to the old writer's refused write.
    pub thaw_to_refusal: Duration,
    /// From the thaw to the old writer's `stopped` (its role no longer Leader at its epoch).
    pub thaw_to_stopped: Option<Duration>,
}

impl Report {
    /// What went wrong: accepted epochs that decrease in commit order, an older epoch accepted
    /// after a newer one, an epoch written by two writers, a reported write missing from the
    /// table, a refusal that was not stale, and no refusal of the thawed writer at all.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        // The ledger's ids are its commit order: the fence's log, as the histories check it.
        let accepted: Vec<Accepted> = self
            .rows
            .iter()
            .map(|r| Accepted {
                at_ms: r.id as f64,
                token: u64::try_from(r.epoch).unwrap_or(0),
            })
            .collect();
        for r in fence_regressions(&accepted) {
            v.push(format!(
                "row {} at epoch {} accepted after row {} at epoch {}",
                r.at_ms, r.token, r.newest_at_ms, r.newest
            ));
        }
        let mut writer_of = std::collections::BTreeMap::new();
        for row in &self.rows {
            if let Some(other) = writer_of.insert(row.epoch, &row.writer)
                && other != &row.writer
            {
                v.push(format!(
                    "epoch {} written by {other} and by {}",
                    row.epoch, row.writer
                ));
            }
        }
        for r in &self.reported {
            if !self.rows.contains(r) {
                v.push(format!("reported write {r:?} is not in the ledger"));
            }
        }
        for r in &self.refusals {
            if r.presented >= r.fence {
                v.push(format!("refusal {r:?} was not of a stale epoch"));
            }
        }
        if !self
            .refusals
            .iter()
            .any(|r| r.writer == self.old.0 && r.presented == self.old.1 && r.fence >= self.new.1)
        {
            v.push(format!(
                "the thawed writer {} was never refused at epoch {}: {:?}",
                self.old.0, self.old.1, self.refusals
            ));
        }
        if self.new.1 <= self.old.1 {
            v.push(format!(
                "the new epoch {} is not above the old {}",
                self.new.1, self.old.1
            ));
        }
        v
    }
}

/// The processes and the database of one run; dropping it stops them all.
pub struct Scenario {
    pub postgres: Postgres,
    operator: Option<OperatorProcess>,
    writers: Vec<Writer>,
}

/// One ledger process and the event lines it printed.
struct Writer {
    pod: String,
    child: Child,
    frozen: bool,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Writer {
    fn pid(&self) -> String {
        self.child.id().map(|p| p.to_string()).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let _ = std::process::Command::new("kill")
            .args([signal, &self.pid()])
            .status();
    }

    fn freeze(&mut self) {
        self.signal("-STOP");
        self.frozen = true;
    }

    fn thaw(&mut self) {
        self.signal("-CONT");
        self.frozen = false;
    }

    /// The event lines so far, with `ledger: ` removed, and when they were read.
    fn events(&self) -> Vec<(Instant, String)> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.frozen {
            self.signal("-CONT");
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        self.writers.clear();
        // The operator is killed as it drops.
        self.operator = None;
    }
}

/// The value of `key=` in an event line.
fn field<'l>(line: &'l str, key: &str) -> Option<&'l str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

async fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(t) = probe() {
            return Ok(t);
        }
        if start.elapsed() > WAIT {
            return Err(Error::Timeout {
                what: what.to_owned(),
                timeout: WAIT,
                last: String::new(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Scenario {
    /// Runs the scenario; the [`Scenario`] is returned with the report so the caller decides when
    /// everything stops (on drop).
    pub async fn run(setup: &Setup<'_>) -> Result<(Scenario, Report)> {
        let say = setup.narrate;
        std::fs::create_dir_all(&setup.log_dir)
            .map_err(Error::io(format!("creating {}", setup.log_dir.display())))?;
        let postgres = Postgres::start().await?;
        say(&format!(
            "PostgreSQL on 127.0.0.1:{} (a private server for this run)",
            postgres.port()
        ));
        let mut scenario = Scenario {
            postgres,
            operator: None,
            writers: Vec::new(),
        };
        let report = scenario.play(setup).await?;
        Ok((scenario, report))
    }

    async fn play(&mut self, setup: &Setup<'_>) -> Result<Report> {
        let say = setup.narrate;
        let ns = &setup.ns.name;
        let kubelet = Kubelet::new(setup.ns.client.clone(), ns);
        let pods: Vec<String> = (0..3).map(|i| format!("ledger-{i}")).collect();
        for pod in &pods {
            kubelet.create_ready_pod(pod, &[APP]).await?;
        }
        leader_groups(&setup.ns.client, ns)
            .create(
                &PostParams::default(),
                &leader_group(GROUP, APP.0, APP.1, LEASE_SECONDS)?,
            )
            .await
            .map_err(Error::kube(format!("creating LeaderGroup {GROUP}")))?;
        say(&format!(
            "namespace {ns}: LeaderGroup {GROUP} and pods {} (Ready, simulated kubelet)",
            pods.join(", ")
        ));

        let log_path = |name: &str| setup.log_dir.join(format!("{ns}-{name}.log"));
        let log = |name: &str| {
            let path = log_path(name);
            std::fs::File::create(&path).map_err(Error::io(format!("creating {}", path.display())))
        };
        let launch = OperatorLaunch::new(
            &setup.operator_bin,
            setup.kubeconfig,
            Some(ns),
            "gc-pause-operator",
            log_path("operator"),
        );
        self.operator = Some(OperatorProcess::start(&launch).await?);

        let database = format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.postgres.port()
        );
        for pod in &pods {
            let stderr = log(pod)?;
            let mut child = Command::new(&setup.ledger_bin)
                .env("KUBECONFIG", setup.kubeconfig)
                .env("POD_NAME", pod)
                .env("POD_NAMESPACE", ns)
                .env("LEADERGROUP_GROUP", GROUP)
                .env("DATABASE_URL", &database)
                .env("LEDGER_INTERVAL_MS", "100")
                .env("HTTP_ADDR", "127.0.0.1:0")
                .env("LEDGER_WRITE_THROUGH_PAUSE", "true")
                .env("RUST_LOG", "info,kube=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(stderr)
                .kill_on_drop(true)
                .spawn()
                .map_err(Error::io(format!(
                    "starting {}",
                    setup.ledger_bin.display()
                )))?;
            let lines = Arc::new(Mutex::new(Vec::new()));
            let stdout = child
                .stdout
                .take()
                .ok_or_else(|| Error::Unexpected(format!("{pod}'s writer has no stdout")))?;
            let sink = Arc::clone(&lines);
            let mut copy = tokio::fs::File::from_std(log(&format!("{pod}.stdout"))?);
            tokio::spawn(async move {
                let mut reader = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    let _ = copy.write_all(format!("{line}\n").as_bytes()).await;
                    if let Some(event) = line.strip_prefix("ledger: ")
                        && let Ok(mut l) = sink.lock()
                    {
                        l.push((Instant::now(), event.to_owned()));
                    }
                }
            });
            self.writers.push(Writer {
                pod: pod.clone(),
                child,
                frozen: false,
                lines,
            });
        }
        say("operator and three ledger writers started (local processes, one per pod)");

        // The first leader writes.
        let (old_i, old_epoch) = wait_for("a leader's third write", || {
            self.writers.iter().enumerate().find_map(|(i, w)| {
                let wrote: Vec<i64> = w
                    .events()
                    .iter()
                    .filter(|(_, l)| l.starts_with("wrote "))
                    .filter_map(|(_, l)| field(l, "epoch")?.parse().ok())
                    .collect();
                (wrote.len() >= 3).then(|| (i, wrote[wrote.len() - 1]))
            })
        })
        .await?;
        let old_pod = self.writers[old_i].pod.clone();
        say(&format!(
            "{old_pod} leads at epoch {old_epoch} and writes every 100 ms"
        ));

        // The GC pause.
        self.writers[old_i].freeze();
        let frozen_at = Instant::now();
        kubelet.set_ready(&old_pod, false).await?;
        say(&format!(
            "SIGSTOP {old_pod} (pid {}): the GC pause; its readiness probe fails, the kubelet reports it NotReady",
            self.writers[old_i].pid()
        ));

        let (new_i, new_epoch, new_write_at) = wait_for("the new leader's writes", || {
            self.writers.iter().enumerate().find_map(|(i, w)| {
                let wrote: Vec<(Instant, i64)> = w
                    .events()
                    .iter()
                    .filter(|(t, l)| l.starts_with("wrote ") && *t > frozen_at)
                    .filter_map(|(t, l)| Some((*t, field(l, "epoch")?.parse().ok()?)))
                    .collect();
                (i != old_i && wrote.len() >= 3).then(|| (i, wrote[0].1, wrote[0].0))
            })
        })
        .await?;
        let new_pod = self.writers[new_i].pod.clone();
        let freeze_to_new_write = new_write_at - frozen_at;
        say(&format!(
            "{new_pod} leads at epoch {new_epoch}: first write {:.0} ms after the freeze",
            freeze_to_new_write.as_secs_f64() * 1000.0
        ));

        if let Some(rest) = FREEZE_AT_LEAST.checked_sub(frozen_at.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        let frozen_for = frozen_at.elapsed();
        self.writers[old_i].thaw();
        let thawed_at = Instant::now();
        say(&format!(
            "SIGCONT {old_pod} after {:.1} s frozen: it still holds epoch {old_epoch} and finishes the write it had checked before the pause",
            frozen_for.as_secs_f64()
        ));

        let old = &self.writers[old_i];
        let (refused_at, refusal) = wait_for("the thawed writer's refusal", || {
            old.events()
                .into_iter()
                .find(|(t, l)| *t > thawed_at && l.starts_with("refused "))
        })
        .await?;
        let thaw_to_refusal = refused_at - thawed_at;
        say(&format!(
            "PostgreSQL refused {old_pod}'s write {:.0} ms after the thaw: {}",
            thaw_to_refusal.as_secs_f64() * 1000.0,
            refusal
                .split_once('(')
                .map_or(refusal.as_str(), |(_, r)| r.trim_end_matches(')'))
        ));
        let stopped = wait_for("the thawed writer to learn it lost", || {
            old.events()
                .into_iter()
                .find(|(t, l)| *t > thawed_at && l.starts_with("role ") && !l.contains("leader/"))
        })
        .await
        .ok();
        let thaw_to_stopped = stopped.as_ref().map(|(t, _)| *t - thawed_at);
        if let (Some((_, line)), Some(d)) = (&stopped, thaw_to_stopped) {
            say(&format!(
                "{old_pod} learns its role {:.0} ms after the thaw: {}",
                d.as_secs_f64() * 1000.0,
                field(line, "role").unwrap_or("?")
            ));
        }

        // A few more writes of the new leader, then every writer stops before the table is read.
        let after = Instant::now();
        let new = &self.writers[new_i];
        wait_for("the new leader to write on", || {
            (new.events()
                .iter()
                .filter(|(t, l)| *t > after && l.starts_with("wrote "))
                .count()
                >= 3)
                .then_some(())
        })
        .await?;
        let events: Vec<(String, Vec<(Instant, String)>)> = self
            .writers
            .iter()
            .map(|w| (w.pod.clone(), w.events()))
            .collect();
        self.writers.clear();

        let mut report = Report {
            old: (old_pod, old_epoch),
            new: (new_pod, new_epoch),
            frozen_for,
            freeze_to_new_write,
            thaw_to_refusal,
            thaw_to_stopped,
            ..Report::default()
        };
        for (pod, lines) in &events {
            for (_, l) in lines {
                let num = |k| field(l, k).and_then(|v| v.parse::<i64>().ok());
                if l.starts_with("wrote ")
                    && let (Some(id), Some(epoch)) = (num("id"), num("epoch"))
                {
                    report.reported.push(Row {
                        id,
                        epoch,
                        writer: pod.clone(),
                    });
                } else if l.starts_with("refused ")
                    && let (Some(presented), Some(fence)) = (num("epoch"), num("fence"))
                {
                    report.refusals.push(Refusal {
                        writer: pod.clone(),
                        presented,
                        fence,
                    });
                } else if l.starts_with("failed ") {
                    report.failed += 1;
                }
            }
        }
        report.rows = self.ledger().await?;
        Ok(report)
    }

    /// The ledger table in id order.
    async fn ledger(&self) -> Result<Vec<Row>> {
        let failed =
            |e: tokio_postgres::Error| Error::Unexpected(format!("reading the ledger: {e}"));
        let (db, connection) =
            tokio_postgres::connect(&self.postgres.connection_string(), tokio_postgres::NoTls)
                .await
                .map_err(failed)?;
        tokio::spawn(connection);
        db.query("SELECT id, epoch, writer FROM ledger ORDER BY id", &[])
            .await
            .map_err(failed)?
            .iter()
            .map(|r| {
                Ok(Row {
                    id: r.try_get(0).map_err(failed)?,
                    epoch: r.try_get(1).map_err(failed)?,
                    writer: r.try_get(2).map_err(failed)?,
                })
            })
            .collect()
    }
}
