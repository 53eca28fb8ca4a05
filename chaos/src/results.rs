//! The run's machine-readable result (`chaos/results/latest.json` for `make chaos`), and its page
//! (`docs/chaos.md`), rendered from that result alone: `leadergroup-chaos --render-only JSON`
//! writes the committed page again from the committed result without a run, and a unit test
//! fails when the two differ.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::report::secs;

/// What a run found, and under which code and settings. Durations are whole milliseconds
/// (`*_ms`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Results {
    /// The tree the run measured.
    pub commit: Commit,
    pub seed: u64,
    /// The command line that ran it.
    pub command: String,
    pub run: RunTimes,
    pub settings: Settings,
    pub faults: Faults,
    /// Every invariant in the page's order, with its violations.
    pub invariants: Vec<Invariant>,
    pub watch: Watch,
    pub applications: Applications,
    pub gaps: Gaps,
    /// The first [`OVERLAPS_KEPT`] overlaps of two applications acting as leader, with the
    /// faults before each.
    pub overlaps: Vec<OverlapSeen>,
    pub rounds: Rounds,
    /// Per operator replica: how many processes it had over the run.
    pub processes: BTreeMap<String, u32>,
}

/// How many violations of each invariant the result keeps (all are counted).
pub const FIRST_KEPT: usize = 10;
/// How many overlaps the result keeps with their faults.
pub const OVERLAPS_KEPT: usize = 20;
/// How many of the longest gaps the result keeps with their faults.
pub const LONGEST_KEPT: usize = 10;

/// `git rev-parse HEAD` of the tree measured, and whether tracked files differed from it (the
/// bench's results say the same in `run.commit` and `run.uncommitted`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    pub sha: String,
    pub dirty: bool,
    /// The tracked files that differed (`git status --porcelain`), when dirty.
    pub uncommitted: Vec<String>,
}

impl Commit {
    /// The commit checked out in `repo` now, and its uncommitted changes to tracked files; an
    /// error when git cannot say, since a result must name what it measured.
    pub fn of(repo: &Path) -> Result<Commit, Error> {
        let (sha, uncommitted) = leadergroup_testenv::record::checkout(repo);
        if sha == "?" {
            return Err(Error::Setup(format!(
                "git cannot say which commit {} is at",
                repo.display()
            )));
        }
        Ok(Commit {
            sha,
            dirty: !uncommitted.is_empty(),
            uncommitted,
        })
    }
}

/// When the run started (before its control plane) and finished (`YYYY-MM-DD HH:MM:SS UTC`, as
/// the bench's results), and how long its parts took.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RunTimes {
    pub started_at: String,
    pub finished_at: String,
    pub setup_ms: u64,
    /// The faults and the rounds' settling.
    pub faults_ms: u64,
    pub total_ms: u64,
}

/// The run's settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub groups: usize,
    pub pods_per_group: usize,
    pub lease_seconds: u32,
    pub operator_lease_seconds: u32,
    /// Faults per round.
    pub round: usize,
    /// I4's bound.
    pub gap_bound_ms: u64,
    /// I2's: how long a round's groups have to settle.
    pub settle_within_ms: u64,
    pub namespace: String,
}

/// The faults: planned, injected and skipped, in all and per kind, and why they were skipped.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Faults {
    pub planned: usize,
    pub injected: usize,
    pub skipped: usize,
    /// Every kind, in the plan's order (`plan::KINDS`).
    pub kinds: Vec<KindCount>,
    /// Every reason, the most frequent first.
    pub skip_reasons: Vec<SkipReason>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct KindCount {
    pub kind: String,
    pub planned: usize,
    pub injected: usize,
    pub skipped: usize,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SkipReason {
    pub reason: String,
    pub count: usize,
}

/// One invariant (or the run's own soundness: `watch`, `harness`) and its violations.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Invariant {
    /// `I1`, `I2`, `I3`, `order`, `I4`, `HA`, `App`, `watch`, `harness`.
    pub id: String,
    pub violations: usize,
    /// The first [`FIRST_KEPT`], as the run worded them.
    pub first: Vec<String>,
}

/// What the independent watch saw.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    /// Leaders handed an epoch.
    pub leaders: usize,
    pub pod_events: usize,
    /// Leaders' marks the order of the writes was judged on, and those it could not be.
    pub order_judged: usize,
    pub order_unjudged: usize,
}

