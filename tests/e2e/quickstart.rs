//! The quickstart (`docs/quickstart.md`) as a user runs it (`page.rs`: every `sh` block whole,
//! every `$ ` line of a `console` block, in order, on the real cluster). The outputs the page
//! shows are checked where they do not depend on the run (the columns of `kubectl get lg`, the
//! Service answering with the leader's name).
//!
//! One substitution, because the cluster has no route out: the page's `busybox:1.36` becomes the
//! busybox image the real cluster's nodes carry (`images/build.sh busybox`). The agent's image is
//! the page's as `images/build.sh agent` names it, and the member's rights come from the kubectl
//! plugin in `target/release/`, which the release build of `make e2e` made. Beyond the commands' success, the test checks
//! the agent's files (one leader) and the fenced write (the leader's landed at its token; after a
//! switchover the new leader's at its own, and the deposed leader's, with the token it held, was
//! refused).

use std::time::Instant;

use leadergroup_testenv::{run_ok, run_tool};

use crate::cluster::{Cluster, RELEASE, RELEASE_NS, repo_root};
use crate::page::{Runner, commands};

/// The page, from the repository's root.
const PAGE: &str = "docs/quickstart.md";
/// The image the page's commands name, and the one the offline nodes have instead.
const PAGE_BUSYBOX: &str = "busybox:1.36";
const LOCAL_BUSYBOX: &str = "localhost/leadergroup/busybox:1.35";
/// The namespace the page creates.
const DEMO_NS: &str = "demo";

#[tokio::test]
async fn the_quickstart_runs_as_written() {
    let c = Cluster::get().await;
    // The page installs the chart itself: start from a cluster without it, as a user does.
    let mut status = c.cp.helm();
    status.args(["status", RELEASE, "--namespace", RELEASE_NS]);
    if run_tool(status).await.0 {
        let mut uninstall = c.cp.helm();
        uninstall.args(["uninstall", RELEASE, "--namespace", RELEASE_NS, "--wait"]);
        run_ok(uninstall).await;
    }
    let _demo = c.namespace_guard(DEMO_NS);

    let page = std::fs::read_to_string(repo_root().join(PAGE)).unwrap();
    let commands = commands(&page);
    assert!(
        commands.len() >= 5,
        "{PAGE}: too few commands found: {commands:?}"
    );
    let runner = Runner {
        page: PAGE,
        replace: vec![(PAGE_BUSYBOX.into(), LOCAL_BUSYBOX.into())],
        env: Vec::new(),
    };
    let started = Instant::now();
    let mut answers = Vec::new();
    for command in &commands {
        let stdout = runner.run(&c, command).await;
        answers.push((command.script.clone(), stdout));
    }
    println!(
        "the quickstart's {} commands: {:.1} s",
        commands.len(),
        started.elapsed().as_secs_f64()
    );

    // What the page shows: the group's columns, and the leader Service answering with a pod's
    // name (the page's web server serves its hostname, the pod's name).
    let get_lg = answers
        .iter()
        .find(|(script, _)| script.starts_with("kubectl get lg"))
        .map(|(_, out)| out.clone())
        .expect("the page runs kubectl get lg");
    let header: Vec<&str> = get_lg
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "LEADER", "EPOCH", "READY", "AGE"],
        "{get_lg}"
    );
    let (_, answer) = answers
        .iter()
        .find(|(s, _)| s.contains("wget"))
        .expect("the page asks the leader Service");
    // wget's progress lines come beside the page (kubectl attaches both streams).
    assert!(
        answer.lines().any(|l| l.starts_with("web-")),
        "the leader Service answered {answer:?}"
    );
    // The agent's files: one leader, the others followers.
    let (_, roles) = answers
        .iter()
        .find(|(s, _)| s.contains("examples/quickstart/agent.yaml"))
        .expect("the page adds the agent");
    let count = |role: &str| {
        roles
            .lines()
            .filter(|l| l.ends_with(&format!(": {role}")))
            .count()
    };
    assert_eq!(count("leader"), 1, "{roles}");
    assert!(count("follower") >= 2, "{roles}");
    // The fenced write: the leader's landed with its token, the deposed one's was refused.
    let (_, fenced) = answers
        .iter()
        .find(|(s, _)| s.contains("fenced-write.sh"))
        .expect("the page fences a write");
    assert!(
        fenced.contains("the deposed leader's write was refused"),
        "{fenced}"
    );
    // The switchover between the two writes, printed by the plugin: "web: OLD -> NEW at epoch N".
    assert!(
        fenced.lines().any(|l| l.starts_with("web: web-")
            && l.contains(" -> web-")
            && l.contains(" at epoch ")),
        "{fenced}"
    );
    let last = fenced.lines().last().unwrap_or_default();
    let (owner, epoch) = last.split_once(" at ").unwrap_or_default();
    assert!(owner.starts_with("web-"), "{fenced}");
    assert!(epoch.parse::<u64>().is_ok_and(|e| e >= 3), "{fenced}");
}
