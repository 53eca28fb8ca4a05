//! The end-to-end results file, `bench/results/e2e.json`, and its tables (the first, the
//! headline, is copied into the README by `make docs-gen`).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::markdown::{Block, Table, met};
use crate::results::{Results, Run, Stamped};
use crate::scenario::{Outcome, Recorded};
use leadergroup_testenv::stats::Summary;

/// The samples of one system in one scenario.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct SystemResult {
    pub system: String,
    pub settings: String,
    pub samples_ms: Vec<f64>,
    pub summary: Option<Summary>,
    /// A candidate started leading while another (not killed, deleted or frozen) still believed
    /// it led.
    pub split_brains: u64,
    /// Repetitions that did not hand over within the bound (the rest of that system's
    /// repetitions of the scenario were skipped).
    pub failures: Vec<String>,
}

impl SystemResult {
    /// No samples yet of `system`.
    pub fn of(system: &str, settings: &str) -> SystemResult {
        let (system, settings) = (system.into(), settings.into());
        SystemResult {
            system,
            settings,
            ..SystemResult::default()
        }
    }

    /// Adds a repetition's outcome, its milliseconds or why it failed, and logs it as `what`;
    /// whether it succeeded.
    pub fn add(&mut self, what: &str, outcome: Result<f64>) -> bool {
        match outcome {
            Ok(ms) => {
                tracing::info!("{what}: {ms:.0} ms");
                self.samples_ms.push(ms);
                true
            }
            Err(e) => {
                tracing::info!("{what}: {e}");
                self.failures.push(e.to_string());
                false
            }
        }
    }

    fn median_ms(&self) -> f64 {
        Summary::median(self.summary.as_ref())
    }

    fn is_ours(&self) -> bool {
        self.system.starts_with("leadergroup-operator")
    }

    /// Ours: its liveness mode, from its name ("Readiness", "Heartbeat").
    fn mode(&self) -> &str {
        self.system
            .trim_start_matches("leadergroup-operator")
            .trim()
            .trim_matches(['(', ')'])
    }
}

/// One scenario, every system.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct ScenarioResult {
    pub scenario: String,
    pub title: String,
    pub clock_start: String,
    pub clock_stop: String,
    pub systems: Vec<SystemResult>,
}

impl ScenarioResult {
    fn ours(&self) -> impl Iterator<Item = &SystemResult> {
        self.systems.iter().filter(|s| s.is_ours())
    }

    fn peers(&self) -> impl Iterator<Item = &SystemResult> {
        self.systems.iter().filter(|s| !s.is_ours())
    }

    /// Its name in the headline and the targets.
    fn short(&self) -> &'static str {
        match self.scenario.as_str() {
            "graceful" => "graceful (leader pod deleted)",
            "crash" => "container crash (SIGKILL)",
            "frozen" => "frozen process (SIGSTOP)",
            "node-loss" => "node lost",
            _ => "?",
        }
    }
}

/// `bench/results/e2e.json`.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct E2eResult {
    /// The cluster's `--node-monitor-grace-period`, seconds.
    pub node_monitor_grace_period_s: u32,
    pub setup: String,
    pub scenarios: Vec<ScenarioResult>,
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

impl Recorded for E2eResult {
    const FILE: &'static str = "e2e";
    /// Measured only alone, on the real cluster.
    const OPTIONAL: bool = true;

    /// The run, the headline, every scenario's table and the targets.
    fn blocks(&self, run: &Run) -> Vec<Block> {
        let grace = self.node_monitor_grace_period_s;
        let mut setup = run.table(&["node-monitor-grace-period"]);
        let default = if grace == 50 {
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
            Block::tables("e2e-headline", [headline(self)]),
        ];
        for sc in &self.scenarios {
            let name = format!("e2e-{}", sc.scenario);
            blocks.push(Block::tables(name, [scenario_table(sc)]));
        }
        blocks.push(Block::tables("e2e-targets", [targets(self)]));
        blocks
    }
}

