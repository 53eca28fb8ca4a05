//! The controller's wiring: watches and caches of LeaderGroups, Pods and Leases, the mapping of
//! pod events to groups, readiness, and the reconcile entry with its error policy.
//!
//! A reconcile runs the transition protocol ([`converge`]: observe, decide, act) or, when the
//! group is being deleted, its [`cleanup`].

mod backoff;
mod cleanup;
mod converge;
mod execute;
mod leader_lists;
mod lease_triggers;
pub(crate) mod memory;
mod refused;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, warn};

use self::memory::Memory;
use crate::crd::{FINALIZER, LEASE_GROUP_LABEL, LeaderGroup};
use crate::error::{ReconcileError, Result};
use crate::group_index::GroupIndex;
use crate::ha::Retired;
use crate::marks;
use crate::metrics::Metrics;
use crate::pod_index::PodIndex;
use crate::retry::{self, Retry};

/// The caches every decision reads from.
#[derive(Clone)]
pub struct Caches {
    /// All LeaderGroups watched.
    pub groups: Store<LeaderGroup>,
    /// All pods watched, trimmed by [`crate::pod_index::trim_pod`] to what the decision reads.
    pub pods: Store<Pod>,
    /// The groups' Leases (those labeled with a group).
    pub leases: Store<Lease>,
    /// The groups' Services (those labeled with a group).
    pub services: Store<Service>,
    /// The EndpointSlices this operator writes (labeled as managed by it).
    pub slices: Store<EndpointSlice>,
}

impl Caches {
    /// Waits until the caches hold their first lists: the caches are synced.
    ///
    /// Each wait is polled afresh every 100 ms: `Store::wait_until_ready` (kube-runtime 5) keeps
    /// one waker only, and the Controller waits on the groups store too, so a single wait here
    /// might never be woken.
    pub async fn wait_synced(&self) {
        async fn listed<K>(store: &Store<K>)
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: std::hash::Hash + Eq + Clone,
        {
            while tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready())
                .await
                .is_err()
            {}
        }
        listed(&self.groups).await;
        listed(&self.pods).await;
        listed(&self.leases).await;
        listed(&self.services).await;
        listed(&self.slices).await;
    }

    /// Sends `true` on `synced` once every watch has delivered its first list.
    async fn announce_synced(self, synced: watch::Sender<bool>) {
        self.wait_synced().await;
        info!("every watch has delivered its first list");
        let _ = synced.send(true);
    }
}

/// What every reconcile shares.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// This replica's identity, written to the Leases it arbitrates.
    pub identity: String,
    /// Publishes Events on the LeaderGroups.
    pub recorder: Recorder,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The watch caches.
    pub caches: Caches,
    /// The pod cache by label and group mark.
    pod_index: PodIndex,
    /// The group cache by namespace.
    group_index: GroupIndex,
    /// What this replica remembers of each group: its barrier, its Lease's sighting (Heartbeat
    /// liveness, and how long another replica that arbitrates it still counts as alive), its
    /// handover clock and its run of failures.
    memory: Arc<Memory>,
    /// The lists of each namespace's leader labels, shared by the checks that want one at once.
    leader_lists: leader_lists::LeaderLists,
    /// Operator replicas known to have stopped on purpose.
    retired: Retired,
    /// The node controller's grace period ([`Settings::node_grace`]).
    node_grace: Duration,
    /// Whether this replica may act (always true without `--leader-elect`).
    active: watch::Receiver<bool>,
    /// Whether every watch has delivered its first list.
    synced: watch::Receiver<bool>,
}

impl Context {
    fn is_active(&self) -> bool {
        *self.active.borrow()
    }

    /// The groups of `ns`, from the cache.
    fn groups_in(&self, ns: &str) -> Vec<Arc<LeaderGroup>> {
        self.group_index.groups_in(&self.caches.groups, ns)
    }

    fn count_leaders(&self) {
        let groups = self.caches.groups.state();
        let with = groups
            .iter()
            .filter(|g| g.status.as_ref().is_some_and(|s| s.leader.is_some()))
            .count();
        self.metrics.set_groups(with, groups.len() - with);
    }
}

