//! What a run injected and what it saw, and the page (`docs/chaos.md` for `make chaos`).

use std::fmt::Write as _;
use std::ops::Range;
use std::time::{Duration, Instant};

use leadergroup_testenv::{ActiveMonitor, InvariantWatcher};

use crate::Config;
use crate::members::{Claims, Overlap};
use crate::plan::{Fault, KINDS, Replica, SpecEdit};
use crate::replica::OperatorReplica;

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

    /// Every violation: I1, I3 and the order of the writes (the watch), I2 (a round that did not settle), I4 (a gap longer
    /// than the bound once the API server's own restarts are taken out of it, or one still open at
    /// the end), two replicas active at once, and two `Membership`s of a group reporting `Leader`
    /// at once.
    pub fn violations(&self) -> Vec<String> {
        let mut all = self.watch_violations.clone();
        all.extend(self.harness_errors.iter().map(|e| format!("Harness: {e}")));
        for (o, start) in &self.overlaps {
            all.push(format!(
                "App: the applications of {} (epoch {}) and {} (epoch {}) of {} both acted as leader for {} (from {} into the run)",
                o.first.0,
                o.first.1,
                o.second.0,
                o.second.1,
                o.group,
                o.length.map_or_else(|| "the rest of the run".into(), secs),
                secs(*start)
            ));
        }
        for (since, length) in &self.both_active {
            all.push(format!(
                "HA: both replicas reported active for {} (from {} into the run)",
                secs(*length),
                secs(*since)
            ));
        }
        for r in &self.rounds {
            if let Some(why) = &r.unsettled {
                all.push(format!(
                    "I2: not settled within 60 s after faults {}..{}: {why}",
                    r.faults.start, r.faults.end
                ));
            }
        }
        for g in &self.gaps {
            match g.length {
                Some(l) if l.saturating_sub(self.api_down_within(g)) <= self.gap_bound => {}
                Some(l) => all.push(format!(
                    "I4: {} without an eligible leader for {} ({} of it kube-apiserver restarting; from {} into the run; bound {})",
                    g.group,
                    secs(l),
                    secs(self.api_down_within(g)),
                    secs(g.start),
                    secs(self.gap_bound)
                )),
                None => all.push(format!(
                    "I4: {} still without an eligible leader at the end (since {})",
                    g.group,
                    secs(g.start)
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

    /// The page.
    pub fn markdown(&self, generated: &str, command: &str) -> String {
        let mut md = String::new();
        let violations = self.violations();
        let _ = writeln!(md, "# Chaos run\n");
        let _ = writeln!(
            md,
            "Generated by `{command}` on {generated}. Seed {seed}: the same seed injects the same \
             faults (kinds, targets, lengths, pauses) in the same order; which pod leads when one \
             strikes, and what the operator makes of it, is the run's own. Repeat it with \
             `make chaos CHAOS_ARGS=\"--seed {seed} --faults {planned}\"`.\n",
            seed = self.seed,
            planned = self.planned,
        );
        let _ = writeln!(md, "## Result\n");
        let _ = writeln!(
            md,
            "**{} violations** of I1–I4 and the applications' single leader in {} faults injected ({} planned, {} skipped: no such pod \
             or Lease at that moment), {} leaders handed an epoch, {} pod events watched, {} leaders' \
             marks checked for the order of the writes ({} not judgeable).\n",
            violations.len(),
            self.injected_count(),
            self.planned,
            self.planned - self.injected_count(),
            self.leaders_seen,
            self.pod_events,
            self.order_judged.0,
            self.order_judged.1,
        );
        let i1 = self
            .watch_violations
            .iter()
            .filter(|v| v.starts_with("I1"))
            .count();
        let i3 = self
            .watch_violations
            .iter()
            .filter(|v| v.starts_with("I3"))
            .count();
        let i2 = self.rounds.iter().filter(|r| r.unsettled.is_some()).count();
        let lengths: Vec<Duration> = self.gaps.iter().filter_map(|g| g.length).collect();
        let over = violations.iter().filter(|v| v.starts_with("I4")).count();
        let _ = writeln!(md, "| invariant | checked | violations |\n|---|---|---|");
        let _ = writeln!(
            md,
            "| I1: at most one pod of a group labeled leader | every pod event of an independent watch | {i1} |"
        );
        let _ = writeln!(
            md,
            "| I2: once converged, the labeled leader is the Lease holder, epochs equal (status, Lease, pod) | after each of {} rounds, all groups, within 60 s | {i2} |",
            self.rounds.len()
        );
        let _ = writeln!(
            md,
            "| I3: epochs only grow, none handed to two pods | every pod event of the watch | {i3} |"
        );
        let _ = writeln!(
            md,
            "| I4: an eligible candidate gets an eligible leader within {} (not counting a kube-apiserver restart's own downtime) | {} gaps timed by the watch | {over} |",
            secs(self.gap_bound),
            lengths.len()
        );
        let _ = writeln!(
            md,
            "| one active operator replica at a time | both replicas' /readyz every 20 ms, two polls in a row | {} |",
            self.both_active.len()
        );
        let _ = writeln!(
            md,
            "| App: at no instant do the applications of two pods of a group act as leader, each acting on the last publication its member's relay (the agent) handed it, leader only before its `valid_until`, on one clock (the run's monotonic clock) | every publication handed to every pod's application: {} handed, {} of them starting a leadership, {} leaderships ended by their `valid_until` alone | {} |\n",
            self.app_deliveries.0,
            self.app_deliveries.1,
            self.app_deliveries.2,
            self.overlaps.len()
        );
        if !violations.is_empty() {
            let _ = writeln!(md, "Violations:\n");
            for v in violations.iter().take(50) {
                let _ = writeln!(md, "- {v}");
            }
            let _ = writeln!(md);
        }
        if !self.overlaps.is_empty() {
            self.overlap_sequences(&mut md);
        }
        let _ = writeln!(md, "## Time without a leader (I4)\n");
        let _ = writeln!(
            md,
            "A gap opens when the watch sees a group with an eligible candidate (Running, Ready, not \
             terminating) and no eligible pod labeled leader, and closes when it sees one again: the \
             time an application had no leader to serve it, on the watch's clock.\n"
        );
        let (of_active, others): (Vec<&GapSeen>, Vec<&GapSeen>) = self
            .gaps
            .iter()
            .filter(|g| g.length.is_some())
            .partition(|g| self.active_replica_fault_within(g));
        let _ = writeln!(
            md,
            "| gaps | count | median | p90 | p99 | worst |\n|---|---|---|---|---|---|"
        );
        let rows = [
            ("all", self.gaps.iter().collect::<Vec<_>>()),
            (
                "opened while a fault struck the active replica (from the fault until its undo and one operator Lease after)",
                of_active,
            ),
            ("every other", others),
        ];
        for (what, gaps) in rows {
            let lengths: Vec<Duration> = gaps.iter().filter_map(|g| g.length).collect();
            let _ = writeln!(
                md,
                "| {what} | {} | {} | {} | {} | {} |",
                lengths.len(),
                quantile(&lengths, 0.5),
                quantile(&lengths, 0.9),
                quantile(&lengths, 0.99),
                quantile(&lengths, 1.0),
            );
        }
        let _ = writeln!(md);
        let mut worst: Vec<&GapSeen> = self.gaps.iter().collect();
        worst.sort_by_key(|g| std::cmp::Reverse(g.length.unwrap_or(Duration::MAX)));
        let _ = writeln!(
            md,
            "The ten longest, with the faults injected in the 3 s before they opened (the last six), \
             and how much of them a kube-apiserver restart took (its stop, its start, until it \
             answered again):\n"
        );
        let _ = writeln!(
            md,
            "| group | opened | length | kube-apiserver restarting | faults before |\n|---|---|---|---|---|"
        );
        for g in worst.iter().take(10) {
            let before: Vec<String> = self
                .injected
                .iter()
                .filter(|i| i.skipped.is_none())
                .filter(|i| i.at + Duration::from_secs(3) >= g.start && i.at <= g.start)
                .map(|i| format!("#{} {}", i.index, describe(&i.fault)))
                .collect();
            let last = before
                .get(before.len().saturating_sub(6)..)
                .unwrap_or_default();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                g.group,
                secs(g.start),
                g.length.map_or_else(|| "open".into(), secs),
                secs(self.api_down_within(g)),
                last.join("; ")
            );
        }
        let downs: Vec<Duration> = self
            .api_down
            .iter()
            .map(|(a, b)| b.saturating_sub(*a))
            .collect();
        let _ = writeln!(
            md,
            "\nThe {} kube-apiserver restarts took median {}, worst {} (until it answered again).",
            downs.len(),
            quantile(&downs, 0.5),
            quantile(&downs, 1.0)
        );
        let _ = writeln!(
            md,
            "\nWhat holds a gap open, read from the run's timeline (`seed-N/timeline.tsv` in the work \
             folder: every fault, gap and restart on the wall clock) beside the replicas' logs: the \
             waits the protocol makes on purpose, added up when faults overlap. An active replica \
             killed, paused or cut off is replaced once its operator Lease ({} s) has gone unrenewed \
             for its duration (the replica that takes over arbitrates the old one's groups at \
             once: that one stopped acting before its hold ran out); a handover whose old leader's \
             client cannot step down (its node cut off, its connections stalled) waits for that \
             leader's belief to lapse (two thirds of the group Lease, {} s, after a \
             `leaseDurationSeconds` edit of the longer one); a stalled connection is noticed after \
             4 s; and the kube-apiserver restarts and its watches' 410 Gone.",
            self.operator_lease_seconds, self.lease_seconds
        );
        let _ = writeln!(md, "\n## Faults\n");
        let _ = writeln!(
            md,
            "| fault | planned | injected | skipped |\n|---|---|---|---|"
        );
        for kind in KINDS {
            let of_kind: Vec<&Injected> = self
                .injected
                .iter()
                .filter(|i| i.fault.kind() == kind)
                .collect();
            let done = of_kind.iter().filter(|i| i.skipped.is_none()).count();
            let _ = writeln!(
                md,
                "| {kind} | {} | {done} | {} |",
                of_kind.len(),
                of_kind.len() - done
            );
        }
        let mut reasons: Vec<(String, usize)> = Vec::new();
        for i in self.injected.iter().filter_map(|i| i.skipped.as_ref()) {
            match reasons.iter_mut().find(|(r, _)| r == i) {
                Some((_, n)) => *n += 1,
                None => reasons.push((i.clone(), 1)),
            }
        }
        reasons.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        if !reasons.is_empty() {
            let _ = writeln!(md, "\nWhy faults were skipped:\n");
            for (r, n) in reasons.iter().take(10) {
                let _ = writeln!(md, "- {n}× {r}");
            }
        }
        let settles: Vec<Duration> = self.rounds.iter().map(|r| r.settle).collect();
        let _ = writeln!(md, "\n## The run\n");
        let _ = writeln!(
            md,
            "- A control plane of its own (etcd + kube-apiserver, restarted by the faults), namespace \
             `{}`; {} groups of 3 pods (the simulated kubelet), `leaseDurationSeconds: {}`, the \
             odd-numbered groups in Heartbeat mode, the others in Readiness mode (but for a \
             `liveness` edit's while).",
            self.namespace, self.groups, self.lease_seconds
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
             application runs on with what it last got. All stop when the pod's container stops. \
             A client restart stops the members and starts new ones in the same pod (an agent's \
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
        let _ = writeln!(
            md,
            "- Two operator replicas with `--leader-elect` (their own Lease {} s), each through a proxy \
             of its own (the held and cut requests); processes over the run: {}.",
            self.operator_lease_seconds,
            self.processes
                .iter()
                .map(|(n, g)| format!("{n} {g}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            md,
            "- Faults 10–150 ms apart, each undone on its own later (so they overlap); the replicas' \
             faults one at a time (one operator always runs), as the promotion holds. Every {} faults \
             a round ends: everything undone, the pods repaired (Ready again, 3 per group), then all \
             groups must settle (I2). Settling took median {}, worst {} over {} rounds.",
            self.round,
            quantile(&settles, 0.5),
            quantile(&settles, 1.0),
            self.rounds.len()
        );
        let _ = writeln!(
            md,
            "- Set-up {}, faults and rounds {}, in all {}.",
            secs(self.setup),
            secs(self.faults_took),
            secs(self.total)
        );
        md
    }
}

impl Report {
    /// Each overlap of two `Membership`s reporting `Leader` (the first 20), with every fault
    /// injected in the 10 s before it opened that struck its group or everyone (replicas,
    /// kube-apiserver, promotion holds), in order, with when it struck.
    fn overlap_sequences(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Two applications leading at once\n\nEach overlap, with the faults of its group and \
             the run-wide ones injected in the 10 s before it opened (time into the run):\n"
        );
        for (o, start) in self.overlaps.iter().take(20) {
            let group: Option<usize> = o.group.trim_start_matches('g').parse().ok();
            let faults: Vec<String> = self
                .injected
                .iter()
                .filter(|i| i.skipped.is_none())
                .filter(|i| i.at + Duration::from_secs(10) >= *start && i.at <= *start)
                .filter(|i| i.fault.group().is_none() || i.fault.group() == group)
                .map(|i| format!("{} #{} {}", secs(i.at), i.index, describe_fully(&i.fault)))
                .collect();
            let _ = writeln!(
                md,
                "- {} at {}: {} (epoch {}) then {} (epoch {}), for {}. Before it: {}",
                o.group,
                secs(*start),
                o.first.0,
                o.first.1,
                o.second.0,
                o.second.1,
                o.length.map_or_else(|| "the rest of the run".into(), secs),
                faults.join("; ")
            );
        }
        let _ = writeln!(md);
    }
}

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

/// The `q` quantile (nearest rank) of `values`, in seconds or milliseconds.
fn quantile(values: &[Duration], q: f64) -> String {
    if values.is_empty() {
        return "–".into();
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    secs(sorted[rank - 1])
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
}
