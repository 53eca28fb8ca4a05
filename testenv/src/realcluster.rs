//! The real cluster of `controlplane/realcluster.sh` (two nodes, each a kubelet with its own
//! containerd): started and stopped, and its nodes stopped, cut off and brought back. The
//! end-to-end tests drive the one `make e2e` started ([`RealCluster::at`]); the benchmark starts
//! its own ([`RealCluster::up`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::controlplane::repo_root;
use crate::{Error, Result};

/// Kubernetes' default `--node-monitor-grace-period`, when `realcluster.sh up` was given none.
const DEFAULT_NODE_MONITOR_GRACE: Duration = Duration::from_secs(50);
/// The nodes' name prefix: `lg-node-<N>`.
const NODE_PREFIX: &str = "lg-node-";
/// The chart's release of the operator, as a user installs it.
pub const OPERATOR_RELEASE: &str = "leadergroup-operator";
/// The namespace it is installed in.
pub const OPERATOR_NAMESPACE: &str = "leadergroup-system";
/// The operator's own Lease (`operator-<fullname>`; the fullname is the release name here).
pub const OPERATOR_LEASE: &str = "operator-leadergroup-operator";
/// The chart's selector label on the operator's pods.
pub const OPERATOR_POD_SELECTOR: &str = "app.kubernetes.io/instance=leadergroup-operator";

/// A real cluster in its folder (`realcluster.sh --dir`).
#[derive(Debug)]
pub struct RealCluster {
    script: PathBuf,
    dir: PathBuf,
    /// Whether dropping it stops the cluster (it was started here).
    owned: bool,
}

impl RealCluster {
    /// The running cluster in `dir`, started by someone else (never stopped here).
    pub fn at(dir: impl Into<PathBuf>) -> RealCluster {
        RealCluster {
            script: repo_root().join("controlplane/realcluster.sh"),
            dir: dir.into(),
            owned: false,
        }
    }

    /// `realcluster.sh up --node-monitor-grace-period <grace>` in `dir`; the cluster is stopped
    /// (`realcluster.sh down`) when the returned value drops, however the caller ends. The guard
    /// exists before the command runs, so a half-started cluster is stopped too.
    pub async fn up(
        dir: impl Into<PathBuf>,
        node_monitor_grace_seconds: u32,
    ) -> Result<RealCluster> {
        let mut cluster = RealCluster::at(dir);
        cluster.owned = true;
        let grace = node_monitor_grace_seconds.to_string();
        cluster
            .run(&["up", "--node-monitor-grace-period", &grace])
            .await?;
        Ok(cluster)
    }

    /// `helm install` of the chart (`charts/leadergroup-operator`) as [`OPERATOR_RELEASE`] into
    /// [`OPERATOR_NAMESPACE`], with `cp`'s helm; further values are the caller's.
    pub fn helm_install(cp: &crate::ControlPlane) -> std::process::Command {
        let mut install = cp.helm();
        install
            .args(["install", OPERATOR_RELEASE])
            .arg(repo_root().join("charts/leadergroup-operator"))
            .args(["--namespace", OPERATOR_NAMESPACE, "--create-namespace"]);
        install
    }