/// Where to watch and how much to do at once.
pub struct Settings {
    /// This replica's identity, written to the Leases it arbitrates.
    pub identity: String,
    /// One namespace, or all when None.
    pub namespace: Option<String>,
    /// How many groups may be reconciled at the same time: bounds the writes that a start or a
    /// node failure sends to the API server at once (unbounded, a start with 1000 groups
    /// sends every group's writes together).
    pub concurrency: u16,
    /// Operator replicas known to have stopped on purpose (see [`crate::ha::Retired`]): the
    /// groups they arbitrated are taken over at once.
    pub retired: Retired,
    /// The node controller's grace period (its `--node-monitor-grace-period`): a Readiness-mode
    /// group whose Lease is too long for it says so in its status (`LateStepDown`).
    pub node_grace: Duration,
}

impl Settings {
    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

/// Builds the controller and runs it until `shutdown` resolves, its cache of the groups written by
/// `groups_writer` (whose reader the caller keeps). `active` says whether this replica
/// may act; `synced` is set once every watch has delivered its first list (what /readyz reports,
/// and what every reconcile waits for).
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    groups_writer: reflector::store::Writer<LeaderGroup>,
    active: watch::Receiver<bool>,
    synced: watch::Sender<bool>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let groups = groups_writer.as_reader();
    let (pods, pods_writer) = reflector::store();
    let (leases, leases_writer) = reflector::store();
    let (services, services_writer) = reflector::store();
    let (slices, slices_writer) = reflector::store();
    let pod_index = PodIndex::default();
    let group_index = GroupIndex::default();
    let caches = Caches {
        groups,
        pods,
        leases,
        services,
        slices,
    };

    let memory = Arc::new(Memory::default());
    let group_stream = {
        let index = group_index.clone();
        let memory = memory.clone();
        watcher(settings.api::<LeaderGroup>(&client), watch_config())
            .modify(|g| g.metadata.managed_fields = None)
            .backoff(watch_backoff())
            .reflect(groups_writer)
            .inspect_ok(move |event| {
                index.apply(event);
                memory.group_watched(event);
            })
            .touched_objects()
    };
    let pod_stream = pod_stream(settings.api::<Pod>(&client), pods_writer, pod_index.clone());
    let lease_stream = watcher(
        settings.api::<Lease>(&client),
        watch_config().labels(LEASE_GROUP_LABEL),
    )
    // Nothing reads who wrote which field; at 10,000 groups that is megabytes held.
    .modify(|l| l.metadata.managed_fields = None)
    .backoff(watch_backoff())
    .reflect(leases_writer)
    .inspect_ok({
        let memory = memory.clone();
        move |event| memory.lease_watched(event)
    })
    .try_filter({
        let mut triggers = lease_triggers::LeaseTriggers::default();
        move |event| futures::future::ready(triggers.wants(event))
    })
    .touched_objects();
    // The groups' own Services and slices: a change of one (a user's edit or deletion) brings the
    // group back to what its spec asks.
    let service_stream = owned_stream(
        settings.api::<Service>(&client),
        watch_config().labels(LEASE_GROUP_LABEL),
        services_writer,
    );
    let slice_stream = owned_stream(
        settings.api::<EndpointSlice>(&client),
        watch_config().labels(&format!(
            "{}={}",
            crate::routing::MANAGED_BY_LABEL,
            crate::routing::MANAGED_BY
        )),
        slices_writer,
    );

    let ctx = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "leadergroup-operator".into(),
                instance: Some(settings.identity.clone()),
            },
        ),
        client,
        identity: settings.identity.clone(),
        metrics,
        caches: caches.clone(),
        pod_index,
        group_index,
        memory,
        leader_lists: leader_lists::LeaderLists::default(),
        retired: settings.retired.clone(),
        node_grace: settings.node_grace,
        active: active.clone(),
        synced: synced.subscribe(),
    });
    tokio::spawn(caches.clone().announce_synced(synced));
    ctx.metrics.watch_groups(caches.groups.clone());
    tokio::spawn(report_active(active.clone(), ctx.metrics.clone()));

    let mapper_ctx = ctx.clone();
    Controller::for_stream(group_stream, caches.groups.clone())
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .trigger_backoff(NoTriggerPause)
        .owns_stream(lease_stream)
        .owns_stream(service_stream)
        .owns_stream(slice_stream)
        .watches_stream(pod_stream, move |pod: Pod| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            let groups = groups_of_pod(&mapper_ctx.groups_in(ns), &pod);
            for group in &groups {
                mapper_ctx.memory.start_handover(group);
            }
            groups
        })
        .reconcile_all_on(activations(active, ctx.clone()))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "reconcile did not complete");
            }
        })
        .await;
}

