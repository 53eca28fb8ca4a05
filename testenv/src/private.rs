//! A control plane of one test (or one chaos run) alone: etcd + kube-apiserver that it may
//! restart, compact and break without touching the shared one the other tests run on.

use std::ops::Deref;
use std::path::PathBuf;

use crate::controlplane::{bin_dir, repo_root, run, start_cluster, target_dir};
use crate::{ControlPlane, Error, Result};

/// etcd + kube-apiserver (`controlplane/cluster.sh`) in `<target>/testenv/<name>-<pid>`, stopped on
/// drop and by the script's watchdog when this process exits. Derefs to its [`ControlPlane`].
pub struct PrivateCluster {
    cp: ControlPlane,
    dir: PathBuf,
}

impl PrivateCluster {
    /// Starts one named `name` (about 4 s), with the pinned binaries of `controlplane/build.sh`.
    pub async fn start(name: &str) -> Result<PrivateCluster> {
        let repo = repo_root();
        let bin_dir = bin_dir(&repo, &[]).await?;
        let dir = target_dir(&repo)
            .join("testenv")
            .join(format!("{name}-{}", std::process::id()));
        start_cluster(&repo, &dir, &bin_dir).await?;
        // From here on the drop stops it, even if loading its kubeconfig fails.
        let stop = Stop(dir.clone());
        let cp = ControlPlane::load(dir.join("kubeconfig"), bin_dir, Some(dir.clone())).await?;
        std::mem::forget(stop);
        Ok(PrivateCluster { cp, dir })
    }

    /// `cluster.sh restart <component>`: `etcd` or `kube-apiserver` stopped and started again,
    /// with the same ports and data.
    pub async fn restart(&self, component: &str) -> Result<()> {
        self.restart_with(component, &[]).await
    }

    /// [`PrivateCluster::restart`] with SIGKILL instead of SIGTERM: a crash (or an OOM kill) and
    /// a restart by its supervisor, without the graceful drain.
    pub async fn crash(&self, component: &str) -> Result<()> {
        self.restart_with(component, &["--kill"]).await
    }

    async fn restart_with(&self, component: &str, flags: &[&str]) -> Result<()> {
        let script = repo_root().join("controlplane/cluster.sh");
        let mut cmd = tokio::process::Command::new(&script);
        cmd.args(["restart", component, "--dir"])
            .arg(&self.dir)
            .args(flags);
        run(
            cmd,
            &format!("cluster.sh restart {component} {}", flags.join(" ")),
        )
        .await
    }

    /// Compacts etcd's history up to its current revision (etcd's JSON gateway), as its periodic
    /// compaction does: watches from before it can only be answered 410 Gone.
    pub async fn compact_etcd(&self) -> Result<()> {
        let env = std::fs::read_to_string(self.dir.join("env"))
            .map_err(Error::io("reading the cluster's env file"))?;
        let port = env
            .lines()
            .find_map(|l| l.strip_prefix("ETCD_PORT="))
            .ok_or_else(|| Error::Unexpected("ETCD_PORT missing from the cluster's env".into()))?
            .to_owned();
        let range = etcd_post(&port, "/v3/kv/range", r#"{"key":"AA=="}"#).await?;
        let revision = range["header"]["revision"]
            .as_str()
            .ok_or_else(|| {
                Error::Unexpected(format!("etcd's range answer has no revision: {range}"))
            })?
            .to_owned();
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        etcd_post(&port, "/v3/kv/compaction", &body).await?;
        Ok(())
    }
}

impl Deref for PrivateCluster {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        &self.cp
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        stop(&self.dir);
    }
}

/// Stops the cluster in its folder when dropped (the start's guard).
struct Stop(PathBuf);

impl Drop for Stop {
    fn drop(&mut self) {
        stop(&self.0);
    }
}

fn stop(dir: &std::path::Path) {
    let _ = std::process::Command::new(repo_root().join("controlplane/cluster.sh"))
        .arg("down")
        .arg("--dir")
        .arg(dir)
        .output();
}

/// A POST to etcd's JSON gateway on 127.0.0.1:`port` (plain HTTP/1.0): its JSON answer.
async fn etcd_post(port: &str, path: &str, body: &str) -> Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = |what: &str| Error::io(format!("etcd {path}: {what}"));
    let mut stream = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
        .await
        .map_err(io("connecting"))?;
    let request = format!(
        "POST {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(io("sending"))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(io("reading"))?;
    let json = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(json).map_err(|e| Error::Unexpected(format!("etcd {path}: {e}: {answer}")))
}
