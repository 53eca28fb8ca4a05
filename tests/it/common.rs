//! Shared by the operator's integration tests: the CRD installed, the operator binary run as a
//! child process (as a user runs it), and, from `leadergroup-testenv` (shared with the end-to-end
//! tests and the chaos run), the settled check (I2) and the watcher that checks I1, I3 and the
//! order of the writes on every event the API server sends.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use leadergroup_operator::crd::{LeaderGroup, ROLE_LABEL, ROLE_LEADER, lease_name_for};
pub use leadergroup_testenv::pods::{epoch, role};
use leadergroup_testenv::pods::{is_leader, marked_group};
use leadergroup_testenv::{
    ControlPlane, HeldRequests, HoldRule, OperatorLaunch, OperatorProcess, Proxy, api_server_addr,
    wait_until,
};
pub use leadergroup_testenv::{InvariantWatcher, Settled, readyz_role, run_ok, run_tool};

/// Generous bound for anything the operator should do "at once": the machine is small and noisy,
/// and tests run in parallel. Speed is measured by the benchmarks, not here.
pub const CONVERGE: Duration = Duration::from_secs(30);

/// A proxy in front of the API server that can cut it off as a network partition does
/// (connections stay open, requests hang instead of failing) or reset its clients' connections,
/// and an admin kubeconfig that goes through it.
pub async fn proxied_admin(cp: &ControlPlane) -> (Proxy, PathBuf) {
    let proxy = Proxy::start(api_server_addr().await.unwrap())
        .await
        .unwrap();
    let kubeconfig = cp.kubeconfig_via(proxy.addr).unwrap();
    (proxy, kubeconfig)
}

/// Installs the CRD as this build generates it, and waits until it is served.
pub async fn install_crd(client: &Client) {
    leadergroup_testenv::install_crd(client, &LeaderGroup::crd())
        .await
        .expect("CRD installed and served");
}

/// The operator binary, running as a child process; a test fails at once when it cannot start.
pub struct Operator {
    process: OperatorProcess,
    /// The identity it runs with.
    pub identity: String,
    /// Where it serves /healthz, /readyz and /metrics.
    pub http: SocketAddr,
    /// Where it serves /metrics over TLS, when started with [`Operator::start_secure`].
    pub metrics_secure: Option<SocketAddr>,
}

