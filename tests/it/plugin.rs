//! `kubectl leadergroup` (the plugin binary) against the light cluster with the operator running:
//! `status` as text and JSON, a `switchover` to a named pod and to the next in the succession with
//! its time, the refusal of a pod that cannot lead (it names the reason), `pause` and `resume`,
//! the history, and each pod's eligibility; `report`'s sections; `status -A`; kubectl's
//! completion through `kubectl_complete-leadergroup`; `member-rbac`'s manifests applied and what
//! they grant.

use std::process::Output;

use kube::api::PostParams;
use leadergroup_testenv::control_plane;

use crate::common::{Operator, World, group, run_tool};

/// Runs the plugin in namespace `ns` with the light cluster's kubeconfig.
async fn plugin(ns: &str, args: &[&str]) -> Output {
    let cp = control_plane().await.unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-leadergroup"))
        .args(["--namespace", ns])
        .args(args)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .output()
        .await
        .expect("run kubectl-leadergroup")
}

/// The plugin's stdout; panics with its stderr unless it succeeded.
async fn plugin_ok(ns: &str, args: &[&str]) -> String {
    let out = plugin(ns, args).await;
    assert!(
        out.status.success(),
        "kubectl leadergroup {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn status_switchover_pause_and_resume() {
    let cp = control_plane().await.unwrap();
    let w = World::new("plugin").await;
    let pods = w.ordered_ready_pods("app", 3, "pay").await;
    let operator = Operator::start(cp, &w.ns.name, "op-plugin", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    w.wait_settled("pay", "a leader at epoch 1", |s| s.epoch == 1)
        .await;
    w.wait_status("pay", "3/3 ready", |s| s.ready.as_deref() == Some("3/3"))
        .await;
    let ns = w.ns.name.as_str();

    let text = plugin_ok(ns, &["status", "pay"]).await;
    assert!(
        text.contains(&format!("leader:      {}, epoch 1", pods[0]))
            && text.contains("3/3 ready")
            && text.contains(&format!("held by {}", pods[0])),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&plugin_ok(ns, &["status", "-o", "json"]).await).unwrap();
    assert_eq!(json[0]["leader"], pods[0].as_str(), "{json}");
    assert_eq!(json[0]["lease"]["holder"], pods[0].as_str(), "{json}");

    // To a named pod: it leads at the next epoch, and the preference is gone again.
    let out = plugin_ok(ns, &["switchover", "pay", &pods[2]]).await;
    println!("{}", out.trim());
    assert!(
        out.starts_with(&format!("pay: {} -> {} at epoch 2 in ", pods[0], pods[2])),
        "{out}\n{}",
        operator.logs()
    );
    let settled = w
        .wait_settled("pay", "the switchover's leader", |s| s.epoch == 2)
        .await;
    assert_eq!(settled.leader, pods[2]);
    let spec = w.groups.get("pay").await.unwrap().spec;
    assert_eq!(spec.preferred_leader, None, "the preference is removed");

    // A pod that cannot lead is refused, and the reason named.
    w.kubelet.set_ready(&pods[1], false).await.unwrap();
    w.wait_status("pay", "2/3 ready", |s| s.ready.as_deref() == Some("2/3"))
        .await;
    let refused = plugin(ns, &["switchover", "pay", &pods[1]]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains(&format!(
            "pod {} cannot lead LeaderGroup pay in namespace {ns}: it is not Running and Ready",
            pods[1]
        )),
        "{stderr}"
    );
    let missing = plugin(ns, &["status", "nosuch"]).await;
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains(&format!("no LeaderGroup nosuch in namespace {ns}")),
        "{missing:?}"
    );

    // To the next in the succession (the only other eligible pod).
    let out = plugin_ok(ns, &["switchover", "pay"]).await;
    assert!(
        out.starts_with(&format!("pay: {} -> {} at epoch 3 in ", pods[2], pods[0])),
        "{out}"
    );

    // Paused: a switchover is refused; resumed: it works again.
    plugin_ok(ns, &["pause", "pay"]).await;
    assert!(w.groups.get("pay").await.unwrap().spec.paused);
    let paused = plugin(ns, &["switchover", "pay", &pods[2]]).await;
    assert!(
        String::from_utf8_lossy(&paused.stderr).contains("is paused"),
        "{paused:?}"
    );
    plugin_ok(ns, &["resume", "pay"]).await;
    assert!(!w.groups.get("pay").await.unwrap().spec.paused);
    plugin_ok(ns, &["switchover", "pay", &pods[2]]).await;
    w.wait_settled("pay", "led by the last switchover's pod", |s| {
        s.epoch == 4 && s.leader == pods[2]
    })
    .await;

    // The history, newest first, and why the NotReady pod is not eligible.
    w.wait_status("pay", "four changes in the history", |s| {
        s.history.len() == 4
    })
    .await;
    let history = plugin_ok(ns, &["history", "pay"]).await;
    println!("{}", history.trim());
    let epochs: Vec<&str> = history
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(epochs, ["4", "3", "2", "1"], "{history}");
    assert!(
        history.lines().nth(1).unwrap().contains("Preferred"),
        "{history}"
    );
    let text = plugin_ok(ns, &["status", "pay"]).await;
    assert!(
        text.contains(&format!("pod:         {} NotReady", pods[1])),
        "{text}"
    );

    // What a bug report needs, in one document: the group, its Lease, each pod's marks, the
    // Events, and the operator's sections (it runs as a process here, not as a pod: they say
    // where they looked).
    let report = plugin_ok(ns, &["report", "pay", "--operator-namespace", ns]).await;
    for section in [
        "# LeaderGroup pay in namespace",
        "## The group",
        "## Its Lease",
        "## Its pods: phase, readiness and the operator's marks",
        "## Events of the group and its pods",
        "## The operator's Lease",
        "## The operator's log",
    ] {
        assert!(report.contains(section), "{section}:\n{report}");
    }
    assert!(
        report.contains(&format!("holderIdentity: {}", pods[2])),
        "{report}"
    );
    let leader_line = report
        .lines()
        .find(|l| l.starts_with(&pods[2]))
        .unwrap_or_default();
    assert!(
        leader_line.contains(" leader ") && leader_line.trim_end().ends_with(" 4"),
        "{report}"
    );
    assert!(report.contains("LeaderGroup/pay Initial"), "{report}");
    assert!(report.contains("no operator pod in namespace"), "{report}");
}

/// `status -A`: the groups of every namespace, each with its own namespace and Lease.
#[tokio::test]
async fn status_of_every_namespace() {
    let a = World::new("plugin-all-a").await;
    let b = World::new("plugin-all-b").await;
    for w in [&a, &b] {
        w.groups
            .create(&PostParams::default(), &group("pay", "pay"))
            .await
            .unwrap();
    }
    let json: serde_json::Value =
        serde_json::from_str(&plugin_ok(&a.ns.name, &["status", "-A", "-o", "json"]).await)
            .unwrap();
    let listed: Vec<(String, String)> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["namespace"].as_str().unwrap().to_owned(),
                g["group"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for w in [&a, &b] {
        assert!(
            listed.contains(&(w.ns.name.clone(), "pay".to_owned())),
            "{} missing from {listed:?}",
            w.ns.name
        );
    }
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "by namespace, then name");
    let refused = plugin(&a.ns.name, &["status", "pay", "-A"]).await;
    assert!(!refused.status.success(), "a group and -A together");
}

/// kubectl's completion of `kubectl leadergroup ...` asks `kubectl_complete-leadergroup` (here a
/// link to the plugin): the subcommands, then the namespace's group names from the cluster.
#[tokio::test]
async fn completes_subcommands_and_group_names_for_kubectl() {
    let cp = control_plane().await.unwrap();
    let w = World::new("plugin-complete").await;
    for name in ["pay", "payroll", "web"] {
        w.groups
            .create(&PostParams::default(), &group(name, name))
            .await
            .unwrap();
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(&w.ns.name);
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kubectl_complete-leadergroup");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kubectl-leadergroup"), &link).unwrap();
    let complete = |words: Vec<String>| {
        let link = link.clone();
        async move {
            let out = tokio::process::Command::new(&link)
                .args(&words)
                .env("KUBECONFIG", cp.kubeconfig_path())
                .output()
                .await
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        }
    };
    assert_eq!(complete(vec!["sw".into()]).await, "switchover\n:4\n");
    let groups = complete(vec![
        "-n".into(),
        w.ns.name.clone(),
        "status".into(),
        "pa".into(),
    ])
    .await;
    assert_eq!(groups, "pay\npayroll\n:4\n");
    // The script for a shell run on its own.
    let script = plugin_ok(&w.ns.name, &["completion", "bash"]).await;
    assert!(script.contains("kubectl-leadergroup"), "{script}");
}

