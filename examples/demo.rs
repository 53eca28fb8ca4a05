//! `make demo`: the operator on the local control plane, end to end, as a user would see it.
//!
//! Installs the CRD, starts the operator (left running afterwards, so the cluster can be explored),
//! creates a LeaderGroup with three pods reported Ready by a simulated kubelet, shows
//! `kubectl get leadergroups` and the pods' roles, then deletes the leader several times and
//! measures each handover: from the DELETE request to the moment a watch shows the new leader's
//! label.
//!
//! Then the GC-pause scenario (the same code as the test `tests/it/gc_pause.rs`): three ledger
//! writers as local processes, the leader frozen with SIGSTOP, leadership moved, the old writer
//! thawed and writing with its old epoch, and PostgreSQL refusing it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, CustomResourceExt, ResourceExt};
use leadergroup_operator::crd::{LeaderGroup, LeaderGroupSpec, PodSelector, ROLE_LABEL};
use leadergroup_testenv::gc_pause;
use leadergroup_testenv::pods::{epoch, is_leader};
use leadergroup_testenv::{
    Kubelet, OperatorLaunch, OperatorProcess, control_plane, install_crd, namespace,
    wait_for_object, wait_until,
};

const HANDOVERS: usize = 7;
const TIMEOUT: Duration = Duration::from_secs(30);

fn step(text: &str) {
    println!("\n==> {text}");
}