impl Operator {
    /// Starts the operator against `cp`, watching `namespace`, with `extra` arguments.
    pub async fn start(
        cp: &ControlPlane,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> Operator {
        Self::start_with_kubeconfig(cp.kubeconfig_path(), namespace, identity, extra).await
    }

    /// Starts the operator with its own kubeconfig (for example one holding a ServiceAccount token).
    pub async fn start_with_kubeconfig(
        kubeconfig: &std::path::Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> Operator {
        Self::launch(kubeconfig, namespace, identity, extra, false).await
    }

    /// Starts the operator with `/metrics` over TLS on a port of its own
    /// ([`Operator::metrics_secure`], `--metrics-secure-addr`), as the chart runs it.
    pub async fn start_secure(
        kubeconfig: &std::path::Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> Operator {
        Self::launch(kubeconfig, namespace, identity, extra, true).await
    }

    async fn launch(
        kubeconfig: &std::path::Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
        secure_metrics: bool,
    ) -> Operator {
        let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("operator-logs")
            .join(format!("{namespace}-{identity}.log"));
        let launch = OperatorLaunch::new(
            env!("CARGO_BIN_EXE_leadergroup-operator"),
            kubeconfig,
            Some(namespace),
            identity,
            log,
        )
        .args(extra)
        .rust_log("info,leadergroup_operator=debug,kube=warn");
        let launch = if secure_metrics {
            launch.secure_metrics()
        } else {
            launch
        };
        let process = OperatorProcess::start(&launch)
            .await
            .unwrap_or_else(|e| panic!("starting leadergroup-operator: {e}"));
        Operator {
            identity: process.identity.clone(),
            http: process.http,
            metrics_secure: process.metrics_secure,
            process,
        }
    }

    /// Sends it `signal` (`kill` syntax: "-STOP", "-CONT", "-TERM") and returns at once.
    pub fn signal(&self, signal: &str) {
        self.process
            .signal(signal)
            .unwrap_or_else(|e| panic!("signalling {}: {e}", self.identity));
    }

    /// Kills it with SIGKILL: no cleanup, no release, as a crash or an OOM kill would.
    pub async fn kill(&mut self) {
        self.process.kill().await.expect("SIGKILL operator");
    }

    /// Sends SIGTERM and waits for it to exit; returns its exit success.
    pub async fn terminate(&mut self) -> bool {
        self.process
            .terminate(CONVERGE)
            .await
            .expect("operator exits after SIGTERM")
            .success()
    }

    /// GETs `path` on its HTTP endpoint: (status code, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        self.process.get(path).await
    }

    /// Waits until /readyz answers 200 and returns its body.
    pub async fn wait_ready(&self) -> String {
        wait_until("operator /readyz", CONVERGE, || async {
            Ok::<_, String>(
                self.get("/readyz")
                    .await
                    .filter(|(c, _)| *c == 200)
                    .map(|(_, b)| b),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()))
    }

    /// Its log so far (for failure messages).
    pub fn logs(&self) -> String {
        self.process.logs()
    }
}

/// The group's Lease, if it exists.
pub async fn lease(client: &Client, namespace: &str, group: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(&lease_name_for(group))
        .await
        .unwrap()
}

/// A group named `name` selecting `app=<app>`, with the default Lease duration.
pub fn group(name: &str, app: &str) -> LeaderGroup {
    LeaderGroup::new(
        name,
        leadergroup_operator::crd::LeaderGroupSpec {
            selector: leadergroup_operator::crd::PodSelector {
                match_labels: [("app".to_string(), app.to_string())].into(),
                ..Default::default()
            },
            lease_duration_seconds: 15,
            preferred_leader: None,
            paused: false,
            liveness: Default::default(),
            service: None,
            history_limit: leadergroup_operator::crd::DEFAULT_HISTORY_LIMIT,
        },
    )
}

/// A group selecting `app=<app>` with `spec.service` set to `service`.
pub fn with_service(name: &str, app: &str, service: serde_json::Value) -> LeaderGroup {
    let mut g = group(name, app);
    g.spec.service = Some(serde_json::from_value(service).unwrap());
    g
}

/// One test's world: its namespace (CRD installed), a kubelet for it, and the APIs it uses.
pub struct World {
    pub ns: leadergroup_testenv::TestNamespace,
    pub kubelet: leadergroup_testenv::Kubelet,
    pub groups: Api<LeaderGroup>,
    pub pods: Api<Pod>,
}

impl World {
    /// A fresh namespace named after `prefix`, with the CRD installed.
    pub async fn new(prefix: &str) -> World {
        World::in_namespace(leadergroup_testenv::namespace(prefix).await.unwrap()).await
    }

    /// The world of namespace `ns` (of any API server, a private one included), with the CRD
    /// installed there.
    pub async fn in_namespace(ns: leadergroup_testenv::TestNamespace) -> World {
        install_crd(&ns.client).await;
        let kubelet = leadergroup_testenv::Kubelet::new(ns.client.clone(), &ns.name);
        World {
            groups: ns.api(),
            pods: ns.api(),
            kubelet,
            ns,
        }
    }

    /// Merge-patches the group `group`'s spec with `spec`, as a user's edit does.
    pub async fn patch_spec(&self, group: &str, spec: serde_json::Value) {
        self.groups
            .patch(
                group,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({ "spec": spec })),
            )
            .await
            .unwrap();
    }

    /// Creates Ready pods `<prefix>-0..n` labeled `app=<app>`, each created in a later second than
    /// the one before (creationTimestamp has 1 s granularity), so the succession order is 0, 1, 2...
    /// by age, not only by the name tie-breaker.
    pub async fn ordered_ready_pods(&self, prefix: &str, n: usize, app: &str) -> Vec<String> {
        let mut names = Vec::new();
        for i in 0..n {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(1100)).await;
            }
            let name = format!("{prefix}-{i}");
            self.kubelet
                .create_ready_pod(&name, &[("app", app)])
                .await
                .unwrap();
            names.push(name);
        }
        names
    }

    /// Holds every promotion of pod `pod` inside the API server (an admission webhook for this
    /// namespace) until the returned guard releases it or drops.
    pub async fn hold_promotions_of(&self, cp: &ControlPlane, pod: &str) -> HeldRequests {
        let rule = HoldRule {
            pod: Some(pod.to_owned()),
            label: ROLE_LABEL.into(),
            value: ROLE_LEADER.into(),
        };
        HeldRequests::start(cp, self.ns.client.clone(), &self.ns.name, rule, pod)
            .await
            .unwrap_or_else(|e| panic!("holding the promotions of {pod}: {e}"))
    }