/// kubectl's connection flags: `--kubeconfig` and `--context` are the plugin's too, whatever
/// `$KUBECONFIG` says; a context the file lacks is refused, naming it.
#[tokio::test]
async fn the_plugin_takes_kubectls_kubeconfig_and_context_flags() {
    let cp = control_plane().await.unwrap();
    let w = World::new("plugin-flags").await;
    w.ordered_ready_pods("app", 1, "pay").await;
    let _operator = Operator::start(cp, &w.ns.name, "op-plugin-flags", &[]).await;
    w.groups
        .create(&PostParams::default(), &group("pay", "pay"))
        .await
        .unwrap();
    w.wait_settled("pay", "a leader at epoch 1", |s| s.epoch == 1)
        .await;
    let path = cp.kubeconfig_path();
    let context = kube::config::Kubeconfig::read_from(path)
        .unwrap()
        .current_context
        .expect("the light cluster's kubeconfig names its context");
    let run = |context: String| {
        let ns = w.ns.name.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-leadergroup"))
                .args(["-n", &ns, "status", "pay"])
                .arg("--kubeconfig")
                .arg(path)
                .args(["--context", &context])
                // Only the flags can lead it to the cluster.
                .env("KUBECONFIG", "/nonexistent/kubeconfig")
                .output()
                .await
                .expect("run kubectl-leadergroup")
        }
    };
    let out = run(context).await;
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("epoch 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run("no-such-context".into()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("no-such-context"),
        "{stderr}"
    );
}

