//! Files that pods of the real cluster write into their emptyDirs, read from the host as they
//! change (each pod's emptyDir lives under its node's kubelet root dir, see
//! [`crate::RealCluster::empty_dir`]): the agents' `role` files, the benchmark peers' event logs.
//! Every node runs on this machine, so a file's mtime is on the clock the harness times faults
//! with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

/// One version of a file: its mtime and contents.
pub type Version = (SystemTime, String);

/// Polls files every 10 ms and keeps every version seen, per key.
pub struct FileHistory {
    state: Arc<Mutex<Polled>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Polled {
    files: Vec<(String, PathBuf)>,
    seen: BTreeMap<String, Vec<Version>>,
}

impl FileHistory {
    /// Starts polling `files`, each under its key.
    pub fn start(files: Vec<(String, PathBuf)>) -> FileHistory {
        let state = Arc::new(Mutex::new(Polled {
            files,
            ..Polled::default()
        }));
        let polled = Arc::clone(&state);
        let task = tokio::spawn(async move {
            loop {
                let files = lock(&polled).files.clone();
                for (key, path) in files {
                    let Ok(read) = read_with_mtime(&path) else {
                        continue;
                    };
                    let mut polled = lock(&polled);
                    let history = polled.seen.entry(key).or_default();
                    if history.last() != Some(&read) {
                        history.push(read);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        FileHistory { state, task }
    }

    /// Polls `path` too, under `key`.
    pub fn add(&self, key: &str, path: PathBuf) {
        lock(&self.state).files.push((key.to_owned(), path));
    }

    /// Every version of `key`'s file seen so far, oldest first.
    pub fn history(&self, key: &str) -> Vec<Version> {
        let polled = lock(&self.state);
        polled.seen.get(key).cloned().unwrap_or_default()
    }

    /// What `key`'s file last read.
    pub fn last(&self, key: &str) -> Option<String> {
        self.history(key).pop().map(|(_, contents)| contents)
    }

    /// The mtime of the first version of `key`'s file that read `contents`, written at or after
    /// `after`.
    pub fn first(&self, key: &str, contents: &str, after: SystemTime) -> Option<SystemTime> {
        self.history(key)
            .into_iter()
            .find(|(t, c)| *t >= after && c == contents)
            .map(|(t, _)| t)
    }
}

fn lock(state: &Mutex<Polled>) -> MutexGuard<'_, Polled> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for FileHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A file's mtime and contents, read through one open file so the two belong together: an agent
/// writes its `role` file to a temporary name and renames it, so the mtime is when it wrote the
/// new role, just before it published it.
fn read_with_mtime(path: &Path) -> std::io::Result<Version> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mtime = file.metadata()?.modified()?;
    let mut contents = String::new();
    file.read_to_string(&mut contents)?;
    Ok((mtime, contents))
}
