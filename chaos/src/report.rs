//! What a run injected and what it saw, and its result ([`Results`]), which the page is rendered
//! from.

use std::fmt::Write as _;
use std::ops::Range;
use std::time::{Duration, Instant};

use leadergroup_testenv::{ActiveMonitor, InvariantWatcher};

use crate::Config;
use crate::members::{Claims, Overlap};
use crate::plan::{Fault, KINDS, Replica, SpecEdit};
use crate::replica::OperatorReplica;
use crate::results::{
    ApiRestarts, Applications, Commit, FIRST_KEPT, FaultSeen, Faults, GAP_ROWS, GapRow, Gaps,
    Invariant, KindCount, LONGEST_KEPT, LongGap, OVERLAPS_KEPT, OverlapSeen, Results, Rounds,
    RunTimes, Settings, SkipReason, Watch, ms,
};

/// One fault as the run injected it (or skipped it).
#[derive(Clone, Debug)]
pub struct Injected {
    pub index: usize,
    /// Since the first fault.
    pub at: Duration,
    pub fault: Fault,
    /// Why it was not injected, if it was not.
    pub skipped: Option<String>,
}

impl Injected {
    pub fn new(index: usize, at: Duration, fault: &Fault, skipped: Option<String>) -> Injected {
        Injected {
            index,
            at,
            fault: fault.clone(),
            skipped,
        }
    }
}

/// The end of a round of faults: how long the groups took to settle (I2), or why they did not.
#[derive(Clone, Debug)]
pub struct Round {
    pub faults: Range<usize>,
    pub settle: Duration,
    pub unsettled: Option<String>,
}

/// A gap (an eligible candidate, no eligible leader) as the watch saw it, since the first fault.
#[derive(Clone, Debug)]
pub struct GapSeen {
    pub group: String,
    pub start: Duration,
    /// `None`: still open at the end of the run.
    pub length: Option<Duration>,
}

/// The run's record.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub planned: usize,
    pub groups: usize,
    pub lease_seconds: u32,
    pub operator_lease_seconds: u32,
    pub round: usize,
    pub gap_bound: Duration,
    pub namespace: String,
    pub setup: Duration,
    pub injected: Vec<Injected>,
    pub rounds: Vec<Round>,
    /// I1, I3 and the order of the writes, from the independent watch.
    pub watch_violations: Vec<String>,
    pub leaders_seen: usize,
    pub pod_events: usize,
    /// Leaders' marks the order of the writes was judged on, and those it could not be (a watch
    /// may have missed what would decide them).
    pub order_judged: (usize, usize),
    pub gaps: Vec<GapSeen>,
    pub faults_took: Duration,
    pub total: Duration,
    /// Per replica: its name and how many processes it had.
    pub processes: Vec<(String, u32)>,
    /// The kube-apiserver restarts: from the fault until the API server answered again, since the
    /// first fault.
    pub api_down: Vec<(Duration, Duration)>,
    /// Both replicas said active: since the first fault, for how long.
    pub both_active: Vec<(Duration, Duration)>,
    /// The applications: publications handed to them, of them those that made one start acting
    /// as leader, and leaderships ended by their validity alone.
    pub app_deliveries: (usize, usize, usize),
    /// Two of a group's applications acting as leader at once, each with when it opened since
    /// the first fault (0 before it).
    pub overlaps: Vec<(Overlap, Duration)>,
    /// The wall clock at the first fault: the timeline's offsets become times the replicas' logs
    /// can be matched against.
    pub faults_started_at: Option<jiff::Timestamp>,
    /// What the run failed to do after counting a fault (its undo, a restart): a void verdict.
    pub harness_errors: Vec<String>,
    /// When the run started (before its control plane) and finished.
    pub started_at: Option<jiff::Timestamp>,
    pub finished_at: Option<jiff::Timestamp>,
}

