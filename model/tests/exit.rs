//! The binary's exit status: what a CI job or a script reads of a run.

use std::process::Command;

fn model() -> Command {
    Command::new(env!("CARGO_BIN_EXE_leadergroup-model"))
}

#[test]
fn a_usage_error_exits_2() {
    let out = model().arg("--bogus").output().expect("the binary runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// A configuration of the code before a fix finds the counterexample it is built to show: its
/// expected outcome, so the run passes.
#[test]
fn an_expected_counterexample_exits_0() {
    let out = model()
        .args(["--config", "agent-returns-before-fix", "--first"])
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("expected: found"), "{stdout}");
    assert!(
        stdout.contains("two pods' applications act as leader"),
        "{stdout}"
    );
}
