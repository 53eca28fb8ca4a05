//! The operator binary run as a child process, as a user runs it: the one way every test, the
//! chaos run and the demo start it.
//!
//! Its HTTP port (/healthz, /readyz, /metrics), and its secure metrics port when asked for, are
//! chosen free just before the start, but another process of the parallel tests (an operator, an
//! agent, a PostgreSQL) may bind one before the operator does: the operator then exits at once
//! with "Address already in use", and it is started again on other ports.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::{Error, Result, http_get};

/// How many times a start is tried when the chosen port was taken in between.
const PORT_ATTEMPTS: usize = 5;
/// How long a start waits for the process to answer /healthz or to exit.
const STARTED_WITHIN: Duration = Duration::from_secs(5);
/// What the operator's log says when its HTTP port was taken.
const PORT_TAKEN: &str = "Address already in use";

/// How to start one operator process.
#[derive(Clone, Debug)]
pub struct OperatorLaunch {
    /// The operator binary.
    pub binary: PathBuf,
    /// The kubeconfig it connects with (`--kubeconfig`).
    pub kubeconfig: PathBuf,
    /// The namespace it watches (`--namespace`); every namespace when `None`.
    pub namespace: Option<String>,
    /// Its identity (`--identity`).
    pub identity: String,
    /// Further arguments, after the ones above and `--http-addr`.
    pub args: Vec<String>,
    /// Serve `/metrics` over TLS on a port of its own (`--metrics-secure-addr`).
    pub secure_metrics: bool,
    /// Its log (stdout, where tracing writes, and stderr, with a fatal error): appended to, so
    /// that the processes of one replica can share one file.
    pub log: PathBuf,
    /// `RUST_LOG`.
    pub rust_log: String,
    /// Left running when its [`OperatorProcess`] drops (the demo leaves it for the user).
    pub keep_running: bool,
}

impl OperatorLaunch {
    /// `binary` connecting with `kubeconfig`, watching `namespace` as `identity`, logging to
    /// `log` at info (the operator's own debug lines included).
    pub fn new(
        binary: impl Into<PathBuf>,
        kubeconfig: impl Into<PathBuf>,
        namespace: Option<&str>,
        identity: &str,
        log: impl Into<PathBuf>,
    ) -> OperatorLaunch {
        OperatorLaunch {
            binary: binary.into(),
            kubeconfig: kubeconfig.into(),
            namespace: namespace.map(str::to_owned),
            identity: identity.to_owned(),
            args: Vec::new(),
            secure_metrics: false,
            log: log.into(),
            rust_log: "info,kube=warn".to_owned(),
            keep_running: false,
        }
    }

    /// These arguments added.
    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> OperatorLaunch {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `/metrics` served over TLS on a free port ([`OperatorProcess::metrics_secure`]), no longer
    /// on the HTTP port.
    pub fn secure_metrics(mut self) -> OperatorLaunch {
        self.secure_metrics = true;
        self
    }

    /// `RUST_LOG` set to `filter`.
    pub fn rust_log(mut self, filter: &str) -> OperatorLaunch {
        filter.clone_into(&mut self.rust_log);
        self
    }

    /// Left running when its process handle drops.
    pub fn keep_running(mut self) -> OperatorLaunch {
        self.keep_running = true;
        self
    }
}

/// A running operator process; killed when dropped (unless launched with `keep_running`).
pub struct OperatorProcess {
    child: Child,
    /// The identity it runs with.
    pub identity: String,
    /// Where it serves /healthz, /readyz and /metrics.
    pub http: SocketAddr,
    /// Where it serves /metrics over TLS, when launched with [`OperatorLaunch::secure_metrics`].
    pub metrics_secure: Option<SocketAddr>,
    /// When this process was spawned (the start that kept its port).
    pub started: Instant,
    log: PathBuf,
}

impl OperatorProcess {
    /// Starts the operator as `launch` says, and returns once it answers /healthz or has exited
    /// for a reason other than its port (a process that exits for another reason is returned,
    /// for the caller to see in its log).
    pub async fn start(launch: &OperatorLaunch) -> Result<OperatorProcess> {
        for _ in 0..PORT_ATTEMPTS {
            let log_before = file_len(&launch.log);
            let mut operator = Self::spawn(launch)?;
            if !operator.lost_its_port(log_before).await {
                return Ok(operator);
            }
        }
        Err(Error::Unexpected(format!(
            "{} found a port taken {PORT_ATTEMPTS} times in a row (log: {})",
            launch.binary.display(),
            launch.log.display()
        )))
    }