/// `member-rbac`: what it prints applies with kubectl as it is, and grants the group's member
/// exactly a member's rights (docs/reference/member-role.yaml): its namespace's pods to read, the
/// group's Lease to read and update, and no other Lease nor anything else.
#[tokio::test]
async fn member_rbac_prints_what_a_member_needs_and_nothing_more() {
    let cp = control_plane().await.unwrap();
    let w = World::new("plugin-member").await;
    let ns = w.ns.name.as_str();
    let manifests = plugin_ok(ns, &["member-rbac", "web", "--service-account", "web"]).await;
    let mut apply = cp.kubectl();
    apply
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = apply.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), manifests.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply of\n{manifests}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member = format!("system:serviceaccount:{ns}:web");
    let can = |verb: &'static str, what: &'static str| {
        let mut check = cp.kubectl();
        check.args(["auth", "can-i", verb, what, "-n", ns, "--as", &member]);
        async move { run_tool(check).await.1.trim() == "yes" }
    };
    for verb in ["get", "watch", "update"] {
        assert!(
            can(verb, "leases/leadergroup-web").await,
            "{verb} the group's Lease"
        );
    }
    for verb in ["get", "watch"] {
        assert!(can(verb, "pods/web-0").await, "{verb} a pod");
    }
    for (verb, what) in [
        ("update", "leases/leadergroup-other"),
        ("get", "leases/someone-else"),
        ("create", "leases"),
        ("delete", "leases/leadergroup-web"),
        ("patch", "pods/web-0"),
        ("list", "secrets"),
        ("get", "leadergroups.leadergroup.io/web"),
    ] {
        assert!(!can(verb, what).await, "{verb} {what} is not a member's");
    }
    // Without the ServiceAccount, for one managed elsewhere: the Role and its binding alone.
    let bare = plugin_ok(
        ns,
        &[
            "member-rbac",
            "web",
            "--service-account",
            "web",
            "--no-service-account",
        ],
    )
    .await;
    assert!(
        !bare.contains("\nkind: ServiceAccount\n") && bare.contains("\nkind: RoleBinding\n"),
        "{bare}"
    );
}
