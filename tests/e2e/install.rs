//! The install page (the chart README's install section, which `docs/install.md` includes) as a
//! user runs it (`page.rs`: every `sh` block whole, every `$ ` line of a `console` block, in
//! order, on the real cluster): the images built with `images/build.sh`, loaded into each node's
//! containerd with `ctr` (step 2a), the chart installed with its default image, which the nodes
//! then run without a pull, a LeaderGroup applied and read, the admission guard's refusals
//! compared with the page's text (`...` where they vary); then each alternative, instead of that
//! release: the images pushed with `skopeo` into a registry and the chart installed from it (step
//! 2b), and one release per namespace instead of the cluster-wide one.
//!
//! What the page leaves to the user and the test provides: a registry (Debian's docker-registry,
//! on loopback without TLS, which the nodes' containerd pulls from over HTTP as it does for any
//! loopback registry; skopeo gets `--dest-tls-verify=false`, as the page says for such a
//! registry) in place of `registry.example.com`; each node's containerd socket for `ctr`
//! (`CONTAINERD_ADDRESS`); and the application the group selects, a StatefulSet `my-app` of two
//! pods in `default`.

use std::process::Stdio;
use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::{Undo, free_port, run_ok, wait_until};
use serde_json::json;

use crate::cluster::{CONVERGE, Cluster, PODS, RELEASE, RELEASE_NS, repo_root};
use crate::page::{Command, Runner, commands, shows};

/// The page, from the repository's root.
const PAGE: &str = "charts/leadergroup-operator/README.md";
/// Where the book's install page starts and ends in it.
const START: &str = "<!-- ANCHOR: install";
const END: &str = "<!-- ANCHOR_END: install";
/// The sections that install instead of the cluster-wide release of the nodes' images, each run
/// after the release before it is gone: from a registry, and one release per namespace.
const FROM_REGISTRY: &str = "### 2b.";
const PER_NAMESPACE: &str = "### Only one namespace";
/// The registry the page names, and the namespaces its per-namespace releases use.
const PAGE_REGISTRY: &str = "registry.example.com";
const TEAMS: [&str; 2] = ["team-a", "team-b"];
/// The application the page's group selects, and its namespace.
const APP: &str = "my-app";
const APP_NS: &str = "default";
const LOCAL_BUSYBOX: &str = "localhost/leadergroup/busybox:1.35";
/// The LeaderGroup CRD, which the per-namespace block applies with kubectl.
const CRD: &str = "leadergroups.leadergroup.io";

/// A registry on loopback (Debian's docker-registry, distribution 2.8), stopped by its PID and
/// its folder removed when dropped.
struct Registry {
    child: std::process::Child,
    dir: std::path::PathBuf,
    addr: std::net::SocketAddr,
}

