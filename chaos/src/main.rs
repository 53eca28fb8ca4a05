//! `leadergroup-chaos [--seed N] [--faults N] [--groups N] [--operator PATH] [--out FILE]`: one
//! chaos run (see the library's docs); writes its page to `--out` (default `docs/chaos.md`) and
//! exits 1 when it saw a violation.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

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
    /// Where the page goes.
    #[arg(long, default_value = "docs/chaos.md")]
    out: PathBuf,
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
    if !cli.operator.is_file() {
        eprintln!(
            "leadergroup-chaos: --operator {}: no such file (cargo build --release --bin leadergroup-operator)",
            cli.operator.display()
        );
        return ExitCode::from(2);
    }
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
    let generated = jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string();
    let command = format!(
        "make chaos (leadergroup-chaos --seed {} --faults {})",
        config.seed, config.faults
    );
    let page = report.markdown(&generated, &command);
    if let Err(e) = std::fs::write(&cli.out, &page) {
        eprintln!("leadergroup-chaos: writing {}: {e}", cli.out.display());
        return ExitCode::from(2);
    }
    let timeline = config.work_dir.join("timeline.tsv");
    if let Err(e) = std::fs::write(&timeline, report.timeline()) {
        eprintln!("leadergroup-chaos: writing {}: {e}", timeline.display());
        return ExitCode::from(2);
    }
    let violations = report.violations();
    println!(
        "leadergroup-chaos: {} faults injected, {} violations, worst gap {}; page in {}",
        report.injected_count(),
        violations.len(),
        report
            .worst_gap()
            .and_then(|g| g.length)
            .map_or_else(|| "none".into(), leadergroup_chaos::secs),
        cli.out.display()
    );
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
