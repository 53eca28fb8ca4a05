//! The controller: watches LeaderGroups, Pods and Leases, and for each group observes (from the
//! watch caches, or fresh after a conflict), decides ([`crate::election::decide`]) and acts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::actions;
use crate::crd::{FINALIZER, GROUP_ANNOTATION, LEASE_GROUP_LABEL, LeaderGroup, LeaderGroupStatus};
use crate::election::{self, Decision, Observation, Plan};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::pod_index::PodIndex;

/// How often one reconcile may meet a 409 and decide again before giving up to the error policy.
const MAX_ATTEMPTS: usize = 5;

/// The caches every decision reads from.
#[derive(Clone)]
pub struct Caches {
    /// All LeaderGroups watched.
    pub groups: Store<LeaderGroup>,
    /// All pods watched, trimmed by [`crate::pod_index::trim_pod`] to what the decision reads.
    pub pods: Store<Pod>,
    /// The groups' Leases (those labeled with a group).
    pub leases: Store<Lease>,
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
    /// When a pod event for a group arrived that the group has not yet been reconciled for: the
    /// start of the handover clock.
    pending: Mutex<HashMap<ObjectRef<LeaderGroup>, Instant>>,
    /// Whether this replica may act (always true without `--leader-elect`).
    active: watch::Receiver<bool>,
    /// Whether every watch has delivered its first list.
    synced: watch::Receiver<bool>,
}

impl Context {
    fn is_active(&self) -> bool {
        *self.active.borrow()
    }

    fn note_pending(&self, group: ObjectRef<LeaderGroup>) {
        if let Ok(mut p) = self.pending.lock() {
            p.entry(group).or_insert_with(Instant::now);
        }
    }

    fn take_pending(&self, group: &ObjectRef<LeaderGroup>) -> Option<Instant> {
        self.pending.lock().ok().and_then(|mut p| p.remove(group))
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
    /// One namespace, or all when None.
    pub namespace: Option<String>,
    /// How many groups may be reconciled at the same time: bounds the writes that a start or a
    /// node failure sends to the API server at once (unbounded, a start with 1000 groups
    /// sends every group's writes together).
    pub concurrency: u16,
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

/// Signals readiness once every watch has delivered its first list.
pub struct Readiness {
    caches: Caches,
}

impl Readiness {
    /// Waits until the three caches hold their first lists.
    ///
    /// Each wait is retried every 100 ms rather than awaited once: `Store::wait_until_ready`
    /// (kube-runtime 5) sits on a futures oneshot that keeps one waker only, and the Controller
    /// waits on the groups store too, so whichever waiter polled first is never woken and
    /// /readyz would say "not ready" forever. A fresh poll sees the value once it is there.
    pub async fn wait(&self) {
        async fn ready<K>(store: &Store<K>)
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: std::hash::Hash + Eq + Clone,
        {
            while tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready())
                .await
                .is_err()
            {}
        }
        ready(&self.caches.groups).await;
        ready(&self.caches.pods).await;
        ready(&self.caches.leases).await;
    }
}

/// Builds the controller and runs it until `shutdown` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    identity: String,
    metrics: Arc<Metrics>,
    active: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (groups, groups_writer) = reflector::store();
    let (pods, pods_writer) = reflector::store();
    let (leases, leases_writer) = reflector::store();
    let pod_index = PodIndex::default();
    let caches = Caches {
        groups,
        pods,
        leases,
    };

    let group_stream = watcher(
        settings.api::<LeaderGroup>(&client),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(groups_writer)
    .touched_objects();
    let pod_stream = watcher(settings.api::<Pod>(&client), watcher::Config::default())
        .modify(crate::pod_index::trim_pod)
        .default_backoff()
        .reflect(pods_writer)
        .inspect_ok({
            let index = pod_index.clone();
            move |event| index.apply(event)
        })
        .touched_objects();
    let lease_stream = watcher(
        settings.api::<Lease>(&client),
        watcher::Config::default().labels(LEASE_GROUP_LABEL),
    )
    .default_backoff()
    .reflect(leases_writer)
    .touched_objects();

    let reporter = Reporter {
        controller: "leadergroup-operator".into(),
        instance: Some(identity.clone()),
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        identity,
        metrics,
        caches: caches.clone(),
        pod_index,
        pending: Mutex::new(HashMap::new()),
        active: active.clone(),
        synced: ready.subscribe(),
    });

