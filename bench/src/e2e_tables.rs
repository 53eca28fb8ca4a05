//! The tables of the end-to-end results file, `bench/results/e2e.json` (the first, the headline,
//! is copied into the README by `make docs-gen`). Per scenario (a case), every system's
//! milliseconds per handover, the longest time two of its applications believed they led
//! (`app_overlap_ms`, per repetition, the struck one included), settings and failures; a peer's
//! overlap is a finding about the peer, said under the table.

use crate::markdown::{Block, Table, met};
use crate::results::{Record, Run};
use crate::scenario::OURS;
use leadergroup_testenv::stats::summarize;

/// One scenario of the file.
struct Scenario<'a> {
    record: &'a Record,
    key: &'a str,
    systems: Vec<&'a str>,
}

impl<'a> Scenario<'a> {
    /// Every scenario of `record`, in order.
    fn all(record: &'a Record) -> Vec<Scenario<'a>> {
        let scenario = |key| Scenario {
            record,
            key,
            systems: record.systems(key),
        };
        record.cases().into_iter().map(scenario).collect()
    }

    fn ours(&self) -> impl Iterator<Item = &'a str> {
        self.systems.clone().into_iter().filter(|s| is_ours(s))
    }

    fn peers(&self) -> impl Iterator<Item = &'a str> {
        self.systems.clone().into_iter().filter(|s| !is_ours(s))
    }

    fn samples(&self, system: &str) -> Vec<f64> {
        self.record.values(system, self.key, "ms")
    }

    fn median(&self, system: &str) -> f64 {
        self.record.median(system, self.key, "ms")
    }

    /// Per repetition, the longest time two of `system`'s applications believed they led.
    fn overlaps(&self, system: &str) -> Vec<f64> {
        self.record.values(system, self.key, "app_overlap_ms")
    }

    /// "0 ms", "1.21 s in 3 of 5": the longest overlap of any repetition, and in how many there
    /// was one; "not recorded" in a file from before the histories were (with the split brains
    /// it counted).
    fn overlap_cell(&self, system: &str) -> String {
        let per_rep = self.overlaps(system);
        let longest = per_rep.iter().copied().fold(f64::NAN, f64::max);
        let with = per_rep.iter().filter(|ms| **ms > 0.0).count();
        let older = self.record.number(system, self.key, "split_brains");
        match (per_rep.len(), with) {
            (0, _) if older.is_finite() => {
                format!(
                    "not recorded (split brains by the older rule, the struck one left out: {older})"
                )
            }
            (0, _) => "not recorded".into(),
            (_, 0) => "0 ms".into(),
            (n, k) => format!("**{} in {k} of {n}**", secs(longest)),
        }
    }

    /// What the histories found, a sentence per system with an overlap: ours' a failure of the
    /// promise, a peer's a finding about the peer.
    fn findings(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for s in &self.systems {
            let overlaps = self.record.texts(s, self.key, "overlaps");
            if overlaps.is_empty() {
                continue;
            }
            let whose = if is_ours(s) {
                format!("**Ours ({}) broke its promise:**", mode(s))
            } else {
                format!("**A finding about {s}:**")
            };
            notes.push(format!(
                "{whose} two of its applications believed they led at once ({}): {}.",
                self.overlap_cell(s).trim_matches('*'),
                overlaps.join("; ")
            ));
        }
        notes
    }

    /// Its name in the headline and the targets.
    fn short(&self) -> &'static str {
        match self.key {
            "graceful" => "graceful (leader pod deleted)",
            "crash" => "container crash (SIGKILL)",
            "frozen" => "frozen process (SIGSTOP)",
            "node-loss" => "node lost",
            "node-loss-operator" => "node lost with the active operator replica",
            "operator-kill" => "active operator replica killed as the leader freezes",
            "operator-stop" => "active operator replica frozen as the leader freezes",
            _ => "?",
        }
    }
}

fn is_ours(system: &str) -> bool {
    system.starts_with(OURS)
}

/// Ours: its liveness mode, from its name ("Readiness", "Heartbeat").
fn mode(system: &str) -> &str {
    system
        .trim_start_matches(OURS)
        .trim()
        .trim_matches(['(', ')'])
}

