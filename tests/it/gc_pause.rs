//! The GC-pause scenario, end to end on the light cluster: a leader frozen
//! with SIGSTOP, leadership moved, the old leader thawed and writing with its old epoch, and
//! PostgreSQL refusing it. The scenario itself, and why the thawed writer writes before it looks
//! at its role again, is in `leadergroup_testenv::gc_pause` (`make demo` runs the same code).

use leadergroup_testenv::gc_pause::{Scenario, Setup};

use crate::common::World;

/// Over every write attempted (the ledger table, and each writer's `wrote`, `refused` and
/// `failed` lines): the accepted epochs never decrease in commit order, no write of an older
/// epoch is accepted once a newer one has been, each epoch has one writer, every write a writer
/// reported as accepted is in the table, and the thawed leader's write at its old epoch was
/// refused by the fence. Prints the number of stale writes refused.
#[tokio::test]
async fn a_thawed_leader_is_refused_by_the_fence() {
    let world = World::new("gc-pause").await;
    let cp = leadergroup_testenv::control_plane().await.unwrap();
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    // Examples are built by `cargo test` next to the test binary's folder (target/debug/deps).
    let ledger_bin = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/ledger");
    assert!(
        ledger_bin.is_file(),
        "{} is missing: `cargo test` builds it; with a narrower selection run `cargo build --example ledger` first",
        ledger_bin.display()
    );
    let narrate = |line: &str| println!("gc-pause: {line}");
    let setup = Setup {
        kubeconfig: cp.kubeconfig_path(),
        ns: &world.ns,
        operator_bin: env!("CARGO_BIN_EXE_leadergroup-operator").into(),
        ledger_bin,
        log_dir: target.join("gc-pause-logs"),
        narrate: &narrate,
    };
    let (scenario, report) = Scenario::run(&setup).await.unwrap_or_else(|e| {
        panic!(
            "{e}\n(logs: {}/gc-pause-logs/{}-*)",
            target.display(),
            world.ns.name
        )
    });
    drop(scenario);

    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "{}\nrows: {:?}\nrefusals: {:?}",
        violations.join("\n"),
        report.rows,
        report.refusals
    );
    let stale = report.refusals.len();
    println!(
        "gc-pause: {} writes accepted (epochs {:?}), {stale} stale write(s) refused, {} failed; \
         old leader {} at epoch {}, new leader {} at epoch {}; frozen {:?}, freeze to the new \
         leader's first write {:?}, thaw to the refusal {:?}, thaw to the old role lost {:?}",
        report.rows.len(),
        report
            .rows
            .iter()
            .map(|r| r.epoch)
            .collect::<std::collections::BTreeSet<_>>(),
        report.failed,
        report.old.0,
        report.old.1,
        report.new.0,
        report.new.1,
        report.frozen_for,
        report.freeze_to_new_write,
        report.thaw_to_refusal,
        report.thaw_to_stopped
    );
}