    let readiness = Readiness {
        caches: caches.clone(),
    };
    tokio::spawn(async move {
        readiness.wait().await;
        info!("every watch has delivered its first list");
        let _ = ready.send(true);
    });

    let mapper_ctx = ctx.clone();
    Controller::for_stream(group_stream, caches.groups.clone())
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .owns_stream(lease_stream)
        .watches_stream(pod_stream, move |pod: Pod| groups_of_pod(&mapper_ctx, &pod))
        .reconcile_all_on(activations(active))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "reconcile did not complete");
            }
        })
        .await;
}

/// A tick every time this replica becomes active, so that it reconciles every group at once.
fn activations(active: watch::Receiver<bool>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(active, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    })
}

/// The groups a pod event concerns: those in its namespace whose selector matches it now, and
/// the group whose marks it carries (it may have just left that group).
fn groups_of_pod(ctx: &Context, pod: &Pod) -> Vec<ObjectRef<LeaderGroup>> {
    let ns = pod.metadata.namespace.as_deref();
    let marked_group = pod.annotations().get(GROUP_ANNOTATION);
    let refs: Vec<ObjectRef<LeaderGroup>> = ctx
        .caches
        .groups
        .state()
        .iter()
        .filter(|g| g.metadata.namespace.as_deref() == ns)
        .filter(|g| {
            (marked_group.is_some() && marked_group == g.metadata.name.as_ref())
                || g.spec.selector.matches(pod.labels())
        })
        .map(|g| ObjectRef::from_obj(g.as_ref()))
        .collect();
    for r in &refs {
        ctx.note_pending(r.clone());
    }
    refs
}

async fn reconcile(group: Arc<LeaderGroup>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.is_active() {
        return Ok(Action::await_change());
    }
    // The Controller starts as soon as the groups are listed; deciding before the pods are would
    // see no candidate and depose a healthy leader (a spurious NoCandidates, then a new epoch).
    let _ = ctx.synced.clone().wait_for(|synced| *synced).await;
    let started = Instant::now();
    let ns = group
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(group.name_any()))?;
    let span = info_span!("reconcile", group = %group.name_any(), namespace = %ns);
    let api: Api<LeaderGroup> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, group, |event| async {
        match event {
            FinalizerEvent::Apply(g) => apply(g, &ctx, &ns, started).await,
            FinalizerEvent::Cleanup(g) => cleanup(g, &ctx, &ns).await,
        }
    })
    .instrument(span)
    .await
    .map_err(Error::from);
    ctx.metrics.reconciled(started.elapsed());
    ctx.count_leaders();
    result
}

fn error_policy(group: Arc<LeaderGroup>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error(error);
    warn!(group = %group.name_any(), category = error.category(), error = %error, "reconcile failed");
    match error {
        Error::Conflict(_) => Action::requeue(Duration::from_millis(50)),
        _ => Action::requeue(Duration::from_secs(2)),
    }
}

