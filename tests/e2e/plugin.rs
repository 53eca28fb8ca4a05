//! `kubectl leadergroup` on the real cluster, as an operator team uses it before a node's
//! maintenance: `status` of the example app's group, a `switchover` to the pod on the other node,
//! timed by the plugin and then through the leader Service (the moved label reaches kube-proxy),
//! and the `history`. Prints the transcript.

use std::time::Instant;

use leadergroup_testenv::run_ok;

use crate::cluster::{APP, Scene, node_of};

/// The plugin, as kubectl runs it, in the app's namespace on this cluster.
fn plugin(s: &Scene, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-leadergroup"));
    cmd.args(["--namespace", &s.app.ns.name])
        .args(args)
        .env("KUBECONFIG", s.c.cp.kubeconfig_path());
    cmd
}

#[tokio::test]
async fn status_then_a_switchover_off_the_leaders_node_then_the_history() {
    let s = Scene::start("plugin", 0).await;
    let first = &s.first;
    let status = run_ok(plugin(&s, &["status", APP])).await;
    println!("$ kubectl leadergroup status {APP}\n{status}");
    assert!(
        status.contains(&format!(
            "leader:      {}, epoch {}",
            first.leader, first.epoch
        )) && status.contains("3/3 ready"),
        "{status}"
    );

    // The maintenance case: move the leader to a pod on another node.
    let pods = s.app.list().await;
    let leader_node = node_of(&s.app.pod(&first.leader).await).to_string();
    let target = pods
        .iter()
        .find(|p| node_of(p) != leader_node)
        .map(kube::ResourceExt::name_any)
        .expect("a pod on the other node");
    let asked = Instant::now();
    let out = run_ok(plugin(&s, &["switchover", APP, &target])).await;
    let answered = s.app.first_answer_from(&target).await;
    println!("$ kubectl leadergroup switchover {APP} {target}\n{out}");
    println!(
        "switchover -> {target} answering through the leader Service: {:.0} ms",
        (answered - asked).as_secs_f64() * 1000.0
    );
    assert!(
        out.starts_with(&format!(
            "{APP}: {} -> {target} at epoch {} in ",
            first.leader,
            first.epoch + 1
        )),
        "{out}"
    );
    let moved = s
        .app
        .wait_handover(first, &["Preferred"], crate::cluster::CONVERGE)
        .await;
    assert_eq!(moved.leader, target);
    let spec = s.app.groups.get(APP).await.unwrap().spec;
    assert_eq!(spec.preferred_leader, None, "the preference is removed");

    let history = run_ok(plugin(&s, &["history", APP])).await;
    println!("$ kubectl leadergroup history {APP}\n{history}");
    let newest = history.lines().nth(1).unwrap_or_default();
    assert!(
        newest.contains(&target) && newest.contains("Preferred"),
        "{history}"
    );
    s.finish().await;
}