impl Report {
    pub fn new(config: &Config, namespace: &str, setup: Duration) -> Report {
        Report {
            seed: config.seed,
            planned: config.faults,
            groups: config.groups,
            lease_seconds: config.lease_seconds,
            operator_lease_seconds: config.operator_lease_seconds,
            round: config.round,
            gap_bound: config.gap_bound,
            namespace: namespace.to_owned(),
            setup,
            injected: Vec::new(),
            rounds: Vec::new(),
            watch_violations: Vec::new(),
            leaders_seen: 0,
            pod_events: 0,
            order_judged: (0, 0),
            gaps: Vec::new(),
            faults_took: Duration::ZERO,
            total: Duration::ZERO,
            processes: Vec::new(),
            api_down: Vec::new(),
            both_active: Vec::new(),
            app_deliveries: (0, 0, 0),
            overlaps: Vec::new(),
            faults_started_at: None,
            harness_errors: Vec::new(),
            started_at: None,
            finished_at: None,
        }
    }

    /// A kube-apiserver restart from `from` to `to` (since the first fault).
    pub fn api_down(&mut self, from: Duration, to: Duration) {
        self.api_down.push((from, to));
    }

    /// Whether `gap` opened while a fault struck the active replica: from its injection until its
    /// undo and one operator Lease after (the longest a standby waits to take over).
    pub fn active_replica_fault_within(&self, gap: &GapSeen) -> bool {
        let lease = Duration::from_secs(u64::from(self.operator_lease_seconds));
        self.injected
            .iter()
            .filter(|i| i.skipped.is_none())
            .filter(|i| i.fault.replica() == Some(Replica::Active))
            .any(|i| {
                let undone = i.at + i.fault.length().unwrap_or_default();
                i.at <= gap.start && gap.start <= undone + lease
            })
    }

    /// How much of `gap` the API server was down (restarting): no operator can act then.
    pub fn api_down_within(&self, gap: &GapSeen) -> Duration {
        let end = gap.start + gap.length.unwrap_or_default();
        self.api_down
            .iter()
            .map(|(from, to)| {
                let (a, b) = ((*from).max(gap.start), (*to).min(end));
                b.saturating_sub(a)
            })
            .sum()
    }

    pub fn injected(&mut self, injected: Injected) {
        self.injected.push(injected);
    }

    pub fn round(&mut self, round: Round) {
        self.rounds.push(round);
    }

    /// Takes the watch's findings once the faults are over.
    pub fn finish(
        &mut self,
        watch: &InvariantWatcher,
        monitor: &ActiveMonitor,
        claims: &Claims,
        faults_started: Instant,
        total: Duration,
        replicas: &mut [OperatorReplica],
    ) {
        let (violations, leaders, events) = watch.report();
        self.watch_violations = violations;
        self.leaders_seen = leaders.len();
        self.pod_events = events;
        self.order_judged = watch.order_judged();
        self.gaps = watch
            .gaps()
            .into_iter()
            .filter(|g| g.start >= faults_started)
            .map(|g| GapSeen {
                group: g.group,
                start: g.start - faults_started,
                length: g.length,
            })
            .collect();
        // Two polls in a row (40 ms): one poll could catch a clean handover between its answers.
        self.both_active = monitor
            .overlaps()
            .into_iter()
            .filter(|o| o.polls > 1)
            .map(|o| (o.since.saturating_duration_since(faults_started), o.length))
            .collect();
        let apps = claims.report();
        self.app_deliveries = (apps.deliveries, apps.leader_starts, apps.lapsed);
        self.overlaps = apps
            .overlaps
            .into_iter()
            .map(|o| {
                let start = o.since.saturating_duration_since(faults_started);
                (o, start)
            })
            .collect();
        self.faults_took = faults_started.elapsed();
        self.total = total;
        self.processes = replicas
            .iter()
            .map(|r| (r.name.clone(), r.generations()))
            .collect();
    }

    /// Every violation: I1, I3 and the order of the writes (the watch), I2 (a round that did not
    /// settle), I4 (a gap longer than the bound once the API server's own restarts are taken out
    /// of it, or one still open at the end), two replicas active at once, two pods' applications
    /// of a group acting as leader at once, and the run's own failures (a watch behind, an undo
    /// that failed), which void the verdict.
    pub fn violations(&self) -> Vec<String> {
        self.classified().into_iter().map(|(_, v)| v).collect()
    }