    fn spawn(launch: &OperatorLaunch) -> Result<OperatorProcess> {
        let http = free_port()?;
        let metrics_secure = launch.secure_metrics.then(free_port).transpose()?;
        if let Some(dir) = launch.log.parent() {
            std::fs::create_dir_all(dir)
                .map_err(Error::io(format!("creating {}", dir.display())))?;
        }
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&launch.log)
                .map_err(Error::io(format!("opening {}", launch.log.display())))
        };
        let started = Instant::now();
        let mut command = Command::new(&launch.binary);
        command.arg("--kubeconfig").arg(&launch.kubeconfig);
        if let Some(namespace) = &launch.namespace {
            command.args(["--namespace", namespace]);
        }
        if let Some(secure) = metrics_secure {
            command.args(["--metrics-secure-addr", &secure.to_string()]);
        }
        let child = command
            .args(["--identity", &launch.identity])
            .args(["--http-addr", &http.to_string()])
            .args(&launch.args)
            .env("RUST_LOG", &launch.rust_log)
            .stdin(Stdio::null())
            .stdout(open_log()?)
            .stderr(open_log()?)
            .kill_on_drop(!launch.keep_running)
            .spawn()
            .map_err(Error::io(format!("starting {}", launch.binary.display())))?;
        Ok(OperatorProcess {
            child,
            identity: launch.identity.clone(),
            http,
            metrics_secure,
            started,
            log: launch.log.clone(),
        })
    }

    /// Whether it exited because its HTTP port was taken: it binds the port at start, so this
    /// waits for /healthz to answer or the process to end. `log_before`: the log's length before
    /// this process started (the log may hold earlier processes' lines).
    async fn lost_its_port(&mut self, log_before: u64) -> bool {
        let deadline = tokio::time::Instant::now() + STARTED_WITHIN;
        while tokio::time::Instant::now() < deadline {
            if self.exited() {
                return self.logs_since(log_before).contains(PORT_TAKEN);
            }
            if self.get("/healthz").await.is_some() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the process has ended.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends `signal` (`-STOP`, `-CONT`, `-TERM`...) with kill(1).
    pub fn signal(&self, signal: &str) -> Result<()> {
        let Some(pid) = self.pid() else {
            return Err(Error::Unexpected(format!(
                "{} is not running",
                self.identity
            )));
        };
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .map_err(Error::io(format!("kill {signal} {pid}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Unexpected(format!("kill {signal} {pid}: {status}")))
        }
    }

    /// SIGKILL (no cleanup, no release, as a crash or an OOM kill), and waits for the end.
    pub async fn kill(&mut self) -> Result<()> {
        self.child
            .kill()
            .await
            .map_err(Error::io(format!("SIGKILL {}", self.identity)))
    }

    /// SIGTERM and waits for the exit, at most `within` (then SIGKILL, and a timeout error).
    pub async fn terminate(&mut self, within: Duration) -> Result<ExitStatus> {
        self.signal("-TERM")?;
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.map_err(Error::io(format!("waiting for {}", self.identity))),
            Err(_) => {
                let _ = self.child.kill().await;
                Err(Error::Timeout {
                    what: format!("{} to exit after SIGTERM", self.identity),
                    timeout: within,
                    last: String::new(),
                })
            }
        }
    }

    /// GETs `path` on its HTTP endpoint: (status code, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.http, path).await
    }

    /// Its log.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its log so far (for failure messages).
    pub fn logs(&self) -> String {
        self.logs_since(0)
    }

    fn logs_since(&self, offset: u64) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(0).min(text.len());
        String::from_utf8_lossy(text.get(start..).unwrap_or_default()).into_owned()
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// A port free on 127.0.0.1 now (the OS picks it; see the module's note on races).
pub fn free_port() -> Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(Error::io("finding a free port"))
}
