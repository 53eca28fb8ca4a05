//! The traffic path's timings, `bench/results/traffic.json`: the end-to-end traffic tests measure
//! them on the real cluster (`make e2e-traffic-timings`, which `make bench-e2e` runs once per
//! kube-proxy setting) and record one entry per kube-proxy setting, route and fault, each run
//! replacing its own; the benchmark splices their table into docs/benchmarks.md. Both read and
//! write the file through these types. In the file, an entry is the samples of its route (the
//! system) in its case, "fault / kube-proxy setting": one per field, the rounds' lists.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Result;
use crate::record::Record;
use crate::stats::summarize;

/// Every entry, in the table's order.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TrafficTimings {
    pub entries: Vec<Entry>,
}

/// The rounds of one fault against one route under one kube-proxy setting.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Entry {
    pub fault: String,
    pub kube_proxy: String,
    pub route: String,
    /// When the run started and ended (UTC), the command that made it, and the commit it
    /// measured (entries of earlier runs lack the last two).
    pub started_at: String,
    #[serde(default)]
    pub finished_at: String,
    pub command: String,
    #[serde(default)]
    pub commit: String,
    /// The machine's one-minute load average just before each round's fault.
    pub load_average: Vec<f64>,
    /// Per round: the fault to the new leader's first answer to a new connection.
    pub new_connection_ms: Vec<f64>,
    /// Per round: the fault to the new leader's first answer on the keep-alive client's
    /// connection; None when it still had none [`Entry::keep_alive_bound_ms`] after the fault.
    pub keep_alive_ms: Vec<Option<f64>>,
    pub keep_alive_bound_ms: f64,
    /// Per round: answers by another pod to requests sent after the new leader's first answer
    /// through the Service, on new connections and on the keep-alive client's.
    pub deposed_new_connection: Vec<usize>,
    pub deposed_keep_alive: Vec<usize>,
}

/// The faults, kube-proxy settings and routes in the table's order.
pub const FAULTS: [&str; 2] = ["pod deleted", "container killed"];
pub const KUBE_PROXY: [&str; 3] = [
    "iptables, default",
    "nftables, default",
    "iptables, minSyncPeriod 100ms",
];
pub const ROUTES: [&str; 3] = ["Label", "EndpointSlice", "agent proxy"];

/// Between an entry's fault and kube-proxy setting in its case.
const CASE: &str = " / ";

/// The position of `name` in `order`, unknown names last.
fn rank(order: &[&str], name: &str) -> usize {
    order.iter().position(|o| *o == name).unwrap_or(order.len())
}

impl TrafficTimings {
    /// Puts `entry` in place of the entry of its fault, kube-proxy setting and route, or among the
    /// others in the table's order.
    pub fn put(&mut self, entry: Entry) {
        let key = |e: &Entry| {
            (
                rank(&FAULTS, &e.fault),
                rank(&KUBE_PROXY, &e.kube_proxy),
                rank(&ROUTES, &e.route),
            )
        };
        self.entries.retain(|e| key(e) != key(&entry));
        self.entries.push(entry);
        self.entries.sort_by_key(key);
    }

    /// Reads `path` (nothing yet when it is missing), puts `entry` and writes it back.
    pub fn record(path: &Path, entry: Entry) -> Result<()> {
        let file: Option<Record<Value>> = Record::read(path)?;
        let mut timings = file.as_ref().map(TrafficTimings::of).unwrap_or_default();
        let entry_run = (
            entry.command.clone(),
            entry.started_at.clone(),
            entry.finished_at.clone(),
            entry.commit.clone(),
        );
        timings.put(entry);
        let mut file = timings.samples();
        // The file's run is the one that wrote it last; each entry names its own.
        file.run = serde_json::json!({
            "command": entry_run.0,
            "started_at": entry_run.1,
            "finished_at": entry_run.2,
            "commit": entry_run.3,
        });
        file.write(path)
    }

    /// The entries of a results file.
    pub fn of<R>(file: &Record<R>) -> TrafficTimings {
        let entries = file.entries().into_iter().filter_map(|(route, case)| {
            let (fault, kube_proxy) = case.split_once(CASE)?;
            let of_entry = file
                .samples
                .iter()
                .filter(|s| s.system == route && s.case == case);
            let mut fields: serde_json::Map<String, Value> = of_entry
                .map(|s| (s.metric.clone(), s.value.clone()))
                .collect();
            for (key, value) in [
                ("route", route),
                ("fault", fault),
                ("kube_proxy", kube_proxy),
            ] {
                fields.insert(key.into(), value.into());
            }
            serde_json::from_value(Value::Object(fields)).ok()
        });
        TrafficTimings {
            entries: entries.collect(),
        }
    }

