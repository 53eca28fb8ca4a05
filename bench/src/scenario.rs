//! What every scenario is to the harness ([`Scenario`]), and what it measures with
//! ([`Context`]): the light control plane (started when a scenario first needs it), the operator
//! binary, the idle baseline, the peers, and the run's record.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use kube::CustomResourceExt;
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::{OperatorLaunch, OperatorProcess};
use tokio::sync::OnceCell;

use crate::error::{Error, Result};
use crate::markdown::Block;
use crate::observe::{RequestCounts, steady_window};
use crate::ours::{ALL_LED_BOUND, CREATE_CONCURRENCY, Groups, LEASE_SECONDS};
use crate::peers::PeerKind;
use crate::results::{Record, Results, Run, Start};

/// Our name in the tables; in the end-to-end ones, its liveness mode follows in parentheses.
pub const OURS: &str = "leadergroup-operator";

/// A benchmark scenario: measured alone (`--only NAME`) or in the full run, it writes its
/// results files; from them, it renders its blocks of docs/benchmarks.md.
pub struct Scenario {
    /// Its name: `--only NAME`, and the prefix of its blocks' names.
    pub name: &'static str,
    /// What `--help` says of it.
    pub help: &'static str,
    /// Its results files, `bench/results/<FILE>.json`.
    pub files: &'static [&'static str],
    /// Whether the full run (no `--only`) measures it; if not, the page may lack its results.
    pub in_full_run: bool,
    /// Measures it; the peers' part, if any, waits for [`Outcome::measure_peers`].
    pub measure: fn(&Context) -> Measuring<'_>,
    /// Its blocks of the page from its results files, in the order of `files`.
    pub render: fn(&[Record]) -> Vec<Block>,
}

impl Scenario {
    /// Its blocks of the page; none while a file of a scenario outside the full run is missing
    /// (the page keeps what it had).
    pub fn blocks(&self, results: &Results) -> Result<Vec<Block>> {
        let mut records = Vec::new();
        for file in self.files {
            match results.read(file)? {
                Some(record) => records.push(record),
                None if !self.in_full_run => return Ok(Vec::new()),
                None => {
                    return Err(Error::Other(format!(
                        "bench/results/{file}.json is missing"
                    )));
                }
            }
        }
        Ok((self.render)(&records))
    }
}

/// What [`Scenario::measure`] returns.
pub type Measuring<'a> = LocalBoxFuture<'a, Result<Box<dyn Outcome>>>;

/// `measurement` as a [`Measuring`].
pub fn measuring<'a, O: Outcome + 'static>(
    measurement: impl Future<Output = Result<O>> + 'a,
) -> Measuring<'a> {
    Box::pin(async move { Ok(Box::new(measurement.await?) as Box<dyn Outcome>) })
}

/// A scenario's measurement, until it is written.
pub trait Outcome {
    /// Measures the peers: after every scenario measured ours, since the peers' many processes
    /// load the machine more.
    fn measure_peers<'a>(&'a mut self, _ctx: &'a Context) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// Writes its results files, each with `run` (the run's record as it ended).
    fn write(&mut self, run: &Run, results: &Results) -> Result<()>;
    /// What its checks found over the run (must be empty): a scenario run alone fails on it.
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }
}

/// One results file as measured, written with the run's record; its `problems` samples are what
/// its checks found.
pub struct Measured(pub &'static str, pub Record);

impl Outcome for Measured {
    fn write(&mut self, run: &Run, results: &Results) -> Result<()> {
        self.1.run = run.clone();
        results.write(self.0, &self.1)
    }

    fn problems(&self) -> Vec<String> {
        self.1.text("", "", "problems").into_iter().collect()
    }
}

/// The command line: which scenarios run, and their settings.
#[derive(clap::Parser, Clone, Debug)]
#[command(
    name = "leadergroup-bench",
    about = "Benchmarks of leadergroup-operator against client-go and the Rust crates"
)]
pub struct Options {
    /// A handful of repetitions of every scenario: a smoke test of the harness, not figures to
    /// publish.
    #[arg(long)]
    pub quick: bool,
    /// The group counts of the scale scenario (default 1,100,1000); with `--only scale-10k`, its
    /// first value is the number of groups (default 10000).
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub scale: Option<Vec<usize>>,
    /// The repository whose bench/results and docs/benchmarks.md are written (default: the one
    /// this binary was built from).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Run one scenario alone and write only its results (the page's tables are rewritten from
    /// bench/results).
    #[arg(long, value_parser = crate::only_values())]
    pub only: Option<String>,
    /// `--only e2e`: the real cluster's --node-monitor-grace-period, seconds (default 50,
    /// `--quick` 10).
    #[arg(long, value_name = "SECS")]
    pub grace: Option<u32>,
    /// `--only scale-10k`: the groups' Lease duration, seconds (default the CRD's, 15).
    #[arg(long, value_name = "SECS")]
    pub lease: Option<i32>,
}

/// The light control plane, the operator binary measured on it, and the run's record.
pub struct Light {
    /// The control plane (its own, or the one `LEADERGROUP_KUBECONFIG` names).
    pub cp: &'static leadergroup_testenv::ControlPlane,
    pub admin: kube::Client,
    pub operator: PathBuf,
    /// The kernel's clock ticks per second, for /proc's CPU times.
    pub ticks: f64,
    run: Mutex<Run>,
}

