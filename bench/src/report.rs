//! Results: the JSON files (every sample) and the page docs/benchmarks.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::observe::{RequestCounts, is_polling_read, is_write};
use crate::ours::LEASE_SECONDS;
use crate::stats::{Summary, summarize};

/// What every results file says about the run.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct Run {
    /// When it started (UTC).
    pub started_at: String,
    /// The command that made it.
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
    /// Wall time of the whole run.
    pub duration_s: f64,
}

/// The samples of one system in one handover scenario.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Handover {
    /// System name.
    pub system: String,
    /// Its settings and how the clock was read.
    pub settings: String,
    /// Every sample, milliseconds.
    pub samples_ms: Vec<f64>,
    /// Their summary.
    pub summary: Option<Summary>,
    /// The operator's API requests per repetition, by verb and resource (ours only).
    pub api_calls_per_repetition: Option<RequestCounts>,
}

impl Handover {
    /// Summarizes `samples`.
    pub fn new(
        system: &str,
        settings: &str,
        samples: Vec<f64>,
        calls: Option<RequestCounts>,
    ) -> Handover {
        Handover {
            system: system.into(),
            settings: settings.into(),
            summary: summarize(&samples),
            samples_ms: samples,
            api_calls_per_repetition: calls,
        }
    }
}

/// `graceful.json` and `crash.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct HandoverResult {
    /// The run.
    pub run: Run,
    /// `graceful` or `crash`.
    pub scenario: String,
    /// One entry per system.
    pub systems: Vec<Handover>,
}

/// One system at one group count.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ScaleEntry {
    /// System name.
    pub system: String,
    /// Groups (of three candidates).
    pub groups: usize,
    /// From process start to every group led (NaN, written as null, when not all were).
    #[serde(deserialize_with = "nan_if_null")]
    pub time_to_all_led_ms: f64,
    /// Length of the steady-state window.
    pub window_s: f64,
    /// Requests per second per group in the window, by verb and resource.
    pub requests_per_s_per_group: RequestCounts,
    /// Writes per group per third of the Lease duration (15 s: per 5 s).
    pub writes_per_group_per_third: f64,
    /// Reads that are not watches, per second per group.
    pub polling_reads_per_s_per_group: f64,
    /// CPU seconds per minute in the window (peers: the three processes together).
    pub cpu_s_per_min: f64,
    /// RSS at the end of the window, MiB (peers: summed).
    pub rss_mib: f64,
    /// Peak RSS, MiB.
    pub peak_rss_mib: f64,
    /// Ours: handovers after NotReady at this size.
    pub handover_notready: Option<Handover>,
    /// Ours: handovers after deletion at this size.
    pub handover_deleted: Option<Handover>,
    /// What went wrong at this size, if anything.
    pub note: Option<String>,
    /// The run it was measured in, when not the page's (`--only scale`).
    #[serde(default)]
    pub measured_in: Option<String>,
}

