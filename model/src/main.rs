//! `cargo run -p leadergroup-model --release -- --config large`: explores a configuration
//! exhaustively and prints what it found, counterexamples as numbered API calls.
//! `--replay` prints the interleavings of the holes it found, kept as regression cases, instead.

use std::process::ExitCode;

use leadergroup_model::finalizer::LeaseOnDeletion;
use leadergroup_model::heartbeat::{self, HbConfig, HeartbeatModel};
use leadergroup_model::{Config, LeaderGroupModel, regressions, run};
use thiserror::Error;

#[derive(Debug, Error)]
enum UsageError {
    #[error(
        "unknown configuration {0:?} (selector, combined, unknown-outcome, large, recreation, group-recreated, group-recreated-lease-deleted, liveness, heartbeat, heartbeat-restart, heartbeat-large, immediate-handover, foreign-write, shortened-handover, lease-deleted, pod-gc, status-patched, two-members)"
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
        let (outcome, text) = regressions::replay_late_promotion_after_selector_edit();
        println!("hole 1, late promotion after a selector edit: {outcome:?}\n{text}");
        let (outcome, text) = regressions::replay_barrier_flag_survives_unknown_outcome();
        println!("hole 2, barrier flag survives an unknown outcome: {outcome:?}\n{text}");
        let (outcome, text) =
            regressions::replay_stale_cache_beside_a_leader_outside_the_selector();
        println!(
            "hole 3, a stale pod cache beside a leader outside the selector: {outcome:?}\n{text}"
        );
        let (outcome, text) = regressions::replay_promotion_on_a_stale_lease_cache();
        println!("hole 4, a promotion on a stale Lease cache: {outcome:?}\n{text}");
        let (outcome, text) = regressions::replay_recreated_pod_outside_a_stale_cache();
        println!("hole 5, a re-created pod outside a stale pod cache: {outcome:?}\n{text}");
        let (outcome, text) = regressions::replay_recreated_pod_outside_a_stale_cache_barrier_up();
        println!("hole 5 on one replica, its barrier flag up: {outcome:?}\n{text}");
        let (outcome, text) = regressions::replay_group_recreated(LeaseOnDeletion::Released);
        println!("the group deleted and created again: {outcome:?}\n{text}");
        let (outcome, text) = regressions::replay_group_recreated(LeaseOnDeletion::Deleted);
        println!(
            "the group deleted and created again, its Lease deleted (as before): {outcome:?}\n{text}"
        );
        let (outcome, text) = heartbeat::regressions::replay_shorter_duration_during_a_cut_off();
        println!("Heartbeat, a shorter Lease during a cut-off: {outcome:?}\n{text}");
        let (outcome, text) = heartbeat::regressions::replay_restarted_client();
        println!("Heartbeat, a restarted client: {outcome:?}\n{text}");
        let (outcome, renewed_unlabeled, text) =
            heartbeat::regressions::replay_successor_deposed_before_its_label();
        println!(
            "Heartbeat, a successor deposed before its label: {outcome:?}, renewed unlabeled: {renewed_unlabeled}\n{text}"
        );
        let (overlap, successor, text) =
            heartbeat::regressions::replay_immediate_handover_with_the_old_leader_cut_off();
        println!(
            "Heartbeat, an immediate handover with the old leader cut off: two clients believe Leader at {overlap:?} s, the successor's from {successor:?} s\n{text}"
        );
        let (overlap, successor, text) =
            heartbeat::regressions::replay_lease_deleted_under_a_cut_off_leader();
        println!(
            "Heartbeat, the Lease deleted under a cut-off leader: two clients believe Leader at {overlap:?} s, the successor's from {successor:?} s\n{text}"
        );
        let (outcome, text) =
            heartbeat::regressions::replay_shorter_duration_then_an_operator_restart();
        println!("Heartbeat, a shorter Lease, then an operator restart: {outcome:?}\n{text}");
        let (overlap, successor, text) =
            heartbeat::regressions::replay_switchover_after_a_shortened_lease();
        println!(
            "Heartbeat, a switchover after a shortened Lease: two clients believe Leader at {overlap:?} s, the successor's from {successor:?} s\n{text}"
        );
        return ExitCode::SUCCESS;
    }
    let text = match &args.config {
        Configured::Readiness(config) => explore(LeaderGroupModel::new(config.clone()), &args),
        Configured::Heartbeat(config) => explore(HeartbeatModel::new(config.clone()), &args),
    };
    print!("{text}");
    ExitCode::SUCCESS
}

/// Explores `model` (depth first, or breadth first with `--first`), and its report.
fn explore<M: run::Explained>(model: M, args: &Args) -> String {
    let report = run::check(model.clone(), args.threads, args.search, true, args.timeout);
    run::render(&report, &model)
}
