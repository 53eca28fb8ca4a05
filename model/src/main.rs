//! `cargo run -p leadergroup-model --release -- --config large`: explores a configuration
//! exhaustively and prints what it found, counterexamples as numbered API calls.
//! `--replay` prints the interleavings of the holes it found, kept as regression cases, instead.
//! It exits 1 on an unexpected counterexample (one to a property other than the one a
//! configuration of the code before a fix is built to break), a checker thread that panicked, or
//! a replay that does not end as its test asserts; 2 on a usage error.

use std::process::ExitCode;

use leadergroup_model::heartbeat::{HbConfig, HeartbeatModel};
use leadergroup_model::{Config, LeaderGroupModel, replays, run};
use thiserror::Error;

#[derive(Debug, Error)]
enum UsageError {
    #[error(
        "unknown configuration {0:?} (selector, combined, unknown-outcome, large, recreation, group-recreated, group-recreated-lease-deleted, liveness, heartbeat, heartbeat-restart, heartbeat-large, immediate-handover, foreign-write, shortened-handover, lease-deleted, pod-gc, status-patched, two-members, agent-paused, agent-paused-before-fix, agent-returns, agent-returns-before-fix, agent-beside-membership, agents-large, readiness-handshake, readiness-agent-paused, readiness-two-members)"
    )]
    Config(String),
    #[error("--threads wants a number, not {0:?}")]
    Threads(String),
    #[error("--timeout wants seconds, not {0:?}")]
    Timeout(String),
    #[error(
        "unknown argument {0:?}; usage: [--config NAME] [--threads N] [--timeout SECS] [--first] [--replay]"
    )]
    Argument(String),
}

/// Which model a configuration is of.
enum Configured {
    Readiness(Config),
    Heartbeat(HbConfig),
}

struct Args {
    config: Configured,
    threads: usize,
    replay: bool,
    search: run::Search,
    timeout: Option<std::time::Duration>,
}

fn args() -> Result<Args, UsageError> {
    let mut out = Args {
        config: Configured::Readiness(Config::large()),
        threads: 2,
        replay: false,
        search: run::Search::DepthFirst,
        timeout: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--config" => {
                let name = it.next().unwrap_or_default();
                out.config = match (Config::named(&name), HbConfig::named(&name)) {
                    (Some(c), _) => Configured::Readiness(c),
                    (None, Some(c)) => Configured::Heartbeat(c),
                    (None, None) => return Err(UsageError::Config(name)),
                };
            }
            "--threads" => {
                let n = it.next().unwrap_or_default();
                out.threads = n.parse().map_err(|_| UsageError::Threads(n))?;
            }
            "--replay" => out.replay = true,
            "--first" => out.search = run::Search::FirstFailure,
            "--timeout" => {
                let n = it.next().unwrap_or_default();
                let secs: u64 = n.parse().map_err(|_| UsageError::Timeout(n))?;
                out.timeout = Some(std::time::Duration::from_secs(secs));
            }
            other => return Err(UsageError::Argument(other.to_string())),
        }
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.replay {
        let replayed = replays::all();
        for r in &replayed {
            let verdict = if r.as_expected {
                "as expected"
            } else {
                "UNEXPECTED"
            };
            println!("{}: {} [{verdict}]\n{}", r.title, r.outcome, r.text);
        }
        let unexpected = replayed.iter().filter(|r| !r.as_expected).count();
        if unexpected > 0 {
            eprintln!("FAILED: {unexpected} replay(s) did not end as their tests assert");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    let (text, failures) = match &args.config {
        Configured::Readiness(config) => explore(LeaderGroupModel::new(config.clone()), &args),
        Configured::Heartbeat(config) => explore(HeartbeatModel::new(config.clone()), &args),
    };
    print!("{text}");
    for failure in &failures {
        eprintln!("FAILED: {failure}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Explores `model` (depth first, or breadth first with `--first`): its report, and what makes
/// the run fail ([`run::failures`]: an unexpected counterexample, a checker thread that panicked).
fn explore<M: run::Explained>(model: M, args: &Args) -> (String, Vec<String>) {
    let report = run::check(model.clone(), args.threads, args.search, true, args.timeout);
    (run::render(&report, &model), run::failures(&report, &model))
}
