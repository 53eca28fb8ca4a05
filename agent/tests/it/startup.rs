//! Starting outside a pod, and with an API server it cannot reach.

use std::time::Duration;

use tokio::net::TcpListener;

use crate::common::{Agent, scratch};

#[tokio::test]
async fn without_pod_name_it_exits_naming_the_variable_and_the_flag() {
    let dir = scratch(&format!("no-pod-name-{}", std::process::id()));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_leadergroup-agent"))
        .arg("--dir")
        .arg(&dir)
        .args(["--http-addr", "127.0.0.1:0"])
        .env_remove("POD_NAME")
        .env("POD_NAMESPACE", "default")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("environment variable POD_NAME is not set")
            && stderr.contains("--pod-name")
            && stderr.contains("metadata.name"),
        "{stderr}"
    );
    // It stopped before publishing anything.
    assert!(!dir.exists());
}

#[tokio::test]
async fn with_the_api_server_out_of_reach_it_publishes_unknown() {
    // A kubeconfig naming a port where nothing answers (bound, then released).
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kubeconfig =
        scratch(&format!("unreachable-{}", std::process::id())).with_extension("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let agent = Agent::start(&kubeconfig, "default", "app-0", &[]).await;
    // Longer than the default Lease's two thirds would need to confirm anything.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        (agent.file("role"), agent.file("epoch")),
        ("unknown".to_owned(), String::new())
    );
    let role = agent.role().await;
    assert_eq!(role["role"], "unknown", "{}", agent.logs());
    assert_eq!(role["epoch"], serde_json::Value::Null);
    let (status, _, _) = agent.get("/healthz").await;
    assert_eq!(status, 200, "healthz is about the process, not the role");
}
