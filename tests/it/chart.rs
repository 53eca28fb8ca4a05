//! The Helm chart installed into a real API server.
//!
//! The CRD is cluster-scoped and shared by every test binary on the shared API server, where it is
//! installed by server-side apply without Helm's ownership metadata: `helm install` with
//! `crds.enabled=true` there is refused ("cannot be imported into the current release"), and
//! adopting it (`--take-ownership`) would make one test's release own, and its uninstall decide
//! the fate of, every other test's LeaderGroups. So:
//! - on the shared API server the release runs with `crds.enabled=false` and
//!   `watchNamespace=<test namespace>`: RBAC, the Deployment's flags, and the operator binary
//!   running with a token of the chart's ServiceAccount;
//! - the CRD's lifecycle (install with the default values, Established, the same schema as
//!   crds/leadergroup.yaml, `helm upgrade`, `helm uninstall` keeping it and the LeaderGroups) runs
//!   on a private API server of its own, where the release is the CRD's only owner; once with the
//!   control plane's Helm 4 and once with Helm 3 (`charts/tests/helm3.sh`, built once and cached),
//!   as most clusters are still installed with it.

mod guard;
mod lease_guard;

use std::path::Path;

use crate::common::{Operator, World, chart_dir, group, repo_root, run_ok, run_tool, with_service};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use leadergroup_operator::crd::{LeaderGroup, ROLE_LABEL, ROLE_LEADER};
use leadergroup_testenv::{
    ControlPlane, Kubelet, PrivateCluster, TestNamespace, control_plane, namespace,
    wait_for_object, wait_until,
};

const CRD_NAME: &str = "leadergroups.leadergroup.io";

/// `helm install lgo` into `release_ns` on the shared API server: without the CRD (see the
/// module's header), watching `watched` only. Add `--set`s before running it.
fn install_watching(cp: &ControlPlane, release_ns: &str, watched: &str) -> std::process::Command {
    let mut install = cp.helm();
    install
        .args(["install", "lgo"])
        .arg(chart_dir())
        .args(["--namespace", release_ns]);
    install.args([
        "--set",
        "crds.enabled=false",
        "--set",
        &format!("watchNamespace={watched}"),
    ]);
    install
}

fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(s)) if s.is_forbidden() => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

fn not_found<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(s)) if s.is_not_found() => {}
        other => panic!("{what}: expected 404 (gone), got {other:?}"),
    }
}

/// The operator container's args in the release's Deployment.
async fn deployment_args(client: &Client, namespace: &str, name: &str) -> Vec<String> {
    let d = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap();
    let spec = d.spec.template.spec.unwrap();
    let c = spec
        .containers
        .iter()
        .find(|c| c.name == "operator")
        .expect("operator container");
    c.args.clone().unwrap_or_default()
}

/// The operator binary run as release `fullname` in namespace `rel` runs it, watching `watched`:
/// the Deployment's own arguments (the harness sets --namespace, --http-addr and
/// --metrics-secure-addr itself, so the chart's are dropped), authenticated with a TokenRequest
/// token of the chart's ServiceAccount. Returns the operator and that token.
async fn release_operator(
    cp: &ControlPlane,
    rel: &TestNamespace,
    fullname: &str,
    watched: &str,
    identity: &str,
) -> (Operator, String) {
    let args = deployment_args(&rel.client, &rel.name, fullname).await;
    let token = rel.service_account_token(fullname).await.unwrap();
    let kubeconfig =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-sa.kubeconfig", rel.name));
    std::fs::write(&kubeconfig, cp.token_kubeconfig(&token)).unwrap();
    let operator = start_as_deployed(&kubeconfig, &args, watched, identity).await;
    (operator, token)
}

