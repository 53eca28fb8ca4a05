//! The histories of what each member's application believed, checked. A run records, per member
//! of each group, every change of its application's belief (on this machine's clock: every node of
//! the real cluster runs here), when its process verifiably did not run, and optionally the log of
//! a fence (each write it accepted, with its token). [`Histories::check`] reports over a window:
//! the longest time two members of one group both believed they lead (`app_overlap_ms`), the time
//! with none, and every fenced write accepted with a token older than one accepted before it.
//!
//! The same code judges ours and the peers: a peer's overlap is a finding about the peer.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// An instant: Unix milliseconds on this machine's clock. Fractions are kept: file mtimes and the
/// peers' stamps are finer than a millisecond, and rounding could hide a short overlap.
pub type Ms = f64;

/// `t` in Unix milliseconds (0 before the epoch, which no clock here reads).
pub fn unix_ms(t: SystemTime) -> Ms {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Unix milliseconds `ms` as a time (the epoch for a negative or unreadable one).
pub fn system_time(ms: Ms) -> SystemTime {
    UNIX_EPOCH + std::time::Duration::try_from_secs_f64(ms / 1e3).unwrap_or_default()
}

/// One change of what a member's application believes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Change {
    pub at_ms: Ms,
    /// It believes it leads from here on (until the next change, or its validity).
    pub leader: bool,
    /// The fencing token it leads with, when it has one.
    pub epoch: Option<u64>,
    /// While leader, the instant from which the belief no longer holds unless a later change
    /// renews it (ours: the agent's `validUntil`); None: until the next change.
    pub valid_until_ms: Option<Ms>,
}

impl Change {
    /// A change to leader (with `epoch`, valid until the next change) or away from it.
    pub fn to(at_ms: Ms, leader: bool, epoch: Option<u64>) -> Change {
        Change {
            at_ms,
            leader,
            epoch,
            valid_until_ms: None,
        }
    }
}

/// A stretch `[from_ms, to_ms)`; `to_ms` None: it never ends.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Span {
    pub from_ms: Ms,
    pub to_ms: Option<Ms>,
}

impl Span {
    fn end(&self) -> Ms {
        self.to_ms.unwrap_or(f64::INFINITY)
    }

    fn contains(&self, t: Ms) -> bool {
        self.from_ms <= t && t < self.end()
    }
}

/// One member of a group: its application's history.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Member {
    /// Its name in the report: ours, the pod; a peer, the process's identity.
    pub name: String,
    /// Every change of its belief, in any order; changes at one instant keep their order.
    pub changes: Vec<Change>,
    /// When its process verifiably did not run (killed, frozen): its belief does not count
    /// there. Only what is verified belongs here: a process that may run counts.
    pub not_running: Vec<Span>,
}

/// A group: the members of which at most one may believe it leads at any instant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Group {
    pub name: String,
    pub members: Vec<Member>,
}

/// One write a fence accepted: when, and with which token.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Accepted {
    pub at_ms: Ms,
    pub token: u64,
}

/// A run's histories: its groups, and the log of the fence that guards them, if any.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Histories {
    pub groups: Vec<Group>,
    pub fence: Vec<Accepted>,
}

/// Two or more members of one group believing they lead, without a break.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Overlap {
    pub group: String,
    pub from_ms: Ms,
    pub to_ms: Ms,
    /// Every member that believed during it, with the epoch it first believed with there.
    pub members: Vec<(String, Option<u64>)>,
}

impl Overlap {
    pub fn ms(&self) -> Ms {
        self.to_ms - self.from_ms
    }
}

/// A fenced write accepted with a token older than one the fence had accepted before.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Regression {
    pub at_ms: Ms,
    pub token: u64,
    /// The newest token accepted before it, and when.
    pub newest: u64,
    pub newest_at_ms: Ms,
}

/// What one group's histories gave over the window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GroupReport {
    pub group: String,
    /// The longest overlap, 0 without any.
    pub app_overlap_ms: Ms,
    pub overlaps: Vec<Overlap>,
    /// The longest stretch with no member believing it leads, and all of them together.
    pub none_ms: Ms,
    pub none_total_ms: Ms,
}