/// What the applications acted on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Applications {
    /// Publications their relays handed them.
    pub deliveries: usize,
    /// Of them, those that started a leadership.
    pub leader_starts: usize,
    /// Leaderships ended by their publication's `valid_until` alone.
    pub lapsed: usize,
}

/// The time without a leader (I4).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Gaps {
    /// The gap table: `all`, `active replica` (opened while a fault struck the active replica),
    /// `other`.
    pub rows: Vec<GapRow>,
    /// The [`LONGEST_KEPT`] longest.
    pub longest: Vec<LongGap>,
    pub api_restarts: ApiRestarts,
}

/// A row of the gap table: closed gaps, and their length's quantiles (nearest rank).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct GapRow {
    pub row: String,
    pub count: usize,
    pub median_ms: Option<u64>,
    pub p90_ms: Option<u64>,
    pub p99_ms: Option<u64>,
    pub worst_ms: Option<u64>,
}

/// The row names of [`Gaps::rows`].
pub const GAP_ROWS: [&str; 3] = ["all", "active replica", "other"];

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LongGap {
    pub group: String,
    /// Since the first fault.
    pub opened_ms: u64,
    /// `None`: still open at the end.
    pub length_ms: Option<u64>,
    /// How much of it a kube-apiserver restart took.
    pub api_down_ms: u64,
    /// The last six faults injected in the 3 s before it opened.
    pub faults_before: Vec<FaultSeen>,
}

/// A fault as a gap's or an overlap's context shows it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct FaultSeen {
    pub index: usize,
    /// Since the first fault.
    pub at_ms: u64,
    pub what: String,
}

/// The kube-apiserver restarts, until it answered again.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ApiRestarts {
    pub count: usize,
    pub median_ms: Option<u64>,
    pub worst_ms: Option<u64>,
}

/// Two applications of a group acting as leader at once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct OverlapSeen {
    pub group: String,
    /// Since the first fault.
    pub opened_ms: u64,
    /// The pod that acted as leader first, and its epoch.
    pub first: (String, i64),
    pub second: (String, i64),
    /// `None`: still open at the end.
    pub length_ms: Option<u64>,
    /// The faults of its group and the run-wide ones injected in the 10 s before it.
    pub faults_before: Vec<FaultSeen>,
}

/// The rounds' settling (I2).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Rounds {
    pub count: usize,
    pub settle_median_ms: Option<u64>,
    pub settle_worst_ms: Option<u64>,
}

/// Whole milliseconds.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `ms` as the page shows a length.
fn show(ms: u64) -> String {
    secs(Duration::from_millis(ms))
}

/// An optional length; `–` when there is none.
fn show_opt(ms: Option<u64>) -> String {
    ms.map_or_else(|| "–".into(), show)
}

/// An instant as the page shows it, to the minute.
fn minute(at: &str) -> String {
    format!("{} UTC", at.get(..16).unwrap_or(at))
}

/// What each invariant says and what was checked, for the page's table.
fn invariant_row(r: &Results, id: &str) -> (String, String) {
    let (what, checked) = match id {
        "I1" => (
            "I1: at most one pod of a group labeled leader".to_owned(),
            format!(
                "every pod event of an independent watch ({})",
                r.watch.pod_events
            ),
        ),
        "I2" => (
            "I2: once converged, the labeled leader is the Lease holder, epochs equal (status, Lease, pod)"
                .to_owned(),
            format!(
                "after each of {} rounds, all groups, within {}",
                r.rounds.count,
                show(r.settings.settle_within_ms)
            ),
        ),
        "I3" => (
            "I3: epochs only grow, none handed to two pods".to_owned(),
            "every pod event of the watch".to_owned(),
        ),
        "order" => (
            "Order: a pod carries a leader's epoch only once the group's Lease names it at that epoch and its status records it"
                .to_owned(),
            format!(
                "{} leaders' marks judged on the watches' revisions ({} not judgeable)",
                r.watch.order_judged, r.watch.order_unjudged
            ),
        ),
        "I4" => (
            format!(
                "I4: an eligible candidate gets an eligible leader within {} (not counting a kube-apiserver restart's own downtime)",
                show(r.settings.gap_bound_ms)
            ),
            format!(
                "{} gaps timed by the watch",
                r.gaps.rows.first().map_or(0, |g| g.count)
            ),
        ),
        "HA" => (
            "one active operator replica at a time".to_owned(),
            "both replicas' /readyz every 20 ms, two polls in a row".to_owned(),
        ),
        "App" => (
            "App: at no instant do the applications of two pods of a group act as leader, each acting on the last publication its member's relay (the agent) handed it, leader only before its `valid_until`, on one clock (the run's monotonic clock)"
                .to_owned(),
            format!(
                "every publication handed to every pod's application: {} handed, {} of them starting a leadership, {} leaderships ended by their `valid_until` alone",
                r.applications.deliveries, r.applications.leader_starts, r.applications.lapsed
            ),
        ),
        "watch" => (
            "the independent watch kept up (a watch behind at the end would leave writes unjudged)"
                .to_owned(),
            "at the end of the run".to_owned(),
        ),
        "harness" => (
            "the run did what it counted: every undo, every replica restarted (a failure voids the verdict)"
                .to_owned(),
            "every fault's undo".to_owned(),
        ),
        other => (other.to_owned(), String::new()),
    };
    (what, checked)
}