    /// The entries as a results file's samples.
    fn samples(&self) -> Record<Value> {
        let mut file = Record::default();
        for e in &self.entries {
            let case = [e.fault.as_str(), &e.kube_proxy].join(CASE);
            let Ok(Value::Object(fields)) = serde_json::to_value(e) else {
                continue;
            };
            let keyed = ["route", "fault", "kube_proxy"];
            for (metric, value) in fields
                .into_iter()
                .filter(|f| !keyed.contains(&f.0.as_str()))
            {
                file.add(&e.route, &case, &metric, value);
            }
        }
        file
    }

    /// The table's rows: fault, kube-proxy, route, then each client's median time and the answers
    /// a deposed pod gave it, then the load average.
    pub fn rows(&self) -> Vec<[String; 8]> {
        self.entries
            .iter()
            .map(|e| {
                [
                    e.fault.clone(),
                    e.kube_proxy.clone(),
                    e.route.clone(),
                    median(&e.new_connection_ms),
                    deposed(&e.deposed_new_connection),
                    e.keep_alive_median(),
                    deposed(&e.deposed_keep_alive),
                    load(&e.load_average),
                ]
            })
            .collect()
    }
}

/// The traffic path's goals: what each asks of an entry, and which routes it applies to.
const GOALS: [(&str, Goal); 4] = [
    (
        "pod deleted: at most 300 ms (median) to the new leader's first answer on a new connection",
        Goal::MedianAtMost {
            fault: "pod deleted",
            ms: 300.0,
        },
    ),
    (
        "ahead of zen-lead's published 1.21 s average (median, new connections)",
        Goal::MedianAtMost {
            fault: "",
            ms: 1210.0,
        },
    ),
    (
        "0 answers by a deposed pod on new connections (EndpointSlice and the proxy)",
        Goal::NoneDeposed { kept: false },
    ),
    (
        "0 answers by a deposed pod on the keep-alive connection (the proxy)",
        Goal::NoneDeposed { kept: true },
    ),
];

