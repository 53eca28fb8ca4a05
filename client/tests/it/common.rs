//! What the tests share: the world (testenv's [`MemberWorld`]: the operator's marks written by
//! hand, since the crate must not depend on the operator, and a ServiceAccount with the documented
//! Role), a client authenticating with a token (possibly through testenv's cut-able
//! [`leadergroup_testenv::Proxy`]), and a recorder of roles.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use kube::{
    Client,
    config::{KubeConfigOptions, Kubeconfig},
};
use leadergroup_client::{Epoch, Membership, Role};
use leadergroup_testenv::{MemberRules, MemberWorld, Proxy, api_server_addr, control_plane};
use tokio::{sync::watch, time::Instant};

/// Every test's Lease duration: validity 2 s, a confirming GET after 1 s of quiet.
pub const DURATION_SECS: i32 = 3;
pub const VALIDITY: Duration = Duration::from_secs(2);

/// The tests' world: a namespace, its kubelet, and the operator's marks written by hand
/// (testenv's, since the crate must not depend on the operator).
pub type World = MemberWorld;

/// A fresh [`World`]; its Leases last [`DURATION_SECS`].
pub async fn world(prefix: &str) -> World {
    World::new(prefix, "leadergroup-client-tests", DURATION_SECS)
        .await
        .unwrap()
}

/// A client as ServiceAccount `name` bound to the member Role of `group` with `rules` (testenv's
/// [`leadergroup_testenv::member_account`]), talking to `server` (see [`token_client`]).
pub async fn member_client(
    w: &World,
    name: &str,
    group: &str,
    rules: MemberRules,
    server: Option<SocketAddr>,
) -> Client {
    let token = w.member_token(name, group, rules).await.unwrap();
    token_client(&token, server).await
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

/// `app-0` (label `app=a`), Ready and leader of group `g` at epoch 5, and its member, reaching the
/// API server through a proxy the test may cut or slow, once it reports `Leader@5`.
pub struct ProxiedLeader {
    pub proxy: Proxy,
    pub membership: Membership,
    pub roles: Recorder,
    pub leader: Role,
}

impl ProxiedLeader {
    pub async fn start(w: &World) -> ProxiedLeader {
        w.ready_leader("app-0", &[("app", "a")], "g", 5)
            .await
            .unwrap();
        let proxy = Proxy::start(api_server_addr().await.unwrap())
            .await
            .unwrap();
        let client = member_client(w, "app", "g", MemberRules::DOCUMENTED, Some(proxy.addr)).await;
        let membership = Membership::start(client, &w.ns.name, "app-0", None);
        let roles = Recorder::new(membership.subscribe());
        let leader = Role::Leader {
            epoch: Epoch::from(5u32),
        };
        roles.wait_for(leader, Duration::from_secs(10)).await;
        ProxiedLeader {
            proxy,
            membership,
            roles,
            leader,
        }
    }
}