/// How each watch backs off after an error: from 100 ms to at most 2 s, reset after a minute
/// without one. kube's default grows to 30 s, for which the caches stay stale after an API
/// server restart (tests/it/restarts.rs); a watch is one request, so retrying it is no load.
fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(
        ExponentialBackoff::from(exponential),
        Duration::from_secs(60),
    )
}

/// The Controller's pause of all of its triggers after any one of them errs: none. Each watch
/// backs off its own retries ([`watch_backoff`]); a pause of the merged triggers would hold every
/// group's events behind whichever watch failed.
struct NoTriggerPause;

impl Iterator for NoTriggerPause {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoTriggerPause {
    fn reset(&mut self) {}
}

/// Every watch asks the API server to end it after [`WATCH_SECONDS`], so that a healthy watch is
/// never silent for longer, and a longer silence ([`READ_TIMEOUT`]) means a dead connection (a
/// half-open one stays silent for kube's default 290 s; tests/it/stalled_watch.rs): the watch
/// starts again from its last resourceVersion, at the cost of one request per watch.
fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_SECONDS)
}

/// How long a watch lasts before the API server ends it (see [`watch_config`]). Short, because a
/// stalled watch goes unnoticed for as long as this and a margin, while a replica that turns
/// active meanwhile decides on its stale caches.
const WATCH_SECONDS: u32 = 2;

/// How long the operator's client waits for the next byte of an answer: the longest a healthy
/// watch stays silent ([`WATCH_SECONDS`]) and a margin. kube-runtime bounds only an open watch;
/// the request that opens one and its list may go out on a pooled connection gone half-open,
/// and would wait for good while the caches froze (tests/it/stalled_watch.rs). The timer counts
/// from the request's write.
const READ_TIMEOUT: Duration = Duration::from_secs(WATCH_SECONDS as u64 + 2);

/// Bounds every request of the operator's client by [`READ_TIMEOUT`].
pub fn configure_client(config: &mut kube::Config) {
    config.read_timeout = Some(READ_TIMEOUT);
    config.reset_reader_on_write = true;
}

/// The pod watch: trimmed before the cache (see [`crate::pod_index::trim_pod`]), reflected into
/// the store, and applied to the index on its way to the Controller.
fn pod_stream(
    api: Api<Pod>,
    writer: reflector::store::Writer<Pod>,
    index: PodIndex,
) -> impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static {
    watcher(api, watch_config())
        .modify(crate::pod_index::trim_pod)
        .backoff(watch_backoff())
        .reflect(writer)
        .inspect_ok(move |event| index.apply(event))
        .touched_objects()
}

/// The watch of objects the groups own, beyond their Leases, reflected into `writer`'s store.
fn owned_stream<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    watcher(api, config)
        .modify(|o| o.meta_mut().managed_fields = None)
        .backoff(watch_backoff())
        .reflect(writer)
        .touched_objects()
}

/// Keeps the `active` gauge equal to whether this replica may act, until the process ends.
async fn report_active(mut active: watch::Receiver<bool>, metrics: Arc<Metrics>) {
    loop {
        metrics.set_active(*active.borrow_and_update());
        if active.changed().await.is_err() {
            return;
        }
    }
}

/// A tick every time this replica becomes active, so that it reconciles every group at once.
fn activations(
    active: watch::Receiver<bool>,
    ctx: Arc<Context>,
) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(active, move |mut rx| {
        let ctx = ctx.clone();
        async move {
            loop {
                rx.changed().await.ok()?;
                if *rx.borrow_and_update() {
                    // Another replica may have acted while this one stood by: no group is known
                    // to be barred against its late promotions.
                    ctx.memory.every_barrier_down();
                    return Some(((), rx));
                }
            }
        }
    })
}

