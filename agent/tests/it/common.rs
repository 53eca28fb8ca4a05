//! What the tests share: the operator's marks written by hand (the agent must not depend on the
//! operator), a ServiceAccount with the documented Role, the agent process under a guard that
//! kills it, and a bare HTTP/1.1 GET.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::Pod,
    rbac::v1::{PolicyRule, Role as RbacRole, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use leadergroup_testenv::{Kubelet, TestNamespace, control_plane, namespace, wait_until};
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    process::{Child, Command},
    sync::watch,
};

/// Every test's Lease duration: the agent's validity is 2 s.
pub const DURATION_SECS: i32 = 3;
/// The longest wait for a state the agent must reach.
pub const WAIT: Duration = Duration::from_secs(15);

pub struct World {
    pub ns: TestNamespace,
    pub kubelet: Kubelet,
    pub pods: Api<Pod>,
    pub leases: Api<Lease>,
}

impl World {
    pub async fn new(prefix: &str) -> World {
        let ns = namespace(prefix).await.unwrap();
        let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
        World {
            pods: ns.api(),
            leases: ns.api(),
            kubelet,
            ns,
        }
    }

    /// What the operator's step 5 writes: role=leader, the epoch, the group.
    pub async fn mark_leader(&self, pod: &str, group: &str, epoch: i64) {
        self.patch_pod(
            pod,
            json!({"metadata": {
                "labels": {"leadergroup.io/role": "leader"},
                "annotations": {"leadergroup.io/epoch": epoch.to_string(), "leadergroup.io/group": group}
            }}),
        )
        .await;
    }

    /// What the operator's step 3 writes: role=follower, no epoch.
    pub async fn mark_follower(&self, pod: &str, group: &str) {
        self.patch_pod(
            pod,
            json!({"metadata": {
                "labels": {"leadergroup.io/role": "follower"},
                "annotations": {"leadergroup.io/epoch": null, "leadergroup.io/group": group}
            }}),
        )
        .await;
    }

    async fn patch_pod(&self, pod: &str, patch: serde_json::Value) {
        self.pods
            .patch(pod, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// What the operator's step 1 writes: the Lease `leadergroup-<group>` with `holder` at
    /// `epoch`, duration [`DURATION_SECS`].
    pub async fn put_lease(&self, group: &str, holder: Option<&str>, epoch: i64) {
        let name = format!("leadergroup-{group}");
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "annotations": {"leadergroup.io/epoch": epoch.to_string()}},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": DURATION_SECS,
                "leaseTransitions": epoch,
            }
        });
        self.leases
            .patch(
                &name,
                &PatchParams::apply("leadergroup-agent-tests").force(),
                &Patch::Apply(lease),
            )
            .await
            .unwrap();
    }

    /// A ServiceAccount `name` bound to exactly the Role the docs give for `group` (pods
    /// get/watch; the group's Lease get/watch by name), and a kubeconfig file that authenticates
    /// with its token: what the agent has in a pod.
    pub async fn member_kubeconfig(&self, name: &str, group: &str) -> PathBuf {
        self.ns.create_service_account(name).await.unwrap();
        let rules = vec![
            PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["pods".to_owned()]),
                verbs: vec!["get".to_owned(), "watch".to_owned()],
                ..PolicyRule::default()
            },
            PolicyRule {
                api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
                resources: Some(vec!["leases".to_owned()]),
                resource_names: Some(vec![format!("leadergroup-{group}")]),
                verbs: vec!["get".to_owned(), "watch".to_owned()],
                ..PolicyRule::default()
            },
        ];
        let role = RbacRole {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            rules: Some(rules),
        };
        self.ns
            .api::<RbacRole>()
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "Role".to_owned(),
                name: name.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: name.to_owned(),
                namespace: Some(self.ns.name.clone()),
                ..Subject::default()
            }]),
        };
        self.ns
            .api::<RoleBinding>()
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        let token = self.ns.service_account_token(name).await.unwrap();
        let cp = control_plane().await.unwrap();
        let path = scratch(&format!("{}-{name}", self.ns.name)).with_extension("kubeconfig");
        std::fs::write(&path, cp.token_kubeconfig(&token)).unwrap();
        path
    }
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
}

impl Agent {
    /// Starts the agent as pod `pod` of `namespace` with `kubeconfig`, its files in a fresh
    /// folder, its endpoint on a free port (it logs the port it bound), and `extra` flags.
    pub async fn start(kubeconfig: &Path, namespace: &str, pod: &str, extra: &[&str]) -> Agent {
        let base = scratch(&format!("{namespace}-{pod}"));
        let dir = base.join("run");
        std::fs::create_dir_all(&base).unwrap();
        let log = base.join("agent.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_leadergroup-agent"))
            .arg("--dir")
            .arg(&dir)
            .args(["--http-addr", "127.0.0.1:0", "--log-format", "json"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", namespace)
            .env_remove("LEADERGROUP_GROUP")
            .env("RUST_LOG", "info,leadergroup_client=debug,kube=warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("start leadergroup-agent");
        let mut agent = Agent {
            child,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
        };
        agent.addr = wait_until("the agent logs its address", WAIT, || async {
            Ok::<_, String>(bound_addr(
                &std::fs::read_to_string(&agent.log).unwrap_or_default(),
            ))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", agent.logs()));
        agent
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

/// The API server's address.
pub async fn api_server_addr() -> SocketAddr {
    let cp = control_plane().await.unwrap();
    cp.server_url()
        .trim_start_matches("https://")
        .parse()
        .unwrap()
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

/// A TCP proxy in front of the API server that can cut the connection the way a network
/// partition does: open connections stop carrying bytes but stay open, new ones are accepted and
/// left hanging. [`Proxy::heal`] closes the hung ones and forwards again.
pub struct Proxy {
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, cut_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, cut_rx.clone()));
            }
        });
        Proxy { addr, cut, task }
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut.send_replace(false);
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    if *cut.borrow_and_update() {
        let _ = cut.wait_for(|c| !*c).await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let mut until_cut = cut.clone();
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
        _ = until_cut.wait_for(|c| *c) => {}
    }
    let _ = cut.wait_for(|c| !*c).await;
}
