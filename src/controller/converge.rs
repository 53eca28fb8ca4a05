//! The transition protocol (docs/protocol.md), run for one group: observe
//! (the group, its namespace's groups, the pods that concern it and its Lease), decide
//! ([`election::decide`], pure), then act on the plan in protocol order:
//! 1. commit the Lease;
//! 2. record the status;
//! 3. demote the old leader (or release it, if the group no longer holds it);
//! 4. raise the barrier on the group's other pods if an earlier promotion may still be in flight
//!    ([`crate::barrier`]), check a fresh list for stray leaders, and read the pod to promote
//!    afresh;
//! 5. promote the new leader, conditional on that read, once 2, 3 and 4 (which run together
//!    after the commit) have all landed and the strays are demoted;
//! 6. tell (an Event, metrics).
//!
//! A 409 at any step means someone else moved first: observe afresh and decide again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::Context;
use super::routes::RoutePlan;
use crate::actions;
use crate::actions::batch::settle_all;
use crate::crd::{LeaderGroup, LeaderGroupStatus};
use crate::election::{
    self, Barrier, Decision, Observation, Plan, PodWrites, Promotion, Transition,
};
use crate::error::{ConflictOn, ReconcileError, Result};
use crate::lease_record::LeaseRecord;
use crate::lease_sightings::{LeaseSeen, Now};

/// How many times one reconcile may decide: after as many 409s, the last one goes to the error
/// policy.
const MAX_ATTEMPTS: usize = 5;

/// Brings the group to what the decision wants: observes, decides and acts, and after a 409
/// observes afresh (the group and the Lease from the API server) and decides again.
///
/// `started` is when the reconcile began: the handover clock when no pod event started one.
pub(super) async fn converge(
    group: Arc<LeaderGroup>,
    ctx: &Context,
    ns: &str,
    started: Instant,
) -> Result<Action> {
    let clock = ctx
        .handover_clocks
        .take(&ObjectRef::from_obj(group.as_ref()))
        .unwrap_or(started);
    let groups_api: Api<LeaderGroup> = Api::namespaced(ctx.client.clone(), ns);
    let leases_api: Api<Lease> = Api::namespaced(ctx.client.clone(), ns);
    let lease_name = group.lease_name();

    let mut group: LeaderGroup = (*group).clone();
    let mut lease = ctx
        .caches
        .leases
        .get(&ObjectRef::new(&lease_name).within(ns))
        .map(|l| (*l).clone());
    let mut attempt = 1;
    loop {
        let seen = observe(ctx, ns, group, lease);
        let decision = seen.decide(&ctx.identity);
        let object = match act(ctx, ns, &seen, decision, clock).await {
            Err(ReconcileError::Conflict(object)) => object,
            other => return other,
        };
        ctx.metrics.conflict(object);
        // This pass may have committed a move off a leader whose demotion or release then
        // failed: the decision taken again no longer names that pod, and the pod cache (not
        // read again) may never have shown its leader label, so only a check beyond the
        // selector, which the barrier flag being down asks for, still finds it.
        ctx.barriers.remove(&ObjectRef::from_obj(&seen.group));
        if attempt == MAX_ATTEMPTS {
            return Err(ReconcileError::Conflict(object));
        }
        debug!(attempt, %object, "conflict: reading afresh and deciding again");
        group = groups_api.get(&seen.group.name_any()).await?;
        lease = actions::lease::read(&leases_api, &lease_name).await?;
        attempt += 1;
    }
}

/// Everything one decision reads, owned, so that the [`Observation`] can borrow it.
struct Snapshot {
    /// The group, from the cache, or from the API server after a conflict.
    group: LeaderGroup,
    /// The other groups of its namespace, from the cache (to settle overlapping selectors).
    other_groups: Vec<Arc<LeaderGroup>>,
    /// The pods that concern the group ([`election::concerns`]), from the cache.
    pods: Vec<Arc<Pod>>,
    /// The group's Lease, from the cache, or from the API server after a conflict.
    lease: Option<Lease>,
    /// When this replica saw the Lease reach that state.
    lease_seen: Option<LeaseSeen>,
    /// The instant of the observation, on this replica's clock.
    now: Timestamp,
    /// Operator replicas known to have stopped on purpose.
    retired: BTreeSet<String>,
    /// The node controller's grace period, as configured.
    node_grace: Duration,
}

