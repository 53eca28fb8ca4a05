//! A watch of a namespace that checks the election's invariants at every state it shows: I1 (at
//! most one pod of a group labeled leader), I3 (the epochs handed to leaders only grow, and no
//! epoch is ever carried by two different pods), and the order of the writes (a pod never
//! carries a leader's epoch before the group's Lease names it at that epoch and its status
//! records it: [`order`]). Shared by the light-cluster tests, the end-to-end tests on real nodes
//! and the chaos run.

mod order;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use leadergroup_client::wire::{EPOCH_ANNOTATION, LEASE_PREFIX, ROLE_LEADER};

use crate::crd::leader_groups;
pub use crate::pods::{eligible, ready};
use crate::pods::{epoch, marked_group, role};
use crate::watch::{Seen, Watched};
use order::{OrderLog, Record, revision};

/// How long [`InvariantWatcher::start`] waits for the watches' first lists.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`InvariantWatcher::catch_up`] gives the Lease and LeaderGroup watches to deliver
/// the versions that came before the pods' writes: a healthy watch is milliseconds behind.
const CATCH_UP: Duration = Duration::from_secs(5);

/// Watches the pods, Leases and LeaderGroups of a namespace (from before the operator acts) and
/// records every violation of I1, I3 and the order invariant, and the sequence of (leader, epoch)
/// it saw; started with
/// [`InvariantWatcher::start_with_candidates`], also every interval a group went without an
/// eligible leader while it had an eligible candidate (what I4 bounds).
pub struct InvariantWatcher {
    watched: Watched<Recorded>,
}

/// What the watcher knows of one pod: its role label, its group annotation, its epoch.
type Marks = (Option<String>, Option<String>, Option<i64>);

#[derive(Default)]
struct Recorded {
    pods: HashMap<String, Marks>,
    /// Per group (epochs are per group: two groups each have an epoch 1): who got each epoch.
    epoch_owner: BTreeMap<(String, i64), String>,
    /// Per group: the last epoch a leader was seen with.
    last_epoch: BTreeMap<String, i64>,
    leaders: Vec<(String, i64)>,
    violations: Vec<String>,
    events: usize,
    /// The order invariant's record.
    order: OrderLog,
    /// The pod label whose value names a pod's group (the groups' selector), when gaps are tracked.
    candidate_label: Option<String>,
    /// Per pod: its group (the candidate label's value) and whether it is eligible now.
    candidates: HashMap<String, Candidate>,
    /// Per group: since when it has had an eligible candidate and no eligible leader.
    leaderless_since: BTreeMap<String, Instant>,
    gaps: Vec<Gap>,
}

/// What the gap tracking knows of one pod.
struct Candidate {
    group: String,
    eligible: bool,
    leader: bool,
}

/// An interval in which a group had an eligible candidate but no eligible pod labeled leader, as
/// this watch saw it (its clock: the arrival of the events that opened and closed it).
#[derive(Clone, Debug)]
pub struct Gap {
    /// The group (the candidate label's value).
    pub group: String,
    /// When it opened.
    pub start: Instant,
    /// How long it lasted; `None` while still open.
    pub length: Option<Duration>,
}

impl InvariantWatcher {
    /// Starts watching `namespace`; returns once the watch has delivered its first list (or after
    /// 30 s without it: [`InvariantWatcher::assert_held`] then fails for lack of events).
    pub async fn start(client: &Client, namespace: &str) -> InvariantWatcher {
        Self::started(client, namespace, None).await
    }

    /// [`InvariantWatcher::start`], also tracking the gaps ([`InvariantWatcher::gaps`]) of the
    /// groups whose pods carry `label` (its value names the group): an eligible pod is Running,
    /// Ready and not terminating (docs/concepts.md, "How it elects").
    pub async fn start_with_candidates(
        client: &Client,
        namespace: &str,
        label: &str,
    ) -> InvariantWatcher {
        Self::started(client, namespace, Some(label.to_owned())).await
    }

    async fn started(
        client: &Client,
        namespace: &str,
        candidate_label: Option<String>,
    ) -> InvariantWatcher {
        let recorded = Recorded {
            candidate_label,
            ..Recorded::default()
        };
        let config = watcher::Config::default;
        let (watched, _) = Watched::new(recorded)
            .watch(
                Api::<Pod>::namespaced(client.clone(), namespace),
                config(),
                Recorded::pods_event,
            )
            .watch(
                Api::<Lease>::namespaced(client.clone(), namespace),
                config(),
                |r: &mut Recorded, event: Seen<Lease>| {
                    r.record_event(Record::Lease, event, lease_version)
                },
            )
            .watch(
                leader_groups(client, namespace),
                config(),
                |r: &mut Recorded, event: Seen<DynamicObject>| {
                    r.record_event(Record::Status, event, status_version)
                },
            )
            .synced(SYNC_TIMEOUT)
            .await;
        InvariantWatcher { watched }
    }