/// The groups a pod event concerns: those in its namespace whose selector matches it now, and
/// the group whose marks it carries (it may have just left that group).
fn groups_of_pod(groups: &[Arc<LeaderGroup>], pod: &Pod) -> Vec<ObjectRef<LeaderGroup>> {
    let ns = pod.metadata.namespace.as_deref();
    let marked_group = marks::marked_group(pod);
    groups
        .iter()
        .filter(|g| g.metadata.namespace.as_deref() == ns)
        .filter(|g| {
            (marked_group.is_some() && marked_group == g.metadata.name.as_deref())
                || g.spec.selector.matches(pod.labels())
        })
        .map(|g| ObjectRef::from_obj(g.as_ref()))
        .collect()
}

async fn reconcile(group: Arc<LeaderGroup>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.is_active() {
        return Ok(Action::await_change());
    }
    let group_ref = ObjectRef::from_obj(group.as_ref());
    // A group the API server refuses for good waits out its backoff whatever events arrive,
    // unless its spec changed or it is being deleted.
    if group.metadata.deletion_timestamp.is_none()
        && let Some(wait) = ctx.memory.waiting(&group_ref, group.metadata.generation)
    {
        debug!(group = %group.name_any(), ?wait, "refused for good before: waiting out the backoff");
        return Ok(Action::requeue(wait));
    }
    // The Controller starts as soon as the groups are listed; deciding before the pods are would
    // see no candidate and depose a healthy leader (a spurious NoCandidates, then a new epoch).
    let _ = ctx.synced.clone().wait_for(|synced| *synced).await;
    let started = Instant::now();
    let ns = group
        .namespace()
        .ok_or_else(|| ReconcileError::MissingNamespace(group.name_any()))?;
    let span = info_span!("reconcile", group = %group.name_any(), namespace = %ns);
    let api: Api<LeaderGroup> = Api::namespaced(ctx.client.clone(), &ns);
    // Every request of a reconcile answers within half the Lease, or is abandoned: a request
    // hanging in a stuck connection must not hold the group (kube's own timeout is minutes).
    // Never less than half of a 1 s Lease (the least the API server lets through): a zero
    // deadline would fail every reconcile.
    let deadline = group.half_lease().max(Duration::from_millis(500));
    let name = group.name_any();
    let cached = group.clone();
    let work = finalizer(&api, FINALIZER, group, |event| async {
        match event {
            FinalizerEvent::Apply(g) => converge::converge(g, &ctx, &ns, started).await,
            FinalizerEvent::Cleanup(g) => cleanup::run(g, &ctx, &ns).await,
        }
    })
    .instrument(span);
    let result = match tokio::time::timeout(deadline, work).await {
        Ok(result) => result.map_err(ReconcileError::from),
        Err(_) => {
            // An abandoned request may still land, a promotion included.
            ctx.memory.barrier_down(&group_ref);
            Err(ReconcileError::Deadline {
                group: name.clone(),
                after: deadline,
            })
        }
    };
    if result.is_err() {
        // A pass that failed may have moved the Lease off a leader and not removed its label:
        // the next decision no longer names it, and a lagging pod cache may not show the label
        // (see `converge`).
        ctx.memory.barrier_down(&group_ref);
    }
    match &result {
        Ok(_) => {
            ctx.memory.succeeded(&group_ref);
            refused::clear(&api, &cached).await;
        }
        Err(e) => match retry::classify(e) {
            Retry::Permanent(refusal) => refused::report(&ctx, &api, &name, &refusal).await,
            Retry::Transient(retry::TransientKind::Stale) => {
                if ctx.memory.missed_deadline(&group_ref) >= backoff::STALE_RUN {
                    let lease = cached.spec.lease_duration_seconds;
                    let slow = retry::too_slow(backoff::STALE_RUN, deadline, lease);
                    refused::report(&ctx, &api, &name, &slow).await;
                }
            }
            Retry::Transient(_) => {}
        },
    }
    ctx.metrics.reconciled(started.elapsed());
    ctx.count_leaders();
    result
}

