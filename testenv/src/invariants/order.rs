//! The order invariant: a pod never carries a leader's epoch before the group's Lease names it
//! at that epoch and the group's status records it.
//!
//! Every object comes from one etcd, so the resourceVersions of Leases, LeaderGroups and pods
//! are revisions of one counter, and comparable. The rule, on what the watches deliver:
//!
//! > When the pod watch delivers a write (a watch event, not an entry of a list) at revision
//! > `r` that gives pod `P` the marks of group `g` at epoch `e` (its group and epoch annotations)
//! > which its previous version did not carry, then the Lease watch must have delivered a
//! > version of `leadergroup-<g>` with `holderIdentity = P`, epoch annotation `e` and a revision
//! > below `r`, and the LeaderGroup watch a version of `g` with `status.leader = P`,
//! > `status.epoch = e` and a revision below `r`.
//!
//! The versions a watch delivers include those of its lists (the state when it listed), so a
//! Lease written before the watch started still counts, as long as it was not overwritten before
//! that list. What the watches cannot tell is left unjudged rather than reported:
//! - a pod whose marks first appear in a list (its write is not known);
//! - a write whose revision lies where the Lease or LeaderGroup watch may have missed writes:
//!   from the last revision it delivered before a (re)list up to its first event after that
//!   list (the list's own revision is not known, so up to the first event after it);
//! - a write the Lease or LeaderGroup watch has not yet passed: the versions before it may still
//!   be on their way. [`OrderLog::finalize`] turns those into violations once the caller has
//!   given the watches time to deliver them and they are healthy: a healthy watch delivers a
//!   write made before the pod's within that time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// How many versions of each group's record a violation's message can cite.
const CITED: usize = 12;

/// The resourceVersion of an object as a revision, when it is one (etcd's are decimal).
pub(crate) fn revision(resource_version: Option<&str>) -> Option<u64> {
    resource_version.and_then(|rv| rv.parse().ok())
}

/// Which of the two records a pod's marks must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// The group's Lease.
    Lease,
    /// The group's status.
    Status,
}

impl Record {
    fn describe(self, group: &str) -> String {
        match self {
            Record::Lease => format!(
                "the Lease {}",
                leadergroup_client::wire::lease_name_for(group)
            ),
            Record::Status => format!("the status of LeaderGroup {group}"),
        }
    }
}

/// What one watch (of Leases or of LeaderGroups) has delivered.
#[derive(Debug, Default)]
struct Watched {
    /// Per (group, named pod, epoch): the lowest revision of a version naming that pod at that
    /// epoch.
    naming: BTreeMap<(String, String, i64), u64>,
    /// The highest revision delivered.
    progress: u64,
    /// Revision ranges in which writes may have been missed: from the last revision delivered
    /// before a list to the first event after it (open, `None`, until that event).
    blind: Vec<(u64, Option<u64>)>,
    /// Whether the watch's last item was an event (not an error).
    healthy: bool,
    /// Per group: the last versions delivered (revision, what it said), for a violation's
    /// message: a violation is rare, and what the watch saw around it is what explains it.
    recent: BTreeMap<String, VecDeque<(u64, String)>>,
}

impl Watched {
    fn relisting(&mut self) {
        if !matches!(self.blind.last(), Some((_, None))) {
            self.blind.push((self.progress, None));
        }
    }

    fn record(&mut self, naming: Option<(&str, &str, i64)>, revision: u64) {
        if let Some((group, pod, epoch)) = naming {
            let lowest = self
                .naming
                .entry((group.to_owned(), pod.to_owned(), epoch))
                .or_insert(revision);
            *lowest = (*lowest).min(revision);
        }
        self.progress = self.progress.max(revision);
        self.healthy = true;
    }

    fn cite(&mut self, group: &str, revision: u64, said: String) {
        let recent = self.recent.entry(group.to_owned()).or_default();
        if recent.len() == 4 * CITED {
            recent.pop_front();
        }
        recent.push_back((revision, said));
    }

