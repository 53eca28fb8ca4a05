//! `cargo run -p leadergroup-model --release -- --config large`: explores a configuration
//! exhaustively and prints what it found, counterexamples as numbered API calls.
//! `--replay` prints the two known holes' interleavings instead.

use std::process::ExitCode;

use leadergroup_model::{Config, LeaderGroupModel, regressions, run};
use thiserror::Error;

#[derive(Debug, Error)]
enum UsageError {
    #[error("unknown configuration {0:?} (small, selector, unknown-outcome, large)")]
    Config(String),
    #[error("--threads wants a number, not {0:?}")]
    Threads(String),
    #[error("unknown argument {0:?}; usage: [--config NAME] [--threads N] [--replay]")]
    Argument(String),
}

struct Args {
    config: Config,
    threads: usize,
    replay: bool,
}

fn args() -> Result<Args, UsageError> {
    let mut out = Args {
        config: Config::large(),
        threads: 2,
        replay: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--config" => {
                let name = it.next().unwrap_or_default();
                out.config = Config::named(&name).ok_or(UsageError::Config(name))?;
            }
            "--threads" => {
                let n = it.next().unwrap_or_default();
                out.threads = n.parse().map_err(|_| UsageError::Threads(n))?;
            }
            "--replay" => out.replay = true,
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
        let (outcome, text) = regressions::replay_late_promotion_after_selector_edit();
        println!("hole 1, late promotion after a selector edit: {outcome:?}\n{text}");
        let (outcome, text) = regressions::replay_barrier_flag_survives_unknown_outcome();
        println!("hole 2, barrier flag survives an unknown outcome: {outcome:?}\n{text}");
        return ExitCode::SUCCESS;
    }
    let model = LeaderGroupModel::new(args.config.clone());
    let report = run::check(args.config, args.threads, true, true);
    print!("{}", run::render(&report, &model));
    ExitCode::SUCCESS
}
