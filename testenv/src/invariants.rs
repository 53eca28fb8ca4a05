//! A watch of a namespace's pods that checks the election's invariants at every state it shows:
//! I1 (at most one pod of a group labeled leader) and I3 (the epochs handed to leaders only grow,
//! and no epoch is ever carried by two different pods). Shared by the light-cluster tests and the
//! end-to-end tests on real nodes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

/// The marks the operator puts on pods, as the design names them (DESIGN.md, "On pods"). This crate
/// cannot depend on the operator's crate (the operator's tests depend on this one), so the names
/// are spelled here; `tests/it` checks them against `leadergroup_operator::crd`.
pub const ROLE_LABEL: &str = "leadergroup.io/role";
/// The role label's value on the leader.
pub const ROLE_LEADER: &str = "leader";
/// The annotation naming the group a pod's marks belong to.
pub const GROUP_ANNOTATION: &str = "leadergroup.io/group";
/// The leader's fencing token.
pub const EPOCH_ANNOTATION: &str = "leadergroup.io/epoch";

/// How long [`InvariantWatcher::start`] waits for the watch's first list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Watches the pods of a namespace (from before the operator acts) and records every violation of
/// I1 and I3, and the sequence of (leader, epoch) it saw; started with
/// [`InvariantWatcher::start_with_candidates`], also every interval a group went without an
/// eligible leader while it had an eligible candidate (what I4 bounds).
pub struct InvariantWatcher {
    state: Arc<Mutex<Recorded>>,
    task: tokio::task::JoinHandle<()>,
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
    /// Ready and not terminating (DESIGN.md, "Election semantics").
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
        use futures::StreamExt;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let state = Arc::new(Mutex::new(Recorded {
            candidate_label,
            ..Recorded::default()
        }));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let recorder = state.clone();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            // With a backoff: through an API server restart, errors come back at once.
            let mut stream = watcher(pods, watcher::Config::default())
                .default_backoff()
                .boxed();
            // A list (the first one, or a relist after the watch broke or expired) is one state of
            // the API server: it replaces what was known, as a whole. Applied pod by pod on top of
            // the old state, a pod seen leader before the gap would count beside the new leader
            // until its own entry of the list arrived.
            let mut listing: Option<Vec<Pod>> = None;
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let mut r = recorder.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    watcher::Event::Apply(p) => {
                        r.apply(&p);
                        r.update_gaps();
                    }
                    watcher::Event::Delete(p) => {
                        r.pods.remove(&p.name_any());
                        r.candidates.remove(&p.name_any());
                        r.update_gaps();
                    }
                    watcher::Event::Init => listing = Some(Vec::new()),
                    watcher::Event::InitApply(p) => listing.get_or_insert_default().push(p),
                    watcher::Event::InitDone => {
                        r.pods.clear();
                        r.candidates.clear();
                        for p in listing.take().unwrap_or_default() {
                            r.apply(&p);
                        }
                        r.update_gaps();
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                }
            }
        });
        let _ = tokio::time::timeout(SYNC_TIMEOUT, synced_rx).await;
        InvariantWatcher { state, task }
    }

    /// The violations seen so far, the (pod, epoch) sequence of leaders, and how many pod events
    /// the watch delivered.
    pub fn report(&self) -> (Vec<String>, Vec<(String, i64)>, usize) {
        let r = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (r.violations.clone(), r.leaders.clone(), r.events)
    }

    /// Every gap seen so far (see [`Gap`]), the open ones last with no length; empty unless
    /// started with [`InvariantWatcher::start_with_candidates`].
    pub fn gaps(&self) -> Vec<Gap> {
        let r = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let open = r.leaderless_since.iter().map(|(group, start)| Gap {
            group: group.clone(),
            start: *start,
            length: None,
        });
        r.gaps.iter().cloned().chain(open).collect()
    }

    /// Panics with every violation seen, if any (or if the watch saw no event at all); returns the
    /// leaders' sequence.
    #[allow(clippy::panic, reason = "a test assertion: the failing test's message")]
    pub fn assert_held(&self) -> Vec<(String, i64)> {
        let (violations, leaders, events) = self.report();
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

impl Drop for InvariantWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorded {
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
        let role = pod.labels().get(ROLE_LABEL).cloned();
        let group = pod.annotations().get(GROUP_ANNOTATION).cloned();
        let epoch = pod
            .annotations()
            .get(EPOCH_ANNOTATION)
            .and_then(|e| e.parse::<i64>().ok());
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

/// Running, Ready and not terminating: what the operator may elect (the selector aside).
pub fn eligible(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && ready(pod)
}

/// The pod's Ready condition is True.
pub fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