    /// [`Report::violations`], each with the id of what it violates ([`INVARIANTS`]).
    fn classified(&self) -> Vec<(&'static str, String)> {
        let mut all: Vec<(&'static str, String)> = self
            .watch_violations
            .iter()
            .map(|v| {
                let id = ["I1", "I3", "order"]
                    .into_iter()
                    .find(|id| v.starts_with(&format!("{id}:")))
                    .unwrap_or("watch");
                (id, v.clone())
            })
            .collect();
        all.extend(
            self.harness_errors
                .iter()
                .map(|e| ("harness", format!("Harness: {e}"))),
        );
        for (o, start) in &self.overlaps {
            all.push(("App", format!(
                "App: the applications of {} (epoch {}) and {} (epoch {}) of {} both acted as leader for {} (from {} into the run)",
                o.first.0,
                o.first.1,
                o.second.0,
                o.second.1,
                o.group,
                o.length.map_or_else(|| "the rest of the run".into(), secs),
                secs(*start)
            )));
        }
        for (since, length) in &self.both_active {
            all.push((
                "HA",
                format!(
                    "HA: both replicas reported active for {} (from {} into the run)",
                    secs(*length),
                    secs(*since)
                ),
            ));
        }
        for r in &self.rounds {
            if let Some(why) = &r.unsettled {
                all.push((
                    "I2",
                    format!(
                        "I2: not settled within {} after faults {}..{}: {why}",
                        secs(crate::run::SETTLE),
                        r.faults.start,
                        r.faults.end
                    ),
                ));
            }
        }
        for g in &self.gaps {
            match g.length {
                Some(l) if l.saturating_sub(self.api_down_within(g)) <= self.gap_bound => {}
                Some(l) => all.push(("I4", format!(
                    "I4: {} without an eligible leader for {} ({} of it kube-apiserver restarting; from {} into the run; bound {})",
                    g.group,
                    secs(l),
                    secs(self.api_down_within(g)),
                    secs(g.start),
                    secs(self.gap_bound)
                ))),
                None => all.push((
                    "I4",
                    format!(
                        "I4: {} still without an eligible leader at the end (since {})",
                        g.group,
                        secs(g.start)
                    ),
                )),
            }
        }
        all
    }

    /// Every fault, gap and kube-apiserver restart in the order they happened, one per line:
    /// wall clock (UTC), seconds since the first fault, what. Matched against the replicas'
    /// logs, it tells what held a long gap open.
    pub fn timeline(&self) -> String {
        let faults = self.injected.iter().map(|i| {
            let what = match &i.skipped {
                None => format!("fault #{} {}", i.index, describe(&i.fault)),
                Some(why) => format!("fault #{} {} skipped: {why}", i.index, describe(&i.fault)),
            };
            (i.at, what)
        });
        let gaps = self.gaps.iter().map(|g| {
            let length = g.length.map_or_else(|| "still open".into(), secs);
            (g.start, format!("gap {} opened, lasted {length}", g.group))
        });
        let restarts = self.api_down.iter().map(|(from, to)| {
            let length = secs(to.saturating_sub(*from));
            (
                *from,
                format!("kube-apiserver restart, answered again after {length}"),
            )
        });
        let mut events: Vec<(Duration, String)> = faults.chain(gaps).chain(restarts).collect();
        events.sort_by_key(|(at, _)| *at);
        let mut out = String::new();
        for (at, what) in events {
            let wall = self
                .faults_started_at
                .and_then(|t| jiff::SignedDuration::try_from(at).ok().map(|d| t + d))
                .map_or_else(|| "-".into(), |t| t.to_string());
            let _ = writeln!(out, "{wall}\t{:.3}\t{what}", at.as_secs_f64());
        }
        out
    }

    /// The longest gap.
    pub fn worst_gap(&self) -> Option<&GapSeen> {
        self.gaps
            .iter()
            .max_by_key(|g| g.length.unwrap_or(Duration::MAX))
    }

    /// Faults injected (not skipped).
    pub fn injected_count(&self) -> usize {
        self.injected.iter().filter(|i| i.skipped.is_none()).count()
    }

    /// The machine-readable result of the run, measured on `commit` by `command`: what the page
    /// is rendered from.
    pub fn results(&self, commit: Commit, command: &str) -> Results {
        let classified = self.classified();
        let invariants = INVARIANTS
            .into_iter()
            .map(|id| {
                let of_id: Vec<&String> = classified
                    .iter()
                    .filter(|(i, _)| *i == id)
                    .map(|(_, v)| v)
                    .collect();
                Invariant {
                    id: id.to_owned(),
                    violations: of_id.len(),
                    first: of_id.into_iter().take(FIRST_KEPT).cloned().collect(),
                }
            })
            .collect();
        let injected = self.injected_count();
        let kinds = KINDS
            .into_iter()
            .map(|kind| {
                let of_kind: Vec<&Injected> = self
                    .injected
                    .iter()
                    .filter(|i| i.fault.kind() == kind)
                    .collect();
                let done = of_kind.iter().filter(|i| i.skipped.is_none()).count();
                KindCount {
                    kind: kind.to_owned(),
                    planned: of_kind.len(),
                    injected: done,
                    skipped: of_kind.len() - done,
                }
            })
            .collect();
        let mut skip_reasons: Vec<SkipReason> = Vec::new();
        for why in self.injected.iter().filter_map(|i| i.skipped.as_ref()) {
            match skip_reasons.iter_mut().find(|r| &r.reason == why) {
                Some(r) => r.count += 1,
                None => skip_reasons.push(SkipReason {
                    reason: why.clone(),
                    count: 1,
                }),
            }
        }
        skip_reasons.sort_by_key(|r| std::cmp::Reverse(r.count));
        let downs: Vec<Duration> = self
            .api_down
            .iter()
            .map(|(a, b)| b.saturating_sub(*a))
            .collect();
        let settles: Vec<Duration> = self.rounds.iter().map(|r| r.settle).collect();
        let at = |t: Option<jiff::Timestamp>| {
            t.map_or_else(String::new, |t| {
                t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
            })
        };
        Results {
            commit,
            seed: self.seed,
            command: command.to_owned(),
            run: RunTimes {
                started_at: at(self.started_at),
                finished_at: at(self.finished_at),
                setup_ms: ms(self.setup),
                faults_ms: ms(self.faults_took),
                total_ms: ms(self.total),
            },
            settings: Settings {
                groups: self.groups,
                pods_per_group: crate::world::PODS_PER_GROUP,
                lease_seconds: self.lease_seconds,
                operator_lease_seconds: self.operator_lease_seconds,
                round: self.round,
                gap_bound_ms: ms(self.gap_bound),
                settle_within_ms: ms(crate::run::SETTLE),
                namespace: self.namespace.clone(),
            },
            faults: Faults {
                planned: self.planned,
                injected,
                skipped: self.planned - injected,
                kinds,
                skip_reasons,
            },
            invariants,
            watch: Watch {
                leaders: self.leaders_seen,
                pod_events: self.pod_events,
                order_judged: self.order_judged.0,
                order_unjudged: self.order_judged.1,
            },
            applications: Applications {
                deliveries: self.app_deliveries.0,
                leader_starts: self.app_deliveries.1,
                lapsed: self.app_deliveries.2,
            },
            gaps: Gaps {
                rows: self.gap_rows(),
                longest: self.longest_gaps(),
                api_restarts: ApiRestarts {
                    count: downs.len(),
                    median_ms: quantile(&downs, 0.5),
                    worst_ms: quantile(&downs, 1.0),
                },
            },
            overlaps: self.overlap_sequences(),
            rounds: Rounds {
                count: self.rounds.len(),
                settle_median_ms: quantile(&settles, 0.5),
                settle_worst_ms: quantile(&settles, 1.0),
            },
            processes: self.processes.iter().cloned().collect(),
        }
    }

    /// The gap table: all closed gaps, those opened while a fault struck the active replica, the
    /// others.
    fn gap_rows(&self) -> Vec<GapRow> {
        let closed: Vec<&GapSeen> = self.gaps.iter().filter(|g| g.length.is_some()).collect();
        let (of_active, others): (Vec<&GapSeen>, Vec<&GapSeen>) = closed
            .iter()
            .partition(|g| self.active_replica_fault_within(g));
        [closed, of_active, others]
            .into_iter()
            .zip(GAP_ROWS)
            .map(|(gaps, row)| {
                let lengths: Vec<Duration> = gaps.iter().filter_map(|g| g.length).collect();
                GapRow {
                    row: row.to_owned(),
                    count: lengths.len(),
                    median_ms: quantile(&lengths, 0.5),
                    p90_ms: quantile(&lengths, 0.9),
                    p99_ms: quantile(&lengths, 0.99),
                    worst_ms: quantile(&lengths, 1.0),
                }
            })
            .collect()
    }

    /// The longest gaps (an open one longest of all), each with the last six faults injected in
    /// the 3 s before it opened.
    fn longest_gaps(&self) -> Vec<LongGap> {
        let mut worst: Vec<&GapSeen> = self.gaps.iter().collect();
        worst.sort_by_key(|g| std::cmp::Reverse(g.length.unwrap_or(Duration::MAX)));
        worst
            .into_iter()
            .take(LONGEST_KEPT)
            .map(|g| {
                let before: Vec<FaultSeen> = self
                    .injected
                    .iter()
                    .filter(|i| i.skipped.is_none())
                    .filter(|i| i.at + Duration::from_secs(3) >= g.start && i.at <= g.start)
                    .map(|i| FaultSeen {
                        index: i.index,
                        at_ms: ms(i.at),
                        what: describe(&i.fault),
                    })
                    .collect();
                let last = before.len().saturating_sub(6);
                LongGap {
                    group: g.group.clone(),
                    opened_ms: ms(g.start),
                    length_ms: g.length.map(ms),
                    api_down_ms: ms(self.api_down_within(g)),
                    faults_before: before.into_iter().skip(last).collect(),
                }
            })
            .collect()
    }

    /// Each overlap of two applications acting as leader (the first [`OVERLAPS_KEPT`]), with
    /// every fault injected in the 10 s before it opened that struck its group or everyone
    /// (replicas, kube-apiserver, promotion holds), in order.
    fn overlap_sequences(&self) -> Vec<OverlapSeen> {
        self.overlaps
            .iter()
            .take(OVERLAPS_KEPT)
            .map(|(o, start)| {
                let group: Option<usize> = o.group.trim_start_matches('g').parse().ok();
                let faults_before = self
                    .injected
                    .iter()
                    .filter(|i| i.skipped.is_none())
                    .filter(|i| i.at + Duration::from_secs(10) >= *start && i.at <= *start)
                    .filter(|i| i.fault.group().is_none() || i.fault.group() == group)
                    .map(|i| FaultSeen {
                        index: i.index,
                        at_ms: ms(i.at),
                        what: describe_fully(&i.fault),
                    })
                    .collect();
                OverlapSeen {
                    group: o.group.clone(),
                    opened_ms: ms(*start),
                    first: o.first.clone(),
                    second: o.second.clone(),
                    length_ms: o.length.map(ms),
                    faults_before,
                }
            })
            .collect()
    }
}

/// What a result reports violations of, in the page's order: the invariants, then the run's own
/// soundness (a watch behind at the end, a failed undo).
const INVARIANTS: [&str; 9] = [
    "I1", "I2", "I3", "order", "I4", "HA", "App", "watch", "harness",
];

/// A fault with its target and lengths (the overlaps' sequences).
fn describe_fully(fault: &Fault) -> String {
    let length = fault
        .length()
        .map_or_else(String::new, |d| format!(" for {}", secs(d)));
    let detail = match fault {
        Fault::EditSpec {
            edit: SpecEdit::LeaseDuration(s),
            ..
        } => format!(" to {s} s"),
        Fault::EditSpec {
            edit: SpecEdit::Selector { exclude },
            ..
        } => format!(" leaving out the {exclude:?}"),
        _ => String::new(),
    };
    format!("{}{detail}{length}", describe(fault))
}

/// A fault with its target, for the gaps' table.
fn describe(fault: &Fault) -> String {
    match fault {
        Fault::FlapPod { group, target, .. }
        | Fault::DeletePod { group, target }
        | Fault::RestartMember { group, target, .. }
        | Fault::CutMember { group, target, .. }
        | Fault::PauseAgent { group, target, .. }
        | Fault::StallMember { group, target } => {
            format!("{} g{group} {target:?}", fault.kind())
        }
        Fault::DeleteLease { group }
        | Fault::ForgeLease { group, .. }
        | Fault::CutLeaderThen { group, .. }
        | Fault::EditSpec { group, .. } => {
            format!("{} g{group}", fault.kind())
        }
        other => match other.replica() {
            Some(r) => format!("{} {r:?}", other.kind()),
            None => other.kind().to_owned(),
        },
    }
}

/// The `q` quantile (nearest rank) of `values`, in whole milliseconds; `None` of none.
fn quantile(values: &[Duration], q: f64) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().map(ms)
}

