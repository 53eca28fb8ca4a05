//! `--on-change`: a command run on each change of role, one at a time, in order.

use leadergroup_client::Role;
use tokio::{
    process::Command,
    sync::{mpsc, oneshot},
    task::JoinHandle,
};
use tracing::{error, info, warn};

use crate::state::role_name;

/// The environment variable holding the role (`leader`, `follower`, `unknown`).
pub const ROLE_ENV: &str = "LEADERGROUP_ROLE";
/// The environment variable holding the epoch while leader, empty otherwise.
pub const EPOCH_ENV: &str = "LEADERGROUP_EPOCH";
/// The environment variable holding, while leader, the Unix time in milliseconds from which the
/// role no longer holds unless confirmed again (the `valid-until` file then has the newer one);
/// empty otherwise.
pub const VALID_UNTIL_ENV: &str = "LEADERGROUP_VALID_UNTIL";

/// The queue of changes waiting for the command.
pub struct OnChange {
    queue: mpsc::UnboundedSender<(Role, Option<u64>, oneshot::Sender<()>)>,
    task: JoinHandle<()>,
}

impl OnChange {
    /// Starts the runner of `command` (a shell command line, run by `/bin/sh -c`).
    pub fn start(command: String) -> OnChange {
        let (queue, changes) = mpsc::unbounded_channel();
        OnChange {
            queue,
            task: tokio::spawn(run(command, changes)),
        }
    }

    /// Queues a run for `role`. Runs never overlap: a change that arrives while the command runs
    /// is run after it, so the last run always saw the role the agent publishes. The receiver
    /// hears when the run has ended, whatever its outcome (a failed command is only reported).
    pub fn changed(&self, role: Role, valid_until_ms: Option<u64>) -> oneshot::Receiver<()> {
        let (done, ended) = oneshot::channel();
        // Fails only once the runner is gone, which happens only at shutdown.
        let _ = self.queue.send((role, valid_until_ms, done));
        ended
    }

    /// Lets the queued runs finish (the caller bounds the wait).
    pub async fn finish(self) {
        drop(self.queue);
        let _ = self.task.await;
    }
}

async fn run(
    command: String,
    mut changes: mpsc::UnboundedReceiver<(Role, Option<u64>, oneshot::Sender<()>)>,
) {
    while let Some((role, valid_until_ms, done)) = changes.recv().await {
        let epoch = role
            .leader_epoch()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let until = valid_until_ms
            .filter(|_| role.is_leader())
            .map(|ms| ms.to_string())
            .unwrap_or_default();
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg(&command)
            .env(ROLE_ENV, role_name(role))
            .env(EPOCH_ENV, &epoch)
            .env(VALID_UNTIL_ENV, &until)
            .kill_on_drop(true)
            .status()
            .await;
        // Its failure is reported and never stops the agent.
        match status {
            Ok(status) if status.success() => info!(%role, "on-change command done"),
            Ok(status) => warn!(%role, %status, command, "on-change command failed"),
            Err(e) => error!(%role, error = %e, command, "on-change command could not start"),
        }
        // Nobody waits any more at shutdown.
        let _ = done.send(());
    }
}