/// Milliseconds as the end-to-end tables show them ("–" when unknown).
fn secs(ms: f64) -> String {
    if !ms.is_finite() {
        "–".into()
    } else if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// How many times ours `peer` is.
fn ratio(peer: f64, ours: f64) -> String {
    let r = peer / ours;
    if !r.is_finite() {
        "–".into()
    } else if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.1}×")
    }
}

/// The run, the headline, every scenario's table and the targets.
pub fn blocks(result: &Record) -> Vec<Block> {
    let (run, scenarios) = (&result.run, Scenario::all(result));
    let grace = result.number("", "", "node_monitor_grace_period_s");
    let mut setup = run.table(&["node-monitor-grace-period"]);
    let default = if grace == 50.0 {
        " (Kubernetes' default)"
    } else {
        " (Kubernetes' default is 50 s)"
    };
    for row in &mut setup.rows {
        row.push(format!("{grace} s{default}"));
    }
    let cluster = Table::new(&["cluster"]).with([run.control_plane.clone()]);
    let quick = run
        .quick
        .then(|| "**A `--quick` smoke run, not figures to publish.**".to_owned());
    let mut blocks = vec![
        Block::tables("e2e-run", [setup, cluster]).notes(quick),
        Block::tables("e2e-headline", [headline(&scenarios)])
            .notes([conditions(&scenarios), measured_on(run)]),
    ];
    for sc in &scenarios {
        let name = format!("e2e-{}", sc.key);
        blocks.push(Block::tables(name, [scenario_table(sc)]).notes(sc.findings()));
    }
    blocks.push(Block::tables("e2e-targets", [targets(&scenarios)]));
    blocks
}

/// The conditions of the comparison, beside its figures: how the systems ran, and each one's
/// settings (as the first scenario recorded them).
fn conditions(scenarios: &[Scenario]) -> String {
    let Some(first) = scenarios.first() else {
        return String::new();
    };
    let settings: Vec<String> = first
        .systems
        .iter()
        .map(|s| {
            let set = first
                .record
                .text(s, first.key, "settings")
                .unwrap_or_default();
            format!("{s}: {set}")
        })
        .collect();
    format!(
        "Medians (p50; p90 and the spread on the benchmark page). Conditions: {}. Settings — {}.",
        first
            .record
            .text("", "", "setup")
            .and_then(|setup| setup
                .split(". ")
                .find(|s| s.starts_with("Graceful"))
                .map(|s| s.trim_end_matches('.').to_owned()))
            .unwrap_or_else(|| "as the benchmark page says".to_owned()),
        settings.join("; ")
    )
}

/// Which build of ours the figures are from, and when: the README copies the headline.
fn measured_on(run: &Run) -> String {
    let ours = run
        .versions
        .get("leadergroup-operator")
        .map_or("an unrecorded version", String::as_str);
    format!(
        "Measured on leadergroup-operator {ours}, {} (`{}`).",
        run.started_at, run.command
    )
}

/// The median of every system in every scenario, and peer / ours.
fn headline(scenarios: &[Scenario]) -> Table {
    let peers: Vec<&str> = scenarios
        .first()
        .map(|s| s.peers().collect())
        .unwrap_or_default();
    let lead = ["fault → new leader's app acting (median)", "ours"];
    let mut table = Table::new(&[&lead[..], &peers[..]].concat());
    for sc in scenarios {
        let several = sc.ours().count() > 1;
        for ours in sc.ours() {
            let label = if several {
                format!("{} — ours in {}", sc.short(), mode(ours))
            } else {
                sc.short().to_owned()
            };
            let o = sc.median(ours);
            let mut row = vec![label, format!("**{}**", secs(o))];
            for p in &peers {
                row.push(match sc.systems.contains(p) {
                    true => format!("{} ({})", secs(sc.median(p)), ratio(sc.median(p), o)),
                    false => "–".into(),
                });
            }
            table.rows.push(row);
        }
    }
    table
}

