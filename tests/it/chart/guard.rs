//! The chart's admission guard (`templates/admission-guard.yaml`): only the chart's
//! ServiceAccount may add, change or remove the operator's marks on pods, and no workload's pod
//! template may carry them; each refusal names the mark.
//!
//! The policy and its binding are cluster-scoped and every test shares this API server, so the
//! release lives in a namespace of its own (the objects' names carry it), the binding selects the
//! test's namespace alone (`admissionGuard.namespaceSelector`: no other test's pods are judged),
//! and `helm uninstall` removes both at the end, or on drop when an assertion failed first.

use std::fmt::Debug;
use std::future::Future;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use leadergroup_operator::crd::{
    EPOCH_ANNOTATION, GROUP_ANNOTATION, ROLE_FOLLOWER, ROLE_LABEL, ROLE_LEADER,
};
use leadergroup_testenv::{
    ControlPlane, NODE_NAME, TestNamespace, control_plane, namespace, wait_until,
};
use serde_json::{Value, json};

use super::{not_found, release_operator};
use crate::common::{CONVERGE, World, group, run_ok, run_tool};

/// The guard's answer to a pod write that touches a mark (reason Forbidden).
pub(super) const FORBIDDEN: u16 = 403;
/// Its answer to a workload whose pod template carries one (reason Invalid).
pub(super) const INVALID: u16 = 422;

/// Never pulled: nothing runs containers on the light cluster.
const IMAGE: &str = "registry.invalid/leadergroup-tests/guard:1";

/// How the refusals name each mark.
pub(super) fn role_mark() -> String {
    format!("label {ROLE_LABEL}")
}
fn epoch_mark() -> String {
    format!("annotation {EPOCH_ANNOTATION}")
}
fn group_mark() -> String {
    format!("annotation {GROUP_ANNOTATION}")
}

/// Panics unless `result` is the guard's refusal: `code`, from a ValidatingAdmissionPolicy, with
/// a message naming `mark`.
#[track_caller]
pub(super) fn refused<T: Debug>(result: Result<T, kube::Error>, code: u16, mark: &str, what: &str) {
    match result {
        Err(kube::Error::Api(s))
            if s.code == code
                && s.message.contains("ValidatingAdmissionPolicy")
                && s.message.contains(mark) => {}
        other => panic!("{what}: expected the guard's {code} naming {mark:?}, got {other:?}"),
    }
}

/// Waits until the API server enforces the guard, which it loads asynchronously after the
/// release created it: until `probe` (a dry run, so that a probe sent too early changes nothing)
/// is refused by a ValidatingAdmissionPolicy. Returns that refusal.
pub(super) async fn enforced<T, F, Fut>(what: &str, mut probe: F) -> kube::Error
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    wait_until(what, CONVERGE, || {
        let answer = probe();
        async move {
            match answer.await {
                Err(kube::Error::Api(s)) if s.message.contains("ValidatingAdmissionPolicy") => {
                    Ok(Some(kube::Error::Api(s)))
                }
                Ok(_) => Ok(None),
                // Not the guard (yet): RBAC still loading, say. Retried; named on timeout.
                Err(e) => Err(e),
            }
        }
    })
    .await
    .unwrap()
}

/// `PostParams` of a dry run: admission judges it, nothing is stored.
pub(super) fn dry_post() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// A pod template with these labels and annotations, and `restartPolicy` (a Job's pods may not
/// restart `Always`, a Deployment's or StatefulSet's must).
fn template(labels: Value, annotations: Value, restart_policy: &str) -> Value {
    json!({
        "metadata": {"labels": labels, "annotations": annotations},
        "spec": {"restartPolicy": restart_policy, "containers": [{"name": "app", "image": IMAGE}]},
    })
}

/// The spec of a Deployment or StatefulSet of pods `app=<name>` whose template also carries
/// `labels` and `annotations`.
fn replicated_spec(name: &str, mut labels: Value, annotations: Value) -> Value {
    labels["app"] = json!(name);
    json!({
        "selector": {"matchLabels": {"app": name}},
        "template": template(labels, annotations, "Always"),
    })
}

/// A Deployment of pods `app=<name>` whose template also carries `labels` and `annotations`.
pub(super) fn deployment(name: &str, labels: Value, annotations: Value) -> Deployment {
    let spec = replicated_spec(name, labels, annotations);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// A pod (unbound: no kubelet ever runs it) with these labels and annotations.
fn pod(name: &str, labels: Value, annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": IMAGE}]},
    }))
    .unwrap()
}