impl Results {
    /// Reads a result written by [`Results::write`].
    pub fn read(path: &Path) -> Result<Results, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })
    }

    /// Writes it to `path`, pretty, creating its folder if need be.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let failed = |source| Error::Write {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        std::fs::write(path, text + "\n").map_err(failed)
    }

    /// Every violation, of every invariant.
    pub fn violations(&self) -> usize {
        self.invariants.iter().map(|i| i.violations).sum()
    }

    /// The page, from this result alone; `source`: where the result is, named in the page's
    /// first line so that it can be rendered again.
    pub fn markdown(&self, source: &str) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "<!-- Rendered from {source} by leadergroup-chaos; `leadergroup-chaos --render-only {source}` writes it again. -->\n"
        );
        let _ = writeln!(md, "# Chaos run\n");
        self.header(&mut md);
        let _ = writeln!(md, "## Result\n");
        self.result(&mut md);
        if !self.overlaps.is_empty() {
            self.overlap_sequences(&mut md);
        }
        let _ = writeln!(md, "## Time without a leader (I4)\n");
        self.gaps(&mut md);
        let _ = writeln!(md, "\n## Faults\n");
        self.faults(&mut md);
        let _ = writeln!(md, "\n## The run\n");
        self.the_run(&mut md);
        md
    }

    fn header(&self, md: &mut String) {
        let dirty = if self.commit.dirty {
            let shown: Vec<String> = self
                .commit
                .uncommitted
                .iter()
                .take(5)
                .map(|p| format!("`{p}`"))
                .collect();
            let more = self.commit.uncommitted.len().saturating_sub(shown.len());
            format!(
                ", with uncommitted changes to {}{}",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more files")
                } else {
                    String::new()
                }
            )
        } else {
            String::new()
        };
        let groups = if self.settings.groups == 4 {
            String::new()
        } else {
            format!(" --groups {}", self.settings.groups)
        };
        let _ = writeln!(
            md,
            "Generated by `{command}` on {finished}, on commit `{sha}`{dirty}; the result is \
             machine-readable beside it. Seed {seed}: the same seed injects the same faults \
             (kinds, targets, lengths, pauses) in the same order; which pod leads when one \
             strikes, and what the operator makes of it, is the run's own. Repeat it with \
             `make chaos CHAOS_ARGS=\"--seed {seed} --faults {planned}{groups}\"`.\n",
            command = self.command,
            finished = minute(&self.run.finished_at),
            sha = self.commit.sha,
            seed = self.seed,
            planned = self.faults.planned,
        );
    }

    fn result(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "**{} violations** of I1–I4, the order of the writes, one active replica and the \
             applications' single leader in {} faults injected ({} planned, {} skipped: no such \
             pod or Lease at that moment), {} leaders handed an epoch, {} pod events watched, {} \
             publications handed to the applications.\n",
            self.violations(),
            self.faults.injected,
            self.faults.planned,
            self.faults.skipped,
            self.watch.leaders,
            self.watch.pod_events,
            self.applications.deliveries,
        );
        let _ = writeln!(md, "| invariant | checked | violations |\n|---|---|---|");
        for i in &self.invariants {
            let (what, checked) = invariant_row(self, &i.id);
            let _ = writeln!(md, "| {what} | {checked} | {} |", i.violations);
        }
        let _ = writeln!(md);
        if self.violations() > 0 {
            let _ = writeln!(md, "Violations (the first {FIRST_KEPT} of each):\n");
            for i in &self.invariants {
                for v in &i.first {
                    let _ = writeln!(md, "- {v}");
                }
                if i.violations > i.first.len() {
                    let _ = writeln!(
                        md,
                        "- ... and {} more of {}",
                        i.violations - i.first.len(),
                        i.id
                    );
                }
            }
            let _ = writeln!(md);
        }
    }

    /// Each overlap of two applications acting as leader, with the faults of its group and the
    /// run-wide ones injected in the 10 s before it opened.
    fn overlap_sequences(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Two applications leading at once\n\nEach overlap (the first {OVERLAPS_KEPT}), with \
             the faults of its group and the run-wide ones injected in the 10 s before it opened \
             (time into the run):\n"
        );
        for o in &self.overlaps {
            let faults: Vec<String> = o
                .faults_before
                .iter()
                .map(|f| format!("{} #{} {}", show(f.at_ms), f.index, f.what))
                .collect();
            let _ = writeln!(
                md,
                "- {} at {}: {} (epoch {}) then {} (epoch {}), for {}. Before it: {}",
                o.group,
                show(o.opened_ms),
                o.first.0,
                o.first.1,
                o.second.0,
                o.second.1,
                o.length_ms
                    .map_or_else(|| "the rest of the run".into(), show),
                faults.join("; ")
            );
        }
        let _ = writeln!(md);
    }

    fn gaps(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "A gap opens when the watch sees a group with an eligible candidate (Running, Ready, not \
             terminating) and no eligible pod labeled leader, and closes when it sees one again: the \
             time an application had no leader to serve it, on the watch's clock.\n"
        );
        let _ = writeln!(
            md,
            "| gaps | count | median | p90 | p99 | worst |\n|---|---|---|---|---|---|"
        );
        for row in &self.gaps.rows {
            let what = match row.row.as_str() {
                "active replica" => {
                    "opened while a fault struck the active replica (from the fault until its undo and one operator Lease after)"
                }
                "other" => "every other",
                other => other,
            };
            let _ = writeln!(
                md,
                "| {what} | {} | {} | {} | {} | {} |",
                row.count,
                show_opt(row.median_ms),
                show_opt(row.p90_ms),
                show_opt(row.p99_ms),
                show_opt(row.worst_ms),
            );
        }
        let _ = writeln!(
            md,
            "\nThe {LONGEST_KEPT} longest, with the faults injected in the 3 s before they opened \
             (the last six), and how much of them a kube-apiserver restart took (its stop, its \
             start, until it answered again):\n"
        );
        let _ = writeln!(
            md,
            "| group | opened | length | kube-apiserver restarting | faults before |\n|---|---|---|---|---|"
        );
        for g in &self.gaps.longest {
            let before: Vec<String> = g
                .faults_before
                .iter()
                .map(|f| format!("#{} {}", f.index, f.what))
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                g.group,
                show(g.opened_ms),
                g.length_ms.map_or_else(|| "open".into(), show),
                show(g.api_down_ms),
                before.join("; ")
            );
        }
        let restarts = &self.gaps.api_restarts;
        let _ = writeln!(
            md,
            "\nThe {} kube-apiserver restarts took median {}, worst {} (until it answered again).",
            restarts.count,
            show_opt(restarts.median_ms),
            show_opt(restarts.worst_ms)
        );
        let _ = writeln!(
            md,
            "\nWhat holds a gap open, read from the run's timeline (`seed-N/timeline.tsv` in the work \
             folder: every fault, gap and restart on the wall clock) beside the replicas' logs: the \
             waits the protocol makes on purpose, added up when faults overlap. An active replica \
             killed, paused or cut off is replaced once its operator Lease ({} s) has gone unrenewed \
             for its duration (the replica that takes over arbitrates the old one's groups at \
             once: that one stopped acting before its hold ran out); a handover whose old leader's \
             member cannot step down (its node cut off, its connections stalled, its agent paused) \
             waits for that leader's belief to lapse (two thirds of the group Lease, {} s, after a \
             `leaseDurationSeconds` edit of the longer one); a stalled connection is noticed after \
             4 s; and the kube-apiserver restarts and its watches' 410 Gone.",
            self.settings.operator_lease_seconds, self.settings.lease_seconds
        );
    }

    fn faults(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "| fault | planned | injected | skipped |\n|---|---|---|---|"
        );
        for k in &self.faults.kinds {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                k.kind, k.planned, k.injected, k.skipped
            );
        }
        if !self.faults.skip_reasons.is_empty() {
            let _ = writeln!(md, "\nWhy faults were skipped:\n");
            for r in self.faults.skip_reasons.iter().take(10) {
                let _ = writeln!(md, "- {}× {}", r.count, r.reason);
            }
        }
    }

    fn the_run(&self, md: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            md,
            "- A control plane of its own (etcd + kube-apiserver, restarted by the faults), namespace \
             `{}`; {} groups of {} pods (the simulated kubelet), `leaseDurationSeconds: {}`, the \
             odd-numbered groups in Heartbeat mode, the others in Readiness mode (but for a \
             `liveness` edit's while).",
            s.namespace, s.groups, s.pods_per_group, s.lease_seconds
        );
        let _ = writeln!(
            md,
            "- Every pod runs the client's `Membership` in the run's process (its group's member \
             ServiceAccount, through a proxy of its own: its node's network); the pods of g2, g3, \
             g6, g7, ... run two, each through its own proxy. Each member has an application, which \
             acts as leader only while the last publication it got says `Leader` and its \
             `valid_until` has not passed. A pod's last member is its agent: a sidecar whose relay \
             hands each publication to its application, its member stepping down only once the \
             application got the publication that says so (gated, as the agent binary's is); the \
             first of a pod of two is the application's own, in its process. An agent paused \
             hands over nothing and its connection holds every byte (a frozen sidecar) while its \
             application runs on with what it last got; the leader's, half the time, while \
             `preferredLeader` names a follower. All stop when the pod's container stops. A \
             client restart stops the members and starts new ones in the same pod (an agent's \
             application runs on meanwhile); a cut-off node holds its connections' bytes and its \
             kubelet's reports (pod faults skip it); one member cut off alone holds only its own; \
             a stall leaves the open connections silent for good while new ones flow. In Heartbeat \
             mode the leader's members renew the Lease. Two applications of one pod acting as \
             leader together are one leader."
        );
        let _ = writeln!(
            md,
            "- Spec edits as a user makes them (a merge patch), each put back 0.1–3 s later: the \
             selector leaving one pod out, `preferredLeader` naming a follower, \
             `leaseDurationSeconds` 2–6, `paused`, `liveness` flipped. The watch's gaps count \
             every pod labeled with the group's `app` as a candidate: a pod left out by a \
             selector edit, or a paused group, can lengthen a gap."
        );
        let processes: Vec<String> = self
            .processes
            .iter()
            .map(|(n, g)| format!("{n} {g}"))
            .collect();
        let _ = writeln!(
            md,
            "- Two operator replicas with `--leader-elect` (their own Lease {} s), each through a proxy \
             of its own (the held and cut requests); processes over the run: {}.",
            s.operator_lease_seconds,
            processes.join(", ")
        );
        let _ = writeln!(
            md,
            "- Faults 10–150 ms apart, each undone on its own later (so they overlap); the replicas' \
             faults one at a time (one operator always runs), as the promotion holds. Every {} faults \
             a round ends: everything undone, the pods repaired (Ready again, {} per group), then all \
             groups must settle (I2). Settling took median {}, worst {} over {} rounds.",
            s.round,
            s.pods_per_group,
            show_opt(self.rounds.settle_median_ms),
            show_opt(self.rounds.settle_worst_ms),
            self.rounds.count
        );
        let _ = writeln!(
            md,
            "- Started {}, finished {}: set-up {}, faults and rounds {}, in all {}.",
            minute(&self.run.started_at),
            minute(&self.run.finished_at),
            show(self.run.setup_ms),
            show(self.run.faults_ms),
            show(self.run.total_ms)
        );
    }
}