fn scenario_table(sc: &Scenario) -> Table {
    let ours: Vec<&str> = sc.ours().collect();
    let mut table = Table::new(&[
        "system",
        "p50",
        "p90",
        "min–max",
        "n",
        "app overlap, longest",
    ]);
    match ours.as_slice() {
        [_, _, ..] => table
            .columns
            .extend(ours.iter().map(|o| format!("peer / ours (vs {})", mode(o)))),
        _ => table.columns.push("peer / ours".into()),
    }
    table.columns.push("settings".into());
    for s in &sc.systems {
        let mut row = vec![s.to_string()];
        row.extend(match summarize(&sc.samples(s)) {
            Some(x) => [
                secs(x.median_ms),
                secs(x.p90_ms),
                format!("{}–{}", secs(x.min_ms), secs(x.max_ms)),
                x.n.to_string(),
            ],
            None => ["–".into(), "–".into(), "–".into(), "0".into()],
        });
        row.push(sc.overlap_cell(s));
        if ours.is_empty() {
            row.push(String::new());
        }
        for o in &ours {
            let vs = (!is_ours(s)).then(|| ratio(sc.median(s), sc.median(o)));
            row.push(vs.unwrap_or_default());
        }
        let mut settings = sc.record.text(s, sc.key, "settings").unwrap_or_default();
        let failures = sc.record.texts(s, sc.key, "failures");
        if !failures.is_empty() {
            let (n, why) = (failures.len(), failures.join("; "));
            settings.push_str(&format!("; **{n} repetition(s) failed**: {why}"));
        }
        row.push(settings);
        table.rows.push(row);
    }
    table
}

/// The end-to-end targets, each met or not, from this run.
fn targets(scenarios: &[Scenario]) -> Table {
    let mut table = Table::new(&["target", "measured", "met"]);
    for sc in scenarios {
        for ours in sc.ours() {
            let o = sc.median(ours);
            let closest = sc
                .peers()
                .map(|p| (p, sc.median(p) / o))
                .filter(|(_, r)| r.is_finite())
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let mode = mode(ours);
            let (measured, verdict) = match closest {
                Some((peer, r)) => (
                    format!(
                        "ours {} ({mode}); the closest peer, {peer}, {} ({} ours)",
                        secs(o),
                        secs(o * r),
                        ratio(o * r, o)
                    ),
                    met(r > 1.0),
                ),
                // The operator's own faults: no peer has an operator (the bounds below).
                None => continue,
            };
            table.row([
                format!(
                    "{}, ours in {mode}: ahead of every peer (median)",
                    sc.short()
                ),
                measured,
                verdict.to_owned(),
            ]);
        }
    }
    // The promise: never two of ours' applications believing they lead, the struck one counted.
    for sc in scenarios {
        for ours in sc.ours() {
            let per_rep = sc.overlaps(ours);
            if per_rep.is_empty() {
                continue;
            }
            let longest = per_rep.iter().copied().fold(0.0, f64::max);
            table.row([
                format!(
                    "{}, ours in {}: no two applications believe they lead at once (app_overlap_ms 0 in every repetition, the struck one counted)",
                    sc.short(),
                    mode(ours)
                ),
                format!("longest {} over {} repetitions", secs(longest), per_rep.len()),
                met(longest == 0.0).to_owned(),
            ]);
        }
    }
    // The Heartbeat group's Lease (5 s) and a second: the bound of a leader lost with its node,
    // which losing the active operator replica too must not lengthen.
    for sc in scenarios {
        if !matches!(
            sc.key,
            "node-loss" | "node-loss-operator" | "operator-kill" | "operator-stop"
        ) {
            continue;
        }
        let Some(system) = sc.systems.iter().find(|s| s.contains("Heartbeat")) else {
            continue;
        };
        let samples = sc.samples(system);
        let max = summarize(&samples).map_or(f64::NAN, |s| s.max_ms);
        // A repetition that failed gave no sample: it counts as a miss, not as nothing.
        let failed = sc.record.texts(system, sc.key, "failures").len();
        table.row([
            format!(
                "{}, Heartbeat: within leaseDurationSeconds (5 s) + 1 s, every sample",
                sc.short()
            ),
            format!(
                "max {} over {} samples, {failed} failed",
                secs(max),
                samples.len()
            ),
            met(failed == 0 && max <= 6_000.0).to_owned(),
        ]);
    }
    table
}
