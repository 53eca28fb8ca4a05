//! What the tests share: the world (testenv's [`MemberWorld`]: the operator's marks written by
//! hand, since the agent must not depend on the operator), a kubeconfig for a ServiceAccount with
//! the documented Role, the agent process under a guard that kills it, a bare HTTP/1.1 GET, and a
//! kubeconfig through testenv's cut-able [`leadergroup_testenv::Proxy`].

use leadergroup_testenv::{MemberRules, MemberWorld, control_plane, wait_until};
use serde_json::json;
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, ChildStdout, Command},
};

/// Every test's Lease duration: the agent's validity is 2 s.
pub const DURATION_SECS: i32 = 3;
/// The longest wait for a state the agent must reach.
pub const WAIT: Duration = Duration::from_secs(15);

/// The tests' world: a namespace, its kubelet, and the operator's marks written by hand
/// (testenv's, since the agent must not depend on the operator).
pub type World = MemberWorld;

/// A fresh [`World`]; its Leases last [`DURATION_SECS`].
pub async fn world(prefix: &str) -> World {
    World::new(prefix, "leadergroup-agent-tests", DURATION_SECS)
        .await
        .unwrap()
}

/// A fresh [`World`] with two Ready pods, `app-0` and `app-1` (label `app=a`), and the kubeconfig
/// of a member of group `g` with the documented Role: a pod's agent before any leader is chosen.
pub async fn world_of_two_members(prefix: &str) -> (World, PathBuf) {
    let w = world(prefix).await;
    for pod in ["app-0", "app-1"] {
        w.kubelet
            .create_ready_pod(pod, &[("app", "a")])
            .await
            .unwrap();
    }
    let kubeconfig = member_kubeconfig(&w, "app", "g").await;
    (w, kubeconfig)
}

/// A ServiceAccount `name` bound to exactly the Role the docs give for `group` (pods get/watch;
/// the group's Lease get/watch by name), and a kubeconfig file that authenticates with its token:
/// what the agent has in a pod.
pub async fn member_kubeconfig(w: &World, name: &str, group: &str) -> PathBuf {
    let token = w
        .member_token(name, group, MemberRules::DOCUMENTED)
        .await
        .unwrap();
    let cp = control_plane().await.unwrap();
    let path = scratch(&format!("{}-{name}", w.ns.name)).with_extension("kubeconfig");
    std::fs::write(&path, cp.token_kubeconfig(&token)).unwrap();
    path
}

/// A fresh path under cargo's scratch folder for integration tests (removed first if present).
pub fn scratch(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("leadergroup-agent")
        .join(name);
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    path
}

/// The agent process; killed when dropped, whatever the test's outcome.
pub struct Agent {
    child: Child,
    pub dir: PathBuf,
    pub addr: SocketAddr,
    pub log: PathBuf,
    /// With [`Output::Unread`], the read end of its stdout, held open and never read.
    _unread: Option<ChildStdout>,
}

/// Where the agent's log lines go.
pub enum Output {
    /// A file the test reads (its address is found there).
    File,
    /// A pipe nobody reads, as a container's stdout on a node whose container runtime stopped;
    /// `RUST_LOG` is `trace`, so that it fills soon.
    Unread,
}

impl Agent {
    /// Starts the agent as pod `pod` of `namespace` with `kubeconfig`, its files in a fresh
    /// folder, its endpoint on a free port (it logs the port it bound), and `extra` flags.
    pub async fn start(kubeconfig: &Path, namespace: &str, pod: &str, extra: &[&str]) -> Agent {
        Agent::start_with(kubeconfig, namespace, pod, extra, Output::File).await
    }

