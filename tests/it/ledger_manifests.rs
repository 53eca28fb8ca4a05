//! The ledger example's manifests (`examples/ledger/manifests/`), as a user copies them, are
//! accepted by the API server: `kubectl apply --dry-run=server` runs admission and validation
//! (the Deployment's native sidecar, the RBAC, the LeaderGroup against the CRD's schema) without
//! creating anything.

use std::path::{Path, PathBuf};

use crate::common::{World, run_ok, run_tool};

fn manifests(copy: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/ledger/manifests")
        .join(copy)
}

/// `kind/name` of every object `kubectl apply --dry-run=server` reported as created.
async fn dry_run(ns: &str, dir: &Path) -> Vec<String> {
    let cp = leadergroup_testenv::control_plane().await.unwrap();
    let mut cmd = cp.kubectl();
    cmd.args(["apply", "--dry-run=server", "-n", ns, "-f"])
        .arg(dir);
    let out = run_ok(cmd).await;
    let mut created: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_suffix(" created (server dry run)"))
        .map(str::to_owned)
        .collect();
    created.sort();
    assert_eq!(created.len(), out.lines().count(), "{out}");
    created
}

#[tokio::test]
async fn the_sidecar_copy_is_accepted_by_the_api_server() {
    let w = World::new("ledger-manifests").await;
    assert_eq!(
        dry_run(&w.ns.name, &manifests("sidecar")).await,
        [
            "deployment.apps/ledger",
            "leadergroup.leadergroup.io/ledger",
            "role.rbac.authorization.k8s.io/ledger-leadergroup-member",
            "rolebinding.rbac.authorization.k8s.io/ledger-leadergroup-member",
            "service/ledger-leader",
            "serviceaccount/ledger",
        ]
    );
}

#[tokio::test]
async fn the_downward_api_copy_is_accepted_and_needs_no_rbac() {
    let w = World::new("ledger-downward").await;
    let dir = manifests("downward-api");
    assert_eq!(
        dry_run(&w.ns.name, &dir).await,
        [
            "deployment.apps/ledger",
            "leadergroup.leadergroup.io/ledger",
            "service/ledger-leader",
        ]
    );
    // No API access at all: no token in the pod.
    let deployment = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    assert!(deployment.contains("automountServiceAccountToken: false"));
    assert!(!deployment.contains("serviceAccountName"));
}

/// The check above can fail: a manifest the schema refuses is reported, not created.
#[tokio::test]
async fn a_broken_manifest_is_refused_by_the_dry_run() {
    let w = World::new("ledger-broken").await;
    let cp = leadergroup_testenv::control_plane().await.unwrap();
    let broken = std::fs::read_to_string(manifests("sidecar").join("leadergroup.yaml"))
        .unwrap()
        .replace("leaseDurationSeconds: 15", "leaseDurationSeconds: -1");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-lg.yaml", w.ns.name));
    std::fs::write(&file, broken).unwrap();
    let mut cmd = cp.kubectl();
    cmd.args(["apply", "--dry-run=server", "-n", &w.ns.name, "-f"])
        .arg(&file);
    let (ok, stdout, stderr) = run_tool(cmd).await;
    assert!(!ok, "a negative lease duration was accepted:\n{stdout}");
    assert!(stderr.contains("leaseDurationSeconds"), "{stderr}");
}