async fn merge(api: &Api<Pod>, name: &str, patch: Value) -> Result<Pod, kube::Error> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// `helm uninstall` of the release when dropped, if the test did not get there: the policy and
/// binding are cluster-scoped and would outlive the test.
pub(super) struct Release {
    cp: &'static ControlPlane,
    name: &'static str,
    namespace: String,
    installed: bool,
}

impl Release {
    /// `helm install lgo` into `rel` watching `watched`, the guards binding `watched` alone.
    pub(super) async fn install(
        cp: &'static ControlPlane,
        rel: &TestNamespace,
        watched: &str,
    ) -> Release {
        let mut install = super::install_watching(cp, &rel.name, watched);
        install.args([
            "--set",
            &format!(
                "admissionGuard.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name={watched}"
            ),
        ]);
        run_ok(install).await;
        Release {
            cp,
            name: "lgo",
            namespace: rel.name.clone(),
            installed: true,
        }
    }

    fn uninstall_command(&self) -> std::process::Command {
        let mut cmd = self.cp.helm();
        cmd.args(["uninstall", self.name, "--namespace", &self.namespace]);
        cmd
    }

    pub(super) async fn uninstall(mut self) {
        run_ok(self.uninstall_command()).await;
        self.installed = false;
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.installed {
            let _ = self.uninstall_command().output();
        }
    }
}

/// Someone who may write pods (and create workloads) in the namespace, but is not the operator.
struct Intruder {
    /// The user name the API server sees (what `kubectl --as` takes).
    user: String,
    client: Client,
}

