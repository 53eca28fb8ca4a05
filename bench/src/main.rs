//! `leadergroup-bench`: runs every benchmark scenario of issue 5 against one control plane (its
//! own, started through leadergroup-testenv, or the one `LEADERGROUP_KUBECONFIG` names), then
//! writes `bench/results/<scenario>.json` (every sample) and `docs/benchmarks.md`. `--only` runs
//! one scenario alone; `--help` lists the flags ([`Cli`]). An unknown flag is refused before
//! anything runs: a typo must not start a twelve-minute run that overwrites published results.

mod app_latency;
mod e2e;
mod e2e_report;
mod error;
mod heartbeat_writes;
mod observe;
mod ours;
mod peers;
mod report;
mod scale_10k;
mod stats;
mod timeline;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use clap::{Parser, ValueEnum};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::error::{Error, Result};
use crate::observe::{LeaderWatch, RequestCounts, api_requests, ms_between, rates};
use crate::ours::{Groups, OperatorProcess};
use crate::peers::PeerGroup;
use crate::report::{
    Burst, BurstResult, Floor, Handover, HandoverResult, Run, ScaleEntry, ScaleResult,
};

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "leadergroup-bench",
    about = "Benchmarks of leadergroup-operator against client-go and the Rust crates"
)]
struct Cli {
    /// A handful of repetitions of every scenario: a smoke test of the harness, not figures to
    /// publish.
    #[arg(long)]
    quick: bool,
    /// The group counts of the scale scenario (default 1,100,1000); with `--only scale-10k`, its
    /// first value is the number of groups (default 10000).
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    scale: Option<Vec<usize>>,
    /// The repository whose bench/results and docs/benchmarks.md are written (default: the one
    /// this binary was built from).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// Run one scenario alone and write only its results (the page is rewritten from
    /// bench/results).
    #[arg(long, value_enum)]
    only: Option<Only>,
    /// `--only e2e`: the real cluster's --node-monitor-grace-period, seconds (default 50,
    /// `--quick` 10).
    #[arg(long, value_name = "SECS")]
    grace: Option<u32>,
    /// `--only scale-10k`: the groups' Lease duration, seconds (default the CRD's, 15).
    #[arg(long, value_name = "SECS")]
    lease: Option<i32>,
}

/// The scenarios that run alone.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    /// The end-to-end scenarios on a real cluster of their own (as root); writes
    /// bench/results/e2e.json and the page's end-to-end section.
    E2e,
    /// The page's end-to-end section again from bench/results/e2e.json (no measurement).
    E2eRender,
    /// How fast the application learns its role (crate and agent).
    AppLatency,
    /// Heartbeat mode's renewal writes.
    HeartbeatWrites,
    /// 10,000 groups (or the first value of `--scale`), then an operator restart.
    #[value(name = "scale-10k")]
    Scale10k,
    /// The burst of failed leaders.
    Burst,
    /// Ours at the sizes of `--scale`.
    Scale,
    /// Rewrite docs/benchmarks.md from bench/results (no measurement).
    Page,
}

