//! The chart's alerts in a real Prometheus: the server (built from its pinned Go module by
//! `charts/tests/prometheus-build.sh prometheus`) runs on the host, finds both operator pods
//! through its Kubernetes service discovery, scrapes their secure /metrics every second (https,
//! the self-signed certificate not verified, with the token of a ServiceAccount bound to the
//! chart's metrics-reader ClusterRole, as the chart's ServiceMonitor does), and evaluates the
//! PrometheusRule the chart renders. The group loses every candidate (its Deployment scaled to 0):
//! `LeaderGroupNoLeader` fires; a candidate comes back: it resolves.
//!
//! The server's path comes from `LEADERGROUP_PROMETHEUS` (`make e2e` builds it and sets it).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use leadergroup_testenv::{free_port, http_get, run_ok};
use serde_json::json;

use crate::cluster::{
    APP, App, CONVERGE, Cluster, METRICS_PORT_NAME, MetricsReader, OPERATOR_POD_SELECTOR, RELEASE,
    RELEASE_NS,
};

/// The environment variable that names the Prometheus server binary.
const PROMETHEUS_ENV: &str = "LEADERGROUP_PROMETHEUS";
/// The warning's `for:` in this test, instead of the chart's default minute.
const NO_LEADER_FOR: &str = "5s";
/// Scrape and rule evaluation interval.
const INTERVAL: &str = "1s";

/// A Prometheus server on the host, stopped (by its PID) and its folder removed when dropped.
struct Prometheus {
    child: std::process::Child,
    dir: PathBuf,
    addr: std::net::SocketAddr,
}

