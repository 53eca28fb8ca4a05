//! What the tests share: the operator's marks written by hand (the crate must not depend on the
//! operator), a ServiceAccount with the documented Role, a recorder of roles, and a TCP proxy that
//! can cut the connection to the API server.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::Pod,
    rbac::v1::{PolicyRule, Role as RbacRole, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use leadergroup_client::Role;
use leadergroup_testenv::{Kubelet, TestNamespace, control_plane, namespace};
use serde_json::json;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    time::Instant,
};

/// Every test's Lease duration: validity 2 s, a confirming GET after 1 s of quiet.
pub const DURATION_SECS: i32 = 3;
pub const VALIDITY: Duration = Duration::from_secs(2);

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
                &PatchParams::apply("leadergroup-client-tests").force(),
                &Patch::Apply(lease),
            )
            .await
            .unwrap();
    }

    /// A ServiceAccount `name` bound to the Role the crate documents for `group` (pods get/watch;
    /// the group's Lease get/watch by name), without the Lease rule when `lease_rule` is false,
    /// and without any rule when `pod_rule` is false too. Returns its token.
    pub async fn member_token(
        &self,
        name: &str,
        group: &str,
        pod_rule: bool,
        lease_rule: bool,
    ) -> String {
        self.ns.create_service_account(name).await.unwrap();
        let mut rules = Vec::new();
        if pod_rule {
            rules.push(PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["pods".to_owned()]),
                verbs: vec!["get".to_owned(), "watch".to_owned()],
                ..PolicyRule::default()
            });
        }
        if lease_rule {
            rules.push(PolicyRule {
                api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
                resources: Some(vec!["leases".to_owned()]),
                resource_names: Some(vec![format!("leadergroup-{group}")]),
                verbs: vec!["get".to_owned(), "watch".to_owned()],
                ..PolicyRule::default()
            });
        }
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
        self.ns.service_account_token(name).await.unwrap()
    }
}

/// A client that authenticates with `token` and talks to `server` (the API server, or a proxy in
/// front of it: the certificate covers 127.0.0.1, so TLS passes through a proxy untouched).
pub async fn token_client(token: &str, server: Option<SocketAddr>) -> Client {
    let cp = control_plane().await.unwrap();
    let mut yaml = cp.token_kubeconfig(token);
    if let Some(server) = server {
        yaml = yaml.replace(cp.server_url(), &format!("https://{server}"));
    }
    let kubeconfig = Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Every role a receiver saw, with when.
#[derive(Clone)]
pub struct Recorder {
    seen: Arc<Mutex<Vec<(Instant, Role)>>>,
    rx: watch::Receiver<Role>,
}

impl Recorder {
    pub fn new(mut rx: watch::Receiver<Role>) -> Recorder {
        let seen = Arc::new(Mutex::new(vec![(Instant::now(), *rx.borrow_and_update())]));
        let log = Arc::clone(&seen);
        let mut task_rx = rx.clone();
        tokio::spawn(async move {
            while task_rx.changed().await.is_ok() {
                let role = *task_rx.borrow_and_update();
                log.lock().unwrap().push((Instant::now(), role));
            }
        });
        Recorder { seen, rx }
    }

    /// The roles seen, in order, without repeats.
    pub fn roles(&self) -> Vec<Role> {
        let mut roles: Vec<Role> = self.seen.lock().unwrap().iter().map(|(_, r)| *r).collect();
        roles.dedup();
        roles
    }

    /// The roles seen since `since`, with when.
    pub fn since(&self, since: Instant) -> Vec<(Instant, Role)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t >= since)
            .copied()
            .collect()
    }

    /// Waits until the role is `want`; returns when it was.
    pub async fn wait_for(&self, want: Role, timeout: Duration) -> Instant {
        let mut rx = self.rx.clone();
        match tokio::time::timeout(timeout, rx.wait_for(|r| *r == want)).await {
            Ok(Ok(_)) => Instant::now(),
            _ => panic!(
                "role {want} not reached within {timeout:?}; seen: {:?}",
                self.roles()
            ),
        }
    }
}

/// A TCP proxy in front of the API server that can cut the connection the way a network
/// partition does: the open connections stop carrying bytes but are not closed, and new ones are
/// accepted and then left hanging. [`Proxy::heal`] closes the hung ones and forwards again.
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
        // Releases the hung connections.
        self.cut.send_replace(false);
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    if *cut.borrow_and_update() {
        // Accepted while cut: hang (a SYN answered, nothing else), close once healed.
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
    // Both sockets stay open and silent until healed.
    let _ = cut.wait_for(|c| !*c).await;
}

/// The API server's address.
pub async fn api_server_addr() -> SocketAddr {
    let cp = control_plane().await.unwrap();
    cp.server_url()
        .trim_start_matches("https://")
        .parse()
        .unwrap()
}