/// Observes, decides and acts, deciding again from fresh reads after a 409.
async fn apply(
    group: Arc<LeaderGroup>,
    ctx: &Context,
    ns: &str,
    started: Instant,
) -> Result<Action> {
    let group_ref = ObjectRef::from_obj(group.as_ref());
    let clock = ctx.take_pending(&group_ref).unwrap_or(started);
    let groups_api: Api<LeaderGroup> = Api::namespaced(ctx.client.clone(), ns);
    let leases_api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let lease_name = group.lease_name();

    let mut group: LeaderGroup = (*group).clone();
    let mut lease = ctx
        .caches
        .leases
        .get(&ObjectRef::new(&lease_name).within(ns))
        .map(|l| (*l).clone());
    for attempt in 0..MAX_ATTEMPTS {
        let pods = concerned_pods(ctx, ns, &group, lease.as_ref());
        let groups: Vec<Arc<LeaderGroup>> = ctx
            .caches
            .groups
            .state()
            .into_iter()
            .filter(|g| g.metadata.namespace.as_deref() == Some(ns))
            .collect();
        let pod_refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        let mut group_refs: Vec<&LeaderGroup> = groups
            .iter()
            .map(|g| g.as_ref())
            .filter(|g| g.metadata.name != group.metadata.name)
            .collect();
        group_refs.push(&group);
        let decision = election::decide(&Observation {
            group: &group,
            groups: &group_refs,
            pods: &pod_refs,
            lease: lease.as_ref(),
            identity: &ctx.identity,
            now: Timestamp::now(),
        });
        let outcome = match decision {
            Decision::Deferred { arbiter, until } => {
                debug!(%arbiter, %until, "another operator replica arbitrates this group");
                let wait = until.duration_since(Timestamp::now()).as_millis().max(0);
                return Ok(Action::requeue(Duration::from_millis(
                    u64::try_from(wait).unwrap_or(0) + 100,
                )));
            }
            Decision::LeaseNotOwned { status } => {
                // The Lease watch only sees Leases labeled with a group, so the foreign Lease
                // going away produces no event: look again, once per Lease duration.
                let again = Duration::from_secs(u64::from(
                    group.spec.lease_duration_seconds.unsigned_abs(),
                ));
                refuse(ctx, &groups_api, &group, status, "LeaseNotOwned")
                    .await
                    .map(|()| Action::requeue(again))
            }
            Decision::InvalidSelector { status, .. } => {
                refuse(ctx, &groups_api, &group, status, "InvalidSelector")
                    .await
                    .map(|()| Action::await_change())
            }
            Decision::Act(plan) => execute(ctx, ns, &group, lease.as_ref(), *plan, clock).await,
        };
        match outcome {
            Err(Error::Conflict(object)) => {
                ctx.metrics.conflict(object);
                debug!(
                    attempt,
                    object, "conflict: reading afresh and deciding again"
                );
                group = groups_api.get(&group.name_any()).await?;
                lease = actions::lease::read(&leases_api, &lease_name).await?;
            }
            other => return other,
        }
    }
    Err(Error::Conflict("LeaderGroup or Lease"))
}

/// The pods of `ns` the decision for `group` looks at, from the index when the selector allows,
/// else from a scan of the cache.
fn concerned_pods(
    ctx: &Context,
    ns: &str,
    group: &LeaderGroup,
    lease: Option<&Lease>,
) -> Vec<Arc<Pod>> {
    let name = group.metadata.name.as_deref().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = match ctx.pod_index.candidates(ns, name, &group.spec.selector) {
        Some(mut names) => {
            names.extend(election::named_leaders(group, lease).map(str::to_string));
            names.sort_unstable();
            names.dedup();
            names
                .iter()
                .filter_map(|n| ctx.caches.pods.get(&ObjectRef::new(n).within(ns)))
                .collect()
        }
        None => ctx
            .caches
            .pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .collect(),
    };
    pods.into_iter()
        .filter(|p| election::concerns(group, lease, p))
        .collect()
}

