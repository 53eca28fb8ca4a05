//! `leadergroup-bench`: runs the benchmark scenarios against one control plane (its own, started
//! through leadergroup-testenv, or the one `LEADERGROUP_KUBECONFIG` names), then writes
//! `bench/results/<scenario>.json` (every sample) and the tables of `docs/benchmarks.md`.
//! `--only` runs one scenario alone; `--help` lists the flags ([`Options`]) and the scenarios
//! ([`SCENARIOS`]). An unknown flag is refused before anything runs: a typo must not start a
//! twelve-minute run that overwrites published results.

mod app_latency;
mod burst;
mod candidates;
mod e2e;
mod e2e_tables;
mod error;
mod floor;
mod handover;
mod heartbeat_writes;
mod markdown;
mod observe;
mod ours;
mod peers;
mod results;
mod scale;
mod scale_10k;
mod scenario;
mod slow;
mod timeline;
mod traffic;

use std::path::{Path, PathBuf};

use clap::Parser;
use clap::builder::{PossibleValue, PossibleValuesParser};

use crate::error::{Error, Result};
use crate::markdown::{Block, excerpt, splice};
use crate::results::Results;
use crate::scenario::{Context, Options, Scenario};

/// Every scenario, in the order of the full run. A new scenario is a file and a line here.
const SCENARIOS: &[&Scenario] = &[
    &floor::FLOOR,
    &handover::HANDOVERS,
    &burst::BURST,
    &app_latency::APP_LATENCY,
    &heartbeat_writes::HEARTBEAT_WRITES,
    &scale::SCALE,
    &scale_10k::SCALE_10K,
    &slow::SLOW,
    &e2e::E2E,
    &traffic::TRAFFIC,
];

/// `--only` values that measure nothing: the page's tables again from bench/results.
const PAGE: [&str; 2] = ["page", "e2e-render"];

/// `--only`: every scenario, and the page alone.
fn only_values() -> PossibleValuesParser {
    let page = PossibleValue::new(PAGE[0])
        .alias(PAGE[1])
        .help("Rewrite the tables of docs/benchmarks.md from bench/results (no measurement)");
    let scenarios = SCENARIOS
        .iter()
        .map(|s| PossibleValue::new(s.name).help(s.help));
    PossibleValuesParser::new(scenarios.chain([page]))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    match run(Options::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("leadergroup-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The repository: this crate lives in `<repo>/bench`.
pub(crate) fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(1)
        .map_or_else(|| manifest.to_path_buf(), Path::to_path_buf)
}

/// Runs a command that must succeed (its stderr passed through); its stdout, trimmed.
pub(crate) async fn run_command(command: std::process::Command) -> Result<String> {
    let shown = format!("{command:?}");
    let out = tokio::process::Command::from(command)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .map_err(Error::io(format!("running {shown}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() {
        return Err(Error::Other(format!("{shown}: {}: {stdout}", out.status)));
    }
    Ok(stdout)
}

async fn run(options: Options) -> Result<()> {
    let repo = options.repo.clone().unwrap_or_else(repo_root);
    let only = options.only.clone();
    let only = only.as_deref();
    if only.is_some_and(|o| PAGE.contains(&o)) {
        return rewrite_page(&repo);
    }
    let scenarios: Vec<&Scenario> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| only.map_or(s.in_full_run, |name| s.name == name))
        .collect();
    let ctx = Context::new(repo, options)?;
    if only.is_none() {
        // Everything the full run needs, before its first measurement.
        ctx.peers().await?;
        ctx.baseline().await?;
    }
    let mut outcomes = Vec::new();
    for scenario in &scenarios {
        outcomes.push((scenario.measure)(&ctx).await?);
    }
    for outcome in &mut outcomes {
        outcome.measure_peers(&ctx).await?;
    }
    let run = ctx.finished_run();
    let results = Results::of(&ctx.repo);
    for outcome in &mut outcomes {
        outcome.write(&run, &results)?;
    }
    rewrite_page(&ctx.repo)?;
    if let Some(name) = only {
        // What a scenario run alone prints and logs: its blocks as the page now holds them; it
        // fails on what its checks found.
        let excerpt = excerpt(&blocks(&scenarios, &results)?);
        let log = ctx.log_dir.join(format!("{name}.md"));
        std::fs::write(&log, &excerpt).map_err(Error::io(format!("writing {}", log.display())))?;
        eprintln!("{excerpt}");
        let problems: Vec<String> = outcomes.iter().flat_map(|o| o.problems()).collect();
        if !problems.is_empty() {
            return Err(Error::Other(format!("{name}: {}", problems.join("; "))));
        }
    }
    tracing::info!(
        "done in {:.0} s: bench/results/*.json, docs/benchmarks.md",
        run.duration_s
    );
    Ok(())
}

/// Every block of `scenarios` from `results`.
fn blocks(scenarios: &[&Scenario], results: &Results) -> Result<Vec<Block>> {
    let per_scenario: Result<Vec<Vec<Block>>> =
        scenarios.iter().map(|s| s.blocks(results)).collect();
    Ok(per_scenario?.concat())
}

/// Rewrites the tables of `<repo>/docs/benchmarks.md` from `<repo>/bench/results`.
fn rewrite_page(repo: &Path) -> Result<()> {
    let path = repo.join("docs/benchmarks.md");
    let page =
        std::fs::read_to_string(&path).map_err(Error::io(format!("reading {}", path.display())))?;
    let page = splice(&page, &blocks(SCENARIOS, &Results::of(repo))?)?;
    std::fs::write(&path, page).map_err(Error::io(format!("writing {}", path.display())))?;
    tracing::info!("wrote the tables of docs/benchmarks.md from bench/results/*.json");
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The committed page holds exactly the tables the committed results render: a change of
    /// the rendering, or results committed without the page regenerated, fails here.
    #[test]
    fn the_committed_page_holds_the_committed_results_tables() {
        let repo = repo_root();
        let page = std::fs::read_to_string(repo.join("docs/benchmarks.md")).unwrap();
        let blocks = blocks(SCENARIOS, &Results::of(&repo)).unwrap();
        // Every block the page has markers for is rendered, and no other.
        let mut names: Vec<&str> = blocks.iter().map(|b| b.name.as_str()).collect();
        let mut marked: Vec<&str> = page
            .split("<!-- bench:")
            .skip(1)
            // A marker's own text only: other comments (`<!-- figures:begin -->`) follow ends.
            .filter_map(|rest| rest.split_once(" -->")?.0.strip_suffix(":begin"))
            // The prose shows the markers' form with a placeholder.
            .filter(|name| *name != "NAME")
            .collect();
        names.sort_unstable();
        marked.sort_unstable();
        assert_eq!(names, marked);
        let regenerated = splice(&page, &blocks).unwrap();
        if regenerated != page {
            let diff: Vec<String> = page
                .lines()
                .zip(regenerated.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("committed:   {a}\nregenerated: {b}"))
                .take(5)
                .collect();
            panic!(
                "docs/benchmarks.md differs from bench/results (`leadergroup-bench --only page` rewrites it):\n{}",
                diff.join("\n")
            );
        }
    }
}
