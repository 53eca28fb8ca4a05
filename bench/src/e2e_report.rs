//! The end-to-end section of docs/benchmarks.md (and the README's headline table).

use std::fmt::Write as _;
use std::path::Path;

use crate::e2e::{E2eResult, ScenarioResult, SystemResult};
use crate::error::{Error, Result};

/// The markers around the section in docs/benchmarks.md.
pub const BEGIN: &str = "<!-- e2e:begin (leadergroup-bench --only e2e) -->";
pub const END: &str = "<!-- e2e:end -->";

fn median(s: &SystemResult) -> f64 {
    s.summary.as_ref().map_or(f64::NAN, |s| s.median_ms)
}

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

fn is_ours(s: &SystemResult) -> bool {
    s.system.starts_with("leadergroup-operator")
}

/// The headline: the median of every system in every scenario, and peer / ours.
pub fn headline(result: &E2eResult) -> String {
    let mut out = String::new();
    let peers: Vec<&str> = result
        .scenarios
        .first()
        .map(|s| {
            s.systems
                .iter()
                .filter(|s| !is_ours(s))
                .map(|s| s.system.as_str())
                .collect()
        })
        .unwrap_or_default();
    let _ = write!(out, "| fault → new leader's app acting (median) | ours |");
    for p in &peers {
        let _ = write!(out, " {p} |");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "|---|---|{}", "---|".repeat(peers.len()));
    for sc in &result.scenarios {
        for ours in sc.systems.iter().filter(|s| is_ours(s)) {
            let label = if sc.systems.iter().filter(|s| is_ours(s)).count() > 1 {
                let mode = ours
                    .system
                    .trim_start_matches("leadergroup-operator")
                    .trim();
                format!("{} — ours in {}", short(sc), mode.trim_matches(['(', ')']))
            } else {
                short(sc).to_owned()
            };
            let o = median(ours);
            let _ = write!(out, "| {label} | **{}** |", secs(o));
            for p in &peers {
                match sc.systems.iter().find(|s| s.system == *p) {
                    Some(s) => {
                        let _ = write!(out, " {} ({}) |", secs(median(s)), ratio(median(s), o));
                    }
                    None => {
                        let _ = write!(out, " – |");
                    }
                }
            }
            let _ = writeln!(out);
        }
    }
    out
}

fn short(sc: &ScenarioResult) -> &'static str {
    match sc.scenario.as_str() {
        "graceful" => "graceful (leader pod deleted)",
        "crash" => "container crash (SIGKILL)",
        "frozen" => "frozen process (SIGSTOP)",
        "node-loss" => "node lost",
        _ => "?",
    }
}

fn scenario_table(out: &mut String, sc: &ScenarioResult) {
    let ours: Vec<&SystemResult> = sc.systems.iter().filter(|s| is_ours(s)).collect();
    let _ = writeln!(out, "### {}\n", sc.title);
    let _ = writeln!(out, "- **Clock starts:** {}.", sc.clock_start);
    let _ = writeln!(out, "- **Clock stops:** {}.\n", sc.clock_stop);
    let vs: Vec<String> = ours
        .iter()
        .map(|o| {
            format!(
                "vs {}",
                o.system
                    .trim_start_matches("leadergroup-operator")
                    .trim()
                    .trim_matches(['(', ')'])
            )
        })
        .collect();
    let vs_header = if vs.len() > 1 {
        vs.iter()
            .map(|v| format!("peer / ours ({v})"))
            .collect::<Vec<_>>()
            .join(" | ")
    } else {
        "peer / ours".to_owned()
    };
    let _ = writeln!(
        out,
        "| system | median | min–max | n | {vs_header} | split brains | settings |"
    );
    let _ = writeln!(
        out,
        "|---|---|---|---|{}---|---|",
        "---|".repeat(vs.len().max(1))
    );
    for s in &sc.systems {
        let (med, spread, n) = match &s.summary {
            Some(x) => (
                secs(x.median_ms),
                format!("{}–{}", secs(x.min_ms), secs(x.max_ms)),
                x.n,
            ),
            None => ("–".into(), "–".into(), 0),
        };
        let ratios: Vec<String> = if is_ours(s) {
            ours.iter().map(|_| "".to_owned()).collect()
        } else {
            ours.iter().map(|o| ratio(median(s), median(o))).collect()
        };
        let ratios = if ratios.is_empty() {
            String::new()
        } else {
            ratios.join(" | ")
        };
        let mut settings = s.settings.clone();
        if !s.failures.is_empty() {
            let _ = write!(
                settings,
                "; **{} repetition(s) failed**: {}",
                s.failures.len(),
                s.failures.join("; ")
            );
        }
        let _ = writeln!(
            out,
            "| {} | {med} | {spread} | {n} | {ratios} | {} | {settings} |",
            s.system, s.split_brains
        );
    }
    let _ = writeln!(out);
}

