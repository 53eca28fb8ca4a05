//! How fast a downward API volume follows the pod's labels: the way to learn the role with no code and no RBAC (`examples/ledger/manifests/downward-api`)
//! is only as fast as the kubelet rewriting `/etc/podinfo/labels`.
//!
//! One pod (the busybox image) with a downward API volume of its labels runs a shell loop that
//! reads the file every 50 ms and, whenever the `step` label's line changes, prints it with the
//! wall clock in microseconds (busybox `adjtimex`: `date` has no `%N` in busybox). The test patches
//! the label 20 times, one change at a time, and takes each latency as the container's timestamp
//! minus the wall clock read just before the PATCH was sent: one machine, one clock. It includes
//! up to 50 ms of polling. It prints the median and p99 and asserts only that every change arrives
//! (within [`ARRIVAL`]): not a speed target.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{LogParams, Patch, PatchParams, PostParams};
use leadergroup_testenv::wait_until;
use serde_json::json;

use crate::cluster::{Cluster, PODS, is_ready};

/// Label changes measured.
const CHANGES: usize = 20;
/// Generous bound for one change to reach the file (the kubelet's periodic sync is 1 minute).
const ARRIVAL: Duration = Duration::from_secs(180);

const BUSYBOX_IMAGE: &str = "localhost/leadergroup/busybox:1.35";

/// Prints `seen <seconds.micros> <the step label's line>` at start and on each change of that line.
const WATCHER: &str = r#"
ts() { adjtimex | awk '/tv_sec/ {s=$2} /tv_usec/ {u=$2} END {printf "%d.%06d", s, u}'; }
prev=none
while :; do
  cur=$(grep '^step=' /etc/podinfo/labels)
  if [ "$cur" != "$prev" ]; then echo "seen $(ts) $cur"; prev=$cur; fi
  usleep 50000
done
"#;

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `seen 1796310038.633623 step="3"` → (1796310038.633623, 3).
fn parse_seen(line: &str) -> Option<(f64, usize)> {
    let rest = line.strip_prefix("seen ")?;
    let (ts, label) = rest.split_once(' ')?;
    let step = label
        .strip_prefix("step=\"")?
        .strip_suffix('"')?
        .parse()
        .ok()?;
    Some((ts.parse().ok()?, step))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::test]
async fn downward_api_labels_file_follows_label_changes() {
    let c = Cluster::get().await;
    let ns = leadergroup_testenv::namespace_in(c.client.clone(), "e2e-downward")
        .await
        .unwrap();
    let pods = ns.api::<Pod>();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "podinfo", "labels": {"app": "podinfo", "step": "0"}},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "watch",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", WATCHER],
                "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo", "readOnly": true}],
            }],
            "volumes": [{
                "name": "podinfo",
                "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_until("the podinfo pod Ready", PODS, || async {
        let p = pods.get("podinfo").await.map_err(|e| e.to_string())?;
        Ok::<_, String>(is_ready(&p).then_some(()))
    })
    .await
    .unwrap();

    // The container's lines, as they arrive (their timestamps are the container's, not arrival's).
    let logs = pods
        .log_stream(
            "podinfo",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut lines = logs.lines();
        while let Some(Ok(line)) = lines.next().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    next_seen(&mut rx, 0).await;

    let mut latencies = Vec::with_capacity(CHANGES);
    for step in 1..=CHANGES {
        let patch = json!({"metadata": {"labels": {"step": step.to_string()}}});
        let sent = now_secs();
        pods.patch("podinfo", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let seen = next_seen(&mut rx, step).await;
        let ms = (seen - sent) * 1e3;
        println!("downward API: step={step} in the file {ms:.0} ms after the PATCH");
        latencies.push(ms);
        // Changes apart, so each one is a fresh update to the kubelet, not part of a burst.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    reader.abort();

    let mut sorted = latencies.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "downward API refresh (label PATCH sent -> labels file changed inside the container, polled every 50 ms): median {:.0} ms, p99 {:.0} ms, min {:.0} ms, max {:.0} ms, n={}",
        percentile(&sorted, 50.0),
        percentile(&sorted, 99.0),
        sorted[0],
        sorted[sorted.len() - 1],
        sorted.len()
    );
    let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client.clone())
        .delete(&ns.name, &kube::api::DeleteParams::background())
        .await;
}

/// Waits for the container's line showing `step`; returns its timestamp.
async fn next_seen(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, step: usize) -> f64 {
    let line = tokio::time::timeout(ARRIVAL, rx.recv())
        .await
        .unwrap_or_else(|_| {
            panic!("step={step} did not reach the downward API file within {ARRIVAL:?}")
        })
        .expect("the container's log stream ended");
    match parse_seen(&line) {
        Some((ts, s)) if s == step => ts,
        Some((_, s)) => panic!("the file showed step={s} while waiting for step={step}"),
        None => panic!("unexpected line from the container: {line:?}"),
    }
}

#[test]
fn parses_the_containers_lines() {
    assert_eq!(
        parse_seen(r#"seen 1796310038.633623 step="3""#),
        Some((1796310038.633623, 3))
    );
    assert_eq!(parse_seen("seen 1.0 "), None);
    assert_eq!(percentile(&[1.0, 2.0, 3.0], 50.0), 2.0);
    assert_eq!(percentile(&[1.0, 2.0, 3.0], 99.0), 3.0);
}
