//! How fast the application knows, on the light cluster: a few handovers
//! (deletion and NotReady, alternately), each candidate pod followed by an in-process
//! `leadergroup-client` `Membership` and a real `leadergroup-agent` process, both authenticated as
//! the pods' ServiceAccount with the documented Role. The measurement is
//! `leadergroup_testenv::app_latency`, which `make bench` runs with 50 handovers (scenario
//! `app-latency`).
//!
//! It asserts what an application relies on, and prints the latencies; it asserts no speed (the
//! bounds in `leadergroup_testenv::app_latency` only declare a run broken).

use leadergroup_testenv::app_latency as measure;
use leadergroup_testenv::stats::Summary;

use crate::common::World;

/// The `leadergroup-agent` binary: `cargo test --workspace` builds it into the same target
/// folder as this test binary.
fn agent_bin() -> std::path::PathBuf {
    let bin = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("leadergroup-agent");
    assert!(
        bin.is_file(),
        "{} is missing: `cargo test --workspace` builds it; with a narrower selection run `cargo build -p leadergroup-agent` first",
        bin.display()
    );
    bin
}

/// Per handover: the new leader's `Membership` and agent report `Leader` at the epoch the Lease
/// holds, one more than the old leader's; the old leader's `Membership` and agent stop reporting
/// `Leader`; nothing reports the new state before the operator's decision (the Lease's
/// `acquireTime`); and over every report of the run no epoch is reported `Leader` by two pods.
/// The order between the old leader's stop and the new leader's start is printed, not asserted:
/// they are two processes with their own watches, and the docs do not promise it (the fence
/// does the rest).
#[tokio::test]
async fn each_new_leader_learns_its_epoch_and_the_old_one_stops() {
    let world = World::new("app-latency").await;
    let cp = leadergroup_testenv::control_plane().await.unwrap();
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let setup = measure::Setup {
        ns: &world.ns,
        kubeconfig: cp.kubeconfig_path(),
        cp,
        operator_bin: env!("CARGO_BIN_EXE_leadergroup-operator").into(),
        agent_bin: agent_bin(),
        log_dir: target.join("app-latency-logs"),
        handovers: 6,
    };
    let report = measure::run(&setup).await.unwrap_or_else(|e| {
        panic!(
            "{e}\n(logs: {}/app-latency-logs/{}-*)",
            target.display(),
            world.ns.name
        )
    });
    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "{}\nhandovers: {:#?}",
        violations.join("\n"),
        report.handovers
    );
    assert_eq!(report.handovers.len(), setup.handovers);

    println!("app-latency: ms from the decision (the Lease's acquireTime):");
    println!(
        "app-latency: trigger    old->new             crate new  crate old  agent new  agent old"
    );
    for h in &report.handovers {
        println!(
            "app-latency: {:<9}  {}@{} -> {}@{}  {:>9.1}  {:>9.1}  {:>9.1}  {:>9.1}",
            h.trigger.name(),
            h.old.0,
            h.old.1,
            h.new.0,
            h.new.1,
            h.crate_new_leader_ms,
            h.crate_old_not_leader_ms,
            h.agent_new_leader_ms,
            h.agent_old_not_leader_ms
        );
    }
    let column =
        |f: fn(&measure::Handover) -> f64| -> Vec<f64> { report.handovers.iter().map(f).collect() };
    for (clock, samples) in [
        (
            "new leader's Membership Leader",
            column(|h| h.crate_new_leader_ms),
        ),
        (
            "old leader's Membership not Leader",
            column(|h| h.crate_old_not_leader_ms),
        ),
        (
            "new leader's agent long poll leader",
            column(|h| h.agent_new_leader_ms),
        ),
        (
            "old leader's agent long poll not leader",
            column(|h| h.agent_old_not_leader_ms),
        ),
    ] {
        println!("app-latency: {clock}: {}", Summary::describe(&samples));
    }
    let overlaps = report
        .handovers
        .iter()
        .filter(|h| h.crate_new_leader_ms < h.crate_old_not_leader_ms)
        .count();
    println!(
        "app-latency: the new Membership said Leader before the old one stopped in {overlaps} of {} handovers (allowed: different epochs; the fence refuses the older)",
        report.handovers.len()
    );
    println!(
        "app-latency: the downward API file is not measured here (no kubelet): see the real cluster's figures"
    );
}