impl ScaleEntry {
    /// Derives the per-group figures from the window's totals.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        system: &str,
        groups: usize,
        time_to_all_led_ms: f64,
        window_s: f64,
        requests: RequestCounts,
        cpu_s_per_min: f64,
        rss_mib: f64,
        peak_rss_mib: f64,
        notready: Option<Vec<f64>>,
        deleted: Option<Vec<f64>>,
    ) -> ScaleEntry {
        let mut entry = ScaleEntry::with_lease(
            system,
            groups,
            time_to_all_led_ms,
            window_s,
            requests,
            cpu_s_per_min,
            LEASE_SECONDS,
        );
        entry.rss_mib = rss_mib;
        entry.peak_rss_mib = peak_rss_mib;
        entry.handover_notready =
            notready.map(|s| Handover::new(system, "NotReady at this size", s, None));
        entry.handover_deleted =
            deleted.map(|s| Handover::new(system, "deletion at this size", s, None));
        entry
    }

    /// The per-group figures of groups whose Lease lasts `lease_seconds`; no RSS or handovers yet.
    pub fn with_lease(
        system: &str,
        groups: usize,
        time_to_all_led_ms: f64,
        window_s: f64,
        requests: RequestCounts,
        cpu_s_per_min: f64,
        lease_seconds: i32,
    ) -> ScaleEntry {
        let n = groups.max(1) as f64;
        let per_group: RequestCounts = requests.into_iter().map(|(k, v)| (k, v / n)).collect();
        let third = f64::from(lease_seconds) / 3.0;
        let writes: f64 = per_group
            .iter()
            .filter(|(k, _)| is_write(k))
            .map(|(_, v)| v)
            .sum();
        let reads: f64 = per_group
            .iter()
            .filter(|(k, _)| is_polling_read(k))
            .map(|(_, v)| v)
            .sum();
        ScaleEntry {
            system: system.into(),
            groups,
            time_to_all_led_ms,
            window_s,
            // + 0.0: an empty f64 sum is -0.0, which would print as "-0.000".
            writes_per_group_per_third: writes * third + 0.0,
            polling_reads_per_s_per_group: reads + 0.0,
            requests_per_s_per_group: per_group,
            cpu_s_per_min,
            rss_mib: 0.0,
            peak_rss_mib: 0.0,
            handover_notready: None,
            handover_deleted: None,
            note: None,
            measured_in: None,
        }
    }
}