/// The operator binary with the Deployment's arguments `args`, watching `watched`: the chart's
/// --namespace, --http-addr and --metrics-secure-addr give way to the harness' (free ports on
/// loopback; the secure /metrics kept when the chart asks for it).
async fn start_as_deployed(
    kubeconfig: &Path,
    args: &[String],
    watched: &str,
    identity: &str,
) -> Operator {
    let own = ["--namespace=", "--http-addr=", "--metrics-secure-addr="];
    let chart_args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !own.iter().any(|flag| a.starts_with(flag)))
        .collect();
    if args.iter().any(|a| a.starts_with("--metrics-secure-addr=")) {
        Operator::start_secure(kubeconfig, watched, identity, &chart_args).await
    } else {
        Operator::start_with_kubeconfig(kubeconfig, watched, identity, &chart_args).await
    }
}

/// The release's secure /metrics as a scraper meets it, on `operator` started as deployed: a
/// ServiceAccount that `metrics.readers` bound to the chart's reader ClusterRole reads it (which
/// needs the operator's own right to review tokens, from the chart), and `other`, a token of a
/// ServiceAccount not bound, is refused.
async fn scrape_as_reader(operator: &Operator, reader: &str, other: &str) {
    let body = wait_until(
        "the chart's metrics reader scrapes /metrics",
        crate::common::CONVERGE,
        || async {
            let (code, body) = operator
                .scrape(Some(reader), leadergroup_testenv::Trust::Any)
                .await;
            // 500: the operator could not review (the chart's metrics-auth ClusterRole missing).
            assert_ne!(code, 500, "{body}\n{}", operator.logs());
            Ok::<_, String>((code == 200).then_some(body))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", operator.logs()));
    assert!(body.contains("leadergroup_active"), "{body}");
    let (code, body) = operator
        .scrape(Some(other), leadergroup_testenv::Trust::Any)
        .await;
    assert_eq!(code, 403, "a ServiceAccount the chart did not bind: {body}");
    assert_eq!(
        operator.get("/metrics").await.map(|(c, _)| c),
        Some(404),
        "no plain /metrics with metrics.secure"
    );
}

#[tokio::test]
async fn release_for_one_namespace_runs_the_operator_as_its_service_account_and_nothing_more() {
    let cp = control_plane().await.unwrap();
    let w = World::new("chart-watch").await;
    let rel = namespace("chart-rel").await.unwrap();
    let other = namespace("chart-other").await.unwrap();
    let admin = w.ns.client.clone();
    let fullname = "lgo-leadergroup-operator";

    // A scraper bound to the secure /metrics' reader role by the chart (metrics.readers).
    let mut install = install_watching(cp, &rel.name, &w.ns.name);
    install.args([
        "--set",
        "metrics.readers[0].kind=ServiceAccount",
        "--set",
        "metrics.readers[0].name=scraper",
        "--set",
        &format!("metrics.readers[0].namespace={}", rel.name),
    ]);
    run_ok(install).await;

    // The objects: ServiceAccount and leader-election Role in the release namespace, the
    // operator's Role in the watched namespace only, and nothing cluster-wide but the secure
    // /metrics' ClusterRoles (the reviews, which a Role cannot grant, and the scrapers' right).
    Api::<ServiceAccount>::namespaced(admin.clone(), &rel.name)
        .get(fullname)
        .await
        .unwrap();
    let role = Api::<Role>::namespaced(admin.clone(), &w.ns.name)
        .get(fullname)
        .await
        .unwrap();
    let resources: Vec<String> = role
        .rules
        .unwrap_or_default()
        .iter()
        .flat_map(|r| r.resources.clone().unwrap_or_default())
        .collect();
    assert!(
        !resources.iter().any(|r| r == "secrets" || r == "*"),
        "{resources:?}"
    );
    let binding = Api::<RoleBinding>::namespaced(admin.clone(), &w.ns.name)
        .get(fullname)
        .await
        .unwrap();
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(
        (subject.name.as_str(), subject.namespace.as_deref()),
        (fullname, Some(rel.name.as_str()))
    );
    let election = format!("{fullname}-leader-election");
    Api::<Role>::namespaced(admin.clone(), &rel.name)
        .get(&election)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &rel.name)
        .get(&election)
        .await
        .unwrap();
    not_found(
        Api::<ClusterRole>::all(admin.clone()).get(fullname).await,
        "no ClusterRole with watchNamespace",
    );
    not_found(
        Api::<ClusterRoleBinding>::all(admin.clone())
            .get(fullname)
            .await,
        "no ClusterRoleBinding with watchNamespace",
    );
    let metrics_auth = format!("{fullname}-metrics-auth.{}", rel.name);
    let metrics_reader = format!("{fullname}-metrics-reader.{}", rel.name);
    for name in [&metrics_auth, &metrics_reader] {
        Api::<ClusterRole>::all(admin.clone())
            .get(name)
            .await
            .unwrap();
        Api::<ClusterRoleBinding>::all(admin.clone())
            .get(name)
            .await
            .unwrap();
    }

    // The binary with exactly the chart's flags, authenticated as the chart's ServiceAccount.
    let args = deployment_args(&admin, &rel.name, fullname).await;
    assert!(
        args.contains(&format!("--namespace={}", w.ns.name)),
        "{args:?}"
    );
    assert!(args.contains(&"--log-format=json".to_string()), "{args:?}");
    assert!(args.contains(&"--leader-elect".to_string()), "{args:?}");
    let names = w.ordered_ready_pods("app", 2, "chart").await;
    let (mut operator, token) = release_operator(cp, &rel, fullname, &w.ns.name, "chart-op").await;
    operator.wait_role("active").await;
    // Its own Lease, in the release namespace, named after the release (operator-<fullname>: never
    // the name of a group's Lease, leadergroup-<group>).
    let own = Api::<Lease>::namespaced(admin.clone(), &rel.name)
        .get(&format!("operator-{fullname}"))
        .await
        .unwrap();
    assert_eq!(
        own.spec.unwrap().holder_identity.as_deref(),
        Some("chart-op")
    );

    w.groups
        .create(
            &PostParams::default(),
            &with_service(
                "g",
                "chart",
                serde_json::json!({"mode": "EndpointSlice", "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap();
    let first = w
        .wait_settled("g", "a leader at epoch 1", |s| s.epoch == 1)
        .await;
    assert_eq!(first.leader, names[0]);
    w.wait_event("g", "Initial", &names[0]).await;
    w.kubelet.delete_now(&first.leader).await.unwrap();
    let second = w
        .wait_settled("g", "handover at epoch 2", |s| s.epoch == 2)
        .await;
    assert_eq!(second.leader, names[1]);
    w.wait_event("g", "LeaderDeleted", &names[1]).await;
    // The leader's Service and its EndpointSlice, written with the chart's rules.
    crate::service::wait_slice_lists(&w, "g-leader", Some(&names[1])).await;
    Api::<Service>::namespaced(admin.clone(), &w.ns.name)
        .get("g-leader")
        .await
        .unwrap();
    let logs = operator.logs();
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "the chart's RBAC misses a permission:\n{logs}"
    );
    // The secure /metrics: the operator, as the chart's ServiceAccount, reviews the tokens; the
    // bound scraper reads, the operator's own ServiceAccount (not a reader) is refused.
    rel.create_service_account("scraper").await.unwrap();
    let scraper = rel.service_account_token("scraper").await.unwrap();
    scrape_as_reader(&operator, &scraper, &token).await;

    // The same token, outside what the chart grants: 403.
    let sa = cp.client_with_token(&token).await.unwrap();
    forbidden(
        Api::<Secret>::namespaced(sa.clone(), &w.ns.name)
            .list(&ListParams::default())
            .await,
        "list secrets in the watched namespace",
    );
    forbidden(
        Api::<Secret>::namespaced(sa.clone(), &rel.name)
            .get("any")
            .await,
        "get a secret in the release namespace",
    );
    // Services: only the verbs the operator uses (no patch), only in the watched namespace.
    forbidden(
        Api::<Service>::namespaced(sa.clone(), &w.ns.name)
            .patch(
                "g-leader",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
        "patch the leader's Service",
    );
    forbidden(
        Api::<Service>::namespaced(sa.clone(), &other.name)
            .list(&ListParams::default())
            .await,
        "list services outside the watched namespace",
    );
    let outside = Kubelet::new(other.client.clone(), &other.name);
    outside
        .create_ready_pod("bystander", &[("app", "chart")])
        .await
        .unwrap();
    let mark = serde_json::json!({"metadata": {"labels": {ROLE_LABEL: ROLE_LEADER}}});
    forbidden(
        Api::<Pod>::namespaced(sa.clone(), &other.name)
            .patch("bystander", &PatchParams::default(), &Patch::Merge(&mark))
            .await,
        "patch a pod outside watchNamespace",
    );
    forbidden(
        Api::<Pod>::namespaced(sa.clone(), &other.name)
            .list(&ListParams::default())
            .await,
        "list pods outside watchNamespace",
    );
    forbidden(
        Api::<Pod>::all(sa.clone())
            .list(&ListParams::default())
            .await,
        "list pods cluster-wide",
    );
    forbidden(
        Api::<LeaderGroup>::namespaced(sa.clone(), &other.name)
            .list(&ListParams::default())
            .await,
        "list LeaderGroups outside watchNamespace",
    );
    // In the release namespace, only its own Lease: not another one.
    let foreign =
        serde_json::from_value::<Lease>(serde_json::json!({"metadata": {"name": "someone-else"}}))
            .unwrap();
    Api::<Lease>::namespaced(admin.clone(), &rel.name)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    forbidden(
        Api::<Lease>::namespaced(sa.clone(), &rel.name)
            .get("someone-else")
            .await,
        "get another Lease in the release namespace",
    );

    // helm upgrade with a changed value reaches the Deployment.
    let mut upgrade = cp.helm();
    upgrade.args(["upgrade", "lgo"]).arg(chart_dir()).args([
        "--namespace",
        &rel.name,
        "--reuse-values",
        "--set",
        "logFormat=text",
    ]);
    run_ok(upgrade).await;
    let args = deployment_args(&admin, &rel.name, fullname).await;
    assert!(args.contains(&"--log-format=text".to_string()), "{args:?}");
    assert!(
        args.contains(&format!("--namespace={}", w.ns.name)),
        "--reuse-values kept watchNamespace: {args:?}"
    );

    // helm uninstall removes the release's objects, not the groups.
    operator.kill().await;
    let mut uninstall = cp.helm();
    uninstall.args(["uninstall", "lgo", "--namespace", &rel.name]);
    run_ok(uninstall).await;
    not_found(
        Api::<Role>::namespaced(admin.clone(), &w.ns.name)
            .get(fullname)
            .await,
        "Role after uninstall",
    );
    not_found(
        Api::<ServiceAccount>::namespaced(admin.clone(), &rel.name)
            .get(fullname)
            .await,
        "ServiceAccount after uninstall",
    );
    for name in [&metrics_auth, &metrics_reader] {
        not_found(
            Api::<ClusterRole>::all(admin.clone()).get(name).await,
            "the secure /metrics' ClusterRole after uninstall",
        );
    }
    w.groups.get("g").await.unwrap();
    Api::<CustomResourceDefinition>::all(admin)
        .get(CRD_NAME)
        .await
        .unwrap();
}

async fn established_crd(client: &Client) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_until("CRD Established", crate::common::CONVERGE, || async {
        let crd = crds.get_opt(CRD_NAME).await?;
        let established = crd
            .as_ref()
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        Ok::<_, kube::Error>(crd.filter(|_| established))
    })
    .await
    .unwrap()
}

/// Which Helm runs a release's commands.
#[derive(Clone, Copy, Debug)]
enum Helm {
    /// The control plane's (`controlplane/build.sh`), Helm 4.
    Four,
    /// Helm 3, from `charts/tests/helm3.sh`'s cache.
    Three,
}

impl Helm {
    /// `helm` against `cluster`: the control plane's binary, or Helm 3's with the same
    /// environment (the cluster's KUBECONFIG).
    fn on(self, cluster: &PrivateCluster) -> std::process::Command {
        let four = cluster.tool("helm");
        match self {
            Helm::Four => four,
            Helm::Three => {
                let mut three = std::process::Command::new(helm3_bin());
                for (name, value) in four.get_envs() {
                    if let Some(value) = value {
                        three.env(name, value);
                    }
                }
                three
            }
        }
    }
}

/// Helm 3's binary, as `charts/tests/helm3.sh` built it (`make it` and `.ci/run` build it first;
/// here it is never built, as the control plane is not: that would take minutes).
fn helm3_bin() -> std::path::PathBuf {
    let out = std::process::Command::new(repo_root().join("charts/tests/helm3.sh"))
        .env("LEADERGROUP_NO_BUILD", "1")
        .output()
        .expect("running charts/tests/helm3.sh");
    assert!(
        out.status.success(),
        "Helm 3 is not built: run charts/tests/helm3.sh\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("helm");
    let version = std::process::Command::new(&bin)
        .args(["version", "--short"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("v3."),
        "{} is not Helm 3: {version:?}",
        bin.display()
    );
    bin
}

#[tokio::test]
async fn default_release_installs_upgrades_and_on_uninstall_keeps_the_crd_and_the_groups() {
    default_release(Helm::Four, "chart").await;
}

#[tokio::test]
async fn default_release_with_helm_3_installs_upgrades_and_uninstalls() {
    default_release(Helm::Three, "chart-helm3").await;
}

/// The default values' release on an API server of its own, with `helm`: installed (the CRD
/// owned and kept), the operator run as deployed, upgraded, uninstalled, reinstalled without
/// `crds.keep` and uninstalled again.
async fn default_release(helm: Helm, name: &str) {
    let cluster = PrivateCluster::start(name).await.unwrap();
    let client = cluster.client().await.unwrap();
    let release = "leadergroup-operator";

    let mut install = helm.on(&cluster);
    install.args(["install", release]).arg(chart_dir()).args([
        "--namespace",
        "leadergroup-system",
        "--create-namespace",
    ]);
    let notes = run_ok(install).await;
    assert!(
        notes.contains("kubectl get leadergroups"),
        "NOTES:\n{notes}"
    );

    // Established, with the schema of crds/leadergroup.yaml (the API server's own defaults aside),
    // owned by the release and kept on uninstall.
    let live = established_crd(&client).await;
    let source: CustomResourceDefinition = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo_root().join("crds/leadergroup.yaml")).unwrap(),
    )
    .unwrap();
    // The API server fills in what a v1 CRD leaves out: the list kind and the conversion
    // strategy. Fill them into the source the same way, and compare the rest exactly.
    let mut source_spec = source.spec.clone();
    source_spec
        .names
        .list_kind
        .get_or_insert_with(|| format!("{}List", source_spec.names.kind));
    if source_spec.conversion.is_none() {
        source_spec.conversion = live
            .spec
            .conversion
            .clone()
            .filter(|c| c.strategy == "None");
    }
    let live_spec = serde_json::to_value(&live.spec).unwrap();
    assert_eq!(
        live_spec,
        serde_json::to_value(&source_spec).unwrap(),
        "the installed CRD differs from crds/leadergroup.yaml"
    );
    assert_eq!(
        live.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("Helm")
    );
    assert_eq!(
        live.annotations()
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some(release)
    );
    assert_eq!(
        live.annotations()
            .get("helm.sh/resource-policy")
            .map(String::as_str),
        Some("keep")
    );
    let uid = live.uid();

    // Default values: cluster-wide RBAC (the secure /metrics' too) and the leader-election Role.
    for name in [
        release.to_owned(),
        format!("{release}-metrics-auth.leadergroup-system"),
    ] {
        Api::<ClusterRole>::all(client.clone())
            .get(&name)
            .await
            .unwrap();
        Api::<ClusterRoleBinding>::all(client.clone())
            .get(&name)
            .await
            .unwrap();
    }
    Api::<ClusterRole>::all(client.clone())
        .get(&format!("{release}-metrics-reader.leadergroup-system"))
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), "leadergroup-system")
        .get(release)
        .await
        .unwrap();
    Api::<Role>::namespaced(client.clone(), "leadergroup-system")
        .get(&format!("{release}-leader-election"))
        .await
        .unwrap();
    let args = deployment_args(&client, "leadergroup-system", release).await;
    assert!(
        args.contains(&"--log-format=json".to_string())
            && !args.iter().any(|a| a.starts_with("--namespace")),
        "{args:?}"
    );

    // The admission guard, for every namespace, enforced before the operator runs: the election
    // and handover below happen under it, and `helm upgrade` updates the operator's Deployment
    // under it (its template carries no mark).
    let guard_name = format!("{release}-marks.leadergroup-system");
    let binding = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .get(&guard_name)
        .await
        .unwrap();
    let selector = binding
        .spec
        .match_resources
        .and_then(|m| m.namespace_selector)
        .unwrap_or_default();
    assert!(
        selector.match_labels.unwrap_or_default().is_empty()
            && selector.match_expressions.unwrap_or_default().is_empty(),
        "the default binding selects every namespace"
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), "leadergroup-system");
    let templated = guard::deployment(
        "templated",
        serde_json::json!({ROLE_LABEL: ROLE_LEADER}),
        serde_json::json!({}),
    );
    let dry_run = guard::dry_post();
    let refusal = guard::enforced("the guard refusing a templated leader label", || {
        deployments.create(&dry_run, &templated)
    })
    .await;
    guard::refused::<()>(
        Err(refusal),
        guard::INVALID,
        &guard::role_mark(),
        "a Deployment templated with role=leader",
    );

    // A LeaderGroup, applied the way a user does.
    let mut kubectl = cluster.tool("kubectl");
    kubectl.args(["create", "namespace", "app"]);
    run_ok(kubectl).await;
    let groups: Api<LeaderGroup> = Api::namespaced(client.clone(), "app");
    groups
        .create(&PostParams::default(), &group("my-app", "my-app"))
        .await
        .unwrap();

    // The default values' RBAC (ClusterRole, leader-election Role for the release's own Lease),
    // exercised by the binary with the Deployment's arguments and the ServiceAccount's token.
    // (The harness adds --namespace app: a ClusterRole grants namespaced requests too.)
    let system = TestNamespace {
        name: "leadergroup-system".into(),
        client: client.clone(),
    };
    let token = system.service_account_token(release).await.unwrap();
    let kubeconfig = cluster.dir().join("sa.kubeconfig");
    std::fs::write(&kubeconfig, cluster.token_kubeconfig(&token)).unwrap();
    let app = TestNamespace {
        name: "app".into(),
        client: client.clone(),
    };
    app.create_service_account("default").await.unwrap();
    let kubelet = Kubelet::new(client.clone(), "app");
    for name in ["my-app-0", "my-app-1"] {
        kubelet
            .create_ready_pod(name, &[("app", "my-app")])
            .await
            .unwrap();
    }
    let args = deployment_args(&client, "leadergroup-system", release).await;
    assert!(
        args.contains(&"--metrics-secure-addr=0.0.0.0:8443".to_string()),
        "the secure /metrics by default: {args:?}"
    );
    let mut operator = start_as_deployed(&kubeconfig, &args, "app", "default-op").await;
    operator.wait_role("active").await;
    let own = Api::<Lease>::namespaced(client.clone(), "leadergroup-system")
        .get(&format!("operator-{release}"))
        .await
        .unwrap();
    assert_eq!(
        own.spec.unwrap().holder_identity.as_deref(),
        Some("default-op")
    );
    let leader_at = |epoch: i64| {
        let groups = groups.clone();
        async move {
            let g = wait_for_object(
                &groups,
                "my-app",
                &format!("a leader at epoch {epoch}"),
                crate::common::CONVERGE,
                |g: Option<&LeaderGroup>| {
                    g.and_then(|g| g.status.as_ref())
                        .is_some_and(|s| s.epoch == epoch && s.leader.is_some())
                },
            )
            .await
            .unwrap();
            g.unwrap().status.unwrap().leader.unwrap()
        }
    };
    let first = leader_at(1).await;
    kubelet.delete_now(&first).await.unwrap();
    let second = leader_at(2).await;
    assert_ne!(first, second);
    let logs = operator.logs();
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "the chart's ClusterRole misses a permission:\n{logs}"
    );
    // The secure /metrics, with a scraper bound by a binding of its own (as a user binds a
    // Prometheus) to the chart's reader ClusterRole.
    let reader_role = format!("{release}-metrics-reader.leadergroup-system");
    app.create_service_account("prometheus").await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "prometheus-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader_role},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "app"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let prometheus = app.service_account_token("prometheus").await.unwrap();
    scrape_as_reader(&operator, &prometheus, &token).await;
    operator.kill().await;

    let mut upgrade = helm.on(&cluster);
    upgrade.args(["upgrade", release]).arg(chart_dir()).args([
        "--namespace",
        "leadergroup-system",
        "--set",
        "logFormat=text",
    ]);
    run_ok(upgrade).await;
    let args = deployment_args(&client, "leadergroup-system", release).await;
    assert!(args.contains(&"--log-format=text".to_string()), "{args:?}");
    assert_eq!(
        established_crd(&client).await.uid(),
        uid,
        "upgrade kept the CRD (not recreated)"
    );

    let mut uninstall = helm.on(&cluster);
    uninstall.args(["uninstall", release, "--namespace", "leadergroup-system"]);
    let (ok, out, err) = run_tool(uninstall).await;
    assert!(ok, "{err}\n{out}");
    assert!(
        format!("{out}{err}").contains(CRD_NAME),
        "helm names the kept CRD: {out}{err}"
    );
    for name in [release.to_owned(), reader_role.clone()] {
        not_found(
            Api::<ClusterRole>::all(client.clone()).get(&name).await,
            "ClusterRole after uninstall",
        );
    }
    not_found(
        Api::<Deployment>::namespaced(client.clone(), "leadergroup-system")
            .get(release)
            .await,
        "Deployment after uninstall",
    );
    not_found(
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .get(&guard_name)
            .await,
        "the guard's policy after uninstall",
    );
    not_found(
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .get(&guard_name)
            .await,
        "the guard's binding after uninstall",
    );
    let kept = established_crd(&client).await;
    assert_eq!(kept.uid(), uid, "the CRD survived uninstall");
    groups
        .get("my-app")
        .await
        .expect("the LeaderGroup survived uninstall");

    // The counter-check: with crds.keep=false the same uninstall deletes the CRD. (The kept CRD
    // still carries this release's ownership metadata, so the reinstall adopts it.)
    let mut reinstall = helm.on(&cluster);
    reinstall.args(["install", release]).arg(chart_dir());
    reinstall.args([
        "--namespace",
        "leadergroup-system",
        "--set",
        "crds.keep=false",
    ]);
    run_ok(reinstall).await;
    assert_eq!(
        established_crd(&client).await.uid(),
        uid,
        "adopted, not recreated"
    );
    let mut uninstall = helm.on(&cluster);
    uninstall.args(["uninstall", release, "--namespace", "leadergroup-system"]);
    run_ok(uninstall).await;
    // Deleting (the LeaderGroup's finalizer holds it in Terminating: no operator runs any more).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get_opt(CRD_NAME).await.unwrap();
    assert!(
        crd.is_none_or(|c| c.metadata.deletion_timestamp.is_some()),
        "without crds.keep, helm uninstall deletes the CRD"
    );
}