/// What a run's histories gave over the window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The longest overlap of any group, 0 without any.
    pub app_overlap_ms: Ms,
    /// The longest stretch with no leader of any group.
    pub none_ms: Ms,
    pub groups: Vec<GroupReport>,
    pub fence_regressions: Vec<Regression>,
}

impl Report {
    /// Every overlap of every group.
    pub fn overlaps(&self) -> impl Iterator<Item = &Overlap> {
        self.groups.iter().flat_map(|g| &g.overlaps)
    }
}

impl Histories {
    /// The report over `[window.from_ms, window.to_ms)`: beliefs and stretches outside it are
    /// cut off at its edges, and a fenced write before it only sets the newest token.
    pub fn check(&self, window: Span) -> Report {
        let groups: Vec<GroupReport> = self.groups.iter().map(|g| g.check(window)).collect();
        let max = |f: fn(&GroupReport) -> Ms| groups.iter().map(f).fold(0.0, f64::max);
        Report {
            app_overlap_ms: max(|g| g.app_overlap_ms),
            none_ms: max(|g| g.none_ms),
            fence_regressions: regressions(&self.fence, window),
            groups,
        }
    }
}

impl Member {
    /// Its changes by time, those of one instant in their given order.
    fn sorted(&self) -> Vec<&Change> {
        let mut changes: Vec<&Change> = self.changes.iter().collect();
        changes.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
        changes
    }

    /// The stretches in which it believed it leads, with the epoch of each, not cut by a window:
    /// from a change to leader until the next change or the validity it carried, whichever
    /// comes first, less the stretches in which its process did not run.
    pub fn beliefs(&self) -> Vec<(Span, Option<u64>)> {
        let changes = self.sorted();
        let mut held = Vec::new();
        for (i, c) in changes.iter().enumerate().filter(|(_, c)| c.leader) {
            let next = changes.get(i + 1).map_or(f64::INFINITY, |n| n.at_ms);
            let end = next.min(c.valid_until_ms.unwrap_or(f64::INFINITY));
            if end > c.at_ms {
                held.push((c.at_ms, end, c.epoch));
            }
        }
        let mut spans = Vec::new();
        for (from, to, epoch) in held {
            for (f, t) in subtract((from, to), &self.not_running) {
                let to_ms = t.is_finite().then_some(t);
                spans.push((Span { from_ms: f, to_ms }, epoch));
            }
        }
        spans
    }

    /// Whether it believes it leads at `t` (and its process may run).
    pub fn believes_at(&self, t: Ms) -> bool {
        self.beliefs().iter().any(|(s, _)| s.contains(t))
    }
}

impl Member {
    /// An agent's member from what its application reads: the versions of its `role` file and
    /// of its `valid-until` file (Unix milliseconds while leader, empty otherwise), each with
    /// the instant it was written. A leader's belief ends at the next `role`, or at the validity
    /// last written before it, whichever comes first; a new validity while leader renews it.
    pub fn from_agent_files(
        name: &str,
        role: &[(SystemTime, String)],
        valid_until: &[(SystemTime, String)],
    ) -> Member {
        let mut written: Vec<(Ms, bool, &str)> = role
            .iter()
            .map(|(t, c)| (unix_ms(*t), true, c.trim()))
            .chain(
                valid_until
                    .iter()
                    .map(|(t, c)| (unix_ms(*t), false, c.trim())),
            )
            .collect();
        // The agent writes `valid-until` before `role`: at one instant, the validity first.
        written.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut leader, mut validity) = (false, None);
        let mut changes = Vec::new();
        for (at_ms, is_role, contents) in written {
            if is_role {
                leader = contents == "leader";
            } else {
                validity = contents.parse::<Ms>().ok();
                if !leader {
                    continue;
                }
            }
            changes.push(Change {
                valid_until_ms: validity.filter(|_| leader),
                ..Change::to(at_ms, leader, None)
            });
        }
        Member {
            name: name.to_owned(),
            changes,
            not_running: Vec::new(),
        }
    }
}