/// A number that serde_json wrote as null (it writes NaN so).
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `scale.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ScaleResult {
    /// The run.
    pub run: Run,
    /// Every system at every size.
    pub entries: Vec<ScaleEntry>,
}

/// One burst.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Burst {
    /// From the start of the sweep until the last group is led again.
    pub all_re_led_ms: f64,
    /// How long the sweep of NotReady reports itself took.
    pub sweep_ms: f64,
    /// Per group, from the start of the sweep.
    pub per_group_ms: Vec<f64>,
}

/// `burst.json`.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct BurstResult {
    /// The run.
    pub run: Run,
    /// Groups per burst.
    pub groups: usize,
    /// Every burst.
    pub bursts: Vec<Burst>,
    /// Per-group latencies over all bursts.
    pub per_group: Option<Summary>,
    /// All re-led, over the bursts.
    pub all_re_led: Option<Summary>,
}

impl BurstResult {
    /// Summarizes the bursts.
    pub fn new(groups: usize, bursts: Vec<Burst>) -> BurstResult {
        let per: Vec<f64> = bursts
            .iter()
            .flat_map(|b| b.per_group_ms.iter().copied())
            .collect();
        let all: Vec<f64> = bursts.iter().map(|b| b.all_re_led_ms).collect();
        BurstResult {
            run: Run::default(),
            groups,
            per_group: summarize(&per),
            all_re_led: summarize(&all),
            bursts,
        }
    }
}

/// `floor.json`.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Floor {
    /// The run.
    pub run: Run,
    /// One Lease update with a resourceVersion precondition, each.
    pub samples_ms: Vec<f64>,
    /// Their summary.
    pub summary: Option<Summary>,
}

impl Floor {
    /// Summarizes the samples.
    pub fn new(samples: Vec<f64>) -> Floor {
        Floor {
            run: Run::default(),
            summary: summarize(&samples),
            samples_ms: samples,
        }
    }
}

/// Reads a results file.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).map_err(Error::io(format!("reading {}", path.display())))?;
    Ok(serde_json::from_str(&text)?)
}

/// Writes docs/benchmarks.md from every `bench/results/*.json`: the full run's, and the
/// scenarios run alone since (each section names its run).
pub fn rewrite_page(repo: &Path) -> Result<()> {
    let results = repo.join("bench/results");
    let graceful: HandoverResult = read_json(&results.join("graceful.json"))?;
    let crash: HandoverResult = read_json(&results.join("crash.json"))?;
    let scale: ScaleResult = read_json(&results.join("scale.json"))?;
    let burst: BurstResult = read_json(&results.join("burst.json"))?;
    let floor: Floor = read_json(&results.join("floor.json"))?;
    let app: crate::app_latency::AppLatencyResult = read_json(&results.join("app-latency.json"))?;
    let heartbeat: crate::heartbeat_writes::HeartbeatWrites =
        read_json(&results.join("heartbeat-writes.json"))?;
    let big_path = results.join("scale-10k.json");
    let big: Option<crate::scale_10k::ScaleBig> = if big_path.is_file() {
        Some(read_json(&big_path)?)
    } else {
        None
    };
    // The end-to-end section comes from its own run (`--only e2e`, as root, on the real cluster).
    let e2e = std::fs::read_to_string(results.join("e2e.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<crate::e2e::E2eResult>(&t).ok());
    let page = markdown(&Page {
        e2e: e2e.as_ref(),
        run: &graceful.run,
        graceful: &graceful,
        crash: &crash,
        scale: &scale,
        burst: &burst,
        floor: &floor,
        app: &app,
        heartbeat: &heartbeat,
        scale_big: big.as_ref(),
    });
    std::fs::write(repo.join("docs/benchmarks.md"), page)
        .map_err(Error::io("writing docs/benchmarks.md"))?;
    crate::say("wrote docs/benchmarks.md from bench/results/*.json");
    Ok(())
}

/// Writes `value` as pretty JSON.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").map_err(Error::io(format!("writing {}", path.display())))
}

/// The machine, the versions and the control plane.
pub async fn describe_run(
    admin: &kube::Client,
    repo: &Path,
    cp: &leadergroup_testenv::ControlPlane,
    quick: bool,
) -> Result<Run> {
    let mut machine = BTreeMap::new();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if let Some(model) = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
    {
        machine.insert("cpu".into(), model.1.trim().to_owned());
    }
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    machine.insert("cores".into(), cores.to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(kib) = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
    {
        machine.insert("memory".into(), format!("{:.1} GiB", kib / 1024.0 / 1024.0));
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    machine.insert("kernel".into(), kernel.trim().to_owned());

    let mut versions = BTreeMap::new();
    let request = http::Request::get("/version")
        .body(Vec::new())
        .map_err(|e| Error::Other(format!("building GET /version: {e}")))?;
    let version: serde_json::Value = serde_json::from_str(&admin.request_text(request).await?)?;
    versions.insert(
        "kube-apiserver".into(),
        version["gitVersion"].as_str().unwrap_or("?").to_owned(),
    );
    versions.insert(
        "leadergroup-operator".into(),
        format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            command_line(
                "git",
                &[
                    "-C",
                    &repo.display().to_string(),
                    "rev-parse",
                    "--short",
                    "HEAD"
                ]
            )
        ),
    );
    versions.insert(
        "client-go".into(),
        "v0.37.2 (tools/leaderelection, LeaseLock)".into(),
    );
    versions.insert("kube-leader-election".into(), "0.44.0 (kube 4)".into());
    versions.insert("kube-lease-manager".into(), "0.13.1 (kube 5)".into());
    versions.insert(
        "operator kube".into(),
        "kube 5, k8s-openapi 0.29 (v1_37)".into(),
    );
    versions.insert("rustc".into(), command_line("rustc", &["--version"]));
    versions.insert("go".into(), command_line("go", &["version"]));
    let control_plane = match cp.cluster_dir() {
        Some(dir) => format!(
            "its own, started by leadergroup-testenv in {} (etcd + kube-apiserver on loopback)",
            dir.display()
        ),
        None => format!(
            "shared, from {} (other clients may add load and requests)",
            leadergroup_testenv::KUBECONFIG_ENV
        ),
    };
    Ok(Run {
        started_at: jiff::Timestamp::now()
            .strftime("%Y-%m-%d %H:%M:%S UTC")
            .to_string(),
        // The arguments the binary got are the BENCH_ARGS of `make bench`.
        command: {
            let args: Vec<String> = std::env::args().skip(1).collect();
            if args.is_empty() {
                "make bench".into()
            } else {
                format!("make bench BENCH_ARGS='{}'", args.join(" "))
            }
        },
        quick,
        machine,
        versions,
        control_plane,
        ..Run::default()
    })
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".into())
}

fn ms(v: f64) -> String {
    if !v.is_finite() {
        return "did not converge".into();
    }
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn row(out: &mut String, name: &str, s: Option<&Summary>, extra: &str) {
    match s {
        Some(s) => {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {}–{} | {} | {extra} |",
                ms(s.median_ms),
                ms(s.p99_ms),
                ms(s.min_ms),
                ms(s.max_ms),
                s.n
            );
        }
        None => {
            let _ = writeln!(out, "| {name} | – | – | – | 0 | {extra} |");
        }
    }
}

pub(crate) fn counts(c: &RequestCounts) -> String {
    if c.is_empty() {
        return "none".into();
    }
    c.iter()
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn median(h: &Handover) -> f64 {
    h.summary.as_ref().map_or(f64::NAN, |s| s.median_ms)
}

fn handover_table(out: &mut String, h: &HandoverResult, floor: f64) {
    let _ = writeln!(
        out,
        "| system | median | p99 | min–max | n | median vs ours; settings |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let ours = h.systems.first().map_or(f64::NAN, median);
    for (i, s) in h.systems.iter().enumerate() {
        let extra = if i == 0 {
            format!("{:.1}× the floor; {}", median(s) / floor, s.settings)
        } else {
            format!("{:.0}× ours; {}", median(s) / ours, s.settings)
        };
        row(out, &s.system, s.summary.as_ref(), &extra);
    }
}

/// Every result the page shows.
pub struct Page<'a> {
    pub run: &'a Run,
    /// The end-to-end section's results (`bench/results/e2e.json`), when there are.
    pub e2e: Option<&'a crate::e2e::E2eResult>,
    pub graceful: &'a HandoverResult,
    pub crash: &'a HandoverResult,
    pub scale: &'a ScaleResult,
    pub burst: &'a BurstResult,
    pub floor: &'a Floor,
    pub app: &'a crate::app_latency::AppLatencyResult,
    pub heartbeat: &'a crate::heartbeat_writes::HeartbeatWrites,
    pub scale_big: Option<&'a crate::scale_10k::ScaleBig>,
}

/// The two API-cost rows of the targets' table for one scale entry (at most one write per group
/// per third of the Lease, no polling reads), each titled by `title` from the target's name.
fn cost_targets(o: &mut String, e: &ScaleEntry, title: impl Fn(&str) -> String) {
    let _ = writeln!(
        o,
        "| {} | {:.2} | {} |",
        title("≤ 1 write per group per third of the Lease"),
        e.writes_per_group_per_third,
        yes(e.writes_per_group_per_third <= 1.05)
    );
    let _ = writeln!(
        o,
        "| {} | {:.3}/s per group | {} |",
        title("no polling reads"),
        e.polling_reads_per_s_per_group,
        yes(e.polling_reads_per_s_per_group < 0.001)
    );
}

/// The page.
pub fn markdown(page: &Page<'_>) -> String {
    let Page {
        run,
        graceful,
        crash,
        scale,
        burst,
        floor,
        app,
        heartbeat,
        e2e,
        scale_big,
    } = *page;
    let mut o = String::new();
    let floor_ms = floor.summary.as_ref().map_or(f64::NAN, |s| s.median_ms);
    let _ = writeln!(o, "# Benchmarks\n");
    let _ = writeln!(
        o,
        "Generated by `{}` (bench/: the harness in src/, peers in peers/) on {}; every sample is in `bench/results/*.json`. The run took {:.0} s.\n",
        run.command, run.started_at, run.duration_s
    );
    if run.quick {
        let _ = writeln!(
            o,
            "**This is a `--quick` smoke run: too few repetitions to mean anything.**\n"
        );
    }
    let _ = writeln!(
        o,
        "**Read the ratios, not the absolute figures.** The machine is small and shared with other engineers' builds and tests, so absolute latencies move from run to run; all systems ran on the same API server in the same invocation, so the ratios within one run are what count.\n"
    );
    let _ = writeln!(
        o,
        "![handover latency distributions](benchmarks-handover.png)\n"
    );
    if let Some(e2e) = e2e {
        let _ = writeln!(o, "{}", crate::e2e_report::section(e2e));
    }

    let _ = writeln!(o, "## The machine and the versions\n");
    for (k, v) in run.machine.iter().chain(run.versions.iter()) {
        let _ = writeln!(o, "- {k}: {v}");
    }
    let _ = writeln!(o, "- control plane: {}", run.control_plane);
    let _ = writeln!(
        o,
        "- idle API server baseline (subtracted from every window), requests/s: {}",
        counts(&run.baseline_requests_per_s)
    );
    let _ = writeln!(
        o,
        "- the independent watch saw two leaders in one group {} times",
        run.double_leaders
    );
    for (peer, n) in &run.peer_split_brains {
        let _ = writeln!(
            o,
            "- {peer}: a candidate started leading while another still believed it led, {n} times (handover scenarios)"
        );
    }
    for (peer, why) in &run.peer_failures {
        let _ = writeln!(o, "- {peer}: its handover repetitions stopped early: {why}");
    }
    let _ = writeln!(o);

    let _ = writeln!(o, "## 5. The floor\n");
    let _ = writeln!(
        o,
        "One Lease update (PUT with the resourceVersion it was read at) on the same server, back to back:\n"
    );
    let _ = writeln!(
        o,
        "| operation | median | p99 | min–max | n | |\n|---|---|---|---|---|---|"
    );
    row(&mut o, "Lease CAS update", floor.summary.as_ref(), "");
    let _ = writeln!(
        o,
        "\nA handover's critical path is three sequential API calls (the Lease CAS; then the status, the demotion and the fresh list, together; then the promotion), so about 3× this is the physical limit of the design. Ours are reported as a multiple of it below.\n"
    );

    let _ = writeln!(o, "## 1. Graceful termination (rolling update)\n");
    let _ = writeln!(
        o,
        "Peers: SIGTERM to the leader process, which releases its Lease (ReleaseOnCancel / step_down / release); the clock stops at the new leader's OnStartedLeading line. Ours: DELETE of the leader pod (the API server sets deletionTimestamp; the simulated kubelet removes the pod 300 ms later); the clock stops when an independent watch sees another pod labeled leader. A replacement candidate is started after every repetition (a new process, or a new pod), as a Deployment would.\n"
    );
    handover_table(&mut o, graceful, floor_ms);
    if let Some(calls) = graceful
        .systems
        .first()
        .and_then(|s| s.api_calls_per_repetition.as_ref())
    {
        let _ = writeln!(
            o,
            "\nOur API requests per repetition (handover plus the replacement pod joining, harness requests excluded): {}\n",
            counts(calls)
        );
    }

    let _ = writeln!(o, "## 2. Crash\n");
    let _ = writeln!(
        o,
        "Peers: SIGKILL to the leader process; the others wait for the Lease to expire. Ours: the leader pod turns NotReady (what a kubelet reports after the container died). **Our clock starts at that report: the kubelet's own detection time (a failed readiness probe: periodSeconds × failureThreshold, 30 s with the defaults; a dead container is seen within about a second) sits before it and is not in these figures.** The peers' clock starts at the kill itself. Both views: with a crashed container, add the kubelet's detection to ours; with a hung process that still answers nothing, add the readiness probe's failure time.\n"
    );
    handover_table(&mut o, crash, floor_ms);
    if let Some(calls) = crash
        .systems
        .first()
        .and_then(|s| s.api_calls_per_repetition.as_ref())
    {
        let _ = writeln!(
            o,
            "\nOur API requests per repetition (one handover, then the old leader Ready again as a follower; harness requests excluded): {}\n",
            counts(calls)
        );
    }

    let _ = write!(o, "{}", scale_section(scale));
    if let Some(big) = scale_big {
        let _ = write!(o, "\n{}", crate::scale_10k::section(big));
    }
    let _ = write!(o, "{}", burst_section(burst));
    let _ = write!(o, "{}", app_latency_section(app));
    let _ = writeln!(o, "{}", crate::heartbeat_writes::section(heartbeat));

    let _ = writeln!(o, "## Targets\n");
    let _ = writeln!(o, "| target | measured | met |\n|---|---|---|");
    for e in scale
        .entries
        .iter()
        .filter(|e| e.system == "leadergroup-operator" && e.groups < 1000)
    {
        for (what, h) in [
            ("NotReady", &e.handover_notready),
            ("deletion", &e.handover_deleted),
        ] {
            if let Some(s) = h.as_ref().and_then(|h| h.summary.as_ref()) {
                let _ = writeln!(
                    o,
                    "| handover after {what} at {} groups: p50 ≤ 15 ms | p50 {} | {} |",
                    e.groups,
                    ms(s.median_ms),
                    yes(s.median_ms <= 15.0)
                );
            }
        }
    }
    let big = scale
        .entries
        .iter()
        .filter(|e| e.system == "leadergroup-operator")
        .max_by_key(|e| e.groups);
    if let Some(e) = big {
        let nr = e.handover_notready.as_ref().and_then(|h| h.summary.clone());
        let del = e.handover_deleted.as_ref().and_then(|h| h.summary.clone());
        for (what, s) in [("NotReady", nr), ("deletion", del)] {
            if let Some(s) = s {
                let _ = writeln!(
                    o,
                    "| handover after {what} at {} groups: p50 ≤ 20 ms, p99 ≤ 100 ms | p50 {}, p99 {} | {} |",
                    e.groups,
                    ms(s.median_ms),
                    ms(s.p99_ms),
                    yes(s.median_ms <= 20.0 && s.p99_ms <= 100.0)
                );
            }
        }
        cost_targets(&mut o, e, |target| {
            format!("{target} ({} groups)", e.groups)
        });
        let _ = writeln!(
            o,
            "| RSS < 64 MiB at {} groups / {} pods | steady {:.1} MiB, peak {:.1} MiB (while converging) | steady {}, peak {} |",
            e.groups,
            e.groups * 3,
            e.rss_mib,
            e.peak_rss_mib,
            yes(e.rss_mib < 64.0),
            yes(e.peak_rss_mib < 64.0)
        );
    }
    if let Some(s) = &burst.all_re_led {
        let _ = writeln!(
            o,
            "| burst of {}: all re-led within 1 s | max {} | {} |",
            burst.groups,
            ms(s.max_ms),
            yes(s.max_ms < 1000.0)
        );
    }
    if let Some(r) = scale_big {
        let e = &r.entry;
        let _ = writeln!(
            o,
            "| {} groups: all led within 60 s | {} | {} |",
            e.groups,
            match r.led_at_bound {
                Some(n) => format!("{n} of {} led when the harness stopped waiting", e.groups),
                None => format!("{:.1} s", e.time_to_all_led_ms / 1000.0),
            },
            yes(r.led_at_bound.is_none() && e.time_to_all_led_ms <= 60_000.0)
        );
        let _ = writeln!(
            o,
            "| {} groups: steady RSS < 256 MiB | {:.1} MiB (peak {:.1}) | {} |",
            e.groups,
            e.rss_mib,
            e.peak_rss_mib,
            yes(e.rss_mib < 256.0)
        );
        cost_targets(&mut o, e, |target| format!("{} groups: {target}", e.groups));
        if let Some(x) = &r.restart {
            let _ = writeln!(
                o,
                "| {} groups: a restart changes no epoch and flaps no label | {} epochs, {} label changes; every group reconciled {:.1} s after the start | {} |",
                e.groups,
                x.epoch_changes,
                x.label_flaps,
                x.to_all_reconciled_ms / 1000.0,
                yes(x.epoch_changes == 0 && x.label_flaps == 0 && x.leader_changes == 0)
            );
        }
    }
    let _ = writeln!(
        o,
        "\nWhy a target is missed, and what was done about it, is in the README's Benchmarks section and in the commit that publishes this run."
    );
    o
}

/// Section 3 of the page: ours and the peers at 1, 100 and 1000 groups, and our handovers at
/// each size. Also what `--only scale` prints.
pub fn scale_section(scale: &ScaleResult) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## 3. Scale\n");
    let _ = writeln!(
        o,
        "Groups of three candidates, Lease duration 15 s. Ours: N LeaderGroups with 3 Ready pods each exist before the operator starts; time from operator start to every group led (seen by the watch). Peers: three candidate processes, each running one elector per Lease (client-go: one client with QPS raised to 10 per elector, so the process's default 5 QPS does not throttle it); time from process start to every Lease's OnStartedLeading. Then a steady-state window: `apiserver_request_total` scraped before and after (idle baseline subtracted), per group per second, by verb; CPU seconds per minute and RSS of the operator (peers: the three processes summed).\n"
    );
    let _ = writeln!(
        o,
        "| system | groups | to all led | requests/s per group (by verb, resource) | writes per group per 5 s | polling reads/s per group | CPU s/min | RSS (peak) |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for e in &scale.entries {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {:.2} | {:.3} | {:.2} | {:.1} MiB ({:.1}) |",
            e.system,
            e.groups,
            ms(e.time_to_all_led_ms),
            counts(&e.requests_per_s_per_group),
            e.writes_per_group_per_third,
            e.polling_reads_per_s_per_group,
            e.cpu_s_per_min,
            e.rss_mib,
            e.peak_rss_mib
        );
    }
    for e in &scale.entries {
        if let Some(run) = &e.measured_in {
            let _ = writeln!(
                o,
                "\n{} at {} groups: measured alone, in the run of {run}.",
                e.system, e.groups
            );
        }
    }
    for e in &scale.entries {
        if let Some(note) = &e.note {
            let _ = writeln!(o, "\n**{} at {} groups: {note}.**", e.system, e.groups);
        }
    }
    let _ = writeln!(
        o,
        "\nPeers at 1000 groups did not fit: 3000 elector processes (or 3000 electors polling every RetryPeriod in three processes, about 1500 GETs and 500 PUTs per second with client-go's defaults) would saturate this 2-core API server and measure the machine, not the libraries. Peers ran at 1 and 100 groups.\n"
    );
    let _ = writeln!(
        o,
        "Our handovers at each size (independent groups, sequentially):\n"
    );
    let _ = writeln!(
        o,
        "| groups | trigger | median | p99 | min–max | n | |\n|---|---|---|---|---|---|---|"
    );
    for e in scale
        .entries
        .iter()
        .filter(|e| e.handover_notready.is_some())
    {
        for (trigger, h) in [
            ("NotReady", &e.handover_notready),
            ("deletion", &e.handover_deleted),
        ] {
            if let Some(h) = h {
                let mut line = String::new();
                row(&mut line, &e.groups.to_string(), h.summary.as_ref(), "");
                let _ = write!(
                    o,
                    "{}",
                    line.replacen(
                        &format!("| {} |", e.groups),
                        &format!("| {} | {trigger} |", e.groups),
                        1
                    )
                );
            }
        }
    }

    o
}

/// Section 4 of the page: the burst. Also what `--only burst` prints.
pub fn burst_section(burst: &BurstResult) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\n## 4. Burst\n");
    let _ = writeln!(
        o,
        "Run of {} (`{}`).\n",
        burst.run.started_at, burst.run.command
    );
    let _ = writeln!(
        o,
        "{} groups whose leaders sit on one node that fails: all {} leader pods reported NotReady at once (concurrent status writes, one sweep). Clock from the start of the sweep.\n",
        burst.groups, burst.groups
    );
    let _ = writeln!(
        o,
        "| measure | median | p99 | min–max | n | |\n|---|---|---|---|---|---|"
    );
    row(
        &mut o,
        "all re-led (per burst)",
        burst.all_re_led.as_ref(),
        "",
    );
    row(&mut o, "per group", burst.per_group.as_ref(), "");
    let sweeps: Vec<String> = burst.bursts.iter().map(|b| ms(b.sweep_ms)).collect();
    let _ = writeln!(
        o,
        "\nThe sweep of status writes itself took {} (part of every figure above).\n",
        sweeps.join(", ")
    );

    o
}

fn yes(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

/// Section 6 of the page: how fast the application knows (scenario `app-latency`). Also what
/// `--only app-latency` prints.
pub fn app_latency_section(app: &crate::app_latency::AppLatencyResult) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## 6. How fast the application knows\n");
    let deletions = app
        .handovers
        .iter()
        .filter(|h| h.trigger == "deletion")
        .count();
    let _ = writeln!(
        o,
        "One group of three pods, {} handovers: {} by deleting the leader pod (the simulated kubelet removes it 300 ms later; a replacement pod joins), {} by the leader pod turning NotReady (Ready again afterwards, as a follower). Every candidate pod is followed by a `leadergroup-client` `Membership` in the bench process and by a real `leadergroup-agent` process, both authenticated as the pods' ServiceAccount with the Role the crate documents (get/watch on pods, get/watch on the group's Lease by name). Lease duration {LEASE_SECONDS} s.\n",
        app.handovers.len(),
        deletions,
        app.handovers.len() - deletions
    );
    let _ = writeln!(
        o,
        "**Every clock starts at {}.** The operator, the agents and the bench run on one machine and read one wall clock. Each clock stops when the bench process sees:\n",
        app.start
    );
    let mut seen = Vec::new();
    for c in &app.clocks {
        if !seen.contains(&c.clock) {
            let _ = writeln!(o, "- {}: {}.", c.clock, c.stop);
            seen.push(c.clock.clone());
        }
    }
    let _ = writeln!(
        o,
        "- downward API file: the kubelet rewrites the `labels`/`annotations` files of a downward API volume. Not measured here: the light cluster has no kubelet. It is measured on the real cluster by `make e2e` (`tests/e2e/downward.rs`: a label PATCH to the file changing inside the container, 20 changes; the test prints median and p99; README, \"Which way to learn the role\", gives the figures).\n"
    );
    let _ = writeln!(
        o,
        "| clock | trigger | median | p99 | min–max | n | |\n|---|---|---|---|---|---|---|"
    );
    for c in &app.clocks {
        let mut line = String::new();
        row(&mut line, &c.clock, c.summary.as_ref(), "");
        let _ = write!(
            o,
            "{}",
            line.replacen(
                &format!("| {} |", c.clock),
                &format!("| {} | {} |", c.clock, c.trigger),
                1
            )
        );
    }
    let _ = writeln!(
        o,
        "| downward API file changes | label PATCH | see `make e2e` | see `make e2e` | – | – | not measurable on the light cluster |"
    );
    let before: Vec<f64> = app
        .handovers
        .iter()
        .map(|h| h.trigger_to_decision_ms)
        .collect();
    if let Some(s) = summarize(&before) {
        let _ = writeln!(
            o,
            "\nBefore the decision (not in the figures above): from the DELETE or the NotReady status write being sent to the decision, median {}, p99 {}.",
            ms(s.median_ms),
            ms(s.p99_ms)
        );
    }
    let overlaps = app
        .handovers
        .iter()
        .filter(|h| h.crate_new_leader_ms < h.crate_old_not_leader_ms)
        .count();
    let _ = writeln!(
        o,
        "\nThe new leader's `Membership` reported `Leader` before the old leader's stopped in {overlaps} of {} handovers: two processes with their own watches, at two different epochs; the fence refuses the older epoch. Checks over every report of the run (no epoch reported `Leader` by two pods, each new leader at the Lease's epoch, nothing before the decision): {}.\n",
        app.handovers.len(),
        if app.violations.is_empty() {
            "all held".to_owned()
        } else {
            format!("**{}**", app.violations.join("; "))
        }
    );
    o
}
