//! `leadergroup-chaos [--seed N] [--faults N] [--groups N] [--operator PATH] [--results JSON]
//! [--out FILE]`: one chaos run (see the library's docs); writes its result to `--results`
//! (default `chaos/results/latest.json`), then its page, rendered from that file, to `--out`
//! (default `docs/chaos.md`), and exits 1 when it saw a violation.
//! `leadergroup-chaos --render-only JSON [--out FILE]` renders the page of a result written
//! before, without a run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use leadergroup_chaos::{Commit, Results};

#[derive(Parser, Debug)]
#[command(
    name = "leadergroup-chaos",
    about = "A seeded, repeatable fault run against two operator replicas"
)]
struct Cli {
    /// The plan's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many faults.
    #[arg(long, default_value_t = 11_000)]
    faults: usize,
    /// How many groups (3 pods each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=50))]
    groups: u32,
    /// The operator binary.
    #[arg(long, default_value = "target/release/leadergroup-operator")]
    operator: PathBuf,
    /// Where the machine-readable result goes (the page is rendered from it); the page names it,
    /// so give it relative to the repository's root.
    #[arg(long, default_value = "chaos/results/latest.json")]
    results: PathBuf,
    /// Where the page goes.
    #[arg(long, default_value = "docs/chaos.md")]
    out: PathBuf,
    /// No run: render the page of this result (written by an earlier run) to `--out`.
    #[arg(long, value_name = "JSON")]
    render_only: Option<PathBuf>,
    /// The git checkout whose commit the result records (the tree the binaries were built
    /// from).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Where the replicas' logs go, and the run's timeline (`seed-N/timeline.tsv`).
    #[arg(long, default_value = "target/chaos")]
    work_dir: PathBuf,
    /// The replicas' `RUST_LOG` (default `info,kube=warn`; e.g. add `kube_runtime::watcher=debug` to see
    /// their watches).
    #[arg(long)]
    operator_log: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(json) = &cli.render_only {
        return match render(json, &cli.out) {
            Ok(results) => {
                println!(
                    "leadergroup-chaos: {} rendered from {} ({} violations)",
                    cli.out.display(),
                    json.display(),
                    results.violations()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("leadergroup-chaos: {e}");
                ExitCode::from(2)
            }
        };
    }
    if !cli.operator.is_file() {
        eprintln!(
            "leadergroup-chaos: --operator {}: no such file (cargo build --release --bin leadergroup-operator)",
            cli.operator.display()
        );
        return ExitCode::from(2);
    }
    // Before the run: the tree the binaries were built from, not whatever is checked out an
    // hour later.
    let commit = match Commit::of(&cli.repo) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leadergroup-chaos: the commit measured: {e}");
            return ExitCode::from(2);
        }
    };
    let command = std::iter::once("leadergroup-chaos".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let mut config = leadergroup_chaos::Config::new(
        cli.seed,
        cli.faults,
        cli.operator,
        cli.work_dir.join(format!("seed-{}", cli.seed)),
    );
    config.groups = cli.groups as usize;
    config.operator_log = cli.operator_log;
    // On SIGINT or SIGTERM the run is dropped: its replicas are killed and its control plane
    // stopped, as when it ends.
    let interrupted = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            Some(()) = async { term.as_mut()?.recv().await } => {}
        }
    };
    let report = tokio::select! {
        result = leadergroup_chaos::run(&config) => match result {
            Ok(r) => r,
            Err(e) => {
                eprintln!("leadergroup-chaos: {e}");
                return ExitCode::from(2);
            }
        },
        () = interrupted => {
            eprintln!("leadergroup-chaos: interrupted; everything it started is stopped");
            return ExitCode::from(130);
        }
    };
    let timeline = config.work_dir.join("timeline.tsv");
    if let Err(e) = std::fs::write(&timeline, report.timeline()) {
        eprintln!("leadergroup-chaos: writing {}: {e}", timeline.display());
        return ExitCode::from(2);
    }
    // The page from the file just written, as --render-only renders it: the two cannot differ.
    let written = report
        .results(commit, &command)
        .write(&cli.results)
        .and_then(|()| render(&cli.results, &cli.out));
    if let Err(e) = written {
        eprintln!("leadergroup-chaos: {e}");
        return ExitCode::from(2);
    }
    let violations = report.violations();
    println!(
        "leadergroup-chaos: {} faults injected, {} violations, worst gap {}; result in {}, page in {}",
        report.injected_count(),
        violations.len(),
        report
            .worst_gap()
            .and_then(|g| g.length)
            .map_or_else(|| "none".into(), leadergroup_chaos::secs),
        cli.results.display(),
        cli.out.display()
    );
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Renders the page of the result at `json` to `out`.
fn render(json: &Path, out: &Path) -> Result<Results, leadergroup_chaos::Error> {
    let results = Results::read(json)?;
    let page = results.markdown(&json.display().to_string());
    std::fs::write(out, page).map_err(|source| leadergroup_chaos::Error::Write {
        path: out.to_owned(),
        source,
    })?;
    Ok(results)
}