/// Issue 14's end-to-end targets, each met or not, from this run.
fn targets(out: &mut String, result: &E2eResult) {
    let _ = writeln!(out, "### Targets (end to end)\n");
    let _ = writeln!(out, "| target | measured | met |");
    let _ = writeln!(out, "|---|---|---|");
    for sc in &result.scenarios {
        for ours in sc.systems.iter().filter(|s| is_ours(s)) {
            let o = median(ours);
            let mut worst: Option<(&str, f64)> = None;
            for p in sc.systems.iter().filter(|s| !is_ours(s)) {
                let r = median(p) / o;
                if r.is_finite() && worst.is_none_or(|(_, w)| r < w) {
                    worst = Some((p.system.as_str(), r));
                }
            }
            let mode = ours
                .system
                .trim_start_matches("leadergroup-operator")
                .trim()
                .trim_matches(['(', ')']);
            let (measured, met) = match worst {
                Some((peer, r)) => (
                    format!(
                        "ours {} ({mode}); the closest peer, {peer}, {} ({} ours)",
                        secs(o),
                        secs(o * r),
                        ratio(o * r, o)
                    ),
                    if r > 1.0 { "yes" } else { "**no**" },
                ),
                None => ("no peer figure".to_owned(), "–"),
            };
            let _ = writeln!(
                out,
                "| {}, ours in {mode}: ahead of every peer (median) | {measured} | {met} |",
                short(sc)
            );
        }
    }
    if let Some(hb) = result
        .scenarios
        .iter()
        .filter(|sc| sc.scenario == "node-loss")
        .flat_map(|sc| sc.systems.iter())
        .find(|s| s.system.contains("Heartbeat"))
    {
        let bound = 5_000.0 + 1_000.0;
        let max = hb.summary.as_ref().map_or(f64::NAN, |s| s.max_ms);
        let _ = writeln!(
            out,
            "| node lost, Heartbeat: within leaseDurationSeconds (5 s) + 1 s, every sample | max {} over {} cuts | {} |",
            secs(max),
            hb.samples_ms.len(),
            if max <= bound { "yes" } else { "**no**" }
        );
    }
    let _ = writeln!(out);
}

/// The section, between its markers.
pub fn section(result: &E2eResult) -> String {
    let mut out = String::new();
    let run = &result.run;
    let _ = writeln!(out, "{BEGIN}");
    let _ = writeln!(out, "## End to end, on the real cluster\n");
    let _ = writeln!(
        out,
        "What a user waits for: from the fault until the new leader's application knows that it leads (detection, decision and the application learning its role), on a real two-node cluster, ours against the peers in one run. Generated by `make bench-e2e` (`leadergroup-bench --only e2e`{}) on {}; the run took {:.0} s; every sample is in `bench/results/e2e.json`. This is separate from the API-to-API sections below, which start their clock at the API event and run on the light cluster.\n",
        if run.quick {
            " --quick: a smoke run, not figures to publish"
        } else {
            ""
        },
        run.started_at,
        run.duration_s
    );
    let _ = writeln!(out, "![end-to-end distributions](benchmarks-e2e.png)\n");
    let _ = writeln!(out, "{}\n", result.setup);
    let _ = writeln!(
        out,
        "The cluster's `--node-monitor-grace-period` is {} s{}: a lost node's pods turn NotReady only after it, which bounds every Readiness-mode handover of a lost node. Cluster: {}.\n",
        result.node_monitor_grace_period_s,
        if result.node_monitor_grace_period_s == 50 {
            " (Kubernetes' default)"
        } else {
            " (Kubernetes' default is 50 s)"
        },
        run.control_plane
    );
    let _ = writeln!(
        out,
        "A split brain: a candidate started leading while another one still believed it led. A killed, deleted or frozen leader's belief stops counting at the fault (it cannot act; a frozen one counts again from its thaw); a cut-off leader's keeps counting (it runs on) until it says it stopped.\n"
    );
    let _ = writeln!(out, "{}", headline(result));
    let _ = writeln!(
        out,
        "Medians; in brackets the peer's median over ours from the same run (above 1: ours is faster).\n"
    );
    for sc in &result.scenarios {
        scenario_table(&mut out, sc);
    }
    targets(&mut out, result);
    let _ = writeln!(out, "{END}");
    out
}

/// Puts `section` into the page at `path`: in place of the marked section when there is one,
/// else before "## The machine and the versions" (or at the end).
pub fn splice(path: &Path, section: &str) -> Result<()> {
    let page =
        std::fs::read_to_string(path).map_err(Error::io(format!("reading {}", path.display())))?;
    let spliced = match (page.find(BEGIN), page.find(END)) {
        (Some(b), Some(e)) if e > b => {
            let after = &page[e + END.len()..];
            format!("{}{}{}", &page[..b], section.trim_end(), after)
        }
        _ => match page.find("## The machine and the versions") {
            Some(at) => format!("{}{}\n\n{}", &page[..at], section.trim_end(), &page[at..]),
            None => format!("{}\n{}", page.trim_end(), section),
        },
    };
    std::fs::write(path, spliced).map_err(Error::io(format!("writing {}", path.display())))
}
