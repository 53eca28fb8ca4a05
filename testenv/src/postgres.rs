use std::{
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use crate::{Error, Result};

/// Environment variable naming a folder with PostgreSQL's `initdb`, `postgres` and `pg_isready`;
/// without it, the newest `/usr/lib/postgresql/<version>/bin` (Debian's layout) is used.
pub const POSTGRES_BIN_ENV: &str = "LEADERGROUP_POSTGRES_BIN";

/// The OS user the server runs as when the tests run as root (initdb refuses root).
const OS_USER: &str = "postgres";

/// How long the server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A private PostgreSQL server for one test: a fresh cluster (`initdb`) in
/// `<temp dir>/leadergroup-testenv-postgres/<pid>-<n>`, listening on 127.0.0.1 on a free port (and a unix
/// socket in that folder) only, with trust authentication for the superuser `postgres`, and no
/// durability (fsync off: it is thrown away).
///
/// Dropping it stops the server (fast shutdown) and removes the folder. If the test process dies
/// first, a watchdog (a shell polling this process, like `cluster.sh --watch-pid`) stops it, and
/// the next [`Postgres::start`] removes any folder left by a process that is gone.
///
/// As root, the server runs as the OS user `postgres` (Debian's package creates it), started
/// with `setpriv`; otherwise as the current user.
#[derive(Debug)]
pub struct Postgres {
    dir: PathBuf,
    port: u16,
    server: Option<Child>,
    watchdog: Option<Child>,
}

impl Postgres {
    /// Starts a server (about 2 s: initdb, then start). Fails with [`Error::PostgresMissing`]
    /// when the binaries are not installed.
    pub async fn start() -> Result<Postgres> {
        tokio::task::spawn_blocking(Postgres::start_blocking)
            .await
            .map_err(|e| Error::Unexpected(format!("starting PostgreSQL: {e}")))?
    }

    /// [`Postgres::start`] for synchronous code.
    pub fn start_blocking() -> Result<Postgres> {
        let bin = bin_dir(std::env::var_os(POSTGRES_BIN_ENV).filter(|d| !d.is_empty()))?;
        // Under the temp dir, not the target dir: as root the server runs as `postgres`, which
        // must traverse every parent of its folder, and a checkout may sit below a private one
        // (/root) or a target dir made by `umask 077`. The root is 0711: traversable, not listable.
        let root = std::env::temp_dir().join("leadergroup-testenv-postgres");
        std::fs::create_dir_all(&root)
            .map_err(Error::io(format!("creating {}", root.display())))?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
            .map_err(Error::io(format!("chmod 0711 {}", root.display())))?;
        remove_leftovers(&root);
        let dir = root.join(format!(
            "{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        let owner = server_owner()?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(Error::io(format!("chown {} to {OS_USER}", dir.display())))?;
        }
        let data = dir.join("data");
        let mut initdb = as_server_user(owner.is_some(), &bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .args(["--no-sync", "--no-instructions"]);
        run(initdb, "initdb")?;

        // A port that was free a moment ago can be taken by the time the server binds it: try
        // a few.
        let mut last = String::new();
        for _ in 0..3 {
            let port = crate::free_port()?.port();
            let log = dir.join("postgres.log");
            let log_file = std::fs::File::create(&log)
                .map_err(Error::io(format!("creating {}", log.display())))?;
            if let Some((uid, gid)) = owner {
                let _ = std::os::unix::fs::chown(&log, Some(uid), Some(gid));
            }
            let err_file = log_file
                .try_clone()
                .map_err(Error::io("duplicating the log file"))?;
            let mut cmd = as_server_user(owner.is_some(), &bin.join("postgres"));
            cmd.arg("-D")
                .arg(&data)
                .arg("-p")
                .arg(port.to_string())
                .arg("-k")
                .arg(&dir)
                .args(["-c", "listen_addresses=127.0.0.1"])
                .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off", "-c", "max_connections=50"])
                .stdin(Stdio::null())
                .stdout(log_file)
                .stderr(err_file);
            let server = cmd.spawn().map_err(Error::io("starting postgres"))?;
            let mut pg = Postgres {
                dir: dir.clone(),
                port,
                server: Some(server),
                watchdog: None,
            };
            pg.watchdog = Some(pg.start_watchdog()?);
            match pg.wait_ready(&bin) {
                Ok(()) => return Ok(pg),
                Err(e) => {
                    last = format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
                    pg.stop_server();
                }
            }
        }
        Err(Error::Unexpected(format!(
            "PostgreSQL did not start in {}: {last}",
            dir.display()
        )))
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The folder holding the data (`data/`), the log (`postgres.log`) and the unix socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A libpq-style connection string for database `postgres` as superuser `postgres` (what
    /// `tokio_postgres::connect` takes).
    pub fn connection_string(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.host(),
            self.port
        )
    }

    fn wait_ready(&mut self, bin: &Path) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Some(server) = self.server.as_mut()
                && let Ok(Some(status)) = server.try_wait()
            {
                return Err(Error::Unexpected(format!("postgres exited: {status}")));
            }
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::Unexpected(format!(
                    "postgres not ready after {READY_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A shell in a process group of its own (a Ctrl-C to the tests must not take it along)
    /// that waits for this process to exit, or the server to stop, and then stops the server
    /// and removes the folder.
    fn start_watchdog(&self) -> Result<Child> {
        use std::os::unix::process::CommandExt;
        let server = self.server.as_ref().map_or(0, Child::id);
        let me = std::process::id();
        let started = std::fs::read_to_string(format!("/proc/{me}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(str::to_owned))
            .and_then(|rest| rest.split_whitespace().nth(19).map(str::to_owned))
            .unwrap_or_default();
        let script = r#"
            alive() { [[ -r /proc/$1/stat ]] && read -r -a st </proc/$1/stat && [[ ${st[2]} != Z ]]; }
            while alive "$1" && [[ $(awk '{print $22}' /proc/$1/stat 2>/dev/null) == "$2" ]] && alive "$3"; do
              sleep 1
            done
            if alive "$3"; then
              echo "watchdog: pid $1 exited; stopping postgres (pid $3)"
              kill -INT "$3" 2>/dev/null
              for _ in $(seq 100); do alive "$3" || break; sleep 0.1; done
              kill -KILL "$3" 2>/dev/null
              rm -rf -- "$4"
            fi"#;
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("watchdog")
            .arg(me.to_string())
            .arg(started)
            .arg(server.to_string())
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(Error::io("starting the postgres watchdog"))
    }

    /// Fast shutdown (SIGINT: clients are disconnected), SIGKILL after 10 s.
    fn stop_server(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-INT", &server.id().to_string()])
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if !matches!(server.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = server.kill();
        let _ = server.wait();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop_server();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where initdb and postgres are: `chosen` ([`POSTGRES_BIN_ENV`]) or Debian's folder.
fn bin_dir(chosen: Option<std::ffi::OsString>) -> Result<PathBuf> {
    if let Some(dir) = chosen {
        let dir = PathBuf::from(dir);
        if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
            return Ok(dir);
        }
        return Err(Error::PostgresMissing {
            looked_in: format!("{POSTGRES_BIN_ENV}={}", dir.display()),
        });
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    versions
        .into_iter()
        .map(|v| PathBuf::from(format!("/usr/lib/postgresql/{v}/bin")))
        .filter(|d| d.join("initdb").is_file() && d.join("postgres").is_file())
        .max_by_key(|d| {
            d.parent()
                .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
        })
        .ok_or_else(|| Error::PostgresMissing {
            looked_in: "/usr/lib/postgresql/*/bin".to_owned(),
        })
}

/// `Some((uid, gid))` of the OS user `postgres` when running as root; `None` otherwise.
fn server_owner() -> Result<Option<(u32, u32)>> {
    let me = std::fs::metadata("/proc/self")
        .map_err(Error::io("reading /proc/self"))?
        .uid();
    if me != 0 {
        return Ok(None);
    }
    let passwd =
        std::fs::read_to_string("/etc/passwd").map_err(Error::io("reading /etc/passwd"))?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&OS_USER))
        .and_then(|f| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))
        .map(Some)
        .ok_or_else(|| {
            Error::Unexpected(format!(
                "running as root, but there is no OS user {OS_USER} to run PostgreSQL as \
                 (Debian's postgresql package creates it: run controlplane/postgres-deps.sh)"
            ))
        })
}

/// `program`, run as the OS user `postgres` when `switch` (root), with `setpriv`, which execs
/// (the child's pid is the program's).
fn as_server_user(switch: bool, program: &Path) -> Command {
    if !switch {
        return Command::new(program);
    }
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid",
        OS_USER,
        "--regid",
        OS_USER,
        "--init-groups",
        "--reset-env",
        "--",
    ])
    .arg(program);
    cmd
}

fn run(mut cmd: Command, what: &str) -> Result<()> {
    let output = cmd.output().map_err(Error::io(format!("running {what}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        command: format!("{cmd:?}"),
        status: output.status.to_string(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        ),
    })
}

/// Removes the folders of test processes that are gone (their watchdog normally did; this
/// covers a watchdog that was killed too), stopping a server still running in one.
fn remove_leftovers(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = entry.path();
        // postmaster.pid's first line is the server's pid; its command line names the folder.
        if let Some(server) = std::fs::read_to_string(dir.join("data/postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()))
        {
            let ours = std::fs::read(format!("/proc/{server}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&*dir.to_string_lossy()))
                .unwrap_or(false);
            if ours {
                let _ = Command::new("kill")
                    .args(["-KILL", &server.to_string()])
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_say_run_the_install_script() {
        let empty =
            std::env::temp_dir().join(format!("testenv-no-postgres-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let err = bin_dir(Some(empty.clone().into_os_string())).unwrap_err();
        std::fs::remove_dir_all(&empty).unwrap();
        assert!(matches!(err, Error::PostgresMissing { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("run `controlplane/postgres-deps.sh`"),
            "{text}"
        );
        assert!(text.contains(&*empty.to_string_lossy()), "{text}");
    }
}
