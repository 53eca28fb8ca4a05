//! The short chaos run of `make test` (a few hundred faults; `make chaos` runs
//! the published one): two replicas of this build's operator, several groups whose pods each run
//! a `Membership` followed by an application through a relay (the agent, which faults pause), the
//! plan's faults, and no violation allowed (I1–I4, one active replica, at no instant the
//! applications of two pods of a group acting as leader). `LEADERGROUP_CHAOS_SEED` picks another
//! seed.

use std::path::Path;

#[tokio::test]
async fn a_short_chaos_run_violates_no_invariant() {
    let seed = std::env::var("LEADERGROUP_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-{}", std::process::id()));
    let mut config = leadergroup_chaos::Config::new(
        seed,
        300,
        env!("CARGO_BIN_EXE_leadergroup-operator").into(),
        work.clone(),
    );
    config.round = 50;
    let commit = leadergroup_chaos::Commit::of(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
    let report = leadergroup_chaos::run(&config).await.unwrap();
    // The result and its page, as `make chaos` writes them, beside the replicas' logs.
    let results = report.results(commit, "tests/it/chaos.rs");
    let json = work.join("chaos.json");
    results.write(&json).unwrap();
    let page = results.markdown(&json.display().to_string());
    std::fs::write(work.join("chaos.md"), &page).unwrap();
    eprintln!("{page}");
    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations (the replicas' logs are in {}):\n{}",
        violations.len(),
        work.display(),
        violations.join("\n")
    );
    // A fault is skipped when its target is missing at that moment (no leader between two
    // handovers, a node cut off): four in five must land for the run to say anything.
    assert!(
        report.injected_count() >= 240,
        "only {} of 300 faults injected",
        report.injected_count()
    );
}
