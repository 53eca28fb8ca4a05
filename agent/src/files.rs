//! The role files in the shared folder, each replaced atomically.

use std::{
    fs::{self, File},
    io::{self, Write},
    path::{Path, PathBuf},
};

use leadergroup_client::Role;

use crate::state::role_name;

/// File holding `leader`, `follower` or `unknown` (no newline).
pub const ROLE_FILE: &str = "role";
/// File holding the epoch in decimal while leader, empty otherwise (no newline).
pub const EPOCH_FILE: &str = "epoch";
/// File holding, while leader, the Unix time in milliseconds from which the role no longer holds
/// unless the file is rewritten; empty otherwise (no newline). A reader acts as leader only while
/// `role` says `leader` and this time is ahead: a paused agent rewrites nothing.
pub const VALID_UNTIL_FILE: &str = "valid-until";

/// Writes `contents` to `dir/name` so that a reader sees the old contents or the new, never a
/// part: a temporary file in the same folder (same filesystem, so the rename is atomic), synced,
/// renamed over the old one, then the folder synced so the rename itself is durable.
pub fn write_atomically(dir: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = File::create(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// The `role` and `epoch` files of one folder.
#[derive(Clone, Debug)]
pub struct RoleFiles {
    dir: PathBuf,
}

impl RoleFiles {
    /// Creates the folder when missing.
    pub fn create(dir: PathBuf) -> io::Result<RoleFiles> {
        fs::create_dir_all(&dir)?;
        Ok(RoleFiles { dir })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Publishes `role`, valid until `valid_until_ms` (Unix milliseconds) while leader. The order
    /// makes a reader that reads `role` and then `epoch` or `valid-until` never pair `leader`
    /// with an epoch or a validity this pod did not hold: on gaining leadership those are written
    /// before the role, on losing it the role before they are emptied.
    pub fn write(&self, role: Role, valid_until_ms: Option<u64>) -> io::Result<()> {
        let epoch = role
            .leader_epoch()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let until = valid_until_ms
            .filter(|_| role.is_leader())
            .map(|ms| ms.to_string())
            .unwrap_or_default();
        let name = role_name(role);
        if role.is_leader() {
            write_atomically(&self.dir, VALID_UNTIL_FILE, until.as_bytes())?;
            write_atomically(&self.dir, EPOCH_FILE, epoch.as_bytes())?;
            write_atomically(&self.dir, ROLE_FILE, name.as_bytes())
        } else {
            write_atomically(&self.dir, ROLE_FILE, name.as_bytes())?;
            write_atomically(&self.dir, EPOCH_FILE, epoch.as_bytes())?;
            write_atomically(&self.dir, VALID_UNTIL_FILE, until.as_bytes())
        }
    }

    /// Moves the validity of the role the files hold (a leader's, confirmed again).
    pub fn extend(&self, valid_until_ms: u64) -> io::Result<()> {
        write_atomically(
            &self.dir,
            VALID_UNTIL_FILE,
            valid_until_ms.to_string().as_bytes(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use leadergroup_client::Epoch;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "leadergroup-agent-unit-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn read(dir: &Path, name: &str) -> String {
        fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn the_files_follow_the_role_and_leave_no_temporary_behind() {
        let dir = scratch("follow");
        let files = RoleFiles::create(dir.join("nested")).unwrap();
        files.write(Role::Unknown, None).unwrap();
        assert_eq!(read(files.dir(), ROLE_FILE), "unknown");
        assert_eq!(read(files.dir(), EPOCH_FILE), "");
        assert_eq!(read(files.dir(), VALID_UNTIL_FILE), "");
        files
            .write(
                Role::Leader {
                    epoch: Epoch::from(42),
                },
                Some(1_765_000_000_000),
            )
            .unwrap();
        assert_eq!(read(files.dir(), ROLE_FILE), "leader");
        assert_eq!(read(files.dir(), EPOCH_FILE), "42");
        assert_eq!(read(files.dir(), VALID_UNTIL_FILE), "1765000000000");
        files.extend(1_765_000_005_000).unwrap();
        assert_eq!(read(files.dir(), VALID_UNTIL_FILE), "1765000005000");
        files.write(Role::Follower, Some(1)).unwrap();
        assert_eq!(read(files.dir(), ROLE_FILE), "follower");
        assert_eq!(read(files.dir(), EPOCH_FILE), "");
        assert_eq!(read(files.dir(), VALID_UNTIL_FILE), "");
        let mut names: Vec<String> = fs::read_dir(files.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["epoch", "role", "valid-until"]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_reader_never_sees_a_partial_file() {
        // A reader racing many replacements sees one of the two whole contents every time (a
        // write in place would show an empty or truncated file now and then).
        let dir = scratch("race");
        fs::create_dir_all(&dir).unwrap();
        let contents = ["leader".to_owned(), "x".repeat(64 * 1024)];
        write_atomically(&dir, "f", contents[0].as_bytes()).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (dir, stop, contents) = (dir.clone(), stop.clone(), contents.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let seen = fs::read_to_string(dir.join("f")).unwrap();
                    assert!(
                        contents.contains(&seen),
                        "a partial file of {} bytes",
                        seen.len()
                    );
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..300 {
            write_atomically(&dir, "f", contents[i % 2].as_bytes()).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(reader.join().unwrap() > 0);
        fs::remove_dir_all(dir).unwrap();
    }
}
