//! A watch of a namespace's pods that checks the election's invariants at every state it shows:
//! I1 (at most one pod of a group labeled leader) and I3 (the epochs handed to leaders only grow,
//! and no epoch is ever carried by two different pods). Shared by the light-cluster tests and the
//! end-to-end tests on real nodes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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
/// I1 and I3, and the sequence of (leader, epoch) it saw.
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
}

impl InvariantWatcher {
    /// Starts watching `namespace`; returns once the watch has delivered its first list (or after
    /// 30 s without it: [`InvariantWatcher::assert_held`] then fails for lack of events).
    pub async fn start(client: &Client, namespace: &str) -> InvariantWatcher {
        use futures::StreamExt;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let state = Arc::new(Mutex::new(Recorded::default()));
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
                    watcher::Event::Apply(p) => r.apply(&p),
                    watcher::Event::Delete(p) => {
                        r.pods.remove(&p.name_any());
                    }
                    watcher::Event::Init => listing = Some(Vec::new()),
                    watcher::Event::InitApply(p) => listing.get_or_insert_default().push(p),
                    watcher::Event::InitDone => {
                        r.pods.clear();
                        for p in listing.take().unwrap_or_default() {
                            r.apply(&p);
                        }
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