/// The source a page names in its first line (`<!-- Rendered from SOURCE by ...`), if any.
pub fn page_source(page: &str) -> Option<&str> {
    page.lines()
        .next()?
        .strip_prefix("<!-- Rendered from ")?
        .split_once(" by leadergroup-chaos")
        .map(|(source, _)| source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// The committed page is the committed result rendered (`--render-only` writes it again);
    /// a page that names no result is from before results were written, and then none may be
    /// committed under the name `make chaos` writes.
    #[test]
    fn the_committed_page_is_its_committed_result_rendered() {
        let page = std::fs::read_to_string(repo().join("docs/chaos.md")).unwrap();
        let Some(source) = page_source(&page) else {
            assert!(
                !repo().join("chaos/results/latest.json").exists(),
                "docs/chaos.md names no result, but chaos/results/latest.json is committed: \
                 leadergroup-chaos --render-only chaos/results/latest.json"
            );
            return;
        };
        let results = Results::read(&repo().join(source)).unwrap();
        let rendered = results.markdown(source);
        if rendered != page {
            let diff: Vec<String> = page
                .lines()
                .zip(rendered.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("committed: {a}\nrendered:  {b}"))
                .take(5)
                .collect();
            panic!(
                "docs/chaos.md differs from {source} rendered (leadergroup-chaos --render-only {source}):\n{}",
                diff.join("\n")
            );
        }
    }

    #[test]
    fn the_page_names_its_source_and_a_result_reads_back_as_written() {
        let results = sample();
        let page = results.markdown("chaos/results/x.json");
        assert_eq!(page_source(&page), Some("chaos/results/x.json"));
        let path = std::env::temp_dir().join(format!("chaos-results-{}.json", std::process::id()));
        results.write(&path).unwrap();
        let back = Results::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(back, results);
        assert_eq!(back.markdown("chaos/results/x.json"), page);
        assert!(
            page.contains(
                "on 2026-12-07 18:05 UTC, on commit `abc`, with uncommitted changes to `src/a.rs`"
            ),
            "{page}"
        );
        assert!(page.contains("| agent paused | 3 | 2 | 1 |"), "{page}");
        assert!(page.contains("- 1× its agent is paused"), "{page}");
        assert!(page.contains("- App: two at once"), "{page}");
    }

    fn sample() -> Results {
        Results {
            commit: Commit {
                sha: "abc".into(),
                dirty: true,
                uncommitted: vec!["src/a.rs".into()],
            },
            seed: 3,
            command: "leadergroup-chaos --seed 3 --faults 3".into(),
            run: RunTimes {
                started_at: "2026-12-07 18:00:00 UTC".into(),
                finished_at: "2026-12-07 18:05:00 UTC".into(),
                setup_ms: 5000,
                faults_ms: 290_000,
                total_ms: 295_000,
            },
            settings: Settings {
                groups: 4,
                pods_per_group: 3,
                lease_seconds: 3,
                operator_lease_seconds: 4,
                round: 100,
                gap_bound_ms: 30_000,
                settle_within_ms: 60_000,
                namespace: "chaos-x".into(),
            },
            faults: Faults {
                planned: 3,
                injected: 2,
                skipped: 1,
                kinds: vec![KindCount {
                    kind: "agent paused".into(),
                    planned: 3,
                    injected: 2,
                    skipped: 1,
                }],
                skip_reasons: vec![SkipReason {
                    reason: "its agent is paused".into(),
                    count: 1,
                }],
            },
            invariants: vec![Invariant {
                id: "App".into(),
                violations: 1,
                first: vec!["App: two at once".into()],
            }],
            watch: Watch {
                leaders: 4,
                pod_events: 40,
                order_judged: 4,
                order_unjudged: 0,
            },
            applications: Applications {
                deliveries: 20,
                leader_starts: 5,
                lapsed: 1,
            },
            gaps: Gaps {
                rows: vec![GapRow {
                    row: "all".into(),
                    count: 1,
                    median_ms: Some(1500),
                    p90_ms: Some(1500),
                    p99_ms: Some(1500),
                    worst_ms: Some(1500),
                }],
                longest: Vec::new(),
                api_restarts: ApiRestarts {
                    count: 0,
                    median_ms: None,
                    worst_ms: None,
                },
            },
            overlaps: Vec::new(),
            rounds: Rounds {
                count: 1,
                settle_median_ms: Some(100),
                settle_worst_ms: Some(100),
            },
            processes: BTreeMap::from([("op-a".into(), 1), ("op-b".into(), 2)]),
        }
    }
}