    /// [`Agent::start`] with its log lines going to `output`. With [`Output::Unread`] its endpoint
    /// is on a port picked here (its log cannot be read for the one it bound).
    pub async fn start_with(
        kubeconfig: &Path,
        namespace: &str,
        pod: &str,
        extra: &[&str],
        output: Output,
    ) -> Agent {
        let base = scratch(&format!("{namespace}-{pod}"));
        let dir = base.join("run");
        std::fs::create_dir_all(&base).unwrap();
        let log = base.join("agent.log");
        let file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_leadergroup-agent"));
        command
            .arg("--dir")
            .arg(&dir)
            .args(["--log-format", "json"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", namespace)
            .env_remove("LEADERGROUP_GROUP")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let picked = match output {
            Output::File => {
                command
                    .args(["--http-addr", "127.0.0.1:0"])
                    .env("RUST_LOG", "info,leadergroup_client=debug,kube=warn")
                    .stdout(file.try_clone().unwrap())
                    .stderr(file);
                None
            }
            Output::Unread => {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap();
                command
                    .arg("--http-addr")
                    .arg(port.to_string())
                    .env("RUST_LOG", "trace")
                    .stdout(Stdio::piped())
                    .stderr(file);
                Some(port)
            }
        };
        let mut child = command.spawn().expect("start leadergroup-agent");
        let unread = child.stdout.take();
        let mut agent = Agent {
            child,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            _unread: unread,
        };
        agent.addr = match picked {
            Some(addr) => {
                let serving = wait_until("the agent serving", WAIT, || async {
                    Ok::<_, String>(TcpStream::connect(addr).await.ok().map(|_| ()))
                })
                .await;
                serving.unwrap_or_else(|e| panic!("{e}\n{}", agent.logs()));
                addr
            }
            None => wait_until("the agent logs its address", WAIT, || async {
                Ok::<_, String>(bound_addr(
                    &std::fs::read_to_string(&agent.log).unwrap_or_default(),
                ))
            })
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", agent.logs())),
        };
        agent
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the agent runs")
    }

    pub fn logs(&self) -> String {
        format!(
            "agent log {}:\n{}",
            self.log.display(),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// The contents of file `name` in its folder ("" when absent).
    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// GET `path` on its endpoint: (status, ETag, body).
    pub async fn get(&self, path: &str) -> (u16, Option<String>, String) {
        http_get(self.addr, path).await
    }

    /// `GET /role` as JSON.
    pub async fn role(&self) -> serde_json::Value {
        let (status, _, body) = self.get("/role").await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Waits until both the files and the endpoint show `role` (and `epoch` while leader).
    pub async fn wait_role(&self, role: &str, epoch: Option<i64>) -> serde_json::Value {
        let epoch_file = epoch.map(|e| e.to_string()).unwrap_or_default();
        let found = wait_until(
            &format!("agent publishes {role} {epoch:?}"),
            WAIT,
            || async {
                let json = self.role().await;
                let files = (self.file("role"), self.file("epoch"));
                Ok::<_, String>(
                    (json["role"] == role
                        && json["epoch"] == json!(epoch)
                        && files == (role.to_owned(), epoch_file.clone()))
                        .then_some(json),
                )
            },
        )
        .await;
        found.unwrap_or_else(|e| {
            panic!(
                "{e}; files: role={:?} epoch={:?}\n{}",
                self.file("role"),
                self.file("epoch"),
                self.logs()
            )
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The address in the agent's JSON log line "serving GET /role and /healthz".
fn bound_addr(log: &str) -> Option<SocketAddr> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["addr"].as_str().and_then(|a| a.parse().ok()))
}

/// A bare HTTP/1.1 GET (`Connection: close`): (status, ETag, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, Option<String>, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {raw:?}"));
    let etag = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("etag")
            .then(|| value.trim().to_owned())
    });
    (status, etag, body.to_owned())
}

impl Agent {
    /// Sends SIGTERM and waits for the exit; returns whether it exited with success.
    pub async fn terminate(&mut self) -> bool {
        let pid = self.child.id().expect("agent still running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the agent exits after SIGTERM")
            .unwrap()
            .success()
    }
}

/// `kubeconfig` rewritten to reach the API server through `proxy` (the certificate covers
/// 127.0.0.1, so TLS passes through the proxy untouched).
pub async fn through(kubeconfig: &Path, proxy: SocketAddr) -> PathBuf {
    let cp = control_plane().await.unwrap();
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    assert!(text.contains(cp.server_url()));
    let path = kubeconfig.with_extension(format!("via-{}.kubeconfig", proxy.port()));
    std::fs::write(
        &path,
        text.replace(cp.server_url(), &format!("https://{proxy}")),
    )
    .unwrap();
    path
}

/// A world where pod `app-0` leads group `g` at epoch 5, and the kubeconfig of its documented
/// ServiceAccount through a cut-able proxy: the set-up of the tests that cut a leader off.
pub async fn leader_behind_proxy(prefix: &str) -> (World, leadergroup_testenv::Proxy, PathBuf) {
    let w = world(prefix).await;
    w.ready_leader("app-0", &[("app", "a")], "g", 5)
        .await
        .unwrap();
    let kubeconfig = member_kubeconfig(&w, "app", "g").await;
    let proxy =
        leadergroup_testenv::Proxy::start(leadergroup_testenv::api_server_addr().await.unwrap())
            .await
            .unwrap();
    let kubeconfig = through(&kubeconfig, proxy.addr).await;
    (w, proxy, kubeconfig)
}

/// Long polls from `version` on, following a leader's answers (its validity moves every third of
/// the Lease, a new version each time), until one is not `leader`: when it came, and the answer.
pub async fn poll_past_leader(
    addr: SocketAddr,
    mut version: String,
) -> (std::time::Instant, (u16, Option<String>, String)) {
    loop {
        let answer = http_get(addr, &format!("/role?wait={version}&timeoutSeconds=60")).await;
        let returned = std::time::Instant::now();
        let state: serde_json::Value = serde_json::from_str(&answer.2).unwrap_or_default();
        if answer.0 != 200 || state["role"] != "leader" {
            return (returned, answer);
        }
        version = state["version"].as_str().unwrap_or_default().to_owned();
    }
}
