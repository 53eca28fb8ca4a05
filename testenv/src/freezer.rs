//! The cgroup v1 freezer of a container on a node of the real cluster: writing `FROZEN` to its
//! `freezer.state` stops every process of it (a long GC pause, a stuck disk), `THAWED` resumes them.
//! The end-to-end tests and the end-to-end benchmark freeze containers through it.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

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