/// Records a refusal in the status and, when it is new, as a Warning Event.
async fn refuse(
    ctx: &Context,
    api: &Api<LeaderGroup>,
    group: &LeaderGroup,
    status: LeaderGroupStatus,
    reason: &str,
) -> Result<()> {
    if group.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let message = status
        .conditions
        .iter()
        .find(|c| c.type_ == election::LEADER_ELECTED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    actions::status::record(api, group, &status).await?;
    warn!(reason, %message, "group refused");
    actions::events::publish(
        &ctx.recorder,
        group,
        EventType::Warning,
        reason,
        message,
        None,
    )
    .await;
    Ok(())
}

/// Runs a plan's steps in protocol order.
async fn execute(
    ctx: &Context,
    ns: &str,
    group: &LeaderGroup,
    lease: Option<&Lease>,
    plan: Plan,
    clock: Instant,
) -> Result<Action> {
    let name = group.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let groups_api: Api<LeaderGroup> = Api::namespaced(ctx.client.clone(), ns);
    let leases_api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let committed_at = Instant::now();

    // 1. Commit.
    if let Some(record) = &plan.commit {
        let owner = group.controller_owner_ref(&());
        actions::lease::compare_and_swap(
            &leases_api,
            &group.lease_name(),
            lease,
            record,
            Some(&name),
            owner,
        )
        .await?;
    }
    // 2. Record.
    if let Some(status) = &plan.status {
        actions::status::record(&groups_api, group, status).await?;
    }
    // 3. Demote.
    for pod in &plan.demote {
        actions::pods::mark_follower(&pods_api, pod, &name).await?;
    }
    if let Some(promotion) = &plan.promote {
        // 4. Check: a fresh list, so that a stray leader the cache has not shown yet is demoted first.
        for stray in actions::pods::labeled_leaders(&pods_api, &name, &group.spec.selector).await? {
            if stray.name_any() != promotion.pod {
                warn!(pod = %stray.name_any(), "demoting a stray leader label");
                actions::pods::mark_follower(&pods_api, &stray.name_any(), &name).await?;
            }
        }
        // Never promote on a decision older than half the Lease: another replica may take over
        // an expired Lease, and this one may have lost its own HA lease meanwhile.
        let half = Duration::from_millis(
            u64::from(group.spec.lease_duration_seconds.unsigned_abs()) * 500,
        );
        if committed_at.elapsed() > half || !ctx.is_active() {
            return Err(Error::StaleDecision(name));
        }
        // 5. Promote.
        actions::pods::promote(&pods_api, &promotion.pod, &name, promotion.epoch).await?;
    }
    // 6. Tell.
    if let Some(t) = &plan.transition {
        let elapsed = clock.elapsed();
        ctx.metrics.transition(t.reason);
        if t.to.is_some() {
            ctx.metrics.handover(elapsed);
        }
        let note = match (&t.from, &t.to) {
            (Some(from), Some(to)) => format!(
                "{to} leads at epoch {} (was {from}: {})",
                t.epoch,
                t.reason.as_str()
            ),
            (None, Some(to)) => format!("{to} leads at epoch {}", t.epoch),
            (Some(from), None) => format!(
                "no eligible pod: {from} no longer leads; epoch stays {}",
                t.epoch
            ),
            (None, None) => "no eligible pod".to_string(),
        };
        info!(from = ?t.from, to = ?t.to, epoch = t.epoch, reason = t.reason.as_str(), elapsed_ms = elapsed.as_millis() as u64, "leadership changed");
        let kind = if t.to.is_some() {
            EventType::Normal
        } else {
            EventType::Warning
        };
        actions::events::publish(
            &ctx.recorder,
            group,
            kind,
            t.reason.as_str(),
            note,
            t.to.as_deref(),
        )
        .await;
    }
    // Off the critical path: followers' marks, and the marks of pods that left.
    for pod in &plan.mark_followers {
        actions::pods::mark_follower(&pods_api, pod, &name).await?;
    }
    for (pod, rv) in &plan.unmark {
        match actions::pods::unmark(&pods_api, pod, Some(rv)).await {
            Err(Error::Conflict(_)) => {
                debug!(%pod, "pod changed before its marks were removed; next pass")
            }
            other => other?,
        }
    }
    Ok(Action::requeue(plan.requeue_after))
}

/// On deletion of the group: removes its marks from the pods, deletes its Lease, then lets go.
async fn cleanup(group: Arc<LeaderGroup>, ctx: &Context, ns: &str) -> Result<Action> {
    let name = group.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let leases_api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    for pod in actions::pods::marked(&pods_api, &name).await? {
        actions::pods::unmark(
            &pods_api,
            &pod.name_any(),
            pod.resource_version().as_deref(),
        )
        .await?;
    }
    if let Some(lease) = actions::lease::read(&leases_api, &group.lease_name()).await?
        && lease
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == group.uid().as_ref())
    {
        actions::lease::delete(&leases_api, &lease).await?;
    }
    info!(group = %name, "group deleted: marks removed from its pods, Lease deleted");
    Ok(Action::await_change())
}
