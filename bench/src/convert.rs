//! One-off: converts the committed results files from their per-scenario formats to the generic
//! record (`cargo test -p leadergroup-bench convert -- --ignored`).

#![allow(clippy::unwrap_used)]

use serde_json::Value;

use crate::results::{Record, Results, Run};

fn old(results: &std::path::Path, name: &str) -> Value {
    let text = std::fs::read_to_string(results.join(format!("{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn run(v: &Value) -> Run {
    serde_json::from_value(v["run"].clone()).unwrap()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap()
}

fn arr(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap()
}

/// The scale entry `e` under `system`, case its group count.
fn entry(r: &mut Record, e: &Value) {
    let (system, case) = (s(&e["system"]), e["groups"].to_string());
    for metric in [
        "window_s",
        "writes_per_group_per_third",
        "polling_reads_per_s_per_group",
        "cpu_s_per_min",
        "rss_mib",
        "peak_rss_mib",
        "requests_per_s_per_group",
    ] {
        if metric == "window_s" {
            r.add(system, &case, "to_all_led_ms", &e["time_to_all_led_ms"]);
        }
        r.add(system, &case, metric, &e[metric]);
    }
    for (key, metric) in [
        ("handover_notready", "handover_notready_ms"),
        ("handover_deleted", "handover_deleted_ms"),
    ] {
        if !e[key].is_null() {
            r.add(system, &case, metric, &e[key]["samples_ms"]);
        }
    }
    for key in ["note", "measured_in"] {
        if !e[key].is_null() {
            r.add(system, &case, key, &e[key]);
        }
    }
}

#[test]
#[ignore]
fn convert() {
    let repo = crate::repo_root();
    let dir = repo.join("bench/results");
    let results = Results::of(&repo);
    let mut out: Vec<(&str, Record)> = Vec::new();

    let v = old(&dir, "floor");
    let mut r = Record {
        run: run(&v),
        ..Record::default()
    };
    r.add("", crate::floor::CASE, "ms", &v["samples_ms"]);
    out.push(("floor", r));

    for name in ["graceful", "crash"] {
        let v = old(&dir, name);
        let mut r = Record {
            run: run(&v),
            ..Record::default()
        };
        for sys in arr(&v["systems"]) {
            let system = s(&sys["system"]);
            r.add(system, name, "settings", &sys["settings"]);
            r.add(system, name, "ms", &sys["samples_ms"]);
            if !sys["api_calls_per_repetition"].is_null() {
                let calls = &sys["api_calls_per_repetition"];
                r.add(system, name, "api_requests_per_repetition", calls);
            }
        }
        out.push((name, r));
    }

    let v = old(&dir, "burst");
    let mut r = Record {
        run: run(&v),
        ..Record::default()
    };
    r.add("", "", "groups", &v["groups"]);
    for (i, b) in arr(&v["bursts"]).iter().enumerate() {
        let case = format!("burst {}", i + 1);
        r.add("", &case, "sweep_ms", &b["sweep_ms"]);
        r.add("", &case, "per_group_ms", &b["per_group_ms"]);
    }
    out.push(("burst", r));

    let v = old(&dir, "heartbeat-writes");
    let mut r = Record {
        run: run(&v),
        ..Record::default()
    };
    r.add("", "", "groups", &v["groups"]);
    r.add("", "", "lease_s", &v["lease_duration_seconds"]);
    for w in arr(&v["windows"]) {
        let mode = s(&w["mode"]);
        r.add("", mode, "window_s", &w["seconds"]);
        r.add("", mode, "requests_per_s", &w["requests_per_s"]);
    }
    out.push(("heartbeat-writes", r));

    let v = old(&dir, "app-latency");
    let mut r = Record {
        run: run(&v),
        ..Record::default()
    };
    for trigger in ["deletion", "NotReady"] {
        let of: Vec<&Value> = arr(&v["handovers"])
            .iter()
            .filter(|h| h["trigger"] == trigger)
            .collect();
        let pods = |key: &str| -> Vec<String> {
            of.iter()
                .map(|h| format!("{} at {}", s(&h[key][0]), h[key][1]))
                .collect()
        };
        r.add("", trigger, "old_leader", pods("old"));
        r.add("", trigger, "new_leader", pods("new"));
        for metric in [
            "trigger_to_decision_ms",
            "crate_new_leader_ms",
            "crate_old_not_leader_ms",
            "agent_new_leader_ms",
            "agent_old_not_leader_ms",
        ] {
            let list: Vec<&Value> = of.iter().map(|h| &h[metric]).collect();
            r.add("", trigger, metric, list);
        }
    }
    r.add("", "", "problems", &v["violations"]);
    out.push(("app-latency", r));

    let v = old(&dir, "scale");
    let mut r = Record {
        run: run(&v),
        ..Record::default()
    };
    for e in arr(&v["entries"]) {
        entry(&mut r, e);
    }
    out.push(("scale", r));

    let v = old(&dir, "scale-10k");
    let mut r = Record {
        run: run(&v),
        ..Record::default()
    };
    for (metric, key) in [
        ("lease_s", "lease_seconds"),
        ("namespaces", "namespaces"),
        ("pods", "pods"),
        ("create_s", "create_s"),
        ("create_concurrency", "create_concurrency"),
    ] {
        r.add("", "", metric, &v[key]);
    }
    entry(&mut r, &v["entry"]);
    r.add("", "", "converge_cpu_s", &v["converge_cpu_s"]);
    if !v["led_at_bound"].is_null() {
        r.add("", "", "led_at_bound", &v["led_at_bound"]);
    }
    if let Some(restart) = v["restart"].as_object() {
        for (metric, value) in restart {
            r.add("", "restart", metric, value);
        }
    }
    out.push(("scale-10k", r));

    let v = old(&dir, "e2e");
    let mut r = Record {
        run: run(&v),
        ..Record::default()
    };
    r.add(
        "",
        "",
        "node_monitor_grace_period_s",
        &v["node_monitor_grace_period_s"],
    );
    r.add("", "", "setup", &v["setup"]);
    let scenarios = arr(&v["scenarios"]);
    r.add("", "", "clock_stop", &scenarios[0]["clock_stop"]);
    for sc in scenarios {
        let key = s(&sc["scenario"]);
        r.add("", key, "title", &sc["title"]);
        r.add("", key, "clock_start", &sc["clock_start"]);
    }
    for sc in scenarios {
        let key = s(&sc["scenario"]);
        for sys in arr(&sc["systems"]) {
            let system = s(&sys["system"]);
            r.add(system, key, "settings", &sys["settings"]);
            r.add(system, key, "ms", &sys["samples_ms"]);
            r.add(system, key, "split_brains", &sys["split_brains"]);
            r.add(system, key, "failures", &sys["failures"]);
        }
    }
    out.push(("e2e", r));

    let v = old(&dir, "traffic");
    let timings: leadergroup_testenv::traffic_timings::TrafficTimings =
        serde_json::from_value(v.clone()).unwrap();
    let traffic = dir.join("traffic.json");
    std::fs::remove_file(&traffic).unwrap();
    for entry in timings.entries {
        leadergroup_testenv::traffic_timings::TrafficTimings::record(&traffic, entry).unwrap();
    }

    for (name, record) in out {
        results.write(name, &record).unwrap();
    }
}
