//! The results files `bench/results/<name>.json` (every sample), and what each says about the
//! run that made it. Knows no scenario.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::markdown::Table;
use crate::observe::RequestCounts;

/// A results file of the bench: the record of the run that measured it, then every sample.
pub type Record = leadergroup_testenv::record::Record<Run>;

/// What every results file says about the run.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct Run {
    /// When it started and ended (UTC).
    pub started_at: String,
    pub finished_at: String,
    /// The commit it measured (HEAD when it started), and the tracked files that differed from
    /// it then: what the binaries were built from.
    pub commit: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uncommitted: Vec<String>,
    pub command: String,
    /// `--quick`: a smoke run, not figures to publish.
    pub quick: bool,
    /// CPU model, cores, memory.
    pub machine: BTreeMap<String, String>,
    /// Versions of everything measured.
    pub versions: BTreeMap<String, String>,
    /// Own control plane or a shared one.
    pub control_plane: String,
    /// The idle API server's own requests per second (subtracted from every window).
    pub baseline_requests_per_s: RequestCounts,
    /// Times the independent watch saw two pods of one group labeled leader (must be 0).
    pub double_leaders: u64,
    /// Per peer kind, in the handover scenarios: how often a candidate started leading while
    /// another still believed it led (a split brain; each library's own OnStartedLeading).
    pub peer_split_brains: BTreeMap<String, u64>,
    /// Per peer kind: why its handover repetitions stopped early, if they did.
    pub peer_failures: BTreeMap<String, String>,
    pub duration_s: f64,
}

/// When a run started, and the commit it measures.
#[derive(Clone, Debug)]
pub struct Start {
    pub at: jiff::Timestamp,
    pub commit: String,
    pub uncommitted: Vec<String>,
}

impl Start {
    /// Now, and `repo`'s HEAD and its tracked files changed since.
    pub fn now(repo: &Path) -> Start {
        let (commit, uncommitted) = leadergroup_testenv::record::checkout(repo);
        Start {
            at: jiff::Timestamp::now(),
            commit,
            uncommitted,
        }
    }
}

/// A time as every run record writes it.
pub fn utc(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

impl Run {
    /// The machine, the versions and the control plane `cp` of a run begun at `start`.
    pub async fn describe(
        admin: &kube::Client,
        start: &Start,
        cp: &leadergroup_testenv::ControlPlane,
        quick: bool,
    ) -> Result<Run> {
        let apiserver = admin.apiserver_version().await?.git_version;
        let head = start.commit.get(..7).unwrap_or(&start.commit);
        let versions = [
            ("kube-apiserver", apiserver.as_str()),
            (
                "leadergroup-operator",
                &format!("{} ({head})", env!("CARGO_PKG_VERSION")),
            ),
            ("client-go", "v0.37.2 (tools/leaderelection, LeaseLock)"),
            ("kube-leader-election", "0.44.0 (kube 4)"),
            ("kube-lease-manager", "0.13.1 (kube 5)"),
            ("operator kube", "kube 5, k8s-openapi 0.29 (v1_37)"),
            ("rustc", &command_line("rustc", &["--version"])),
            ("go", &command_line("go", &["version"])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let control_plane = match cp.cluster_dir() {
            Some(dir) => format!(
                "its own, started by leadergroup-testenv in {} (etcd + kube-apiserver on loopback)",
                in_repo(dir).display()
            ),
            None => format!(
                "shared, from {} (other clients may add load and requests)",
                leadergroup_testenv::KUBECONFIG_ENV
            ),
        };
        // The arguments the binary got are the BENCH_ARGS of `make bench`.
        let args: Vec<String> = std::env::args().skip(1).collect();
        let command = if args.is_empty() {
            "make bench".into()
        } else {
            format!("make bench BENCH_ARGS='{}'", args.join(" "))
        };
        Ok(Run {
            machine: machine(),
            started_at: utc(start.at),
            commit: start.commit.clone(),
            uncommitted: start.uncommitted.clone(),
            command,
            quick,
            versions,
            control_plane,
            ..Run::default()
        })
    }

    /// The commit it measured, else the version it recorded (a run from before commits were).
    pub fn commit_or_version(&self) -> String {
        match (
            self.commit.get(..7),
            self.versions.get("leadergroup-operator"),
        ) {
            (Some(commit), _) => format!("commit {commit}"),
            (None, Some(version)) => format!("leadergroup-operator {version}"),
            (None, None) => "an unrecorded version".into(),
        }
    }

    /// Ends it now: when, and how long it took since `started`.
    pub fn finish(&mut self, started: std::time::Instant) {
        self.finished_at = utc(jiff::Timestamp::now());
        self.duration_s = started.elapsed().as_secs_f64();
    }

    /// Its command, when it started and how long it took, as the page's run tables begin.
    pub fn table(&self, more_columns: &[&str]) -> Table {
        let mut table = Table::new(&[&["command", "started", "took"], more_columns].concat());
        table.row([
            format!("`{}`", self.command),
            self.started_at.clone(),
            format!("{:.0} s", self.duration_s),
        ]);
        table
    }
}

/// CPU model, cores, memory and kernel of this machine.
fn machine() -> BTreeMap<String, String> {
    let proc_line = |file: &str, key: &str| {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(key))
            .map(str::to_owned)
    };
    let mut machine = BTreeMap::new();
    if let Some((_, model)) = proc_line("/proc/cpuinfo", "model name")
        .as_deref()
        .and_then(|l| l.split_once(':'))
    {
        machine.insert("cpu".into(), model.trim().to_owned());
    }
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    machine.insert("cores".into(), cores.to_string());
    if let Some(kib) = proc_line("/proc/meminfo", "MemTotal:")
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
    {
        machine.insert("memory".into(), format!("{:.1} GiB", kib / 1024.0 / 1024.0));
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    machine.insert("kernel".into(), kernel.trim().to_owned());
    machine
}

/// A program's trimmed stdout, or "?".
fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".into())
}

/// The folder of the results files.
#[derive(Clone, Debug)]
pub struct Results(PathBuf);

impl Results {
    /// `<repo>/bench/results`.
    pub fn of(repo: &Path) -> Results {
        Results(repo.join("bench/results"))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(format!("{name}.json"))
    }

    /// Reads `<name>.json`, None when there is none (a scenario not run yet).
    pub fn read(&self, name: &str) -> Result<Option<Record>> {
        Ok(Record::read(&self.path(name))?)
    }

    /// Writes `<name>.json`, pretty.
    pub fn write(&self, name: &str, record: &Record) -> Result<()> {
        Ok(record.write(&self.path(name))?)
    }
}

/// `path` relative to the repository when it lies in it: the page names no folder of the machine
/// it was measured on.
pub fn in_repo(path: &Path) -> PathBuf {
    let root = crate::repo_root();
    path.strip_prefix(&root).unwrap_or(path).to_path_buf()
}