impl Registry {
    async fn start() -> Registry {
        let dir = repo_root()
            .join("target")
            .join(format!("e2e-registry-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let addr = free_port().unwrap();
        // JSON is YAML: the registry reads this file as its configuration.
        let config = json!({
            "version": 0.1,
            // info: the access log, which shows the nodes' pulls.
            "log": {"level": "info"},
            "storage": {"filesystem": {"rootdirectory": dir.join("data")}},
            "http": {"addr": addr.to_string()},
        });
        std::fs::write(dir.join("config.yml"), config.to_string()).unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = std::process::Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting docker-registry (controlplane/node-deps.sh installs it): {e}")
            });
        let registry = Registry { child, dir, addr };
        let up = wait_until("the registry answering /v2/", CONVERGE, || async {
            Ok::<_, String>(
                leadergroup_testenv::http_get(registry.addr, "/v2/")
                    .await
                    .filter(|(code, _)| *code == 200)
                    .map(|_| ()),
            )
        })
        .await;
        if let Err(e) = up {
            panic!("{e}\n{}", registry.log());
        }
        registry
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The 1-based line of the first line of `text` that starts with `prefix`.
fn line_of(text: &str, prefix: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("{PAGE}: no line starts with {prefix:?}"))
        + 1
}

/// The lines of the section whose heading starts with `heading`, up to the next heading of its
/// level or above (or `end`).
fn section(text: &str, heading: &str, end: usize) -> std::ops::Range<usize> {
    let start = line_of(text, heading);
    let next = text
        .lines()
        .enumerate()
        .skip(start)
        .find(|(_, l)| l.starts_with("## ") || l.starts_with("### "))
        .map_or(end, |(i, _)| i + 1);
    start..next.min(end)
}

/// The images in the pod specs of the running (not terminating) operator pods, and their pull
/// policies.
async fn operator_images(c: &Cluster) -> Vec<(String, String)> {
    let operators: Vec<Pod> = c
        .operator_pods()
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert!(!operators.is_empty());
    operators
        .iter()
        .flat_map(|p| p.spec.iter().flat_map(|s| &s.containers))
        .map(|c| {
            (
                c.image.clone().unwrap_or_default(),
                c.image_pull_policy.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until the page's group is led by one of the page's application pods; returns it.
async fn led(c: &Cluster) -> String {
    let groups = Api::<LeaderGroup>::namespaced(c.client.clone(), APP_NS);
    wait_until("the page's group led", CONVERGE, || async {
        Ok::<_, kube::Error>(
            groups
                .get(APP)
                .await?
                .status
                .and_then(|s| s.leader)
                .filter(|l| l.starts_with(APP)),
        )
    })
    .await
    .unwrap()
}

/// `helm uninstall` of a release the test or the page installed, waiting for its objects to go.
fn uninstall(c: &Cluster, release: &str, ns: &str) -> std::process::Command {
    let mut helm = c.cp.helm();
    helm.args([
        "uninstall",
        release,
        "--namespace",
        ns,
        "--ignore-not-found",
        "--wait",
    ]);
    helm
}

/// `kubectl delete` of `what` in `ns` when dropped, not waiting, gone already or not.
fn delete(c: &Cluster, ns: &str, what: &str) -> Undo {
    let mut kubectl = c.cp.kubectl();
    kubectl.args([
        "delete",
        "-n",
        ns,
        "--ignore-not-found",
        "--wait=false",
        what,
    ]);
    Undo::new(kubectl)
}

/// Drops kubectl's server-side apply of the CRD from its managed fields. A user who applies the
/// CRD so keeps `crds.enabled=false` in every release; the next tests install releases that
/// manage it (the previous release's older CRD among them), which would conflict with kubectl.
async fn hand_the_crd_back_to_helm(c: &Cluster) {
    let crds = Api::<CustomResourceDefinition>::all(c.client.clone());
    let crd = crds.get(CRD).await.unwrap();
    let kept: Vec<_> = crd
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|f| {
            !(f.manager.as_deref() == Some("kubectl") && f.operation.as_deref() == Some("Apply"))
        })
        .collect();
    crds.patch(
        CRD,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"managedFields": kept}})),
    )
    .await
    .unwrap();
}

/// The user's application: a StatefulSet of two busybox pods labeled `app: my-app`.
async fn start_app(c: &Cluster) {
    let set: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": APP, "namespace": APP_NS},
        "spec": {
            "replicas": 2,
            "serviceName": APP,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app",
                        "image": LOCAL_BUSYBOX,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                    }],
                },
            },
        },
    }))
    .unwrap();
    Api::<StatefulSet>::namespaced(c.client.clone(), APP_NS)
        .create(&PostParams::default(), &set)
        .await
        .unwrap();
}

/// Runs a command of the page: a `$ ` line that shows an error must fail with that error (its
/// stderr, `...` where it varies); every other command must succeed. The loading block runs once
/// for each node's containerd, as the page says.
async fn run(c: &Cluster, runner: &Runner, command: &Command, nodes: &[String]) {
    if command.script.contains("ctr -n k8s.io") {
        for node in nodes {
            let socket = c.containerd_socket(node);
            let on_node = Runner {
                page: runner.page,
                replace: runner.replace.clone(),
                env: [
                    runner.env.clone(),
                    vec![("CONTAINERD_ADDRESS".into(), socket.display().to_string())],
                ]
                .concat(),
            };
            on_node.run(c, command).await;
        }
        return;
    }
    match command.shown.as_deref().map(str::trim) {
        Some(shown) if !shown.is_empty() => {
            let (ok, stdout, stderr) = runner.attempt(c, command).await;
            assert!(
                !ok && shows(shown, &stderr),
                "{PAGE}:{}: the page shows\n{shown}\nbut the command {}:\n{stderr}{stdout}",
                command.line,
                if ok { "succeeded" } else { "said" }
            );
        }
        _ => {
            runner.run(c, command).await;
        }
    }
}