    /// Waits until the group `group` no longer exists (its finalizer has let it go).
    pub async fn wait_group_gone(&self, group: &str) {
        wait_until("the group is gone", CONVERGE, || async {
            self.groups
                .get_opt(group)
                .await
                .map(|g| g.is_none().then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n(operator logs: {})", self.log_hint()));
    }

    /// Waits until `group`'s status satisfies `cond`; returns that status.
    pub async fn wait_status(
        &self,
        group: &str,
        what: &str,
        cond: impl Fn(&leadergroup_operator::crd::LeaderGroupStatus) -> bool,
    ) -> leadergroup_operator::crd::LeaderGroupStatus {
        let g = leadergroup_testenv::wait_for_object(
            &self.groups,
            group,
            what,
            CONVERGE,
            |g: Option<&LeaderGroup>| g.and_then(|g| g.status.as_ref()).is_some_and(&cond),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n(operator logs: {})", self.log_hint()));
        g.and_then(|g| g.status).unwrap()
    }

    /// Waits until the group has settled (I2, [`leadergroup_testenv::judge_settled`]) on a
    /// leader satisfying `cond`.
    pub async fn wait_settled(
        &self,
        group: &str,
        what: &str,
        cond: impl Fn(&Settled) -> bool,
    ) -> Settled {
        leadergroup_testenv::wait_settled(
            &self.ns.client,
            &self.ns.name,
            group,
            what,
            CONVERGE,
            cond,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n(operator logs: {})", self.log_hint()))
    }

    /// The settled state of `group`, if it is settled now (see [`World::wait_settled`]).
    pub async fn settled(&self, group: &str) -> Result<Option<Settled>, String> {
        leadergroup_testenv::settled(&self.ns.client, &self.ns.name, group)
            .await
            .map(Result::ok)
            .map_err(|e| e.to_string())
    }

    /// Pods carrying `group`'s marks and labeled leader, with their epoch annotation.
    pub async fn labeled_leaders(&self, group: &str) -> Vec<(String, Option<i64>)> {
        self.pods
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| is_leader(p) && marked_group(p) == Some(group))
            .map(|p| (p.name_any(), epoch(p)))
            .collect()
    }

    /// Waits until `group` has no leader anywhere: not in the status, not on any pod, not in the
    /// Lease; returns the status.
    pub async fn wait_leaderless(
        &self,
        group: &str,
        what: &str,
    ) -> leadergroup_operator::crd::LeaderGroupStatus {
        wait_until(what, CONVERGE, || async {
            let status = self
                .groups
                .get(group)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let holder = lease(&self.ns.client, &self.ns.name, group)
                .await
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty());
            let any_leader = self
                .pods
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .any(is_leader);
            Ok::<_, String>(
                (status.leader.is_none() && holder.is_none() && !any_leader).then_some(status),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n(operator logs: {})", self.log_hint()))
    }

    /// The Events recorded on `group`: (reason, note), oldest first.
    pub async fn events(&self, group: &str) -> Vec<(String, String)> {
        let api: Api<k8s_openapi::api::events::v1::Event> = self.ns.api();
        let mut events: Vec<_> = api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("LeaderGroup") && r.name.as_deref() == Some(group)
                })
            })
            .collect();
        events.sort_by_key(|e| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
        events
            .into_iter()
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    /// Waits for an Event on `group` with `reason` whose note contains `note`; returns the note.
    pub async fn wait_event(&self, group: &str, reason: &str, note: &str) -> String {
        let found = wait_until(
            &format!("an Event {reason} mentioning {note:?} on {group}"),
            CONVERGE,
            || async {
                let found = self
                    .events(group)
                    .await
                    .into_iter()
                    .find(|(r, n)| r == reason && n.contains(note));
                Ok::<_, String>(found.map(|(_, n)| n))
            },
        )
        .await;
        match found {
            Ok(n) => n,
            Err(e) => panic!("{e}\nevents: {:?}", self.events(group).await),
        }
    }

    fn log_hint(&self) -> String {
        format!(
            "{}/operator-logs/{}-*.log",
            env!("CARGO_TARGET_TMPDIR"),
            self.ns.name
        )
    }
}

// ---- Tools and endpoints for the chart, kubectl, HA and metrics tests. ----

/// The chart's folder in the repository.
pub fn chart_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/leadergroup-operator")
}

/// The value of one sample in Prometheus text, e.g.
/// `metric(&text, r#"leadergroup_transitions_total{reason="Initial"}"#)`.
pub fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(sample))
        .find_map(|rest| rest.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

impl Operator {
    /// The role /readyz reports once ready ("active" or "standby"); None while it answers 503
    /// or does not answer at all.
    pub async fn role(&self) -> Option<String> {
        readyz_role(self.http).await
    }

    /// Waits until /readyz reports `role`.
    pub async fn wait_role(&self, role: &str) {
        wait_until(
            &format!("{} /readyz says {role}", self.identity),
            CONVERGE,
            || async {
                Ok::<_, String>((self.role().await.as_deref() == Some(role)).then_some(()))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
    }

    /// /metrics, which must answer 200.
    pub async fn metrics(&self) -> String {
        let (code, body) = self.get("/metrics").await.expect("/metrics answers");
        assert_eq!(code, 200, "{body}");
        body
    }

    /// GETs /metrics on its secure port with `token` (none: no Authorization header), trusting
    /// its certificate as `trust` says: (status code, body).
    pub async fn scrape(
        &self,
        token: Option<&str>,
        trust: leadergroup_testenv::Trust<'_>,
    ) -> (u16, String) {
        let addr = self
            .metrics_secure
            .expect("started with Operator::start_secure");
        leadergroup_testenv::https_get(addr, "/metrics", token, trust)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "scraping {addr}: {e}
{}",
                    self.logs()
                )
            })
    }

    /// How many reconciles it has finished (`leadergroup_reconcile_seconds_count`).
    pub async fn reconciles(&self) -> f64 {
        metric(&self.metrics().await, "leadergroup_reconcile_seconds_count").unwrap_or(0.0)
    }

    /// Waits until it has finished `more` reconciles beyond `before` ([`Operator::reconciles`]):
    /// the proof that it decided again, where a test would otherwise sleep.
    pub async fn wait_reconciles(&self, before: f64, more: f64, what: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.reconciles().await < before + more {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