    /// The cluster's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `realcluster.sh ARGS --dir <dir>`, not started.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(&self.script);
        command.args(args).arg("--dir").arg(&self.dir);
        command
    }

    /// Runs `realcluster.sh ARGS --dir <dir>` (its stderr passed through, it talks while it
    /// works); its stdout, trimmed.
    pub async fn run(&self, args: &[&str]) -> Result<String> {
        let shown = format!("realcluster.sh {}", args.join(" "));
        let out = tokio::process::Command::from(self.command(args))
            .stderr(Stdio::inherit())
            .output()
            .await
            .map_err(Error::io(format!("running {shown}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(Error::Command {
                command: shown,
                status: out.status.to_string(),
                output: stdout,
            })
        }
    }

    /// Node `node`'s number (`1` of `lg-node-1`).
    pub fn node_number(node: &str) -> Result<&str> {
        node.strip_prefix(NODE_PREFIX)
            .ok_or_else(|| Error::Unexpected(format!("not a node of realcluster.sh: {node}")))
    }

    /// The emptyDir `volume` of pod `uid` on node `node`, as its kubelet mounted it under the
    /// cluster's folder `dir`: what a container writes there, the host reads.
    pub fn empty_dir(dir: &Path, node: &str, uid: &str, volume: &str) -> Result<PathBuf> {
        let pods = dir.join(format!("node{}/kubelet/pods", Self::node_number(node)?));
        Ok(pods
            .join(uid)
            .join("volumes/kubernetes.io~empty-dir")
            .join(volume))
    }

    /// Node `node`'s containerd socket.
    pub fn containerd_socket(&self, node: &str) -> Result<PathBuf> {
        let n = Self::node_number(node)?;
        Ok(self.dir.join(format!("node{n}")).join("containerd.sock"))
    }

    /// Stops node `node`'s kubelet and containerd (`stop-node`); the guard starts them again
    /// when it drops.
    pub async fn stop_node(&self, node: &str) -> Result<Undo> {
        let n = Self::node_number(node)?;
        self.run(&["stop-node", n]).await?;
        Ok(Undo::new(self.command(&["start-node", n])))
    }

    /// Loses node `node` (`cut-node`): its kubelet and containerd stop, and its pods lose every
    /// packet to and from the host (the API server) and the other node, while their containers
    /// run on. Returns the guard, which lets the packets through and starts the node again when
    /// it drops, and the wall clock of the cut.
    pub async fn cut_node(&self, node: &str) -> Result<(Undo, SystemTime)> {
        let n = Self::node_number(node)?;
        let out = self.run(&["cut-node", n]).await?;
        let undo = Undo::new(self.command(&["uncut-node", n]));
        let secs: f64 = out.parse().map_err(|e| {
            Error::Unexpected(format!(
                "cut-node printed {out:?}, not the time of the cut: {e}"
            ))
        })?;
        Ok((undo, UNIX_EPOCH + Duration::from_secs_f64(secs)))
    }

    /// The node controller's `--node-monitor-grace-period` in this cluster: what
    /// `realcluster.sh up` was given (its `env` file), else Kubernetes' default, 50 s.
    pub fn node_monitor_grace_period(&self) -> Result<Duration> {
        let path = self.dir.join("env");
        let env = std::fs::read_to_string(&path)
            .map_err(Error::io(format!("reading {}", path.display())))?;
        match env
            .lines()
            .find_map(|l| l.strip_prefix("GRACE="))
            .filter(|g| !g.is_empty())
        {
            None => Ok(DEFAULT_NODE_MONITOR_GRACE),
            Some(g) => g
                .parse()
                .map(Duration::from_secs)
                .map_err(|e| Error::Unexpected(format!("{}: GRACE={g}: {e}", path.display()))),
        }
    }
}

/// Node `node`'s Ready condition status ("True", "False", "Unknown"; empty before it reported).
pub async fn node_ready(client: &kube::Client, node: &str) -> Result<String> {
    let n = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(node)
        .await
        .map_err(Error::kube(format!("reading node {node}")))?;
    Ok(n.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
        .unwrap_or_default())
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        eprintln!(
            "testenv: stopping the real cluster in {}",
            self.dir.display()
        );
        match self.command(&["down"]).status() {
            Ok(s) if s.success() => {}
            other => eprintln!(
                "testenv: realcluster.sh down failed ({other:?}): run `controlplane/realcluster.sh down --dir {}`",
                self.dir.display()
            ),
        }
    }
}

/// The command that undoes what a test did to a cluster (a node stopped or cut, a node
/// cordoned, a namespace created), run when the guard drops: whatever the test did in between,
/// a failed assertion included, the next test finds the cluster whole. A command, not async
/// code: a drop cannot await.
#[derive(Debug)]
pub struct Undo(std::process::Command);

impl Undo {
    /// Runs `command` when dropped.
    pub fn new(command: std::process::Command) -> Undo {
        Undo(command)
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        match self.0.output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "undoing failed: {:?}: {}",
                self.0,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("undoing failed: {:?}: {e}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_found_by_its_number() {
        let cluster = RealCluster::at("/tmp/real");
        assert_eq!(RealCluster::node_number("lg-node-2").unwrap(), "2");
        assert_eq!(
            cluster.containerd_socket("lg-node-1").unwrap(),
            Path::new("/tmp/real/node1/containerd.sock")
        );
        assert!(RealCluster::node_number("worker-1").is_err());
        assert_eq!(
            RealCluster::empty_dir(Path::new("/tmp/real"), "lg-node-2", "u1", "events").unwrap(),
            Path::new("/tmp/real/node2/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/events")
        );
    }
}