impl Prometheus {
    /// Starts the server with `rules` (a rule file's YAML) and a scrape job named as the chart's
    /// metrics Service, so that the rules' `job` selector matches, over the operator's pods'
    /// secure port, presenting `token`.
    async fn start(c: &Cluster, rules: &str, token: &str) -> Prometheus {
        let binary = std::env::var(PROMETHEUS_ENV).unwrap_or_else(|_| {
            panic!("{PROMETHEUS_ENV} is not set: run through `make e2e`, or set it to the output of charts/tests/prometheus-build.sh prometheus")
        });
        let dir = crate::cluster::repo_root()
            .join("target")
            .join(format!("e2e-prometheus-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("rules.yaml"), rules).unwrap();
        std::fs::write(dir.join("token"), token).unwrap();
        let (instance_label, instance) = OPERATOR_POD_SELECTOR.split_once('=').unwrap();
        let config = json!({
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [dir.join("rules.yaml")],
            "scrape_configs": [{
                "job_name": format!("{RELEASE}-metrics"),
                "honor_labels": true,
                "scheme": "https",
                "tls_config": {"insecure_skip_verify": true},
                "authorization": {"type": "Bearer", "credentials_file": dir.join("token")},
                "kubernetes_sd_configs": [{
                    "role": "pod",
                    "kubeconfig_file": c.cp.kubeconfig_path(),
                    "namespaces": {"names": [RELEASE_NS]},
                }],
                "relabel_configs": [
                    {
                        "source_labels": [format!("__meta_kubernetes_pod_label_{}", sanitize(instance_label))],
                        "regex": instance,
                        "action": "keep",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": METRICS_PORT_NAME,
                        "action": "keep",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_name"],
                        "target_label": "pod",
                    },
                ],
            }],
        });
        // JSON is YAML: Prometheus reads this file as its configuration.
        std::fs::write(dir.join("prometheus.yml"), config.to_string()).unwrap();
        let addr = free_port().unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = std::process::Command::new(&binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        let server = Prometheus { child, dir, addr };
        let ready = leadergroup_testenv::wait_until("Prometheus ready", CONVERGE, || async {
            Ok::<_, String>(
                http_get(server.addr, "/-/ready")
                    .await
                    .filter(|(code, _)| *code == 200)
                    .map(|_| ()),
            )
        })
        .await;
        if let Err(e) = ready {
            panic!("{e}\n{}", server.log());
        }
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` on the HTTP API, as JSON; panics unless it answers 200.
    async fn api(&self, path: &str) -> serde_json::Value {
        match http_get(self.addr, path).await {
            Some((200, body)) => serde_json::from_str(&body).unwrap(),
            other => panic!("Prometheus {path}: {other:?}\n{}", self.log()),
        }
    }

    /// The states (`pending`, `firing`) of the active alerts named `alert` for group `group` of
    /// namespace `ns`, with their severity.
    async fn alert_states(&self, alert: &str, ns: &str, group: &str) -> Vec<(String, String)> {
        let answer = self.api("/api/v1/alerts").await;
        let alerts = answer["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        alerts
            .iter()
            .filter(|a| {
                a["labels"]["alertname"] == alert
                    && a["labels"]["namespace"] == ns
                    && a["labels"]["group"] == group
            })
            .map(|a| {
                (
                    a["state"].as_str().unwrap_or_default().to_string(),
                    a["labels"]["severity"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect()
    }

    /// The operator pods the server scrapes and finds up, or what it says of those it does not
    /// (the scrape's last error: a 401 or 403 names the token's rights).
    async fn targets_up(&self) -> Result<usize, String> {
        let answer = self.api("/api/v1/targets?state=active").await;
        let targets = answer["data"]["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let up = targets.iter().filter(|t| t["health"] == "up").count();
        let down: Vec<String> = targets
            .iter()
            .filter(|t| t["health"] != "up")
            .map(|t| format!("{}: {}", t["scrapeUrl"], t["lastError"]))
            .collect();
        if down.is_empty() {
            Ok(up)
        } else {
            Err(format!("{up} up; not up: {}", down.join("; ")))
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Kubernetes label name as a Prometheus meta label spells it.
fn sanitize(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The alert rules of the chart's PrometheusRule, rendered with the installed release's name and
/// this test's short `for:`, as a Prometheus rule file.
async fn rendered_rules(c: &Cluster) -> String {
    let mut template = c.cp.helm();
    template.args([
        "template",
        RELEASE,
        &crate::cluster::repo_root()
            .join("charts/leadergroup-operator")
            .display()
            .to_string(),
        "--namespace",
        RELEASE_NS,
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        &format!("prometheusRule.noLeaderWarningFor={NO_LEADER_FOR}"),
        "--show-only",
        "templates/prometheusrule.yaml",
    ]);
    let rendered = run_ok(template).await;
    let rule: serde_json::Value = serde_yaml_ng::from_str(&rendered).unwrap();
    serde_yaml_ng::to_string(&rule["spec"]).unwrap()
}

/// Scales the app's Deployment to `replicas`.
async fn scale(app: &App, replicas: i32) {
    app.deployments
        .patch(
            APP,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// Polls until the alert's states for the group satisfy `cond`; returns when they first did.
async fn wait_alert(
    server: &Prometheus,
    app: &App,
    what: &str,
    cond: impl Fn(&[(String, String)]) -> bool,
) -> Instant {
    let ns = app.ns.name.clone();
    let poll = Duration::from_millis(200);
    let seen = leadergroup_testenv::wait_until_every(what, CONVERGE, poll, || async {
        let states = server.alert_states("LeaderGroupNoLeader", &ns, APP).await;
        if cond(&states) {
            return Ok::<_, String>(Some(Instant::now()));
        }
        Err(format!("LeaderGroupNoLeader for {ns}/{APP}: {states:?}"))
    })
    .await;
    match seen {
        Ok(at) => at,
        Err(e) => panic!("{e}\n{}", app.summary().await),
    }
}

#[tokio::test]
async fn the_no_leader_alert_fires_when_a_group_loses_every_candidate_and_resolves_when_one_returns()
 {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let app = App::start(&c, "alerts", 1, 0).await;
    app.wait_settled("a leader", CONVERGE, |_| true).await;

    let reader = MetricsReader::create(&app.ns, "prometheus").await;
    let server = Prometheus::start(&c, &rendered_rules(&c).await, &reader.token).await;
    leadergroup_testenv::wait_until("both operator pods scraped", CONVERGE, || async {
        Ok::<_, String>((server.targets_up().await? == 2).then_some(()))
    })
    .await
    .unwrap();
    // With a leader the alert is not even pending: the rule sees the group's series at 1.
    let series = format!(
        "/api/v1/query?query=leadergroup_group_leader%7Bnamespace%3D%22{}%22%7D",
        app.ns.name
    );
    leadergroup_testenv::wait_until("the group's leader series at 1", CONVERGE, || async {
        let answer = server.api(&series).await;
        let values: Vec<_> = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| r["value"][1].as_str().unwrap_or_default().to_string())
            .collect();
        Ok::<_, String>((!values.is_empty() && values.iter().all(|v| v == "1")).then_some(()))
    })
    .await
    .unwrap();
    assert!(
        server
            .alert_states("LeaderGroupNoLeader", &app.ns.name, APP)
            .await
            .is_empty()
    );

    // Every candidate goes: the warning fires after its `for:`.
    let lost = Instant::now();
    scale(&app, 0).await;
    let fired = wait_alert(&server, &app, "LeaderGroupNoLeader firing", |states| {
        states
            .iter()
            .any(|(state, severity)| state == "firing" && severity == "warning")
    })
    .await;
    println!(
        "every candidate gone -> LeaderGroupNoLeader (warning, for: {NO_LEADER_FOR}) firing: {:.1} s",
        (fired - lost).as_secs_f64()
    );

    // A candidate comes back: the alert resolves (no longer pending nor firing).
    let back = Instant::now();
    scale(&app, 1).await;
    let resolved = wait_alert(&server, &app, "LeaderGroupNoLeader resolved", |states| {
        states.is_empty()
    })
    .await;
    println!(
        "a candidate back -> LeaderGroupNoLeader resolved: {:.1} s",
        (resolved - back).as_secs_f64()
    );
    app.wait_settled("a leader again", CONVERGE, |_| true).await;
    drop(server);
    reader.remove().await;
    app.delete().await;
}
