//! A Heartbeat group whose pods run the leadergroup-agent alone, as the example's sidecar does:
//! the members' ServiceAccount and Role, the pods (each started a second after the one before,
//! so the first is the oldest and leads), and the group. The Lease guard's test and the upgrade
//! test set it up.

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::TestNamespace;
use serde_json::{Value, json};

use crate::cluster::{create, wait_pods_ready_where};

/// The ServiceAccount the agents run as.
pub const MEMBER: &str = "member";
/// The agent image this tree builds (`images/build.sh agent`).
pub const AGENT_IMAGE: &str = "leadergroup-agent:0.2.0";

/// A pod of `group` whose only container is the agent `image`.
pub fn agent_pod(name: &str, group: &str, image: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": group}},
        "spec": {
            "serviceAccountName": MEMBER,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
            "containers": [{
                "name": "agent",
                "image": image,
                "args": ["--dir", "/var/run/leadergroup", "--http-addr", "127.0.0.1:8686"],
                "env": agent_env(group),
                "volumeMounts": [{"name": "run", "mountPath": "/var/run/leadergroup"}],
            }],
            "volumes": [{"name": "run", "emptyDir": {}}],
        },
    })
}

/// The agent's environment: its pod and namespace from the downward API, and its group.
pub fn agent_env(group: &str) -> Value {
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    json!([
        {"name": "POD_NAME", "valueFrom": field("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
        {"name": "LEADERGROUP_GROUP", "value": group},
    ])
}

/// The ServiceAccount `name`, and the Role the agents need on `group`'s Lease and the pods, bound
/// to it and to `also` (more subjects).
pub async fn member_account(ns: &TestNamespace, name: &str, group: &str, also: &[Value]) {
    let _: ServiceAccount = create(ns, json!({"metadata": {"name": name}})).await;
    // Exactly the documented rules (docs/reference/member-role.yaml).
    let rules = leadergroup_testenv::member_rules(group).unwrap();
    let _: Role = create(ns, json!({"metadata": {"name": name}, "rules": rules})).await;
    let mut subjects = vec![json!({"kind": "ServiceAccount", "name": name})];
    subjects.extend_from_slice(also);
    let _: RoleBinding = create(
        ns,
        json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        }),
    )
    .await;
}

/// The account, the pods `names` running the agent `image` (the first the oldest), Ready, and
/// the Heartbeat group with a Lease of `lease_seconds`.
pub async fn heartbeat_group(
    ns: &TestNamespace,
    group: &str,
    names: &[&str],
    image: &str,
    lease_seconds: i32,
    also: &[Value],
) {
    member_account(ns, MEMBER, group, also).await;
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            // creationTimestamp has a resolution of a second: the order of the pods is theirs.
            tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        }
        let _: Pod = create(ns, agent_pod(name, group, image)).await;
    }
    let pods: Api<Pod> = ns.api();
    wait_pods_ready_where(&pods, names.len(), "the agent pods Ready", |p| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str)
            == Some(group)
    })
    .await;
    let _: LeaderGroup = create(
        ns,
        json!({
            "apiVersion": "leadergroup.io/v1alpha1", "kind": "LeaderGroup",
            "metadata": {"name": group},
            "spec": {"selector": {"matchLabels": {"app": group}}, "liveness": "Heartbeat",
                     "leaseDurationSeconds": lease_seconds},
        }),
    )
    .await;
}