/// Its run is the real cluster's, which it described itself, not the light one's.
impl Outcome for Stamped<E2eResult> {
    fn write(&mut self, _light: &Run, results: &Results) -> Result<()> {
        results.write(E2eResult::FILE, self)
    }
}

/// The median of every system in every scenario, and peer / ours.
fn headline(result: &E2eResult) -> Table {
    let peers: Vec<&str> = result
        .scenarios
        .first()
        .map(|s| s.peers().map(|s| s.system.as_str()).collect())
        .unwrap_or_default();
    let mut table = Table::new(
        &[
            &["fault → new leader's app acting (median)", "ours"],
            &peers[..],
        ]
        .concat(),
    );
    for sc in &result.scenarios {
        let several = sc.ours().count() > 1;
        for ours in sc.ours() {
            let label = if several {
                format!("{} — ours in {}", sc.short(), ours.mode())
            } else {
                sc.short().to_owned()
            };
            let o = ours.median_ms();
            let mut row = vec![label, format!("**{}**", secs(o))];
            for p in &peers {
                row.push(match sc.systems.iter().find(|s| s.system == *p) {
                    Some(s) => format!("{} ({})", secs(s.median_ms()), ratio(s.median_ms(), o)),
                    None => "–".into(),
                });
            }
            table.rows.push(row);
        }
    }
    table
}

fn scenario_table(sc: &ScenarioResult) -> Table {
    let ours: Vec<&SystemResult> = sc.ours().collect();
    let mut table = Table::new(&["system", "median", "min–max", "n"]);
    match ours.as_slice() {
        [_, _, ..] => table.columns.extend(
            ours.iter()
                .map(|o| format!("peer / ours (vs {})", o.mode())),
        ),
        _ => table.columns.push("peer / ours".into()),
    }
    table
        .columns
        .extend(["split brains".into(), "settings".into()]);
    for s in &sc.systems {
        let mut row = vec![s.system.clone()];
        row.extend(match &s.summary {
            Some(x) => [
                secs(x.median_ms),
                format!("{}–{}", secs(x.min_ms), secs(x.max_ms)),
                x.n.to_string(),
            ],
            None => ["–".into(), "–".into(), "0".into()],
        });
        if ours.is_empty() {
            row.push(String::new());
        }
        for o in &ours {
            let vs = (!s.is_ours()).then(|| ratio(s.median_ms(), o.median_ms()));
            row.push(vs.unwrap_or_default());
        }
        let mut settings = s.settings.clone();
        if !s.failures.is_empty() {
            let (n, why) = (s.failures.len(), s.failures.join("; "));
            settings.push_str(&format!("; **{n} repetition(s) failed**: {why}"));
        }
        row.extend([s.split_brains.to_string(), settings]);
        table.rows.push(row);
    }
    table
}

/// The end-to-end targets, each met or not, from this run.
fn targets(result: &E2eResult) -> Table {
    let mut table = Table::new(&["target", "measured", "met"]);
    for sc in &result.scenarios {
        for ours in sc.ours() {
            let o = ours.median_ms();
            let closest = sc
                .peers()
                .map(|p| (p.system.as_str(), p.median_ms() / o))
                .filter(|(_, r)| r.is_finite())
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let mode = ours.mode();
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
                None => ("no peer figure".to_owned(), "–"),
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
    if let Some(hb) = result
        .scenarios
        .iter()
        .filter(|sc| sc.scenario == "node-loss")
        .flat_map(|sc| sc.systems.iter())
        .find(|s| s.system.contains("Heartbeat"))
    {
        let max = hb.summary.as_ref().map_or(f64::NAN, |s| s.max_ms);
        table.row([
            "node lost, Heartbeat: within leaseDurationSeconds (5 s) + 1 s, every sample"
                .to_owned(),
            format!("max {} over {} cuts", secs(max), hb.samples_ms.len()),
            met(max <= 6_000.0).to_owned(),
        ]);
    }
    table
}
