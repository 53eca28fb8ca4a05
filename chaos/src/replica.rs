//! One operator replica: the operator binary run with `--leader-elect`, reaching the API server
//! through a proxy of its own (so its requests can be held or cut), killed, paused, rolled and
//! started again as the faults say.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leadergroup_testenv::{
    OperatorLaunch, OperatorProcess, Proxy, ReadyzAddr, free_port, readyz_role,
};

use crate::Error;

/// How the replicas are started.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The operator binary.
    pub binary: PathBuf,
    /// The namespace it watches, and where its own Lease lives.
    pub namespace: String,
    /// Its own Lease's duration, in seconds.
    pub lease_seconds: u32,
    /// Where its logs go (`<name>.log`, every process of the replica appended).
    pub log_dir: PathBuf,
    /// Their `RUST_LOG`, if not the operator tests' default.
    pub rust_log: Option<String>,
}

/// A replica: its proxy, its current process (none while killed), how many it has had.
pub struct OperatorReplica {
    pub name: String,
    pub proxy: Proxy,
    kubeconfig: PathBuf,
    launch: Launch,
    process: Option<OperatorProcess>,
    /// Where its current process serves /readyz (read by the active-replica monitor, which must
    /// not wait for a fault that holds the replicas).
    http: ReadyzAddr,
    generation: u32,
}

impl OperatorReplica {
    /// Starts replica `name` behind `proxy`; `admin_kubeconfig` is the cluster's, with the server
    /// replaced by the proxy's address.
    pub async fn start(
        name: &str,
        launch: &Launch,
        admin_kubeconfig: &Path,
        server: &str,
    ) -> Result<OperatorReplica, Error> {
        let upstream: SocketAddr = server
            .trim_start_matches("https://")
            .parse()
            .map_err(|e| Error::Setup(format!("the API server's address {server}: {e}")))?;
        let proxy = Proxy::start(upstream).await?;
        let text = std::fs::read_to_string(admin_kubeconfig)
            .map_err(|e| Error::Setup(format!("{}: {e}", admin_kubeconfig.display())))?;
        let kubeconfig = launch.log_dir.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            text.replace(server, &format!("https://{}", proxy.addr)),
        )
        .map_err(|e| Error::Setup(format!("{}: {e}", kubeconfig.display())))?;
        let mut replica = OperatorReplica {
            name: name.to_owned(),
            proxy,
            kubeconfig,
            launch: launch.clone(),
            process: None,
            http: Arc::new(Mutex::new(free_port()?)),
            generation: 0,
        };
        replica.spawn().await?;
        Ok(replica)
    }

    /// A new process (a new identity, as a new pod of a Deployment would have).
    pub async fn spawn(&mut self) -> Result<(), Error> {
        self.generation += 1;
        let mut launch = OperatorLaunch::new(
            &self.launch.binary,
            &self.kubeconfig,
            Some(&self.launch.namespace),
            &format!("{}-{}", self.name, self.generation),
            self.launch.log_dir.join(format!("{}.log", self.name)),
        )
        .args([
            "--leader-elect",
            "--leader-elect-namespace",
            &self.launch.namespace,
        ])
        .args([
            "--leader-elect-lease-duration",
            &self.launch.lease_seconds.to_string(),
        ]);
        if let Some(filter) = &self.launch.rust_log {
            launch = launch.rust_log(filter);
        }
        let process = OperatorProcess::start(&launch).await?;
        *self.http.lock().unwrap_or_else(PoisonError::into_inner) = process.http;
        self.process = Some(process);
        Ok(())
    }

    /// What its /readyz says: `active`, `standby`, or `None` (not answering within 300 ms: down
    /// or paused).
    pub async fn role(&self) -> Option<String> {
        let addr = *self.http.lock().unwrap_or_else(PoisonError::into_inner);
        tokio::time::timeout(Duration::from_millis(300), readyz_role(addr))
            .await
            .ok()
            .flatten()
    }

    /// Where its current process serves /readyz, for the [`ActiveMonitor`].
    ///
    /// [`ActiveMonitor`]: leadergroup_testenv::ActiveMonitor
    pub fn http(&self) -> ReadyzAddr {
        Arc::clone(&self.http)
    }

    /// SIGKILL, and waits for the process to end. No process: nothing to kill, which a fault
    /// that meant to kill one must not count as done.
    pub async fn kill(&mut self) -> Result<(), Error> {
        let mut process = self.running()?;
        process.kill().await?;
        Ok(())
    }

    /// SIGSTOP or SIGCONT.
    pub fn signal(&self, signal: &str) -> Result<(), Error> {
        let process = self.process.as_ref().ok_or_else(|| self.not_running())?;
        process.signal(signal)?;
        Ok(())
    }

    /// SIGTERM, and waits for it to exit (SIGKILL after 30 s): a rollout's stop.
    pub async fn terminate(&mut self) -> Result<(), Error> {
        let mut process = self.running()?;
        process.terminate(Duration::from_secs(30)).await?;
        Ok(())
    }

    /// Starts a new process if the current one ended on its own (it crashed: its log says); the
    /// report counts the replicas' processes.
    pub async fn restart_if_exited(&mut self) -> Result<(), Error> {
        if self.process.as_mut().is_some_and(OperatorProcess::exited) {
            self.spawn().await?;
        }
        Ok(())
    }

    /// The current process, taken: it is stopped next.
    fn running(&mut self) -> Result<OperatorProcess, Error> {
        self.process.take().ok_or_else(|| self.not_running())
    }

    fn not_running(&self) -> Error {
        Error::Setup(format!("replica {} runs no process", self.name))
    }

    /// How many processes it has had.
    pub fn generations(&self) -> u32 {
        self.generation
    }
}