impl Light {
    /// The run's record so far.
    pub fn run(&self) -> Run {
        self.run.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Changes the run's record.
    pub fn record(&self, change: impl FnOnce(&mut Run)) {
        if let Ok(mut run) = self.run.lock() {
            change(&mut run);
        }
    }
}

/// What the scenarios of one invocation share.
pub struct Context {
    pub repo: PathBuf,
    /// Where processes' logs and the `--only` excerpts go (`target/bench-logs`).
    pub log_dir: PathBuf,
    pub options: Options,
    started: Instant,
    /// When the invocation started, and the commit it measures.
    pub start: Start,
    light: OnceCell<Light>,
    baseline: OnceCell<RequestCounts>,
    peers: OnceCell<Vec<PeerKind>>,
}

impl Context {
    /// A context for `repo`; nothing started yet.
    pub fn new(repo: PathBuf, options: Options) -> Result<Context> {
        let log_dir = repo.join("target/bench-logs");
        std::fs::create_dir_all(&log_dir).map_err(Error::io("creating target/bench-logs"))?;
        Ok(Context {
            start: Start::now(&repo),
            repo,
            log_dir,
            options,
            started: Instant::now(),
            light: OnceCell::new(),
            baseline: OnceCell::new(),
            peers: OnceCell::new(),
        })
    }

    /// When the invocation started, on the monotonic clock.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// `full` repetitions, or `quick` ones with `--quick`.
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.options.quick { quick } else { full }
    }

    /// A steady-state window of ours.
    pub fn window(&self) -> Duration {
        self.pick(Duration::from_secs(30), Duration::from_secs(5))
    }

    /// How long to let things settle once every group is led.
    pub fn settle(&self) -> Duration {
        self.pick(Duration::from_secs(10), Duration::from_secs(2))
    }

    /// The light control plane with the CRD installed, started on the first call.
    pub async fn light(&self) -> Result<&Light> {
        self.light
            .get_or_try_init(|| async {
                let operator = crate::ours::release_binary("leadergroup-operator")?;
                tracing::info!("control plane");
                let cp = leadergroup_testenv::control_plane().await?;
                let admin = cp.client().await?;
                leadergroup_testenv::install_crd(&admin, &LeaderGroup::crd()).await?;
                let run = Run::describe(&admin, &self.start, cp, self.options.quick).await?;
                Ok(Light {
                    cp,
                    admin,
                    operator,
                    ticks: crate::observe::ticks_per_second(),
                    run: Mutex::new(run),
                })
            })
            .await
    }

    /// Starts the operator on the light control plane, watching `namespace` (every namespace
    /// when None), logging to `<log_dir>/<log>` (`BENCH_OPERATOR_LOG=info`: each handover's step
    /// timings).
    pub async fn start_operator(
        &self,
        namespace: Option<&str>,
        log: &str,
    ) -> Result<OperatorProcess> {
        let light = self.light().await?;
        self.start_operator_via(namespace, log, light.cp.kubeconfig_path())
            .await
    }

    /// [`Context::start_operator`] with `kubeconfig` (a proxy's, say) instead of the admin's.
    pub async fn start_operator_via(
        &self,
        namespace: Option<&str>,
        log: &str,
        kubeconfig: &std::path::Path,
    ) -> Result<OperatorProcess> {
        let light = self.light().await?;
        let log = self.log_dir.join(log);
        // A fresh log per run: the launch appends.
        let _ = std::fs::remove_file(&log);
        let level = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
        let launch = OperatorLaunch::new(
            &light.operator,
            kubeconfig,
            namespace,
            "bench-operator",
            log,
        )
        .rust_log(&level);
        Ok(OperatorProcess::start(&launch).await?)
    }

    /// `count` groups of three Ready pods in a fresh namespace, every one led by an operator
    /// watching that namespace (logging to `<log_dir>/<log>`).
    pub async fn led_groups(
        &self,
        prefix: &str,
        count: usize,
        log: &str,
    ) -> Result<(Groups, OperatorProcess)> {
        let groups = Groups::create(prefix, count, CREATE_CONCURRENCY, LEASE_SECONDS).await?;
        let op = self.start_operator(Some(&groups.namespace), log).await?;
        groups.wait_all_led(ALL_LED_BOUND).await?;
        Ok((groups, op))
    }

    /// The idle API server's own requests per second, measured on the first call.
    pub async fn baseline(&self) -> Result<&RequestCounts> {
        self.baseline
            .get_or_try_init(|| async {
                let light = self.light().await?;
                let window = self.pick(Duration::from_secs(15), Duration::from_secs(3));
                tracing::info!("baseline: {} s of an idle API server", window.as_secs());
                let idle = steady_window(&light.admin, window, None, Default::default);
                let baseline = idle.await?.requests;
                light.record(|run| run.baseline_requests_per_s = baseline.clone());
                Ok(baseline)
            })
            .await
    }

    /// The four peer configurations, their binaries built or checked on the first call.
    pub async fn peers(&self) -> Result<&[PeerKind]> {
        let kinds = self
            .peers
            .get_or_try_init(|| crate::peers::build(&self.repo))
            .await?;
        Ok(kinds)
    }

    /// The run's record as it ends now (a default one when nothing ran on the light cluster).
    pub fn finished_run(&self) -> Run {
        let mut run = self.light.get().map(Light::run).unwrap_or_default();
        run.finish(self.started);
        run
    }
}