/// `(from, to)` less every span of `cut`.
fn subtract((from, to): (Ms, Ms), cut: &[Span]) -> Vec<(Ms, Ms)> {
    let mut left = vec![(from, to)];
    for c in cut {
        left = left
            .into_iter()
            .flat_map(|(f, t)| {
                let before = (f, t.min(c.from_ms));
                let after = (f.max(c.end()), t);
                [before, after].into_iter().filter(|(a, b)| b > a)
            })
            .collect();
    }
    left
}

/// The members of `members` that believe they lead at `t`.
pub fn believers(members: &[Member], t: Ms) -> Vec<&str> {
    let believe = members.iter().filter(|m| m.believes_at(t));
    believe.map(|m| m.name.as_str()).collect()
}

/// The first member other than `except` whose belief that it leads starts at or after `from`,
/// and when.
pub fn first_start<'a>(members: &'a [Member], except: &str, from: Ms) -> Option<(&'a str, Ms)> {
    members
        .iter()
        .filter(|m| m.name != except)
        .filter_map(|m| {
            let starts = m.beliefs().into_iter().map(|(s, _)| s.from_ms);
            let first = starts.filter(|s| *s >= from).reduce(f64::min)?;
            Some((m.name.as_str(), first))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

impl Group {
    fn check(&self, window: Span) -> GroupReport {
        let (w0, w1) = (window.from_ms, window.end());
        // Each member's beliefs merged (a renewal touching the stretch before it is one belief)
        // and cut to the window, as +1 and -1 at their edges.
        let mut edges: Vec<(Ms, i32, usize)> = Vec::new();
        let mut epochs: Vec<Vec<(Span, Option<u64>)>> = Vec::new();
        for (i, m) in self.members.iter().enumerate() {
            let beliefs = m.beliefs();
            for (from, to) in merged(beliefs.iter().map(|(s, _)| (s.from_ms, s.end()))) {
                let (from, to) = (from.max(w0), to.min(w1));
                if to > from {
                    edges.push((from, 1, i));
                    edges.push((to, -1, i));
                }
            }
            epochs.push(beliefs);
        }
        // Ends before starts at one instant: beliefs that touch do not overlap.
        edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut report = GroupReport {
            group: self.name.clone(),
            ..GroupReport::default()
        };
        let mut active: Vec<usize> = Vec::new();
        let mut none_from = Some(w0);
        let mut open: Option<Overlap> = None;
        for (t, step, member) in edges {
            if step > 0 {
                if let Some(from) = none_from.take() {
                    report.none(t - from);
                }
                active.push(member);
            } else {
                active.retain(|m| *m != member);
            }
            match (&mut open, active.len()) {
                (None, 2..) => {
                    // One member leaving as another joins at the same instant: one overlap.
                    let last = report.overlaps.last().filter(|o| o.to_ms == t);
                    let went_on = last.is_some().then(|| report.overlaps.pop()).flatten();
                    open = Some(went_on.unwrap_or_else(|| Overlap {
                        group: self.name.clone(),
                        from_ms: t,
                        to_ms: t,
                        members: Vec::new(),
                    }));
                }
                (Some(o), 0 | 1) => {
                    o.to_ms = t;
                    report.overlap(open.take());
                }
                _ => {}
            }
            if let Some(o) = &mut open {
                for m in &active {
                    let name = &self.members[*m].name;
                    if !o.members.iter().any(|(n, _)| n == name) {
                        let epoch = epochs[*m]
                            .iter()
                            .find(|(s, _)| s.contains(t))
                            .and_then(|e| e.1);
                        o.members.push((name.clone(), epoch));
                    }
                }
            }
            if active.is_empty() {
                none_from = Some(t);
            }
        }
        if let Some(from) = none_from.filter(|_| w1.is_finite()) {
            report.none(w1 - from);
        }
        report
    }
}

impl GroupReport {
    fn none(&mut self, ms: Ms) {
        if ms > 0.0 {
            self.none_ms = self.none_ms.max(ms);
            self.none_total_ms += ms;
        }
    }

    fn overlap(&mut self, overlap: Option<Overlap>) {
        if let Some(o) = overlap.filter(|o| o.ms() > 0.0) {
            self.app_overlap_ms = self.app_overlap_ms.max(o.ms());
            self.overlaps.push(o);
        }
    }
}

/// `spans` joined where they touch or overlap, by time.
fn merged(spans: impl Iterator<Item = (Ms, Ms)>) -> Vec<(Ms, Ms)> {
    let mut spans: Vec<(Ms, Ms)> = spans.collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(Ms, Ms)> = Vec::new();
    for (from, to) in spans {
        match out.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => out.push((from, to)),
        }
    }
    out
}

/// The writes of `log` inside `window` accepted with a token older than the newest accepted
/// before them (the log in its order; those before the window count as accepted before).
/// Every write of `log` the fence accepted with a token older than one it accepted before, over
/// the whole log: the check a fence's own log gets, in the tests that read one.
pub fn fence_regressions(log: &[Accepted]) -> Vec<Regression> {
    regressions(
        log,
        Span {
            from_ms: f64::NEG_INFINITY,
            to_ms: None,
        },
    )
}

fn regressions(log: &[Accepted], window: Span) -> Vec<Regression> {
    let mut log: Vec<&Accepted> = log.iter().collect();
    log.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
    let mut newest: Option<&Accepted> = None;
    let mut found = Vec::new();
    for w in log {
        match newest {
            Some(n) if w.token < n.token => {
                if window.contains(w.at_ms) {
                    found.push(Regression {
                        at_ms: w.at_ms,
                        token: w.token,
                        newest: n.token,
                        newest_at_ms: n.at_ms,
                    });
                }
            }
            _ => newest = Some(w),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn lead(at_ms: Ms, epoch: u64) -> Change {
        Change::to(at_ms, true, Some(epoch))
    }

    fn stop(at_ms: Ms) -> Change {
        Change::to(at_ms, false, None)
    }

    fn member(name: &str, changes: Vec<Change>) -> Member {
        Member {
            name: name.into(),
            changes,
            not_running: Vec::new(),
        }
    }

    fn one_group(members: Vec<Member>) -> Histories {
        Histories {
            groups: vec![Group {
                name: "g".into(),
                members,
            }],
            fence: Vec::new(),
        }
    }

    fn window(from_ms: Ms, to_ms: Ms) -> Span {
        Span {
            from_ms,
            to_ms: Some(to_ms),
        }
    }

    /// A handover in which the old leader stops before the new one starts: no overlap, and the
    /// gap between them is the time with none.
    #[test]
    fn a_clean_handover_has_no_overlap_and_its_gap_is_the_time_with_none() {
        let h = one_group(vec![
            member("a", vec![lead(0.0, 1), stop(100.0)]),
            member("b", vec![lead(130.0, 2)]),
        ]);
        let r = h.check(window(0.0, 1000.0));
        assert_eq!(r.app_overlap_ms, 0.0);
        assert!(r.groups[0].overlaps.is_empty());
        assert_eq!((r.none_ms, r.groups[0].none_total_ms), (30.0, 30.0));
        // Touching beliefs (one stops at the instant the other starts) do not overlap.
        let h = one_group(vec![
            member("a", vec![lead(0.0, 1), stop(100.0)]),
            member("b", vec![lead(100.0, 2)]),
        ]);
        let r = h.check(window(0.0, 1000.0));
        assert_eq!((r.app_overlap_ms, r.none_ms), (0.0, 0.0));
    }

    /// The old leader learns late that it was deposed: the overlap is from the new leader's start
    /// to the old one's stop, with both members and their epochs.
    #[test]
    fn a_late_stop_is_an_overlap() {
        let h = one_group(vec![
            member("a", vec![lead(0.0, 1), stop(400.0)]),
            member("b", vec![lead(150.0, 2)]),
            member("c", vec![stop(0.0)]),
        ]);
        let r = h.check(window(0.0, 1000.0));
        assert_eq!(r.app_overlap_ms, 250.0);
        let o = &r.groups[0].overlaps[0];
        assert_eq!((o.from_ms, o.to_ms), (150.0, 400.0));
        assert_eq!(
            o.members,
            [("a".to_owned(), Some(1)), ("b".to_owned(), Some(2))]
        );
        // Two overlaps: the longest is the report's; the window cuts them.
        let h = one_group(vec![
            member("a", vec![lead(0.0, 1), stop(400.0), lead(600.0, 3)]),
            member("b", vec![lead(350.0, 2), stop(800.0)]),
        ]);
        let r = h.check(window(0.0, 700.0));
        let spans: Vec<(Ms, Ms)> = r.overlaps().map(|o| (o.from_ms, o.to_ms)).collect();
        assert_eq!(spans, [(350.0, 400.0), (600.0, 700.0)]);
        assert_eq!(r.app_overlap_ms, 100.0);
        // One leaves as a third joins: the overlap goes on, one stretch.
        let h = one_group(vec![
            member("a", vec![lead(0.0, 1), stop(200.0)]),
            member("b", vec![lead(100.0, 2), stop(300.0)]),
            member("c", vec![lead(200.0, 3)]),
        ]);
        let r = h.check(window(0.0, 1000.0));
        assert_eq!((r.app_overlap_ms, r.groups[0].overlaps.len()), (200.0, 1));
        assert_eq!(r.groups[0].overlaps[0].members.len(), 3);
    }

    /// Ours: a leader belief ends at its validity when no change comes before it; a renewal that
    /// moves the validity keeps the belief without a break; a late renewal starts it again.
    #[test]
    fn validity_ends_a_belief() {
        let valid = |at_ms: Ms, until: Ms| Change {
            valid_until_ms: Some(until),
            ..lead(at_ms, 1)
        };
        // a's agent froze after its renewal at 100 (valid until 300); b led from 320.
        let a = member("a", vec![valid(0.0, 200.0), valid(100.0, 300.0)]);
        let b = member("b", vec![lead(320.0, 2)]);
        let r = one_group(vec![a.clone(), b.clone()]).check(window(0.0, 1000.0));
        assert_eq!((r.app_overlap_ms, r.none_ms), (0.0, 20.0));
        assert!(a.believes_at(299.0) && !a.believes_at(300.0));
        // Without its validity, a's belief would run on: a 680 ms overlap.
        let unbounded = member("a", vec![lead(0.0, 1)]);
        let r = one_group(vec![unbounded, b.clone()]).check(window(0.0, 1000.0));
        assert_eq!(r.app_overlap_ms, 680.0);
        // A renewal after the validity lapsed: believed again from the renewal, so b's start at
        // 320 overlaps a's renewed belief from 350.
        let late = member("a", vec![valid(0.0, 200.0), valid(350.0, 500.0)]);
        assert_eq!(late.beliefs().len(), 2);
        let r = one_group(vec![late, b]).check(window(0.0, 1000.0));
        assert_eq!(r.app_overlap_ms, 150.0);
        // A validity at or before the change itself: never believed.
        let stale = member("a", vec![valid(100.0, 100.0)]);
        assert!(stale.beliefs().is_empty());
    }

    /// A group without any believer for the whole window: all of it is time with none; a
    /// window cuts the stretches at its edges.
    #[test]
    fn time_with_none() {
        let r = one_group(vec![member("a", vec![stop(0.0)])]).check(window(100.0, 600.0));
        assert_eq!((r.none_ms, r.groups[0].none_total_ms), (500.0, 500.0));
        let h = one_group(vec![
            member(
                "a",
                vec![lead(0.0, 1), stop(200.0), lead(300.0, 2), stop(350.0)],
            ),
            member("b", vec![lead(500.0, 3)]),
        ]);
        let r = h.check(window(100.0, 1000.0));
        assert_eq!(r.groups[0].none_total_ms, 100.0 + 150.0);
        assert_eq!(r.none_ms, 150.0);
        // Members of two groups never overlap each other.
        let mut two = one_group(vec![member("a", vec![lead(0.0, 1)])]);
        two.groups.push(Group {
            name: "h".into(),
            members: vec![member("b", vec![lead(0.0, 1)])],
        });
        assert_eq!(two.check(window(0.0, 100.0)).app_overlap_ms, 0.0);
    }

    /// A process that does not run does not count while it does not: a killed one from the
    /// kill on, a frozen one until its thaw, and after the thaw it counts again.
    #[test]
    fn a_process_that_does_not_run_counts_only_while_it_runs() {
        let frozen = Member {
            not_running: vec![Span {
                from_ms: 100.0,
                to_ms: Some(500.0),
            }],
            ..member("a", vec![lead(0.0, 1), stop(650.0)])
        };
        let b = member("b", vec![lead(300.0, 2)]);
        let r = one_group(vec![frozen.clone(), b.clone()]).check(window(0.0, 1000.0));
        // Thawed at 500, a believes until it says it stopped at 650: a finding.
        assert_eq!(r.app_overlap_ms, 150.0);
        assert_eq!(believers(&[frozen.clone(), b.clone()], 400.0), ["b"]);
        assert_eq!(believers(&[frozen, b.clone()], 550.0), ["a", "b"]);
        let killed = Member {
            not_running: vec![Span {
                from_ms: 100.0,
                to_ms: None,
            }],
            ..member("a", vec![lead(0.0, 1)])
        };
        let r = one_group(vec![killed.clone(), b.clone()]).check(window(0.0, 1000.0));
        assert_eq!((r.app_overlap_ms, r.none_ms), (0.0, 200.0));
        assert_eq!(
            first_start(&[killed, b], "a", 50.0),
            Some(("b", 300.0)),
            "the new leader"
        );
    }

    /// The fence's log: a write accepted with a token older than one accepted before it is a
    /// regression; equal tokens and growing ones are not; one before the window only sets the
    /// newest token.
    #[test]
    fn fence_regressions() {
        let at = |at_ms: Ms, token: u64| Accepted { at_ms, token };
        let h = Histories {
            groups: Vec::new(),
            fence: vec![
                at(10.0, 1),
                at(20.0, 2),
                at(30.0, 2),
                at(40.0, 1),
                at(50.0, 3),
                at(60.0, 2),
            ],
        };
        let r = h.check(window(0.0, 100.0));
        let found: Vec<(Ms, u64, u64)> = r
            .fence_regressions
            .iter()
            .map(|r| (r.at_ms, r.token, r.newest))
            .collect();
        assert_eq!(found, [(40.0, 1, 2), (60.0, 2, 3)]);
        assert_eq!(r.fence_regressions[1].newest_at_ms, 50.0);
        let later = h.check(window(55.0, 100.0));
        assert_eq!(later.fence_regressions.len(), 1);
        assert!(h.check(window(0.0, 35.0)).fence_regressions.is_empty());
    }

    #[test]
    fn an_agents_files_give_its_beliefs_with_their_validity() {
        let at = |ms: u64| UNIX_EPOCH + std::time::Duration::from_millis(ms);
        let role = [
            (at(1_000), "follower".to_owned()),
            (at(2_000), "leader".to_owned()),
            (at(9_000), "unknown".to_owned()),
        ];
        let valid_until = [
            (at(2_000), "4000".to_owned()),
            (at(3_000), "6000".to_owned()),
            (at(9_000), String::new()),
        ];
        let m = Member::from_agent_files("a", &role, &valid_until);
        let spans: Vec<(Ms, Option<Ms>)> = m
            .beliefs()
            .iter()
            .map(|(s, _)| (s.from_ms, s.to_ms))
            .collect();
        // Renewed at 3 s, then nothing: the belief ends at 6 s, not at the `unknown` of 9 s.
        assert_eq!(
            spans,
            vec![(2_000.0, Some(3_000.0)), (3_000.0, Some(6_000.0))]
        );
        assert!(m.believes_at(5_999.0));
        assert!(!m.believes_at(6_000.0));
        assert!(!m.believes_at(8_000.0));
    }
}
