//! A container on a node of the real cluster, as the end-to-end tests and the end-to-end benchmark
//! strike it: killed through its node's containerd, or frozen through its cgroup v1 freezer
//! (writing `FROZEN` to its `freezer.state` stops every process of it, as a long GC pause or a
//! stuck disk would; `THAWED` resumes them).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::{Error, Result};

/// SIGKILL to container `id`'s main process through the containerd at `socket` (`ctr task kill`:
/// what an OOM kill or a crash does; the kubelet restarts it).
pub async fn kill_container(socket: &Path, id: &str) -> Result<()> {
    let output = tokio::process::Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args([
            "--namespace",
            "k8s.io",
            "task",
            "kill",
            "--signal",
            "SIGKILL",
            id,
        ])
        .output()
        .await
        .map_err(Error::io("running ctr task kill"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        command: format!("ctr task kill --signal SIGKILL {id}"),
        status: output.status.to_string(),
        output: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// The `freezer.state` file of container `id` on node `node` (its cgroup lies a few levels under
/// the node's freezer root, `/sys/fs/cgroup/freezer/<node>`).
pub fn freezer_state(node: &str, id: &str) -> Result<PathBuf> {
    let root = Path::new("/sys/fs/cgroup/freezer").join(node);
    find_dir(&root, id, 5)
        .map(|d| d.join("freezer.state"))
        .ok_or_else(|| {
            Error::Unexpected(format!(
                "no freezer cgroup of container {id} under {}",
                root.display()
            ))
        })
}

/// The cgroup freezer of one container: thawed when dropped, whatever the caller did in
/// between.
#[derive(Debug)]
pub struct Frozen {
    state: PathBuf,
}

impl Frozen {
    /// The freezer of container `id` on node `node`, found but not frozen yet (finding it walks
    /// the node's cgroups: a caller that times the freeze finds it first).
    pub fn locate(node: &str, id: &str) -> Result<Frozen> {
        freezer_state(node, id).map(|state| Frozen { state })
    }

    /// Freezes container `id` on node `node`.
    pub fn freeze_now(node: &str, id: &str) -> Result<Frozen> {
        let frozen = Frozen::locate(node, id)?;
        frozen.freeze()?;
        Ok(frozen)
    }

    /// Freezes it now.
    pub fn freeze(&self) -> Result<()> {
        std::fs::write(&self.state, "FROZEN")
            .map_err(Error::io(format!("freezing {}", self.state.display())))
    }

    /// Waits until the freezer reads `FROZEN` (a write starts the freeze; it reads `FREEZING`
    /// until every process of the container stopped) and returns when it did: from then on its
    /// processes verifiably do not run.
    pub async fn confirmed(&self, within: Duration) -> Result<SystemTime> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let state = std::fs::read_to_string(&self.state)
                .map_err(Error::io(format!("reading {}", self.state.display())))?;
            if state.trim() == "FROZEN" {
                return Ok(SystemTime::now());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Unexpected(format!(
                    "{} still reads {} after {within:?}",
                    self.state.display(),
                    state.trim()
                )));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Thaws it now.
    pub fn thaw(&self) -> Result<()> {
        std::fs::write(&self.state, "THAWED")
            .map_err(Error::io(format!("thawing {}", self.state.display())))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(e) = self.thaw() {
            eprintln!("testenv: {e}");
        }
    }
}

/// The folder called `name` under `root`, at most `depth` levels further down.
fn find_dir(root: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if entry.file_name().to_str() == Some(name) {
            return Some(path);
        }
        if depth > 0
            && let Some(found) = find_dir(&path, name, depth - 1)
        {
            return Some(found);
        }
    }
    None
}