fn error_policy(group: Arc<LeaderGroup>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let retry = retry::classify(error);
    ctx.metrics.error(&retry);
    let name = group.name_any();
    let namespace = group.namespace().unwrap_or_default();
    let group_ref = ObjectRef::from_obj(group.as_ref());
    if retry == Retry::Transient(retry::TransientKind::StaleFinalizer) {
        // Not a failure: the group's next event, or this requeue, sees the finalizer.
        debug!(group = %name, namespace = %namespace, "finalizer added by an earlier pass; the cache is behind");
        return Action::requeue(retry.after());
    }
    let api_message = retry::api_status(error)
        .map(|s| s.message.as_str())
        .unwrap_or_default();
    // A refusal backs off; so does a run of missed deadlines, since retrying at once only adds to
    // the load that makes the API server slow.
    let cap = match &retry {
        Retry::Permanent(_) => Some(backoff::CAP),
        Retry::Transient(retry::TransientKind::Stale)
            if ctx.memory.missed_deadlines(&group_ref) >= backoff::STALE_RUN =>
        {
            Some(backoff::CAP_SLOW)
        }
        Retry::Transient(_) => None,
    };
    let (object, field) = match &retry {
        Retry::Permanent(p) => (p.object.clone().unwrap_or_default(), p.fields.join(",")),
        Retry::Transient(_) => (String::new(), String::new()),
    };
    let wait = cap.map(|cap| {
        ctx.memory
            .failed(&group_ref, group.metadata.generation, cap)
    });
    warn!(
        group = %name,
        namespace = %namespace,
        error_class = retry.class(),
        error_kind = retry.kind(),
        api_message,
        object,
        field,
        failures = ctx.memory.failures(&group_ref),
        backoff_seconds = wait.map(|w| w.as_secs()),
        error = %error,
        "reconcile failed"
    );
    Action::requeue(wait.unwrap_or_else(|| retry.after()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::GROUP_ANNOTATION;
    use serde_json::json;

    #[test]
    fn a_watch_retries_within_2_s_and_its_errors_pause_no_other_trigger() {
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = (0..200).filter_map(|_| backoff.next()).collect();
        assert_eq!(delays.len(), 200, "a watch never stops retrying");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(2)),
            "{:?}",
            delays.iter().max()
        );
        let pauses: Vec<Duration> = NoTriggerPause.take(3).collect();
        assert_eq!(pauses, vec![Duration::ZERO; 3]);
    }

    fn group(ns: &str, name: &str, app: &str) -> Arc<LeaderGroup> {
        let g = json!({
            "apiVersion": "leadergroup.io/v1alpha1",
            "kind": "LeaderGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": app}}},
        });
        Arc::new(serde_json::from_value(g).unwrap())
    }

    fn pod(ns: &str, app: &str, marked_by: Option<&str>) -> Pod {
        let mut annotations = serde_json::Map::new();
        if let Some(g) = marked_by {
            annotations.insert(GROUP_ANNOTATION.into(), g.into());
        }
        let p = json!({"metadata": {
            "name": "p", "namespace": ns, "labels": {"app": app}, "annotations": annotations,
        }});
        serde_json::from_value(p).unwrap()
    }

    fn names(refs: Vec<ObjectRef<LeaderGroup>>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn a_pod_maps_to_the_groups_of_its_namespace_that_select_it_or_marked_it() {
        let groups = [
            group("ns", "a", "x"),
            group("ns", "b", "y"),
            group("ns", "c", "x"),
            group("other", "d", "x"),
        ];
        assert_eq!(
            names(groups_of_pod(&groups, &pod("ns", "x", None))),
            ["a", "c"]
        );
        // It left b's selector while carrying b's marks: b must still hear of it.
        assert_eq!(
            names(groups_of_pod(&groups, &pod("ns", "z", Some("b")))),
            ["b"]
        );
        assert!(groups_of_pod(&groups, &pod("ns", "z", None)).is_empty());
    }
}
