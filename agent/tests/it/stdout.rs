//! A leading agent whose stdout nobody reads any more still publishes `unknown` in time when it is
//! cut off from the API server. A container's stdout is a pipe its node's container runtime
//! drains; with containerd stopped (crashed, restarted, or the node lost) it fills after about
//! 128 KiB and every write to it blocks. Here the pipe is the test's, never read, and the agent
//! logs at `trace` to fill it.

use leadergroup_testenv::wait_until;
use std::time::{Duration, Instant};

use crate::common::{Agent, DURATION_SECS, Output, WAIT, leader_behind_proxy};

/// Whether a thread of process `pid` waits to write into a full pipe.
fn waits_on_a_full_pipe(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|task| {
            std::fs::read_to_string(task.path().join("wchan"))
                .is_ok_and(|wchan| wchan.contains("pipe_write"))
        })
}

#[tokio::test]
async fn a_cut_off_leader_whose_stdout_is_full_publishes_unknown_in_time() {
    let (w, proxy, kubeconfig) = leader_behind_proxy("agent-stdout").await;
    let agent = Agent::start_with(
        &kubeconfig,
        &w.ns.name,
        "app-0",
        &["--group", "g"],
        Output::Unread,
    )
    .await;
    agent.wait_role("leader", Some(5)).await;
    let pid = agent.pid();
    let full = wait_until(
        "the agent's stdout full",
        Duration::from_secs(90),
        || async { Ok::<_, String>(waits_on_a_full_pipe(pid).then_some(())) },
    )
    .await;
    full.unwrap_or_else(|e| panic!("{e}\n{}", agent.logs()));

    let cut = Instant::now();
    proxy.cut();
    let unknown = wait_until("the agent publishes unknown", WAIT, || async {
        Ok::<_, String>((agent.file("role") == "unknown").then(Instant::now))
    })
    .await;
    let after = match unknown {
        Ok(at) => at - cut,
        Err(e) => panic!(
            "{e}: its role file still reads {:?}, a thread of it waiting on the full pipe: {}\n{}",
            agent.file("role"),
            waits_on_a_full_pipe(pid),
            agent.logs()
        ),
    };
    let validity = Duration::from_secs(DURATION_SECS as u64) * 2 / 3;
    eprintln!(
        "stdout full: the agent published unknown {after:?} after the cut (validity {validity:?})"
    );
    // As in the cut test: the last confirmation was at most a third of the duration before the
    // cut; the slack covers a slow GET and the scheduling on 2 shared cores.
    assert!(
        after <= validity + Duration::from_millis(600),
        "unknown only {after:?} after the cut\n{}",
        agent.logs()
    );
}