/// `1.234 s` or `87 ms`.
pub fn secs(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_counts_as_the_active_replicas_from_its_fault_until_one_operator_lease_after_the_undo()
    {
        let config = Config::new(1, 10, "op".into(), "work".into());
        let mut report = Report::new(&config, "ns", Duration::ZERO);
        let s = Duration::from_secs;
        let paused = Fault::PauseReplica {
            replica: Replica::Active,
            paused: s(2),
        };
        let standby = Fault::KillReplica {
            replica: Replica::Standby,
            down: s(2),
        };
        report.injected = vec![
            Injected::new(0, s(10), &paused, None),
            Injected::new(1, s(100), &standby, None),
        ];
        let gap = |start| GapSeen {
            group: "g".into(),
            start,
            length: Some(s(1)),
        };
        let lease = s(u64::from(config.operator_lease_seconds));
        assert!(!report.active_replica_fault_within(&gap(s(9))));
        assert!(report.active_replica_fault_within(&gap(s(10))));
        assert!(report.active_replica_fault_within(&gap(s(12) + lease)));
        assert!(!report.active_replica_fault_within(&gap(s(13) + lease)));
        // The standby's fault is not the active one's.
        assert!(!report.active_replica_fault_within(&gap(s(101))));
    }

    #[test]
    fn a_result_counts_each_violation_under_its_invariant_and_every_fault_under_its_kind() {
        let config = Config::new(1, 3, "op".into(), "work".into());
        let mut report = Report::new(&config, "ns", Duration::ZERO);
        report.watch_violations = vec![
            "I1: two".into(),
            "I3: down".into(),
            "order: early".into(),
            "the watch fell behind".into(),
        ];
        report.harness_errors = vec!["undo failed".into()];
        let pause = Fault::PauseAgent {
            group: 0,
            target: crate::plan::Target::Leader,
            paused: Duration::from_secs(2),
            hand_over: false,
        };
        report.injected = vec![
            Injected::new(0, Duration::ZERO, &pause, None),
            Injected::new(
                1,
                Duration::ZERO,
                &pause,
                Some("its agent is paused".into()),
            ),
        ];
        let commit = Commit {
            sha: "abc".into(),
            dirty: false,
            uncommitted: Vec::new(),
        };
        let results = report.results(commit, "test");
        let count = |id: &str| {
            results
                .invariants
                .iter()
                .find(|i| i.id == id)
                .map(|i| i.violations)
        };
        for id in ["I1", "I3", "order", "watch", "harness"] {
            assert_eq!(count(id), Some(1), "{id}");
        }
        assert_eq!(count("App"), Some(0));
        assert_eq!(results.violations(), report.violations().len());
        let paused = results
            .faults
            .kinds
            .iter()
            .find(|k| k.kind == "agent paused")
            .unwrap();
        assert_eq!((paused.planned, paused.injected, paused.skipped), (2, 1, 1));
        assert_eq!(results.faults.kinds.len(), KINDS.len());
    }
}