/// What a goal asks of an entry.
#[derive(Clone, Copy)]
enum Goal {
    /// The new-connection median of `fault` (every fault when empty) at most `ms`.
    MedianAtMost { fault: &'static str, ms: f64 },
    /// No answer by a deposed pod on new connections, or on the keep-alive connection (the
    /// proxy's goal alone).
    NoneDeposed { kept: bool },
}

impl Goal {
    /// Its verdict on `e` ("yes: 243 ms", "**no**: 1128 ms"), None where it does not apply.
    fn verdict(self, e: &Entry) -> Option<String> {
        let (ok, measured) = match self {
            Goal::MedianAtMost { fault, ms } => {
                if !fault.is_empty() && e.fault != fault {
                    return None;
                }
                let median = summarize(&e.new_connection_ms)?.median_ms;
                (median <= ms, format!("{median:.0} ms"))
            }
            Goal::NoneDeposed { kept } => {
                let proxy = e.route == ROUTES[2];
                if (kept && !proxy) || (!kept && e.route == ROUTES[0]) {
                    return None;
                }
                let per_round = match kept {
                    true => &e.deposed_keep_alive,
                    false => &e.deposed_new_connection,
                };
                let total: usize = per_round.iter().sum();
                (total == 0, total.to_string())
            }
        };
        Some(format!("{}: {measured}", if ok { "yes" } else { "**no**" }))
    }
}

impl TrafficTimings {
    /// The goals' table: a row per goal, fault and kube-proxy setting, the verdict per route
    /// (Label, EndpointSlice, the agent proxy; "–" where the goal does not apply).
    pub fn goals(&self) -> Vec<[String; 6]> {
        let mut rows = Vec::new();
        for (goal, rule) in GOALS {
            let mut cases: Vec<(&str, &str)> = self
                .entries
                .iter()
                .map(|e| (e.fault.as_str(), e.kube_proxy.as_str()))
                .collect();
            cases.dedup();
            for (fault, kube_proxy) in cases {
                let verdict = |route: &str| {
                    self.entries
                        .iter()
                        .find(|e| {
                            e.fault == fault && e.kube_proxy == kube_proxy && e.route == route
                        })
                        .and_then(|e| rule.verdict(e))
                };
                let cells: Vec<Option<String>> = ROUTES.iter().map(|r| verdict(r)).collect();
                if cells.iter().all(Option::is_none) {
                    continue;
                }
                let [label, slice, proxy] =
                    [0, 1, 2].map(|i| cells[i].clone().unwrap_or("–".into()));
                rows.push([
                    goal.into(),
                    fault.into(),
                    kube_proxy.into(),
                    label,
                    slice,
                    proxy,
                ]);
            }
        }
        rows
    }
}

impl Entry {
    /// The keep-alive client's median, a round that never reached the new leader counting as
    /// longer than any that did.
    fn keep_alive_median(&self) -> String {
        let mut times: Vec<f64> = self
            .keep_alive_ms
            .iter()
            .map(|t| t.unwrap_or(f64::INFINITY))
            .collect();
        times.sort_by(f64::total_cmp);
        let n = times.len();
        let middle = match n {
            0 => return "–".into(),
            _ if n % 2 == 1 => times[n / 2],
            _ => (times[n / 2 - 1] + times[n / 2]) / 2.0,
        };
        let stayed = times.iter().filter(|t| t.is_infinite()).count();
        let after = format!(
            "still on the deposed pod after {:.0} s",
            self.keep_alive_bound_ms / 1e3
        );
        match stayed {
            0 => format!("{middle:.0} ms (n {n})"),
            _ if middle.is_infinite() => format!("{after} ({stayed} of {n} rounds)"),
            _ => format!("{middle:.0} ms (n {n}; {stayed} {after})"),
        }
    }
}

/// "332 ms (n 5)", the median of `samples`.
fn median(samples: &[f64]) -> String {
    summarize(samples).map_or_else(
        || "–".into(),
        |s| format!("{:.0} ms (n {})", s.median_ms, s.n),
    )
}

/// "0", or "612 in 5 rounds": the answers a deposed pod gave, over every round.
fn deposed(per_round: &[usize]) -> String {
    let total: usize = per_round.iter().sum();
    let rounds = per_round.iter().filter(|n| **n > 0).count();
    match rounds {
        0 => "0".into(),
        _ => format!("{total} in {rounds} of {} rounds", per_round.len()),
    }
}

/// "3.1 (2.0–4.2)": the median load average and its spread.
fn load(samples: &[f64]) -> String {
    summarize(samples).map_or_else(
        || "–".into(),
        |s| format!("{:.1} ({:.1}–{:.1})", s.median_ms, s.min_ms, s.max_ms),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fault: &str, kube_proxy: &str, route: &str) -> Entry {
        Entry {
            fault: fault.into(),
            kube_proxy: kube_proxy.into(),
            route: route.into(),
            new_connection_ms: vec![300.0, 100.0, 200.0],
            keep_alive_ms: vec![None, Some(3000.0), None],
            keep_alive_bound_ms: 6000.0,
            deposed_new_connection: vec![0, 0, 0],
            deposed_keep_alive: vec![10, 0, 20],
            load_average: vec![2.0, 4.0, 3.0],
            ..Entry::default()
        }
    }

    #[test]
    fn a_run_replaces_its_own_entries_in_the_tables_order() {
        let mut t = TrafficTimings::default();
        t.put(entry("container killed", "iptables, default", "Label"));
        t.put(entry("pod deleted", "nftables, default", "agent proxy"));
        t.put(entry("pod deleted", "nftables, default", "Label"));
        let mut again = entry("pod deleted", "nftables, default", "Label");
        again.new_connection_ms = vec![1.0];
        t.put(again.clone());
        let keys: Vec<(&str, &str)> = t
            .entries
            .iter()
            .map(|e| (e.fault.as_str(), e.route.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("pod deleted", "Label"),
                ("pod deleted", "agent proxy"),
                ("container killed", "Label")
            ]
        );
        assert_eq!(t.entries[0], again);
    }

    /// The results file holds an entry as its route's samples in its case; reading them back
    /// gives the entry.
    #[test]
    fn entries_are_read_back_from_the_samples_they_are_written_as() {
        let path = std::env::temp_dir().join(format!("traffic-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let entries = [
            entry("pod deleted", "iptables, default", "agent proxy"),
            entry("container killed", "nftables, default", "Label"),
        ];
        for e in &entries {
            TrafficTimings::record(&path, e.clone()).unwrap();
        }
        let file: Record<Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            file.systems("pod deleted / iptables, default"),
            ["agent proxy"]
        );
        assert_eq!(TrafficTimings::of(&file).entries, entries);
    }

    #[test]
    fn rows_give_medians_deposed_answers_and_the_load() {
        let t = TrafficTimings {
            entries: vec![entry("pod deleted", "iptables, default", "Label")],
        };
        assert_eq!(
            t.rows()[0][3..],
            [
                "200 ms (n 3)",
                "0",
                "still on the deposed pod after 6 s (2 of 3 rounds)",
                "30 in 2 of 3 rounds",
                "3.0 (2.0–4.0)",
            ]
        );
        let goals = t.goals();
        assert_eq!(goals.len(), 2, "{goals:?}");
        assert_eq!(goals[0][3..], ["yes: 200 ms", "–", "–"]);
        assert_eq!(goals[1][3..], ["yes: 200 ms", "–", "–"]);
        let mut one_stayed = entry("pod deleted", "iptables, default", "Label");
        one_stayed.keep_alive_ms = vec![Some(3000.0), None, Some(1000.0)];
        assert_eq!(
            one_stayed.keep_alive_median(),
            "3000 ms (n 3; 1 still on the deposed pod after 6 s)"
        );
    }
}