    /// Declares that the test itself writes the leader marks of `pod` at `epoch` (a forgery the
    /// operator must cope with): the order invariant does not judge that write.
    pub fn forged_marks(&self, pod: &str, epoch: i64) {
        self.lock().order.forged(pod, epoch);
    }

    /// Gives the watches up to 40 s to show every object as new as the API server has it now
    /// (a violation if they do not: what they missed would go unjudged), then the Lease and
    /// LeaderGroup watches up to 5 s more to deliver what came before the pods' writes seen so
    /// far, and judges those writes on what they delivered (see [`order`]).
    pub async fn catch_up(&self) {
        if let Err(behind) = self.watched.caught_up().await {
            self.lock().violations.push(behind);
        }
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        while self.lock().order.pending() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.lock().order.finalize();
    }

    /// How many pods' writes of a leader's marks the order invariant judged, and how many it
    /// could not (see [`order`]: a watch may have missed what would decide them).
    pub fn order_judged(&self) -> (usize, usize) {
        self.lock().order.tally()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.watched.lock()
    }

    /// The violations seen so far, the (pod, epoch) sequence of leaders, and how many pod events
    /// the watch delivered.
    pub fn report(&self) -> (Vec<String>, Vec<(String, i64)>, usize) {
        let r = self.lock();
        let mut violations = r.violations.clone();
        violations.extend(r.order.violations());
        (violations, r.leaders.clone(), r.events)
    }

    /// Every gap seen so far (see [`Gap`]), the open ones last with no length; empty unless
    /// started with [`InvariantWatcher::start_with_candidates`].
    pub fn gaps(&self) -> Vec<Gap> {
        let r = self.lock();
        let open = r.leaderless_since.iter().map(|(group, start)| Gap {
            group: group.clone(),
            start: *start,
            length: None,
        });
        r.gaps.iter().cloned().chain(open).collect()
    }

    /// Lets the watches catch up ([`InvariantWatcher::catch_up`]), then panics with every
    /// violation seen, if any (or if the watch saw no pod event at all); returns the leaders'
    /// sequence.
    #[allow(clippy::panic, reason = "a test assertion: the failing test's message")]
    pub async fn assert_held(&self) -> Vec<(String, i64)> {
        self.catch_up().await;
        let (violations, leaders, events) = self.report();
        let (judged, not_judged) = self.order_judged();
        eprintln!(
            "invariants: {events} pod events, {judged} leader marks judged in order, {not_judged} not judgeable"
        );
        if events == 0 {
            panic!("the invariant watcher saw no pod event at all");
        }
        if !violations.is_empty() {
            panic!(
                "invariants violated:\n{}\nleaders: {leaders:?}",
                violations.join("\n")
            );
        }
        leaders
    }
}

/// A version of a group's Lease or status: the group, what it says as written (its holder and
/// epoch, whatever they are, for a violation's message), and the pod it names at an epoch, if it
/// names one.
struct RecordVersion {
    group: String,
    said: String,
    named: Option<(String, i64)>,
}

/// A group's Lease, if `lease` is one.
fn lease_version(lease: &Lease) -> Option<RecordVersion> {
    let group = lease.name_any().strip_prefix(LEASE_PREFIX)?.to_owned();
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.clone());
    let epoch = lease.annotations().get(EPOCH_ANNOTATION);
    let said = format!(
        "{}@{} (transitions {})",
        holder.as_deref().unwrap_or("-"),
        epoch.map_or("-", String::as_str),
        spec.and_then(|s| s.lease_transitions).unwrap_or(0)
    );
    let epoch = epoch.and_then(|e| e.parse().ok());
    Some(RecordVersion {
        group,
        said,
        named: holder.zip(epoch),
    })
}

/// A LeaderGroup's status.
fn status_version(group: &DynamicObject) -> Option<RecordVersion> {
    let status = &group.data["status"];
    let (leader, epoch) = (status["leader"].as_str(), status["epoch"].as_i64());
    Some(RecordVersion {
        group: group.name_any(),
        said: format!("{}@{}", leader.unwrap_or("-"), status["epoch"]),
        named: leader.map(str::to_owned).zip(epoch),
    })
}

impl Recorded {
    /// A delivery of the pod watch. A list replaces what was known, as a whole: applied pod by
    /// pod on top of the old state, a pod seen leader before the gap would count beside the new
    /// leader until its own entry of the list arrived.
    fn pods_event(&mut self, seen: Seen<Pod>) {
        match seen {
            Seen::Applied(p) => {
                self.order_check(&p);
                self.apply(&p);
            }
            Seen::Deleted(p) => {
                self.pods.remove(&p.name_any());
                self.candidates.remove(&p.name_any());
            }
            Seen::Listed(pods) => {
                self.pods.clear();
                self.candidates.clear();
                for p in &pods {
                    self.apply(p);
                }
            }
            Seen::Relisting | Seen::Failed => return,
        }
        self.update_gaps();
    }