/// Repetitions and windows of one run.
#[derive(Clone, Debug)]
struct Plan {
    baseline_window: Duration,
    floor_reps: usize,
    ours_graceful: usize,
    ours_crash: usize,
    burst_groups: usize,
    bursts: usize,
    scale_sizes: Vec<usize>,
    scale_notready: usize,
    scale_graceful: usize,
    ours_window: Duration,
    peer_sizes: Vec<usize>,
    peer_window: Duration,
    /// (graceful, crash) repetitions per peer kind, in [`peers::kinds`] order.
    peer_reps: Vec<(usize, usize)>,
    settle: Duration,
    /// Handovers of the app-latency scenario.
    app_latency: usize,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            baseline_window: Duration::from_secs(15),
            floor_reps: 300,
            ours_graceful: 100,
            ours_crash: 100,
            burst_groups: 100,
            bursts: 3,
            scale_sizes: vec![1, 100, 1000],
            scale_notready: 40,
            scale_graceful: 20,
            ours_window: Duration::from_secs(30),
            peer_sizes: vec![1, 100],
            peer_window: Duration::from_secs(20),
            peer_reps: vec![(10, 5), (15, 10), (8, 4), (8, 4)],
            settle: Duration::from_secs(10),
            app_latency: 50,
        }
    }

    fn quick() -> Plan {
        Plan {
            baseline_window: Duration::from_secs(3),
            floor_reps: 20,
            ours_graceful: 5,
            ours_crash: 5,
            burst_groups: 10,
            bursts: 1,
            scale_sizes: vec![1, 10],
            scale_notready: 3,
            scale_graceful: 2,
            ours_window: Duration::from_secs(5),
            peer_sizes: vec![2],
            peer_window: Duration::from_secs(5),
            peer_reps: vec![(1, 1), (2, 1), (1, 1), (1, 1)],
            settle: Duration::from_secs(2),
            app_latency: 4,
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leadergroup-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

pub(crate) fn say(msg: impl AsRef<str>) {
    let t = jiff::Timestamp::now().strftime("%H:%M:%S");
    eprintln!("bench {t} {}", msg.as_ref());
}

/// The repository: this crate lives in `<repo>/bench`.
fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(1)
        .map_or_else(|| manifest.to_path_buf(), Path::to_path_buf)
}

async fn run() -> Result<()> {
    let cli = Cli::parse();
    let quick = cli.quick;
    let repo = cli.repo.clone().unwrap_or_else(repo_root);
    let mut plan = if quick { Plan::quick() } else { Plan::full() };
    if let Some(sizes) = &cli.scale {
        plan.scale_sizes.clone_from(sizes);
    }
    let started = Instant::now();

    if cli.only == Some(Only::E2eRender) {
        return e2e::render(&repo);
    }
    if cli.only == Some(Only::E2e) {
        let mut e2e_plan = if quick {
            e2e::Plan::quick()
        } else {
            e2e::Plan::full()
        };
        if let Some(grace) = cli.grace {
            e2e_plan.grace = grace;
        }
        return e2e::only(&e2e_plan, &repo, quick).await;
    }
    let operator = ours::operator_binary()?;
    match cli.only {
        None => {}
        Some(Only::AppLatency) => return only_app_latency(&plan, &repo, &operator, quick).await,
        Some(Only::HeartbeatWrites) => {
            return only_heartbeat_writes(&plan, &repo, &operator, quick).await;
        }
        Some(Only::Scale10k) => return only_scale_10k(&plan, &repo, &operator, &cli).await,
        Some(Only::Burst) => return only_burst(&plan, &repo, &operator, quick).await,
        Some(Only::Scale) => return only_scale(&plan, &repo, &operator, quick).await,
        Some(Only::Page) => return report::rewrite_page(&repo),
        Some(Only::E2e | Only::E2eRender) => {}
    }
    let client_go = tool_output(&repo.join("bench/peers/client-go/build.sh"), &[]).await?;
    let rust_peer = repo.join("target/bench-peers/release/leadergroup-bench-rust-peer");
    if !rust_peer.is_file() {
        return Err(Error::Other(format!(
            "{} is missing: run `cargo build --release --manifest-path bench/peers/rust/Cargo.toml` with CARGO_TARGET_DIR=target/bench-peers (make bench does)",
            rust_peer.display()
        )));
    }
    let kinds = peers::kinds(Path::new(&client_go), &rust_peer);
    let Alone {
        log_dir,
        cp,
        mut run,
        ..
    } = Alone::start(&repo, quick).await?;
    let admin = cp.client().await?;
    let ticks = observe::ticks_per_second();

    say(format!(
        "baseline: {} s of an idle API server",
        plan.baseline_window.as_secs()
    ));
    let before = api_requests(&admin).await?;
    tokio::time::sleep(plan.baseline_window).await;
    let after = api_requests(&admin).await?;
    let baseline = rates(&before, &after, plan.baseline_window.as_secs_f64(), None);
    run.baseline_requests_per_s = baseline.clone();

    say(format!("floor: {} Lease updates", plan.floor_reps));
    let floor = floor(plan.floor_reps).await?;

    // Ours, one group, alone on the server: its latencies are milliseconds, and nothing else may
    // load the machine meanwhile.
    let mut graceful = Vec::new();
    let mut crash = Vec::new();
    {
        let groups = Groups::create("bench-ours", 1).await?;
        let watch = LeaderWatch::start(&groups.client, &groups.namespace).await?;
        let op = OperatorProcess::start(
            &operator,
            cp.kubeconfig_path(),
            &groups.namespace,
            &log_dir.join("operator-single.log"),
        )
        .await?;
        groups.wait_all_led(&watch).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;

        say(format!(
            "ours: {} graceful handovers (leader pod deleted)",
            plan.ours_graceful
        ));
        let (samples, calls) = repeat_counting(&admin, &baseline, plan.ours_graceful, || async {
            let ms = groups.deletion_handover(&watch, "g-0").await?;
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok(ms)
        })
        .await?;
        graceful.push(Handover::new(
            "leadergroup-operator",
            "delete the leader pod; the simulated kubelet removes it 300 ms later; leader label seen by an independent watch",
            samples,
            Some(calls),
        ));

        say(format!(
            "ours: {} crashes (leader pod NotReady)",
            plan.ours_crash
        ));
        let (samples, calls) = repeat_counting(&admin, &baseline, plan.ours_crash, || async {
            let ms = groups.not_ready_handover(&watch, "g-0").await?;
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok(ms)
        })
        .await?;
        crash.push(Handover::new(
            "leadergroup-operator",
            "leader pod reported NotReady through pods/status; leader label seen by an independent watch",
            samples,
            Some(calls),
        ));
        run.double_leaders += watch.double_leaders();
        op.stop().await;
    }

    say(format!(
        "burst: {} groups, {} bursts",
        plan.burst_groups, plan.bursts
    ));
    let burst = burst(&plan, &operator, cp.kubeconfig_path(), &log_dir, &mut run).await?;

    say(format!(
        "app-latency: {} handovers, Membership and agent per pod",
        plan.app_latency
    ));
    let mut app = app_latency::run(cp, &operator, &log_dir, plan.app_latency).await?;

    say("heartbeat-writes: 100 groups, Readiness then Heartbeat");
    let mut heartbeat =
        heartbeat_writes::run(cp, &operator, &log_dir, 100, plan.ours_window, run.clone()).await?;

    let mut scale = Vec::new();
    for &size in &plan.scale_sizes {
        say(format!("scale: ours, {size} groups"));
        scale.push(
            scale_ours(
                &plan,
                size,
                &operator,
                cp.kubeconfig_path(),
                &log_dir,
                &baseline,
                ticks,
                &mut run,
            )
            .await?,
        );
    }

    say("peers: graceful and crash handovers, the four kinds side by side");
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let tasks: Vec<_> = kinds
        .iter()
        .zip(plan.peer_reps.iter().copied())
        .enumerate()
        .map(|(i, (kind, (g, c)))| {
            let (kind, kubeconfig, log_dir) = (kind.clone(), kubeconfig.clone(), log_dir.clone());
            tokio::spawn(async move {
                let ns = leadergroup_testenv::namespace(&format!("bench-peer-{i}")).await?;
                let mut group =
                    PeerGroup::start(&kind, &ns.client, &kubeconfig, &ns.name, 1, &log_dir).await?;
                group
                    .wait_all_led(kind.lease * 3 + Duration::from_secs(30))
                    .await?;
                // A peer that fails to hand over within its bound is a result, not a harness
                // error: the failure is recorded and that kind's remaining repetitions skipped.
                let mut soft = Vec::new();
                let mut hard = Vec::new();
                let mut failures = Vec::new();
                for (kill, reps, out) in [(false, g, &mut soft), (true, c, &mut hard)] {
                    for _ in 0..reps {
                        match group.handover(kill).await {
                            Ok(ms) => out.push(ms),
                            Err(e) => {
                                say(format!("peers: {}: {e}", kind.name));
                                failures.push(e.to_string());
                                break;
                            }
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    if !failures.is_empty() {
                        break;
                    }
                }
                if !failures.is_empty() {
                    say(format!(
                        "peers: {} failed: {}",
                        kind.name,
                        failures.join("; ")
                    ));
                }
                let split_brains = group.overlaps();
                group.stop().await;
                say(format!("peers: {} done", kind.name));
                Ok::<_, Error>((kind, soft, hard, split_brains, failures))
            })
        })
        .collect();
    for task in tasks {
        let (kind, soft, hard, split_brains, failures) = task
            .await
            .map_err(|e| Error::Other(format!("peer task: {e}")))??;
        run.peer_split_brains
            .insert(kind.name.to_string(), split_brains);
        if !failures.is_empty() {
            run.peer_failures
                .insert(kind.name.to_string(), failures.join("; "));
        }
        graceful.push(Handover::new(kind.name, kind.settings, soft, None));
        crash.push(Handover::new(kind.name, kind.settings, hard, None));
    }

    for kind in &kinds {
        for &size in &plan.peer_sizes {
            say(format!("scale: {}, {size} groups", kind.name));
            scale.push(
                scale_peer(&plan, kind, size, &kubeconfig, &log_dir, &baseline, ticks).await?,
            );
        }
    }

    run.duration_s = started.elapsed().as_secs_f64();
    let results = repo.join("bench/results");
    std::fs::create_dir_all(&results).map_err(Error::io("creating bench/results"))?;
    let graceful = HandoverResult {
        run: run.clone(),
        scenario: "graceful".into(),
        systems: graceful,
    };
    let crash = HandoverResult {
        run: run.clone(),
        scenario: "crash".into(),
        systems: crash,
    };
    let scale = ScaleResult {
        run: run.clone(),
        entries: scale,
    };
    let burst = BurstResult {
        run: run.clone(),
        ..burst
    };
    let floor = Floor {
        run: run.clone(),
        ..floor
    };
    report::write_json(&results.join("graceful.json"), &graceful)?;
    report::write_json(&results.join("crash.json"), &crash)?;
    report::write_json(&results.join("scale.json"), &scale)?;
    report::write_json(&results.join("burst.json"), &burst)?;
    report::write_json(&results.join("floor.json"), &floor)?;
    app.run = run.clone();
    report::write_json(&results.join("app-latency.json"), &app)?;
    heartbeat.run = run.clone();
    report::write_json(&results.join("heartbeat-writes.json"), &heartbeat)?;
    report::rewrite_page(&repo)?;
    say(format!(
        "done in {:.0} s: bench/results/*.json, docs/benchmarks.md",
        run.duration_s
    ));
    Ok(())
}

/// A scenario run alone: its own control plane, the CRD, the run's description, and
/// `target/bench-logs`.
struct Alone {
    started: Instant,
    log_dir: PathBuf,
    cp: &'static leadergroup_testenv::ControlPlane,
    run: Run,
}

impl Alone {
    async fn start(repo: &Path, quick: bool) -> Result<Alone> {
        let started = Instant::now();
        let log_dir = repo.join("target/bench-logs");
        std::fs::create_dir_all(&log_dir).map_err(Error::io("creating target/bench-logs"))?;
        say("control plane");
        let cp = leadergroup_testenv::control_plane().await?;
        let admin = cp.client().await?;
        ours::install_crd(&admin).await?;
        let run = report::describe_run(&admin, repo, cp, quick).await?;
        Ok(Alone {
            started,
            log_dir,
            cp,
            run,
        })
    }

    /// Writes `bench/results/<name>.json` and the section to `target/bench-logs/<name>.md`
    /// (and stderr); docs/benchmarks.md is left alone.
    fn publish(
        &self,
        repo: &Path,
        name: &str,
        json: &impl serde::Serialize,
        section: &str,
    ) -> Result<()> {
        let results = repo.join("bench/results");
        std::fs::create_dir_all(&results).map_err(Error::io("creating bench/results"))?;
        report::write_json(&results.join(format!("{name}.json")), json)?;
        std::fs::write(self.log_dir.join(format!("{name}.md")), section)
            .map_err(Error::io(format!("writing target/bench-logs/{name}.md")))?;
        eprintln!("{section}");
        say(format!(
            "done in {:.0} s: bench/results/{name}.json, target/bench-logs/{name}.md",
            self.started.elapsed().as_secs_f64()
        ));
        Ok(())
    }
}

/// `--only app-latency`: that scenario on a control plane of its own.
async fn only_app_latency(plan: &Plan, repo: &Path, operator: &Path, quick: bool) -> Result<()> {
    let mut alone = Alone::start(repo, quick).await?;
    say(format!(
        "app-latency: {} handovers, Membership and agent per pod",
        plan.app_latency
    ));
    let mut app = app_latency::run(alone.cp, operator, &alone.log_dir, plan.app_latency).await?;
    alone.run.duration_s = alone.started.elapsed().as_secs_f64();
    app.run = alone.run.clone();
    alone.publish(
        repo,
        "app-latency",
        &app,
        &report::app_latency_section(&app),
    )?;
    if !app.violations.is_empty() {
        return Err(Error::Other(format!(
            "app-latency: {}",
            app.violations.join("; ")
        )));
    }
    Ok(())
}

/// `--only heartbeat-writes`: that scenario on a control plane of its own.
async fn only_heartbeat_writes(
    plan: &Plan,
    repo: &Path,
    operator: &Path,
    quick: bool,
) -> Result<()> {
    let alone = Alone::start(repo, quick).await?;
    let window = plan.ours_window;
    let mut result = heartbeat_writes::run(
        alone.cp,
        operator,
        &alone.log_dir,
        100,
        window,
        alone.run.clone(),
    )
    .await?;
    result.run.duration_s = alone.started.elapsed().as_secs_f64();
    alone.publish(
        repo,
        "heartbeat-writes",
        &result,
        &heartbeat_writes::section(&result),
    )
}

/// The idle API server's own requests per second, over the plan's baseline window.
async fn idle_baseline(plan: &Plan, admin: &kube::Client) -> Result<RequestCounts> {
    say(format!(
        "baseline: {} s of an idle API server",
        plan.baseline_window.as_secs()
    ));
    let before = api_requests(admin).await?;
    tokio::time::sleep(plan.baseline_window).await;
    let after = api_requests(admin).await?;
    Ok(rates(
        &before,
        &after,
        plan.baseline_window.as_secs_f64(),
        None,
    ))
}

/// `--only scale-10k`: 10,000 groups (or the first size of `--scale`) on a control plane of
/// their own; writes `bench/results/scale-10k.json` and rewrites the page.
async fn only_scale_10k(plan: &Plan, repo: &Path, operator: &Path, cli: &Cli) -> Result<()> {
    let quick = cli.quick;
    let groups = cli
        .scale
        .as_ref()
        .and_then(|sizes| sizes.first().copied())
        .unwrap_or(if quick { 200 } else { 10_000 });
    let lease = cli.lease.unwrap_or(ours::LEASE_SECONDS);
    let mut alone = Alone::start(repo, quick).await?;
    let admin = alone.cp.client().await?;
    alone.run.baseline_requests_per_s = idle_baseline(plan, &admin).await?;
    let mut result = scale_10k::run(
        alone.cp,
        operator,
        &alone.log_dir,
        groups,
        lease,
        plan.settle,
        plan.ours_window,
        &alone.run.baseline_requests_per_s.clone(),
        alone.run.clone(),
    )
    .await?;
    result.run.duration_s = alone.started.elapsed().as_secs_f64();
    alone.publish(repo, "scale-10k", &result, &scale_10k::section(&result))?;
    report::rewrite_page(repo)
}

/// `--only burst`: the burst scenario alone; writes `bench/results/burst.json` and rewrites the
/// page.
async fn only_burst(plan: &Plan, repo: &Path, operator: &Path, quick: bool) -> Result<()> {
    let mut alone = Alone::start(repo, quick).await?;
    say(format!(
        "burst: {} groups, {} bursts",
        plan.burst_groups, plan.bursts
    ));
    let mut run = alone.run.clone();
    let result = burst(
        plan,
        operator,
        alone.cp.kubeconfig_path(),
        &alone.log_dir,
        &mut run,
    )
    .await?;
    run.duration_s = alone.started.elapsed().as_secs_f64();
    alone.run = run.clone();
    let result = BurstResult { run, ..result };
    alone.publish(repo, "burst", &result, &report::burst_section(&result))?;
    report::rewrite_page(repo)
}

/// `--only scale`: ours at the sizes of `--scale` (default 1, 100, 1000), alone; replaces our
/// entries at those sizes in `bench/results/scale.json` (the peers' stay) and rewrites the page.
async fn only_scale(plan: &Plan, repo: &Path, operator: &Path, quick: bool) -> Result<()> {
    let mut alone = Alone::start(repo, quick).await?;
    let admin = alone.cp.client().await?;
    let baseline = idle_baseline(plan, &admin).await?;
    alone.run.baseline_requests_per_s = baseline.clone();
    let ticks = observe::ticks_per_second();
    let mut run = alone.run.clone();
    let mut entries = Vec::new();
    for &size in &plan.scale_sizes {
        say(format!("scale: ours, {size} groups"));
        let mut entry = scale_ours(
            plan,
            size,
            operator,
            alone.cp.kubeconfig_path(),
            &alone.log_dir,
            &baseline,
            ticks,
            &mut run,
        )
        .await?;
        entry.measured_in = Some(format!("{} (`{}`)", run.started_at, run.command));
        entries.push(entry);
    }
    run.duration_s = alone.started.elapsed().as_secs_f64();
    let path = repo.join("bench/results/scale.json");
    let mut result: ScaleResult = report::read_json(&path)?;
    result.entries.retain(|e| {
        !(e.system == "leadergroup-operator" && entries.iter().any(|n| n.groups == e.groups))
    });
    result.entries.extend(entries);
    result.entries.sort_by_key(|e| {
        (
            e.system != "leadergroup-operator",
            e.system.clone(),
            e.groups,
        )
    });
    let section = report::scale_section(&result);
    alone.run = run;
    alone.publish(repo, "scale", &result, &section)?;
    report::rewrite_page(repo)
}

/// Runs a program and returns its trimmed stdout.
async fn tool_output(program: &Path, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .map_err(Error::io(format!("running {}", program.display())))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "{} failed: {}",
            program.display(),
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Requests the harness itself makes while it drives our handovers (the simulated kubelet and the
/// stand-in ReplicaSet): left out of the operator's API calls per handover.
fn harness_request(key: &str) -> bool {
    matches!(
        key,
        "GET pods" | "PATCH pods/status" | "DELETE pods" | "POST pods"
    )
}

/// Runs `rep` `n` times; returns the samples and the operator's API requests per repetition, by
/// verb and resource, from the API server's counters (less the idle baseline and the harness's
/// own requests).
async fn repeat_counting<F, Fut>(
    admin: &kube::Client,
    baseline: &RequestCounts,
    n: usize,
    mut rep: F,
) -> Result<(Vec<f64>, RequestCounts)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<f64>>,
{
    let before = api_requests(admin).await?;
    let t0 = Instant::now();
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        samples.push(rep().await?);
    }
    let seconds = t0.elapsed().as_secs_f64();
    let after = api_requests(admin).await?;
    let per_rep = rates(&before, &after, seconds, Some(baseline))
        .into_iter()
        .filter(|(k, _)| !harness_request(k))
        .map(|(k, per_s)| (k, per_s * seconds / n.max(1) as f64))
        .filter(|(_, v)| *v >= 0.05)
        .collect();
    Ok((samples, per_rep))
}

/// The floor: one Lease update with a resourceVersion precondition, repeated.
async fn floor(reps: usize) -> Result<Floor> {
    let ns = leadergroup_testenv::namespace("bench-floor").await?;
    let api: Api<Lease> = ns.api();
    let mut lease = api
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("floor".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("bench".into()),
                    lease_duration_seconds: Some(15),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await?;
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps {
        if let Some(spec) = lease.spec.as_mut() {
            spec.lease_transitions = Some(i32::try_from(i).unwrap_or(i32::MAX));
        }
        let t0 = Instant::now();
        // replace sends the resourceVersion it holds: the compare-and-swap the protocol uses.
        lease = api.replace("floor", &PostParams::default(), &lease).await?;
        samples.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(Floor::new(samples))
}

/// Burst: every group's leader turns NotReady in one sweep (their node failed).
async fn burst(
    plan: &Plan,
    operator: &Path,
    kubeconfig: &Path,
    log_dir: &Path,
    run: &mut Run,
) -> Result<BurstResult> {
    let groups = Groups::create("bench-burst", plan.burst_groups).await?;
    let watch = LeaderWatch::start(&groups.client, &groups.namespace).await?;
    let op = OperatorProcess::start(
        operator,
        kubeconfig,
        &groups.namespace,
        &log_dir.join("operator-burst.log"),
    )
    .await?;
    groups.wait_all_led(&watch).await?;
    tokio::time::sleep(plan.settle).await;
    let mut bursts = Vec::new();
    for _ in 0..plan.bursts {
        let old: Vec<(String, String)> = groups
            .names
            .iter()
            .filter_map(|g| watch.leader(g).map(|l| (g.clone(), l.pod)))
            .collect();
        let t0 = SystemTime::now();
        futures::future::try_join_all(
            old.iter()
                .map(|(_, pod)| groups.kubelet.set_ready(pod, false)),
        )
        .await?;
        let sweep_ms = ms_between(t0, SystemTime::now());
        let mut per_group = Vec::new();
        for (g, pod) in &old {
            let new = watch.wait_new_leader(g, Some(pod), ours::BOUND).await?;
            per_group.push(ms_between(t0, new.at));
        }
        let all = per_group.iter().copied().fold(0.0, f64::max);
        bursts.push(Burst {
            all_re_led_ms: all,
            sweep_ms,
            per_group_ms: per_group,
        });
        futures::future::try_join_all(
            old.iter()
                .map(|(_, pod)| groups.kubelet.set_ready(pod, true)),
        )
        .await?;
        tokio::time::sleep(plan.settle).await;
    }
    run.double_leaders += watch.double_leaders();
    op.stop().await;
    Ok(BurstResult::new(plan.burst_groups, bursts))
}

#[allow(clippy::too_many_arguments)]
async fn scale_ours(
    plan: &Plan,
    size: usize,
    operator: &Path,
    kubeconfig: &Path,
    log_dir: &Path,
    baseline: &RequestCounts,
    ticks: f64,
    run: &mut Run,
) -> Result<ScaleEntry> {
    let groups = Groups::create(&format!("bench-scale-{size}"), size).await?;
    let watch = LeaderWatch::start(&groups.client, &groups.namespace).await?;
    let op = OperatorProcess::start(
        operator,
        kubeconfig,
        &groups.namespace,
        &log_dir.join(format!("operator-scale-{size}.log")),
    )
    .await?;
    let t0 = SystemTime::now() - op.started.elapsed();
    let led = match groups.wait_all_led(&watch).await {
        Ok(led) => led,
        Err(e) => {
            // Record what the operator managed and what it cost, rather than losing the run.
            let count = groups
                .names
                .iter()
                .filter(|g| watch.leader(g).is_some())
                .count();
            say(format!("scale {size}: {e}; {count} of {size} groups led"));
            let (requests, cpu, sample) =
                window(&groups.client, plan.ours_window, baseline, || {
                    op.sample(ticks)
                })
                .await?;
            op.stop().await;
            let mut entry = ScaleEntry::new(
                "leadergroup-operator",
                size,
                f64::NAN,
                plan.ours_window.as_secs_f64(),
                requests,
                cpu,
                sample.rss_mib,
                sample.peak_rss_mib,
                None,
                None,
            );
            entry.note = Some(format!(
                "not every group was led within {} s: {count} of {size} were; the window was measured while it still converged",
                ours::ALL_LED_BOUND.as_secs()
            ));
            return Ok(entry);
        }
    };
    let to_all_led = ms_between(t0, led);
    tokio::time::sleep(plan.settle).await;
    let (requests, cpu, sample) = window(&groups.client, plan.ours_window, baseline, || {
        op.sample(ticks)
    })
    .await?;
    let step = (size / plan.scale_notready.max(1)).max(1);
    let mut notready = Vec::new();
    for i in 0..plan.scale_notready {
        let g = &groups.names[(i * step) % size];
        notready.push(groups.not_ready_handover(&watch, g).await?);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let step = (size / plan.scale_graceful.max(1)).max(1);
    let mut deleted = Vec::new();
    for i in 0..plan.scale_graceful {
        let g = &groups.names[(i * step + step / 2) % size];
        deleted.push(groups.deletion_handover(&watch, g).await?);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    run.double_leaders += watch.double_leaders();
    let last = op.sample(ticks);
    op.stop().await;
    Ok(ScaleEntry::new(
        "leadergroup-operator",
        size,
        to_all_led,
        plan.ours_window.as_secs_f64(),
        requests,
        cpu,
        sample.rss_mib,
        last.peak_rss_mib,
        Some(notready),
        Some(deleted),
    ))
}

/// A steady-state window: API requests per second per verb (less the baseline), CPU seconds per
/// minute, and the process sample at the end.
async fn window<S>(
    admin: &kube::Client,
    length: Duration,
    baseline: &RequestCounts,
    sample: S,
) -> Result<(RequestCounts, f64, observe::ProcSample)>
where
    S: Fn() -> observe::ProcSample,
{
    let before = api_requests(admin).await?;
    let cpu0 = sample().cpu_seconds;
    let t0 = Instant::now();
    tokio::time::sleep(length).await;
    let end = sample();
    let seconds = t0.elapsed().as_secs_f64();
    let after = api_requests(admin).await?;
    let cpu_per_min = (end.cpu_seconds - cpu0) / seconds * 60.0;
    Ok((
        rates(&before, &after, seconds, Some(baseline)),
        cpu_per_min,
        end,
    ))
}

async fn scale_peer(
    plan: &Plan,
    kind: &peers::PeerKind,
    size: usize,
    kubeconfig: &Path,
    log_dir: &Path,
    baseline: &RequestCounts,
    ticks: f64,
) -> Result<ScaleEntry> {
    let ns = leadergroup_testenv::namespace(&format!("bench-peer-scale-{size}")).await?;
    let t0 = SystemTime::now();
    let group = PeerGroup::start(kind, &ns.client, kubeconfig, &ns.name, size, log_dir).await?;
    let led = group
        .wait_all_led(kind.lease * 4 + Duration::from_secs(60))
        .await?;
    let to_all_led = ms_between(t0, led);
    tokio::time::sleep(plan.settle.min(Duration::from_secs(5))).await;
    let (requests, cpu, sample) = window(&ns.client, plan.peer_window, baseline, || {
        group.sample(ticks)
    })
    .await?;
    group.stop().await;
    Ok(ScaleEntry::new(
        kind.name,
        size,
        to_all_led,
        plan.peer_window.as_secs_f64(),
        requests,
        cpu,
        sample.rss_mib,
        sample.peak_rss_mib,
        None,
        None,
    ))
}
