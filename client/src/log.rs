//! The log set-up of the agent and the operator (feature `log`), for applications too: lines go to
//! stdout through a bounded queue that a thread of its own writes out, so a stdout that stops
//! taking lines never blocks the code that logs.
//!
//! It does stop. A container's stdout is a pipe that its node's container runtime drains; on a node
//! whose containerd has stopped (crashed, restarted for an upgrade, or the node lost), nothing
//! drains it, and after about 128 KiB every write to it blocks. A process that writes its log lines
//! straight to stdout then stops wherever it logs next: an agent that logs the role change it is
//! making would never publish `unknown`, and its application would act on as leader. Lines that
//! find the queue full are dropped instead: a log is worth less than the role being on time.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// What the agent and the operator log when `RUST_LOG` is not set: their own lines from info up,
/// kube's warnings.
pub const DEFAULT_FILTER: &str = "info,kube=warn";

/// How many lines may wait for stdout before new ones are dropped: enough for a burst, and a
/// bounded amount of memory (a line is a few hundred bytes) in a sidecar with a small limit.
pub const QUEUE_LINES: usize = 1024;

/// Keeps the writer thread; dropping it writes out what is queued (within a second), so hold it
/// until the process ends.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    _writer: WorkerGuard,
}

/// Installs the global subscriber: `RUST_LOG` if set, else `default_filter`; JSON lines (fields
/// flattened) or text, coloured only when stdout is a terminal (never in a pipe or a collector's
/// capture, where the escape codes would be noise).
pub fn init(json: bool, default_filter: &str) -> LogGuard {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let ansi = std::io::stdout().is_terminal();
    let (writer, guard) = NonBlockingBuilder::default()
        .buffered_lines_limit(QUEUE_LINES)
        .lossy(true)
        .thread_name("log-writer")
        .finish(std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    LogGuard { _writer: guard }
}