impl Snapshot {
    /// The decision on what was observed, at this instant.
    fn decide(&self, identity: &str) -> Decision {
        let pods: Vec<&Pod> = self.pods.iter().map(AsRef::as_ref).collect();
        let mut groups: Vec<&LeaderGroup> = self.other_groups.iter().map(AsRef::as_ref).collect();
        groups.push(&self.group);
        election::decide(&Observation {
            group: &self.group,
            groups: &groups,
            pods: &pods,
            lease: self.lease.as_ref(),
            lease_seen: self.lease_seen,
            retired: &self.retired,
            identity,
            node_grace: self.node_grace,
            now: self.now,
        })
    }
}

/// The observe step: the group and its Lease as given, with the rest of what the decision reads
/// from the watch caches, and when this replica saw the Lease reach that state.
fn observe(ctx: &Context, ns: &str, group: LeaderGroup, lease: Option<Lease>) -> Snapshot {
    let now = Now::read();
    let lease_seen = ctx
        .lease_sightings
        .observe(&ObjectRef::from_obj(&group), lease.as_ref(), now);
    let pods = concerned_pods(ctx, ns, &group, lease.as_ref());
    let other_groups = ctx
        .groups_in(ns)
        .into_iter()
        .filter(|g| g.metadata.name != group.metadata.name)
        .collect();
    Snapshot {
        group,
        other_groups,
        pods,
        lease,
        lease_seen,
        now: now.wall,
        retired: ctx.retired.snapshot(),
        node_grace: ctx.node_grace,
    }
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

/// Acts on the decision: waits for the replica that arbitrates the group, records why the group
/// is refused, or executes the plan.
async fn act(
    ctx: &Context,
    ns: &str,
    seen: &Snapshot,
    decision: Decision,
    clock: Instant,
) -> Result<Action> {
    let group = &seen.group;
    match decision {
        Decision::Deferred { arbiter, until } => {
            debug!(%arbiter, %until, "another operator replica arbitrates this group");
            let wait = until.duration_since(Timestamp::now()).as_millis().max(0);
            Ok(Action::requeue(Duration::from_millis(
                u64::try_from(wait).unwrap_or(0) + 100,
            )))
        }
        Decision::LeaseNotOwned { status, demote } => {
            // The Lease watch only sees Leases labeled with a group, so the foreign Lease
            // going away produces no event: look again, once per Lease duration.
            let again =
                Duration::from_secs(u64::from(group.spec.lease_duration_seconds.unsigned_abs()));
            // Nobody leads: the group's EndpointSlice lists nobody either.
            let routes = RoutePlan::new(ctx, ns, group, &status, &seen.pods);
            let status = routes.status(&status).unwrap_or(status);
            refuse(ctx, ns, group, status, "LeaseNotOwned").await?;
            let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            for pod in &demote {
                warn!(%pod, "demoting the leader of a group refused for a Lease it does not own");
                actions::pods::mark_follower(&pods_api, pod, &group.name_any()).await?;
            }
            routes.tidy(routes.known_slice(), false).await?;
            Ok(Action::requeue(again))
        }
        Decision::InvalidSelector { status, .. } => {
            refuse(ctx, ns, group, status, "InvalidSelector")
                .await
                .map(|()| Action::await_change())
        }
        Decision::ImplausibleEpoch { status, .. } => {
            refuse(ctx, ns, group, status, "ImplausibleEpoch")
                .await
                .map(|()| Action::await_change())
        }
        Decision::TokensExhausted { status, .. } => {
            refuse(ctx, ns, group, status, "TokensExhausted")
                .await
                .map(|()| Action::await_change())
        }
        Decision::Act(mut plan) => {
            let current = group.status.clone().unwrap_or_default();
            let next = plan.status.as_ref().unwrap_or(&current);
            let routes = RoutePlan::new(ctx, ns, group, next, &seen.pods);
            if let Some(status) = routes.status(next) {
                plan.status = Some(status);
            }
            execute(ctx, ns, group, seen.lease.as_ref(), *plan, &routes, clock).await
        }
    }
}

/// Records a refusal in the status and, when it is new, as a Warning Event.
async fn refuse(
    ctx: &Context,
    ns: &str,
    group: &LeaderGroup,
    status: LeaderGroupStatus,
    reason: &str,
) -> Result<()> {
    if group.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let message = status
        .condition(election::LEADER_ELECTED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let groups_api: Api<LeaderGroup> = Api::namespaced(ctx.client.clone(), ns);
    actions::status::record(&groups_api, group, &status).await?;
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

/// Runs the plan's steps in protocol order. `lease` is the Lease as observed: the commit's
/// precondition. The leader's EndpointSlice changes from the old leader to the new one in one
/// write once the promotion has landed (emptied instead when the promotion fails, or in step 3
/// when there is no pod to promote), so that it never lists two pods.
///
/// Steps 2 to 4 (record; demote and release; barrier and check) do not depend on one another, so
/// they go out together once the commit landed, and the promotion waits for all three: the
/// critical path is commit, check, promote (three round trips) instead of five. What the order
/// guarantees still holds: the token is in the Lease and the status before it is handed out, the
/// old leader has lost its label before the new one gets it, and the check's list is taken after
/// the commit (a stray it cannot show yet is equally missed in sequence; the barrier covers the
/// promotions still in flight).
async fn execute(
    ctx: &Context,
    ns: &str,
    group: &LeaderGroup,
    lease: Option<&Lease>,
    plan: Plan,
    routes: &RoutePlan,
    clock: Instant,
) -> Result<Action> {
    // A group taken back from another arbiter may hold its promotions in flight, whatever this
    // replica remembers from before.
    let arbiter = lease.and_then(|l| LeaseRecord::from_lease(l).arbiter);
    let barrier_up = ctx.barriers.is_up(group) && arbiter.as_deref() == Some(ctx.identity.as_str());
    let writes = plan.writes(barrier_up);
    let steps = Steps::new(ctx, ns, group);
    let mut times = StepTimes::default();
    // 1. Commit.
    if let Some(record) = &plan.commit {
        steps.commit(lease, record).await?;
    }
    times.commit = steps.elapsed();
    // 2, 3 and 4 together. Each runs to its end even when another fails: a request dropped in
    // flight could still land after the decision taken afresh (a late demotion of a pod promoted
    // again).
    // With a pod to promote, or one to promote once its predecessor has stepped down, the slice
    // changes once, after the promotion: the old leader's endpoint replaced by the new one's in
    // one write. kube-proxy rate-limits its syncs (its minSyncPeriod, 1 s by default): of two
    // writes a few round trips apart, the second would wait for that period. Meanwhile the
    // slice routes to the predecessor alone, the one pod whose application may still lead.
    let awaits_step_down = plan.awaits_step_down;
    let keeps_route = writes.promote.is_some() || awaits_step_down;
    let (recorded, demoted, checked, cleared) = futures::join!(
        steps.record(plan.status.as_ref()),
        steps.demote(&writes),
        steps.bar_and_check(&writes),
        async {
            if keeps_route {
                Ok(routes.known_slice())
            } else {
                routes.clear().await
            }
        },
    );
    (times.record, times.demote) = (recorded?, demoted?);
    let mut slice = cleared?;
    if let (Some(promotion), Some(check)) = (&writes.promote, checked?) {
        let promoted = async {
            (times.barrier, times.check) = (check.barred_at, check.checked_at);
            steps.demote_strays(&check, &writes).await?;
            times.strays = steps.elapsed();
            // Gone since the decision: decide again.
            let version = check
                .target_version
                .as_ref()
                .ok_or(ReconcileError::Conflict(ConflictOn::Pod))?;
            // The decision saw a Lease older than the one the API server holds: decide again.
            if !check.committed {
                return Err(ReconcileError::Conflict(ConflictOn::Lease));
            }
            steps.still_current()?;
            // 5. Promote.
            steps.promote(promotion, version).await?;
            times.promote = steps.elapsed();
            Ok(())
        }
        .await;
        if let Err(e) = promoted {
            // The old leader, demoted, must not stay routed until the next pass.
            routes.clear().await?;
            return Err(e);
        }
        slice = routes.route(slice).await?;
        if plan.transition.is_none() {
            // Committed in an earlier pass: it waited for its predecessor's step-down, or this
            // is a retry. The only log line of the moment the new leader is labeled.
            info!(
                pod = %promotion.pod, epoch = promotion.epoch, promote_ms = ms(times.promote),
                "leader marked after its commit"
            );
        }
        if writes.raises_barrier {
            ctx.barriers.insert(group);
        }
    }
    // 6. Tell.
    if let Some(t) = &plan.transition {
        tell(ctx, group, t, clock, &times).await;
    }
    steps.tidy(&writes).await?;
    routes.tidy(slice, awaits_step_down).await?;
    Ok(Action::requeue(plan.requeue_after))
}

/// What step 4 found: the leaders a fresh list shows, and the pod to promote as read then.
struct Check {
    /// The group's pods labeled leader, fresh from the API server.
    leaders: Vec<Pod>,
    /// The resourceVersion of the pod to promote, read fresh (None: gone, or not selected).
    target_version: Option<String>,
    /// The Lease, read fresh, names the pod to promote at the promotion's epoch.
    committed: bool,
    /// When the barrier writes had landed.
    barred_at: Duration,
    /// When the check's list had been read.
    checked_at: Duration,
}

/// The actions of one pass on one group, with the clock of its steps.
struct Steps<'a> {
    ctx: &'a Context,
    group: &'a LeaderGroup,
    name: String,
    pods: Api<Pod>,
    groups: Api<LeaderGroup>,
    leases: Api<Lease>,
    /// When this pass's steps began (before the commit): what the promotion's deadline counts
    /// from.
    started: Instant,
}

impl<'a> Steps<'a> {
    fn new(ctx: &'a Context, ns: &str, group: &'a LeaderGroup) -> Self {
        Steps {
            ctx,
            group,
            name: group.name_any(),
            pods: Api::namespaced(ctx.client.clone(), ns),
            groups: Api::namespaced(ctx.client.clone(), ns),
            leases: Api::namespaced(ctx.client.clone(), ns),
            started: Instant::now(),
        }
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Step 1: the Lease, conditional on the version observed.
    async fn commit(&self, lease: Option<&Lease>, record: &LeaseRecord) -> Result<()> {
        let owner = self.group.controller_owner_ref(&());
        let lease_name = self.group.lease_name();
        actions::lease::compare_and_swap(
            &self.leases,
            &lease_name,
            lease,
            record,
            Some(&self.name),
            owner,
        )
        .await?;
        Ok(())
    }

    /// Step 2: the status, if it changes.
    async fn record(&self, status: Option<&LeaderGroupStatus>) -> Result<Duration> {
        if let Some(status) = status {
            actions::status::record(&self.groups, self.group, status).await?;
        }
        Ok(self.elapsed())
    }

    /// Step 3: the old leaders lose their label, the deposed ones with their barrier. A 409 on a
    /// release means the pod changed (an older group may have just taken it): decide again, once
    /// every write of the step has ended.
    async fn demote(&self, writes: &PodWrites) -> Result<Duration> {
        let demote = settle_all(
            writes
                .demote
                .iter()
                .map(|pod| actions::pods::mark_follower(&self.pods, pod, &self.name)),
        );
        let release =
            settle_all(writes.release.iter().map(|pod| {
                actions::pods::unmark(&self.pods, &pod.name, Some(&pod.resource_version))
            }));
        let deposed = self.raise_barriers(&writes.deposed);
        let (demoted, released, deposed) = futures::join!(demote, release, deposed);
        demoted?;
        released?;
        deposed?;
        Ok(self.elapsed())
    }

    /// Step 4: the barriers, then, when there is a promotion, a fresh list, so that a stray
    /// leader the cache has not shown yet is demoted before the promotion, the pod to promote
    /// read afresh (its promotion is conditional on this version), and the Lease read afresh
    /// beside them: a decision on a Lease cache that lags behind the Lease (with nothing to
    /// commit, so no precondition to fail) would hand out a token the Lease no longer holds.
    async fn bar_and_check(&self, writes: &PodWrites) -> Result<Option<Check>> {
        self.raise_barriers(&writes.barriers).await?;
        let Some(promotion) = &writes.promote else {
            return Ok(None);
        };
        let barred_at = self.elapsed();
        let selector = &self.group.spec.selector;
        let lease_name = self.group.lease_name();
        let ((leaders, target), lease) = futures::try_join!(
            actions::pods::check(
                &self.pods,
                &self.name,
                selector,
                &promotion.pod,
                writes.list_every_leader,
            ),
            actions::lease::read(&self.leases, &lease_name),
        )?;
        Ok(Some(Check {
            leaders,
            target_version: target.and_then(|p| p.resource_version()),
            committed: promotion.is_committed_in(lease.as_ref()),
            barred_at,
            checked_at: self.elapsed(),
        }))
    }

    async fn raise_barriers(&self, barriers: &[Barrier]) -> Result<()> {
        settle_all(
            barriers
                .iter()
                .map(|barrier| actions::pods::raise_barrier(&self.pods, barrier, &self.name)),
        )
        .await?;
        Ok(())
    }

    /// Step 4, after the check: a leader label this plan did not know of is demoted. The pods
    /// demoted and released above may still show theirs in a list taken before those writes
    /// landed.
    async fn demote_strays(&self, check: &Check, writes: &PodWrites) -> Result<()> {
        let strays = check
            .leaders
            .iter()
            .map(ResourceExt::name_any)
            .filter(|pod| !writes.expected_leaders.contains(pod));
        settle_all(strays.map(|stray| async move {
            warn!(pod = %stray, "demoting a stray leader label");
            actions::pods::mark_follower(&self.pods, &stray, &self.name).await
        }))
        .await?;
        Ok(())
    }

    /// Never promote on a decision older than half the Lease: another replica may take over an
    /// expired Lease, and this one may have lost its own HA lease meanwhile.
    fn still_current(&self) -> Result<()> {
        if self.elapsed() > self.group.half_lease() || !self.ctx.is_active() {
            return Err(ReconcileError::StaleDecision(self.name.clone()));
        }
        Ok(())
    }

    /// Step 5: the leader's marks, conditional on the version step 4 read.
    async fn promote(&self, promotion: &Promotion, version: &str) -> Result<()> {
        let (pod, epoch) = (&promotion.pod, promotion.epoch);
        actions::pods::promote(&self.pods, pod, &self.name, epoch, version).await
    }

    /// Off the critical path: followers' marks, and the marks of pods that left (a pod changed
    /// since it was seen keeps them until the next pass).
    async fn tidy(&self, writes: &PodWrites) -> Result<()> {
        settle_all(
            writes
                .mark_followers
                .iter()
                .map(|pod| actions::pods::mark_follower(&self.pods, pod, &self.name)),
        )
        .await?;
        settle_all(writes.unmark.iter().map(|pod| async move {
            let rv = Some(pod.resource_version.as_str());
            match actions::pods::unmark(&self.pods, &pod.name, rv).await {
                Err(ReconcileError::Conflict(_)) => {
                    debug!(pod = %pod.name, "pod changed before its marks were removed; next pass");
                    Ok(())
                }
                other => other,
            }
        }))
        .await?;
        Ok(())
    }
}

/// When each step of a transition ended, from the start of the commit: the profile of a
/// handover, logged with it. Record, demote and barrier-then-check run together after the commit.
#[derive(Default)]
struct StepTimes {
    commit: Duration,
    record: Duration,
    demote: Duration,
    barrier: Duration,
    check: Duration,
    /// The strays the check found demoted (the check's end when there were none).
    strays: Duration,
    promote: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Step 6: counts the transition, times the handover from `clock`, logs it and publishes an Event
/// (a Warning when no pod leads any more).
async fn tell(
    ctx: &Context,
    group: &LeaderGroup,
    t: &Transition,
    clock: Instant,
    steps: &StepTimes,
) {
    let elapsed = clock.elapsed();
    let namespace = group.namespace().unwrap_or_default();
    ctx.metrics
        .transition(&namespace, &group.name_any(), t.reason);
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
    // The steps' ends, in ms from the start of the commit; the clock runs from the watch event.
    info!(
        from = ?t.from, to = ?t.to, epoch = t.epoch, reason = t.reason.as_str(),
        elapsed_ms = ms(elapsed),
        decided_ms = ms(elapsed.saturating_sub(steps.promote)),
        commit_ms = ms(steps.commit),
        record_ms = ms(steps.record),
        demote_ms = ms(steps.demote),
        barrier_ms = ms(steps.barrier),
        check_ms = ms(steps.check),
        strays_ms = ms(steps.strays),
        promote_ms = ms(steps.promote),
        "leadership changed"
    );
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
