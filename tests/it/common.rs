//! Shared by the operator's integration tests: the CRD installed once, the operator binary run as
//! a child process (as a user runs it), and (from `leadergroup-testenv`, shared with the
//! end-to-end tests) the watcher that checks the invariants I1 and I3 on every pod event the API
//! server sends.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use leadergroup_operator::crd::{
    EPOCH_ANNOTATION, GROUP_ANNOTATION, LeaderGroup, ROLE_LABEL, ROLE_LEADER,
};
use leadergroup_testenv::{ControlPlane, wait_until};
pub use leadergroup_testenv::{InvariantWatcher, http_get, readyz_role, run_ok, run_tool};
use tokio::process::{Child, Command};

/// Generous bound for anything the operator should do "at once": the machine is small and noisy,
/// and tests run in parallel. Speed is measured by the benchmarks, not here.
pub const CONVERGE: Duration = Duration::from_secs(30);

/// Installs the CRD (server-side apply, so parallel test binaries can all do it) and waits until
/// the API server serves it.
pub async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = LeaderGroup::crd();
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("leadergroup-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    wait_until("CRD Established", CONVERGE, || async {
        let c = crds.get(&crd.name_any()).await?;
        let established = c
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        Ok::<_, kube::Error>(established.then_some(()))
    })
    .await
    .expect("CRD established");
    // The first requests for a new resource can still 404 for a moment after Established.
    let groups: Api<LeaderGroup> = Api::all(client.clone());
    wait_until("LeaderGroups served", CONVERGE, || async {
        groups.list(&Default::default()).await.map(|_| Some(()))
    })
    .await
    .expect("LeaderGroups served");
}

/// The operator binary, running as a child process.
pub struct Operator {
    child: Child,
    /// The identity it runs with.
    pub identity: String,
    /// Where it serves /healthz, /readyz and /metrics.
    pub http: SocketAddr,
    log: std::path::PathBuf,
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
        // The port was free when chosen, but another process of the parallel tests (an operator,
        // an agent, a PostgreSQL) may bind it before this operator does: it then exits at once
        // with "Address already in use", and it is started again on another port.
        for _ in 0..5 {
            let mut operator = Self::spawn(kubeconfig, namespace, identity, extra);
            if !operator.lost_its_port().await {
                return operator;
            }
        }
        panic!("leadergroup-operator found its HTTP port taken five times in a row");
    }

    fn spawn(
        kubeconfig: &std::path::Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> Operator {
        let http = free_port();
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("operator-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{namespace}-{identity}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_leadergroup-operator"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", namespace, "--identity", identity])
            .args(["--http-addr", &http.to_string()])
            .args(extra)
            .env("RUST_LOG", "info,leadergroup_operator=debug,kube=warn")
            // tracing writes to stdout; stderr has the fatal error, if any. Both into the log.
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("start leadergroup-operator");
        Operator {
            child,
            identity: identity.to_string(),
            http,
            log,
        }
    }

    /// Whether it exited because its HTTP port was taken: it binds the port at start, so this
    /// waits for /healthz to answer or the process to end (at most a few seconds; an operator
    /// that exits for another reason is left for the test to see).
    async fn lost_its_port(&mut self) -> bool {
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.logs().contains("Address already in use");
            }
            if self.get("/healthz").await.is_some() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("operator still running")
    }

    /// Kills it with SIGKILL: no cleanup, no release, as a crash or an OOM kill would.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("SIGKILL operator");
    }

    /// Sends SIGTERM and waits for it to exit; returns its exit success.
    pub async fn terminate(&mut self) -> bool {
        let pid = self.pid().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        let status = tokio::time::timeout(CONVERGE, self.child.wait())
            .await
            .expect("operator exits after SIGTERM")
            .expect("wait operator");
        status.success()
    }

    /// GETs `path` on its HTTP endpoint: (status code, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.http, path).await
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
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The group's Lease, if it exists.
pub async fn lease(client: &Client, namespace: &str, group: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(&leadergroup_operator::crd::lease_name_for(group))
        .await
        .unwrap()
}

/// The pod's role label.
pub fn role(pod: &Pod) -> Option<&str> {
    pod.labels().get(ROLE_LABEL).map(String::as_str)
}

/// The pod's epoch annotation.
pub fn epoch(pod: &Pod) -> Option<i64> {
    pod.annotations()
        .get(EPOCH_ANNOTATION)
        .and_then(|e| e.parse().ok())
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
        },
    )
}

/// One test's world: its namespace (CRD installed), a kubelet for it, and the APIs it uses.
pub struct World {
    pub ns: leadergroup_testenv::TestNamespace,
    pub kubelet: leadergroup_testenv::Kubelet,
    pub groups: Api<LeaderGroup>,
    pub pods: Api<Pod>,
}

/// The state a user sees once the operator has settled a group with a leader (I2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    pub leader: String,
    pub epoch: i64,
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

    /// Waits until the group has settled (I2) on a leader satisfying `cond`: the status names it
    /// at epoch e, the Lease holds it at epoch e, and it is the only pod of the group labeled
    /// leader, annotated with epoch e.
    pub async fn wait_settled(
        &self,
        group: &str,
        what: &str,
        cond: impl Fn(&Settled) -> bool,
    ) -> Settled {
        wait_until(what, CONVERGE, || async {
            let observed = self.settled(group).await?;
            Ok::<_, String>(observed.filter(|s| cond(s)))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n(operator logs: {})", self.log_hint()))
    }

    /// The settled state of `group`, if it is settled now (see [`World::wait_settled`]).
    pub async fn settled(&self, group: &str) -> Result<Option<Settled>, String> {
        let g = self.groups.get(group).await.map_err(|e| e.to_string())?;
        let status = g.status.unwrap_or_default();
        let Some(leader) = status.leader.clone() else {
            return Ok(None);
        };
        let Some(l) = lease(&self.ns.client, &self.ns.name, group).await else {
            return Ok(None);
        };
        let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
        let lease_epoch = l
            .annotations()
            .get(EPOCH_ANNOTATION)
            .and_then(|e| e.parse::<i64>().ok());
        let leaders = self.labeled_leaders(group).await;
        let settled = holder.as_deref() == Some(leader.as_str())
            && lease_epoch == Some(status.epoch)
            && leaders == vec![(leader.clone(), Some(status.epoch))];
        Ok(settled.then_some(Settled {
            leader,
            epoch: status.epoch,
        }))
    }

    /// Pods carrying `group`'s marks and labeled leader, with their epoch annotation.
    pub async fn labeled_leaders(&self, group: &str) -> Vec<(String, Option<i64>)> {
        self.pods
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| role(p) == Some(ROLE_LEADER))
            .filter(|p| p.annotations().get(GROUP_ANNOTATION).map(String::as_str) == Some(group))
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
                .any(|p| role(p) == Some(ROLE_LEADER));
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
}

/// The role /readyz at `addr` reports once ready ("active", "standby"); None while it answers

#[test]
fn the_invariant_watcher_reads_the_operators_marks() {
    use leadergroup_testenv::invariants as watched;
    assert_eq!(watched::ROLE_LABEL, ROLE_LABEL);
    assert_eq!(watched::ROLE_LEADER, ROLE_LEADER);
    assert_eq!(watched::GROUP_ANNOTATION, GROUP_ANNOTATION);
    assert_eq!(watched::EPOCH_ANNOTATION, EPOCH_ANNOTATION);
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