#[tokio::test]
async fn only_the_charts_service_account_sets_the_marks_and_no_template_carries_them() {
    let cp = control_plane().await.unwrap();
    let w = World::new("guard").await;
    let rel = namespace("guard-rel").await.unwrap();
    let admin = w.ns.client.clone();
    let fullname = "lgo-leadergroup-operator";
    let guard_name = format!("{fullname}-marks.{}", rel.name);

    let release = Release::install(cp, &rel, &w.ns.name).await;
    let policy = Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .get(&guard_name)
        .await
        .unwrap();
    assert_eq!(policy.spec.unwrap().failure_policy.as_deref(), Some("Fail"));
    let binding = Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .get(&guard_name)
        .await
        .unwrap()
        .spec;
    assert_eq!(binding.policy_name, guard_name);
    let selector = binding.match_resources.unwrap().namespace_selector.unwrap();
    assert_eq!(
        selector.match_labels.unwrap_or_default(),
        [("kubernetes.io/metadata.name".to_string(), w.ns.name.clone())].into(),
        "the binding selects the test's namespace only"
    );

    // Two intruders with the same RBAC: pods (create, update, patch) and a few workload kinds.
    // A user, impersonated, and a ServiceAccount of the namespace with a token of its own (not
    // an impersonation: the token authenticates as it).
    let rules: Role = serde_json::from_value(json!({
        "metadata": {"name": "pod-writer"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "update", "patch"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["create"]},
            {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["create"]},
        ],
    }))
    .unwrap();
    w.ns.api::<Role>()
        .create(&PostParams::default(), &rules)
        .await
        .unwrap();
    w.ns.create_service_account("intruder").await.unwrap();
    let sa_user = format!("system:serviceaccount:{}:intruder", w.ns.name);
    let grant: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "pod-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-writer"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "someone"},
            {"kind": "ServiceAccount", "name": "intruder", "namespace": w.ns.name},
        ],
    }))
    .unwrap();
    w.ns.api::<RoleBinding>()
        .create(&PostParams::default(), &grant)
        .await
        .unwrap();
    let intruders = [
        Intruder {
            user: "someone".into(),
            client: cp.client_as("someone").await.unwrap(),
        },
        Intruder {
            user: sa_user,
            client: w.ns.service_account_client("intruder").await.unwrap(),
        },
    ];

    // A pod outside any group, for marks added from nothing.
    w.kubelet
        .create_ready_pod("plain", &[("app", "bystander")])
        .await
        .unwrap();
    let someone: Api<Pod> = Api::namespaced(intruders[0].client.clone(), &w.ns.name);
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let label_leader = Patch::Merge(json!({"metadata": {"labels": {ROLE_LABEL: ROLE_LEADER}}}));
    let first = enforced("the guard refusing a leader label by someone", || {
        someone.patch("plain", &dry_run, &label_leader)
    })
    .await;
    refused::<()>(Err(first), FORBIDDEN, &role_mark(), "the first refusal");

    // The operator, as the chart's ServiceAccount, elects under the guard.
    let names = w.ordered_ready_pods("member", 2, "guard").await;
    let (mut operator, _) = release_operator(cp, &rel, fullname, &w.ns.name, "guard-op").await;
    operator.wait_role("active").await;
    w.groups
        .create(&PostParams::default(), &group("g", "guard"))
        .await
        .unwrap();
    let first = w
        .wait_settled("g", "a leader at epoch 1", |s| s.epoch == 1)
        .await;
    let (leader, follower) = (names[0].clone(), names[1].clone());
    assert_eq!(first.leader, leader);

    // Pod writes that touch a mark, and the mark each refusal must name.
    let (role, epoch, in_group) = (role_mark(), epoch_mark(), group_mark());
    let label = |value: Value| json!({"metadata": {"labels": {ROLE_LABEL: value}}});
    let annotate = |key: &str, value: Value| json!({"metadata": {"annotations": {key: value}}});
    let touching = [
        // (what, pod, merge patch, mark). Adding a mark to a pod that has none:
        (
            "labels a pod leader",
            "plain",
            label(json!(ROLE_LEADER)),
            &role,
        ),
        (
            "gives a pod an epoch",
            "plain",
            annotate(EPOCH_ANNOTATION, json!("9")),
            &epoch,
        ),
        // changing and removing the operator's marks:
        (
            "demotes the leader",
            leader.as_str(),
            label(json!(ROLE_FOLLOWER)),
            &role,
        ),
        (
            "promotes a follower",
            follower.as_str(),
            label(json!(ROLE_LEADER)),
            &role,
        ),
        (
            "removes the leader's epoch",
            leader.as_str(),
            annotate(EPOCH_ANNOTATION, Value::Null),
            &epoch,
        ),
        (
            "removes a follower's role",
            follower.as_str(),
            label(Value::Null),
            &role,
        ),
        (
            "moves a follower to another group",
            follower.as_str(),
            annotate(GROUP_ANNOTATION, json!("other")),
            &in_group,
        ),
    ];
    let forged = [
        // (what, labels, annotations, mark) of a pod created with a mark.
        (
            "creates a pod labeled leader",
            json!({ROLE_LABEL: ROLE_LEADER}),
            json!({}),
            &role,
        ),
        (
            "creates a pod in a group",
            json!({}),
            json!({GROUP_ANNOTATION: "g"}),
            &in_group,
        ),
    ];
    for (i, intruder) in intruders.iter().enumerate() {
        let who = &intruder.user;
        let pods: Api<Pod> = Api::namespaced(intruder.client.clone(), &w.ns.name);
        for (what, name, patch, mark) in &touching {
            let answer = merge(&pods, name, patch.clone()).await;
            refused(answer, FORBIDDEN, mark, &format!("{who} {what}"));
        }
        for (j, (what, labels, annotations, mark)) in forged.iter().enumerate() {
            let forgery = pod(
                &format!("forged-{i}-{j}"),
                labels.clone(),
                annotations.clone(),
            );
            let answer = pods.create(&PostParams::default(), &forgery).await;
            refused(answer, FORBIDDEN, mark, &format!("{who} {what}"));
        }
        // The same with kubectl, as a user sees it.
        let mut kubectl = cp.kubectl();
        kubectl.args(["--as", who, "-n", &w.ns.name, "label", "pod", "plain"]);
        kubectl.arg(format!("{ROLE_LABEL}={ROLE_LEADER}"));
        let (ok, out, err) = run_tool(kubectl).await;
        assert!(
            !ok && err.contains(&role_mark()),
            "kubectl --as={who} label: the refusal names the mark:\n{out}{err}"
        );

        // Everything else still passes: another label, on a marked pod too (merge patch, and a
        // full replace that carries the marks unchanged), and a pod without marks.
        merge(
            &pods,
            "plain",
            json!({"metadata": {"labels": {"touched-by": format!("intruder-{i}")}}}),
        )
        .await
        .unwrap_or_else(|e| panic!("{who} labels a pod: {e}"));
        let mut marked = pods.get(&leader).await.unwrap();
        marked
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("touched-by".into(), format!("intruder-{i}"));
        pods.replace(&leader, &PostParams::default(), &marked)
            .await
            .unwrap_or_else(|e| panic!("{who} replaces the leader pod, marks unchanged: {e}"));
        let unmarked = format!("unmarked-{i}");
        pods.create(
            &PostParams::default(),
            &pod(&unmarked, json!({"app": "bystander"}), json!({})),
        )
        .await
        .unwrap_or_else(|e| panic!("{who} creates a pod without marks: {e}"));

        // A Binding (what the scheduler posts) adds its own labels and annotations to the pod it
        // binds: refused with a mark, accepted without.
        let bind = |annotations: Value| {
            let body = json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": unmarked, "annotations": annotations},
                "target": {"kind": "Node", "name": NODE_NAME},
            });
            let (pods, unmarked) = (&pods, &unmarked);
            async move {
                pods.create_subresource::<Value, Value>(
                    "binding",
                    unmarked,
                    &PostParams::default(),
                    &body,
                )
                .await
            }
        };
        let answer = bind(json!({EPOCH_ANNOTATION: "9"})).await;
        refused(
            answer,
            FORBIDDEN,
            &epoch,
            &format!("{who} binds a pod with an epoch"),
        );
        bind(json!({}))
            .await
            .unwrap_or_else(|e| panic!("{who} binds a pod: {e}"));
    }

    // Workloads whose pod template carries a mark: refused for anyone, the admin included
    // (`Invalid`: the template is wrong, whoever writes it). A CronJob's template is inside its
    // jobTemplate.
    let someone = intruders[0].client.clone();
    let create = PostParams::default();
    let mut spec = replicated_spec("templated", json!({}), json!({GROUP_ANNOTATION: "g"}));
    spec["serviceName"] = json!("templated");
    let statefulset: StatefulSet =
        serde_json::from_value(json!({"metadata": {"name": "templated"}, "spec": spec})).unwrap();
    let cronjob: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "templated"},
        "spec": {
            "schedule": "0 0 * * *",
            "jobTemplate": {"spec": {"template": template(json!({}), json!({EPOCH_ANNOTATION: "1"}), "Never")}},
        },
    }))
    .unwrap();
    let leader_template = deployment("templated", json!({ROLE_LABEL: ROLE_LEADER}), json!({}));
    let templated = [
        (
            "a Deployment templated with role=leader",
            Api::<Deployment>::namespaced(someone.clone(), &w.ns.name)
                .create(&create, &leader_template)
                .await
                .map(drop),
            &role,
        ),
        (
            "the admin's Deployment templated with role=leader",
            Api::<Deployment>::namespaced(admin.clone(), &w.ns.name)
                .create(&create, &leader_template)
                .await
                .map(drop),
            &role,
        ),
        (
            "a StatefulSet templated with a group annotation",
            Api::<StatefulSet>::namespaced(someone.clone(), &w.ns.name)
                .create(&create, &statefulset)
                .await
                .map(drop),
            &in_group,
        ),
        (
            "a CronJob whose jobTemplate carries an epoch",
            Api::<CronJob>::namespaced(someone.clone(), &w.ns.name)
                .create(&create, &cronjob)
                .await
                .map(drop),
            &epoch,
        ),
    ];
    for (what, answer, mark) in templated {
        refused(answer, INVALID, mark, what);
    }
    Api::<Deployment>::namespaced(someone, &w.ns.name)
        .create(&create, &deployment("plain", json!({}), json!({})))
        .await
        .expect("a Deployment without marks");

    // The kubelet's status updates of marked pods pass (they leave the marks alone), and the
    // operator still hands over: the leader deleted, the follower promoted.
    w.kubelet.set_ready(&follower, true).await.unwrap();
    w.kubelet.set_ready(&leader, true).await.unwrap();
    w.kubelet.delete_now(&leader).await.unwrap();
    let second = w
        .wait_settled("g", "handover at epoch 2", |s| s.epoch == 2)
        .await;
    assert_eq!(second.leader, follower);
    w.wait_event("g", "LeaderDeleted", &follower).await;
    let logs = operator.logs();
    assert!(
        !logs.contains("ValidatingAdmissionPolicy") && !logs.to_lowercase().contains("forbidden"),
        "the guard refused the operator:\n{logs}"
    );
    operator.kill().await;

    release.uninstall().await;
    not_found(
        Api::<ValidatingAdmissionPolicy>::all(admin.clone())
            .get(&guard_name)
            .await,
        "the policy after helm uninstall",
    );
    not_found(
        Api::<ValidatingAdmissionPolicyBinding>::all(admin)
            .get(&guard_name)
            .await,
        "the binding after helm uninstall",
    );
}
