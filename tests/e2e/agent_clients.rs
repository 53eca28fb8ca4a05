//! The book's three clients of the agent (`examples/agent-clients`: shell, Python, Go) in pods on
//! the real cluster, each beside the agent as its native sidecar, the way the book tells a user to
//! run them (image `agent-clients`, `images/build.sh`). One group of the three pods; leadership is
//! moved to each in turn with `spec.preferredLeader`, and each client must print, in its
//! container's log, that it leads at the epoch the group records, then that it follows once
//! leadership has moved on.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{LogParams, Patch, PatchParams};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::{wait_settled, wait_until};
use serde_json::{Value, json};

use crate::agents::{agent_env, member_account};
use crate::cluster::{CONVERGE, Cluster, create, wait_pods_ready};

const GROUP: &str = "clients";
const MEMBER: &str = "member";
const CLIENTS_IMAGE: &str = "localhost/leadergroup/agent-clients:1";

/// The three clients: the pod's name and the client container's command.
const CLIENTS: [(&str, &[&str]); 3] = [
    ("client-shell", &["/bin/sh", "/usr/local/bin/role.sh"]),
    (
        "client-python",
        &["/usr/bin/python3", "/usr/local/bin/role.py"],
    ),
    ("client-go", &["/usr/local/bin/agent-role"]),
];

/// A pod of the group: the agent as a native sidecar, and the client reading its long poll.
fn client_pod(name: &str, command: &[&str]) -> Value {
    let agent_image = format!("leadergroup-agent:{}", env!("CARGO_PKG_VERSION"));
    json!({
        "metadata": {"name": name, "labels": {"app": GROUP}},
        "spec": {
            "serviceAccountName": MEMBER,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
            "initContainers": [{
                "name": "leadergroup-agent",
                "image": agent_image,
                "restartPolicy": "Always",
                "env": agent_env(GROUP),
                "volumeMounts": [{"name": "leadergroup", "mountPath": "/var/run/leadergroup"}],
            }],
            "containers": [{
                "name": "client",
                "image": CLIENTS_IMAGE,
                "command": command,
                "env": [{"name": "LEADERGROUP_AGENT", "value": "http://127.0.0.1:8686"}],
            }],
            "volumes": [{"name": "leadergroup", "emptyDir": {"medium": "Memory"}}],
        },
    })
}

/// The lines the client container of `pod` has printed.
async fn client_lines(pods: &Api<Pod>, pod: &str) -> Vec<String> {
    let params = LogParams {
        container: Some("client".into()),
        ..LogParams::default()
    };
    let log = pods.logs(pod, &params).await.unwrap_or_default();
    log.lines().map(str::to_owned).collect()
}

/// Waits until the client of `pod` has printed `line` (after `after` lines).
async fn wait_line(pods: &Api<Pod>, pod: &str, line: &str, after: usize) -> usize {
    let found = wait_until(&format!("{pod} prints {line:?}"), CONVERGE, || async {
        let lines = client_lines(pods, pod).await;
        Ok::<_, String>(
            lines
                .iter()
                .skip(after)
                .position(|l| l == line)
                .map(|i| after + i + 1),
        )
    })
    .await;
    match found {
        Ok(seen) => seen,
        Err(e) => panic!("{e}; it printed {:?}", client_lines(pods, pod).await),
    }
}

#[tokio::test]
async fn the_shell_python_and_go_clients_follow_their_agent_in_pods() {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let ns = leadergroup_testenv::namespace_in(c.client.clone(), "e2e-agent-clients")
        .await
        .unwrap();
    let _ns_guard = c.namespace_guard(&ns.name);
    member_account(&ns, MEMBER, GROUP, &[]).await;

    let pods: Api<Pod> = ns.api();
    for (name, command) in CLIENTS {
        let _: Pod = create(&ns, client_pod(name, command)).await;
    }
    wait_pods_ready(&pods, CLIENTS.len()).await;
    let groups: Api<LeaderGroup> = ns.api();
    let _: LeaderGroup = create(
        &ns,
        json!({
            "apiVersion": "leadergroup.io/v1alpha1", "kind": "LeaderGroup",
            "metadata": {"name": GROUP},
            "spec": {"selector": {"matchLabels": {"app": GROUP}}},
        }),
    )
    .await;

    // Each client in turn leads (the preferred leader), then follows once the next one leads.
    let started = Instant::now();
    let mut previous: Option<(&str, usize)> = None;
    for (name, _) in CLIENTS {
        groups
            .patch(
                GROUP,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"preferredLeader": name}})),
            )
            .await
            .unwrap();
        let settled = wait_settled(
            &c.client,
            &ns.name,
            GROUP,
            &format!("{name} leads"),
            CONVERGE,
            |s| s.leader == name,
        )
        .await
        .unwrap();
        let leading = format!("role=leader epoch={}", settled.epoch);
        let seen = wait_line(&pods, name, &leading, 0).await;
        if let Some((before, from)) = previous {
            wait_line(&pods, before, "role=follower epoch=", from).await;
        }
        previous = Some((name, seen));
        println!(
            "{name}: {leading} after {:.1} s: {:?}",
            started.elapsed().as_secs_f64(),
            client_lines(&pods, name).await
        );
    }
}