    /// What this watch delivered of `group`'s record up to a little past `revision`, and where
    /// it was blind.
    fn citation(&self, group: &str, revision: u64) -> String {
        let versions: Vec<String> = self
            .recent
            .get(group)
            .into_iter()
            .flatten()
            .filter(|(r, _)| *r <= revision.saturating_add(1000))
            .map(|(r, said)| format!("{r}: {said}"))
            .collect();
        let from = versions.len().saturating_sub(CITED);
        format!(
            "versions seen [{}]; blind {:?}; progress {}",
            versions[from..].join(", "),
            self.blind,
            self.progress
        )
    }

    /// Whether `revision` lies where this watch may have missed writes.
    fn blind_at(&self, revision: u64) -> bool {
        self.blind
            .iter()
            .any(|(from, to)| *from < revision && to.is_none_or(|to| revision < to))
    }

    /// Judges the write at `revision` that marked `pod` at `epoch` for `group` against what this
    /// watch delivered; at a `last_call`, a write the watch has not passed is decided too.
    fn judge(&self, group: &str, pod: &str, epoch: i64, revision: u64, last_call: bool) -> Verdict {
        let key = (group.to_owned(), pod.to_owned(), epoch);
        if self.naming.get(&key).is_some_and(|first| *first < revision) {
            return Verdict::Held;
        }
        if self.blind_at(revision) {
            return Verdict::Unknowable;
        }
        if self.progress > revision || (last_call && self.healthy) {
            return Verdict::Broken;
        }
        if last_call {
            Verdict::Unknowable
        } else {
            Verdict::Pending
        }
    }
}

/// A judgment of one pod write against one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Held,
    Broken,
    /// Not yet: the watch has not passed the write.
    Pending,
    /// Never: the watch may have missed what would decide it.
    Unknowable,
}

/// A write that gave a pod a group's marks at an epoch.
#[derive(Clone, Debug)]
struct PodWrite {
    pod: String,
    group: String,
    epoch: i64,
    revision: u64,
}

/// The order invariant's record: the Leases' and statuses' versions seen, the pods' writes to
/// judge, and what was judged for good.
#[derive(Debug, Default)]
pub(crate) struct OrderLog {
    leases: Watched,
    statuses: Watched,
    writes: Vec<PodWrite>,
    /// (pod, epoch) marks a test wrote itself, not the operator.
    forged: BTreeSet<(String, i64)>,
    /// The writes before this index were judged at a last call ([`OrderLog::finalize`]).
    finalized: usize,
    /// The violations found at last calls.
    final_violations: Vec<String>,
}

impl OrderLog {
    /// The watch of `record` starts a (re)list.
    pub(crate) fn relisting(&mut self, record: Record) {
        self.watched(record).relisting();
    }

    /// The watch of `record` delivered an error instead of an event.
    pub(crate) fn watch_failed(&mut self, record: Record) {
        self.watched(record).healthy = false;
    }

    /// The watch of `record` delivered a version at `revision` (from a list when `listed`, else
    /// as an event, which closes a blind range), naming `pod` at `epoch` for `group` if it does.
    pub(crate) fn seen(
        &mut self,
        record: Record,
        naming: Option<(&str, &str, i64)>,
        revision: u64,
        listed: bool,
    ) {
        let watched = self.watched(record);
        if !listed && let Some((_, to @ None)) = watched.blind.last_mut() {
            *to = Some(revision);
        }
        watched.record(naming, revision);
    }

    /// The watch of `record` delivered a version of `group`'s record at `revision` that says
    /// `said` (its holder and epoch as written): cited if a violation involves the group.
    pub(crate) fn cite(&mut self, record: Record, group: &str, revision: u64, said: String) {
        self.watched(record).cite(group, revision, said);
    }