#[tokio::test]
async fn the_install_page_runs_as_written() {
    let c = Cluster::get().await;
    // The page installs the chart itself: start from a cluster without it, as a user does.
    run_ok(uninstall(&c, RELEASE, RELEASE_NS)).await;
    // Undone in reverse: the group and the app go while their operator still runs, then the
    // releases, then the teams' namespaces.
    let _teams: Vec<Undo> = TEAMS
        .iter()
        .map(|ns| delete(&c, "default", &format!("namespace/{ns}")))
        .collect();
    let _team_releases: Vec<Undo> = TEAMS
        .iter()
        .map(|ns| Undo::new(uninstall(&c, &format!("lgo-{ns}"), ns)))
        .collect();
    let _release = Undo::new(uninstall(&c, RELEASE, RELEASE_NS));
    let _app = delete(&c, APP_NS, &format!("statefulset/{APP}"));
    let _group = delete(&c, APP_NS, &format!("leadergroups.leadergroup.io/{APP}"));
    let registry = Registry::start().await;
    start_app(&c).await;

    let readme = std::fs::read_to_string(repo_root().join(PAGE)).unwrap();
    let (start, end) = (line_of(&readme, START), line_of(&readme, END));
    let from_registry = section(&readme, FROM_REGISTRY, end);
    let per_namespace = section(&readme, PER_NAMESPACE, end);
    let (mut registry_path, mut alternative, mut main) = (Vec::new(), Vec::new(), Vec::new());
    for cmd in commands(&readme)
        .into_iter()
        .filter(|cmd| (start..end).contains(&cmd.line))
    {
        if from_registry.contains(&cmd.line) {
            registry_path.push(cmd);
        } else if per_namespace.contains(&cmd.line) {
            alternative.push(cmd);
        } else {
            main.push(cmd);
        }
    }
    assert!(main.len() >= 7, "{PAGE}: too few commands found: {main:?}");
    assert!(!alternative.is_empty(), "{PAGE}: no per-namespace commands");
    // Each way of loading the images is a path of its own: the nodes' (the chart's default image)
    // never names the registry, the registry's never imports into a node.
    assert!(
        main.iter().all(|c| !c.script.contains(PAGE_REGISTRY))
            && registry_path.iter().all(|c| !c.script.contains("ctr ")),
        "{PAGE}: the install mixes the nodes' path and the registry's: {main:?} {registry_path:?}"
    );
    for path in [&main, &registry_path] {
        let text: String = path.iter().map(|c| c.script.as_str()).collect();
        assert!(
            text.contains("operator.tar") && text.contains("agent.tar"),
            "{PAGE}: a path that does not load both the operator's and the agent's image: {path:?}"
        );
    }
    // The page's registry has TLS; this one does not, which skopeo is told as the page says.
    let runner = Runner {
        page: PAGE,
        replace: vec![
            (
                format!("docker://{PAGE_REGISTRY}"),
                format!("--dest-tls-verify=false docker://{}", registry.addr),
            ),
            (PAGE_REGISTRY.into(), registry.addr.to_string()),
        ],
        env: Vec::new(),
    };
    let nodes: Vec<String> = Api::<Node>::all(c.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();

    let started = Instant::now();
    for command in &main {
        run(&c, &runner, command, &nodes).await;
    }
    println!(
        "the install page's {} commands: {:.1} s",
        main.len(),
        started.elapsed().as_secs_f64()
    );
    // The chart's default image is the one the nodes were given, never pulled.
    let images = operator_images(&c).await;
    assert!(
        images
            .iter()
            .all(|(image, policy)| image.starts_with("leadergroup-operator:") && policy == "Never"),
        "the default release runs {images:?}, not the loaded leadergroup-operator:<version> with pullPolicy Never"
    );
    println!("{APP} led by {}", led(&c).await);

    // Step 2b instead: the same release from the registry.
    run_ok(uninstall(&c, RELEASE, RELEASE_NS)).await;
    for command in &registry_path {
        run(&c, &runner, command, &nodes).await;
    }
    // The operator runs the image named in the registry, which the nodes' containerd asked the
    // registry for (its access log: a runtime reports a pod's image by any name the image has).
    // Pods of an earlier release may still be terminating.
    let pulled = format!("{}/leadergroup-operator:", registry.addr);
    let images = operator_images(&c).await;
    assert!(
        images
            .iter()
            .all(|(image, policy)| image.starts_with(&pulled) && policy == "IfNotPresent"),
        "the registry's release runs {images:?}, not {pulled}* pulled IfNotPresent"
    );
    let log = registry.log();
    assert!(
        log.lines()
            .any(|l| l.contains("/v2/leadergroup-operator/manifests/")
                && l.contains("useragent=\"containerd/")),
        "no node's containerd asked the registry for the image:\n{log}"
    );
    println!("{APP} led by {}", led(&c).await);

    // The alternative: one release per namespace, instead of the cluster-wide one.
    let mut delete = c.cp.kubectl();
    delete.args([
        "delete",
        "-n",
        APP_NS,
        "--ignore-not-found",
        &format!("leadergroup/{APP}"),
        &format!("statefulset/{APP}"),
    ]);
    run_ok(delete).await;
    run_ok(uninstall(&c, RELEASE, RELEASE_NS)).await;
    for command in &alternative {
        run(&c, &runner, command, &nodes).await;
    }
    hand_the_crd_back_to_helm(&c).await;
    let mut rollout = c.cp.kubectl();
    rollout.args([
        "rollout",
        "status",
        "-n",
        TEAMS[0],
        &format!("deployment/lgo-{}-leadergroup-operator", TEAMS[0]),
        &format!("--timeout={}s", PODS.as_secs()),
    ]);
    run_ok(rollout).await;
}