    /// A delivery of the Lease or LeaderGroup watch, for the order invariant.
    fn record_event<K: Resource>(
        &mut self,
        record: Record,
        seen: Seen<K>,
        read: impl Fn(&K) -> Option<RecordVersion>,
    ) {
        let mut note = |o: &K, listed: bool, deleted: bool| {
            let Some(rv) = revision(o.meta().resource_version.as_deref()) else {
                return;
            };
            let Some(v) = read(o) else {
                self.order.seen(record, None, rv, listed);
                return;
            };
            let how = match (listed, deleted) {
                (true, _) => "listed ",
                (_, true) => "deleted ",
                _ => "",
            };
            self.order
                .cite(record, &v.group, rv, format!("{how}{}", v.said));
            let named = v
                .named
                .as_ref()
                .map(|(p, e)| (v.group.as_str(), p.as_str(), *e));
            self.order.seen(record, named, rv, listed);
        };
        match seen {
            Seen::Relisting => self.order.relisting(record),
            Seen::Failed => self.order.watch_failed(record),
            Seen::Listed(objects) => objects.iter().for_each(|o| note(o, true, false)),
            Seen::Applied(o) => note(&o, false, false),
            Seen::Deleted(o) => note(&o, false, true),
        }
    }

    /// Before `pod`'s new state is applied: a write that gives it a group's marks at an epoch it
    /// did not carry is one the order invariant judges.
    fn order_check(&mut self, pod: &Pod) {
        let name = pod.name_any();
        let (Some(group), Some(e), Some(rv)) = (
            marked_group(pod),
            epoch(pod),
            revision(pod.metadata.resource_version.as_deref()),
        ) else {
            return;
        };
        let before = self
            .pods
            .get(&name)
            .map(|(_, group, epoch)| (group.as_deref(), *epoch));
        if before != Some((Some(group), Some(e))) {
            self.order.pod_marked(&name, group, e, rv);
        }
    }

    /// Opens and closes the groups' gaps after a change of the known pods.
    fn update_gaps(&mut self) {
        if self.candidate_label.is_none() {
            return;
        }
        // Per group: (an eligible candidate, an eligible leader).
        let mut groups: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
        for c in self.candidates.values() {
            let g = groups.entry(c.group.as_str()).or_default();
            g.0 |= c.eligible;
            g.1 |= c.eligible && c.leader;
        }
        let now = Instant::now();
        for (group, (candidate, leader)) in &groups {
            if *candidate && !*leader {
                self.leaderless_since
                    .entry((*group).to_owned())
                    .or_insert(now);
            }
        }
        let closed: Vec<String> = self
            .leaderless_since
            .keys()
            .filter(|g| groups.get(g.as_str()).is_none_or(|(c, l)| !*c || *l))
            .cloned()
            .collect();
        for group in closed {
            if let Some(start) = self.leaderless_since.remove(&group) {
                self.gaps.push(Gap {
                    group,
                    start,
                    length: Some(now - start),
                });
            }
        }
    }

    fn apply(&mut self, pod: &Pod) {
        self.events += 1;
        let name = pod.name_any();
        let role = role(pod).map(str::to_owned);
        let group = marked_group(pod).map(str::to_owned);
        let epoch = epoch(pod);
        self.pods
            .insert(name.clone(), (role.clone(), group.clone(), epoch));
        if let Some(label) = &self.candidate_label
            && let Some(candidate_group) = pod.labels().get(label)
        {
            let candidate = Candidate {
                group: candidate_group.clone(),
                eligible: eligible(pod),
                leader: role.as_deref() == Some(ROLE_LEADER),
            };
            self.candidates.insert(name.clone(), candidate);
        }

        let mut leaders_by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (pod_name, (role, group, _)) in &self.pods {
            if role.as_deref() == Some(ROLE_LEADER) {
                leaders_by_group
                    .entry(group.clone().unwrap_or_default())
                    .or_default()
                    .push(pod_name.clone());
            }
        }
        for (group, leaders) in &leaders_by_group {
            if leaders.len() > 1 {
                self.violations.push(format!(
                    "I1: group {group:?} has {} pods labeled leader at once: {leaders:?} (after an event of {name})",
                    leaders.len()
                ));
            }
        }
        if role.as_deref() == Some(ROLE_LEADER)
            && let Some(e) = epoch
        {
            let group = group.unwrap_or_default();
            match self.epoch_owner.get(&(group.clone(), e)) {
                Some(owner) if owner != &name => self.violations.push(format!(
                    "I3: group {group:?}: epoch {e} handed to {owner} and then to {name}"
                )),
                _ => {
                    self.epoch_owner.insert((group.clone(), e), name.clone());
                }
            }
            if let Some(last) = self.last_epoch.get(&group)
                && *last > e
            {
                self.violations.push(format!(
                    "I3: group {group:?}: epoch went down from {last} to {e} ({name})"
                ));
            }
            self.last_epoch.insert(group, e);
            if self.leaders.last() != Some(&(name.clone(), e)) {
                self.leaders.push((name, e));
            }
        }
    }
}