    /// The pod watch delivered, as an event, a write at `revision` giving `pod` the marks of
    /// `group` at `epoch`.
    pub(crate) fn pod_marked(&mut self, pod: &str, group: &str, epoch: i64, revision: u64) {
        self.writes.push(PodWrite {
            pod: pod.to_owned(),
            group: group.to_owned(),
            epoch,
            revision,
        });
    }

    /// Marks `pod` at `epoch` written by the test itself: not judged.
    pub(crate) fn forged(&mut self, pod: &str, epoch: i64) {
        self.forged.insert((pod.to_owned(), epoch));
    }

    /// (writes judged, writes that could not be judged) among those seen so far.
    pub(crate) fn tally(&self) -> (usize, usize) {
        let unknowable = self
            .writes
            .iter()
            .filter(|w| {
                self.verdicts(w, true)
                    .iter()
                    .any(|(_, v)| *v == Verdict::Unknowable)
            })
            .count();
        (self.writes.len() - unknowable, unknowable)
    }

    /// How many writes are still waiting for a watch to pass them.
    pub(crate) fn pending(&self) -> usize {
        self.writes
            .iter()
            .skip(self.finalized)
            .filter(|w| {
                self.verdicts(w, false)
                    .iter()
                    .any(|(_, v)| *v == Verdict::Pending)
            })
            .count()
    }

    /// The last call for every write seen so far: one still waiting is judged on what the
    /// watches delivered, if they are healthy.
    pub(crate) fn finalize(&mut self) {
        let mut found = Vec::new();
        for write in self.writes.iter().skip(self.finalized) {
            found.extend(self.violations_of(write, true));
        }
        self.final_violations.extend(found);
        self.finalized = self.writes.len();
    }

    /// Every violation found: at last calls, and among the later writes those already decided.
    pub(crate) fn violations(&self) -> Vec<String> {
        let mut all = self.final_violations.clone();
        for write in self.writes.iter().skip(self.finalized) {
            all.extend(self.violations_of(write, false));
        }
        all
    }

    fn watched(&mut self, record: Record) -> &mut Watched {
        match record {
            Record::Lease => &mut self.leases,
            Record::Status => &mut self.statuses,
        }
    }

    fn verdicts(&self, w: &PodWrite, last_call: bool) -> [(Record, Verdict); 2] {
        if self.forged.contains(&(w.pod.clone(), w.epoch)) {
            return [
                (Record::Lease, Verdict::Held),
                (Record::Status, Verdict::Held),
            ];
        }
        [
            (Record::Lease, &self.leases),
            (Record::Status, &self.statuses),
        ]
        .map(|(record, watched)| {
            (
                record,
                watched.judge(&w.group, &w.pod, w.epoch, w.revision, last_call),
            )
        })
    }