#[tokio::main]
async fn main() {
    let cp = control_plane()
        .await
        .expect("control plane (run `make light-cluster-up`)");
    let kubectl = |args: &[&str]| {
        let out = cp.kubectl().args(args).output().expect("kubectl");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    };

    step("installing the LeaderGroup CRD (crds/leadergroup.yaml)");
    let client = cp.client().await.unwrap();
    install_crd(&client, &LeaderGroup::crd()).await.unwrap();

    let ns = namespace("demo").await.unwrap();
    step(&format!(
        "namespace {} with three pods (app=payments), reported Running and Ready by a simulated kubelet",
        ns.name
    ));
    let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
    for i in 0..3 {
        kubelet
            .create_ready_pod(&format!("payments-{i}"), &[("app", "payments")])
            .await
            .unwrap();
    }

    step("starting the operator (watching that namespace; log in .cluster/demo-operator.log)");
    // Left running on purpose when the demo exits (`make light-cluster-down` stops it).
    let launch = OperatorLaunch::new(
        "target/debug/leadergroup-operator",
        cp.kubeconfig_path(),
        Some(&ns.name),
        "demo-operator",
        ".cluster/demo-operator.log",
    )
    .keep_running();
    let operator = OperatorProcess::start(&launch)
        .await
        .expect("start target/debug/leadergroup-operator (built by make demo)");
    let pid = operator.pid().expect("the operator runs");
    std::fs::write(".cluster/demo-operator.pid", pid.to_string()).unwrap();
    println!(
        "operator pid {pid} (metrics: curl http://{}/metrics)",
        operator.http
    );

    step("kubectl apply: LeaderGroup payments");
    let groups: Api<LeaderGroup> = Api::namespaced(ns.client.clone(), &ns.name);
    let group = LeaderGroup::new(
        "payments",
        LeaderGroupSpec {
            selector: PodSelector {
                match_labels: [("app".into(), "payments".into())].into(),
                ..Default::default()
            },
            lease_duration_seconds: 15,
            preferred_leader: None,
            paused: false,
            liveness: Default::default(),
            service: None,
            history_limit: leadergroup_operator::crd::DEFAULT_HISTORY_LIMIT,
        },
    );
    groups.create(&PostParams::default(), &group).await.unwrap();
    current_leader(&groups).await;
    step("kubectl get leadergroups -o wide");
    kubectl(&["-n", &ns.name, "get", "leadergroups", "-o", "wide"]);
    step(&format!("kubectl get pods -L {ROLE_LABEL}"));
    kubectl(&["-n", &ns.name, "get", "pods", "-L", ROLE_LABEL]);

    step(&format!(
        "deleting the leader {HANDOVERS} times; each time a new pod joins so three remain"
    ));
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let mut times = Vec::new();
    for round in 0..HANDOVERS {
        let leader = current_leader(&groups).await;
        let mut events = watcher(pods.clone(), watcher::Config::default())
            .applied_objects()
            .boxed();
        // The watch is live once it has delivered the current pods.
        let _ = events.try_next().await;
        let started = Instant::now();
        kubelet.begin_termination(&leader).await.unwrap();
        let new_leader = loop {
            let pod = tokio::time::timeout(TIMEOUT, events.try_next())
                .await
                .expect("handover within 30 s")
                .unwrap()
                .unwrap();
            if pod.name_any() != leader && is_leader(&pod) {
                break pod;
            }
        };
        let took = started.elapsed();
        times.push(took);
        let epoch = epoch(&new_leader).map_or_else(String::new, |e| e.to_string());
        println!(
            "  handover {}: {leader} deleted -> {} leads at epoch {epoch} after {:.1} ms",
            round + 1,
            new_leader.name_any(),
            took.as_secs_f64() * 1000.0
        );
        // The kubelet finishes the old pod's termination; a replacement joins as a follower.
        kubelet.finish_termination(&leader).await.unwrap();
        kubelet
            .create_ready_pod(&format!("payments-{}", round + 3), &[("app", "payments")])
            .await
            .unwrap();
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "  median handover {:.1} ms over {} deletions (min {:.1} ms, max {:.1} ms), measured from the DELETE request to the new leader's label seen by a watch",
        median.as_secs_f64() * 1000.0,
        times.len(),
        times[0].as_secs_f64() * 1000.0,
        times[times.len() - 1].as_secs_f64() * 1000.0
    );

    wait_until("roles settle", TIMEOUT, || async {
        let list = pods.list(&Default::default()).await?;
        let settled = list
            .items
            .iter()
            .all(|p| p.labels().contains_key(ROLE_LABEL));
        Ok::<_, kube::Error>(settled.then_some(()))
    })
    .await
    .unwrap();
    step("kubectl get leadergroups -o wide");
    kubectl(&["-n", &ns.name, "get", "leadergroups", "-o", "wide"]);
    step(&format!("kubectl get pods -L {ROLE_LABEL}"));
    kubectl(&["-n", &ns.name, "get", "pods", "-L", ROLE_LABEL]);
    step("kubectl describe leadergroup payments (events)");
    let out = cp
        .kubectl()
        .args(["-n", &ns.name, "describe", "leadergroup", "payments"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if let Some(i) = text.find("Events:") {
        print!("{}", &text[i..]);
    }

    gc_pause_demo(cp).await;

    println!("\nThe cluster and the operator are still running. Look around:");
    println!("  export KUBECONFIG={}", cp.kubeconfig_path().display());
    println!(
        "  kubectl -n {} get lg -w      # then, in another shell:",
        ns.name
    );
    println!(
        "  kubectl -n {} delete pod <the leader> --wait=false",
        ns.name
    );
    println!(
        "  (the simulated kubelet is gone, so a deleted pod stays Terminating: finish with --grace-period=0 --force)"
    );
    println!("Stop everything with: make light-cluster-down");
}

async fn current_leader(groups: &Api<LeaderGroup>) -> String {
    let g = wait_for_object(
        groups,
        "payments",
        "a leader",
        TIMEOUT,
        |g: Option<&LeaderGroup>| {
            g.and_then(|g| g.status.as_ref())
                .is_some_and(|s| s.leader.is_some())
        },
    )
    .await
    .unwrap()
    .unwrap();
    g.status.unwrap().leader.unwrap()
}

/// Part two: the GC pause, told as it happens, then the ledger as PostgreSQL holds it.
async fn gc_pause_demo(cp: &leadergroup_testenv::ControlPlane) {
    step("the GC pause: a frozen leader wakes up and writes with its old epoch");
    let ns = namespace("gc-pause").await.unwrap();
    let started = Instant::now();
    let narrate = move |line: &str| {
        println!("  [{:>5.2} s] {line}", started.elapsed().as_secs_f64());
    };
    let setup = gc_pause::Setup {
        kubeconfig: cp.kubeconfig_path(),
        ns: &ns,
        operator_bin: "target/debug/leadergroup-operator".into(),
        ledger_bin: "target/debug/examples/ledger".into(),
        log_dir: ".cluster/gc-pause".into(),
        narrate: &narrate,
    };
    let (scenario, report) = match gc_pause::Scenario::run(&setup).await {
        Ok(done) => done,
        Err(e) => panic!("the GC-pause scenario failed: {e} (logs in .cluster/gc-pause/)"),
    };
    drop(scenario); // every writer, the scenario's operator and PostgreSQL stop here

    step("the ledger table, in commit order (id)");
    let mut runs: Vec<(i64, i64, i64, String)> = Vec::new();
    for row in &report.rows {
        match runs.last_mut() {
            Some(run) if run.2 == row.epoch && run.3 == row.writer => run.1 = row.id,
            _ => runs.push((row.id, row.id, row.epoch, row.writer.clone())),
        }
    }
    for (first, last, epoch, writer) in &runs {
        println!("  ids {first:>3}..{last:<3} epoch {epoch}  written by {writer}");
    }
    for r in &report.refusals {
        println!(
            "  refused: {} at epoch {} < fence {} (rolled back, not in the table)",
            r.writer, r.presented, r.fence
        );
    }
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    println!(
        "  timings: frozen {}; freeze -> new leader's first write {}; thaw -> refusal {}; thaw -> old writer learns it lost {}",
        ms(report.frozen_for),
        ms(report.freeze_to_new_write),
        ms(report.thaw_to_refusal),
        report.thaw_to_stopped.map_or("(not seen)".to_owned(), ms)
    );
    let violations = report.violations();
    if violations.is_empty() {
        println!(
            "  checked: accepted epochs never decrease in commit order; {} stale write(s) refused; {} write(s) accepted",
            report.refusals.len(),
            report.rows.len()
        );
    } else {
        panic!(
            "the GC-pause scenario broke its guarantee:\n{}",
            violations.join("\n")
        );
    }
}