    fn violations_of(&self, w: &PodWrite, last_call: bool) -> Vec<String> {
        self.verdicts(w, last_call)
            .into_iter()
            .filter(|(_, v)| *v == Verdict::Broken)
            .map(|(record, _)| {
                let watched = match record {
                    Record::Lease => &self.leases,
                    Record::Status => &self.statuses,
                };
                format!(
                    "order: pod {} carried epoch {} of group {:?} at revision {}, but {} was not seen \
                     naming it at that epoch at a lower revision ({})",
                    w.pod,
                    w.epoch,
                    w.group,
                    w.revision,
                    record.describe(&w.group),
                    watched.citation(&w.group, w.revision)
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both watches listed (nothing yet) and delivered a first event, as when the watcher starts
    /// before the group exists.
    fn started() -> OrderLog {
        let mut log = OrderLog::default();
        for record in [Record::Lease, Record::Status] {
            log.relisting(record);
            log.seen(record, None, 10, false);
        }
        log
    }

    #[test]
    fn a_promotion_after_the_lease_and_the_status_holds() {
        let mut log = started();
        log.seen(Record::Lease, Some(("pay", "app-0", 1)), 20, false);
        log.seen(Record::Status, Some(("pay", "app-0", 1)), 21, false);
        log.pod_marked("app-0", "pay", 1, 22);
        // A renewal and a later status write: both watches have passed the promotion.
        log.seen(Record::Lease, Some(("pay", "app-0", 1)), 30, false);
        log.seen(Record::Status, Some(("pay", "app-0", 1)), 31, false);
        assert_eq!(log.pending(), 0);
        log.finalize();
        assert_eq!(log.violations(), Vec::<String>::new());
    }

    #[test]
    fn a_promotion_before_the_status_records_it_is_reported() {
        let mut log = started();
        log.seen(Record::Lease, Some(("pay", "app-0", 1)), 20, false);
        log.pod_marked("app-0", "pay", 1, 21);
        log.seen(Record::Status, Some(("pay", "app-0", 1)), 22, false);
        let violations = log.violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(
            violations[0].contains("status of LeaderGroup pay"),
            "{violations:?}"
        );
    }

    #[test]
    fn a_lease_naming_another_pod_or_epoch_does_not_count() {
        let mut log = started();
        log.seen(Record::Lease, Some(("pay", "app-1", 1)), 20, false);
        log.cite(Record::Lease, "pay", 20, "app-1@1".into());
        log.seen(Record::Lease, Some(("pay", "app-0", 2)), 21, false);
        log.cite(Record::Lease, "pay", 21, "app-0@2".into());
        log.seen(Record::Status, Some(("pay", "app-0", 1)), 22, false);
        log.pod_marked("app-0", "pay", 1, 23);
        log.seen(Record::Lease, None, 40, false);
        log.seen(Record::Status, None, 41, false);
        let violations = log.violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(
            violations[0].contains("Lease leadergroup-pay"),
            "{violations:?}"
        );
        assert!(
            violations[0].contains("versions seen [20: app-1@1, 21: app-0@2]"),
            "what the watch saw is cited: {violations:?}"
        );
    }

    #[test]
    fn a_write_the_watches_have_not_passed_waits_for_the_last_call() {
        let mut log = started();
        log.seen(Record::Lease, Some(("pay", "app-0", 1)), 20, false);
        log.pod_marked("app-0", "pay", 1, 22);
        assert_eq!(log.pending(), 1, "the status watch has not passed 22");
        assert!(log.violations().is_empty());
        log.finalize();
        assert_eq!(
            log.violations().len(),
            1,
            "a healthy watch had time to deliver it"
        );
    }

    #[test]
    fn a_lease_written_before_the_watch_started_counts_from_its_list() {
        let mut log = OrderLog::default();
        for record in [Record::Lease, Record::Status] {
            log.relisting(record);
            log.seen(record, Some(("pay", "app-0", 3)), 5, true);
            log.seen(record, Some(("pay", "app-0", 3)), 12, false);
        }
        // The pod lost its label and got it back at the same epoch.
        log.pod_marked("app-0", "pay", 3, 15);
        log.finalize();
        assert_eq!(log.violations(), Vec::<String>::new());
    }

    #[test]
    fn what_a_relist_may_have_missed_is_not_judged() {
        let mut log = started();
        log.seen(Record::Status, Some(("pay", "app-0", 1)), 20, false);
        // The Lease watch breaks after 10 and lists again; its first event after is at 40.
        log.relisting(Record::Lease);
        log.pod_marked("app-0", "pay", 1, 25);
        log.seen(Record::Lease, Some(("pay", "app-1", 2)), 35, true);
        log.seen(Record::Lease, Some(("pay", "app-1", 2)), 40, false);
        log.seen(Record::Status, None, 41, false);
        log.finalize();
        assert_eq!(log.violations(), Vec::<String>::new());
    }

    #[test]
    fn marks_the_test_wrote_itself_are_not_judged() {
        let mut log = started();
        log.forged("gone-0", 7);
        log.pod_marked("gone-0", "pay", 7, 20);
        log.seen(Record::Lease, None, 30, false);
        log.seen(Record::Status, None, 31, false);
        log.finalize();
        assert_eq!(log.violations(), Vec::<String>::new());
    }
}
