//! The executor: sends one [`Plan`] in protocol order (docs/protocol.md, the same step numbers),
//! each step a named call, with no decision in it.
//!
//! - 1: commit the Lease;
//! - 2, 3 and 4 together once the commit landed (none depends on another): record the status;
//!   demote, release and bar the deposed leaders (and, with nobody to promote, take the old
//!   leader out of the slice); raise the group's barrier, then check a fresh list for stray
//!   leaders and read the pod to promote and the Lease afresh;
//! - 4b: demote the strays;
//! - 5: promote the new leader, conditional on the version step 4 read; 5b: route the slice to it;
//! - 6: tell (an Event, metrics, the log of the steps' times), then tidy off the critical path:
//!   follower marks, marks off pods that left, the Service and the objects no longer wanted.
//!
//! A 409 at any step means someone else moved first: the caller observes afresh and decides
//! again.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::Context;
use crate::actions;
use crate::actions::batch::settle_all;
use crate::crd::{LeaderGroup, LeaderGroupStatus};
use crate::election::{Barrier, Plan, PodWrites, Promotion, Transition};
use crate::error::{ConflictOn, ReconcileError, Result};
use crate::lease_record::LeaseRecord;
use crate::routing::{self, Route};

/// Sends `plan`, decided for `group` on `lease` (the commit's precondition). `clock` is when the
/// handover began, for its metric.
///
/// The leader's EndpointSlice changes from the old leader to the new one in one write once the
/// promotion has landed (emptied instead when the promotion fails, or in step 3 when there is no
/// pod to promote), so that it never lists two pods. kube-proxy rate-limits its syncs (its
/// minSyncPeriod, 1 s by default): of two writes a few round trips apart, the second would wait
/// for that period.
pub(super) async fn execute(
    ctx: &Context,
    ns: &str,
    group: &LeaderGroup,
    lease: Option<&Lease>,
    plan: Plan,
    clock: Instant,
) -> Result<Action> {
    if let Some(deferred) = &plan.deferred {
        debug!(arbiter = %deferred.arbiter, until = %deferred.until, "another operator replica arbitrates this group");
    }
    let steps = Steps::new(ctx, ns, group, plan.route.as_ref());
    let writes = &plan.pods;
    steps
        .time("commit", steps.commit(lease, plan.commit.as_ref()))
        .await?;
    // Each of these runs to its end even when another fails: a request dropped in flight could
    // still land after the decision taken afresh (a late demotion of a pod promoted again).
    let keeps_route = writes.promote.is_some() || plan.awaits_step_down;
    let (recorded, demoted, checked, slice) = futures::join!(
        steps.time("record", steps.record(plan.status.as_ref())),
        steps.time("demote", steps.demote(writes)),
        steps.bar_and_check(writes),
        steps.clear_route(keeps_route),
    );
    recorded?;
    demoted?;
    let mut slice = slice?;
    if let (Some(promotion), Some(check)) = (&writes.promote, checked?) {
        let promoted = async {
            steps
                .time("strays", steps.demote_strays(&check, writes))
                .await?;
            steps.still_current(&check, promotion)?;
            steps
                .time("promote", steps.promote(&check, promotion))
                .await
        }
        .await;
        if let Err(e) = promoted {
            // The old leader, demoted, must not stay routed until the next pass.
            steps.clear_route(false).await?;
            return Err(e);
        }
        slice = steps.route(slice).await?;
        if writes.raises_barrier {
            ctx.memory.barrier_raised(group);
        }
        if plan.transition.is_none() {
            // Committed in an earlier pass: it waited for its predecessor's step-down, or this
            // is a retry. The only log line of the moment the new leader is labeled.
            info!(
                pod = %promotion.pod, epoch = promotion.epoch, promote_ms = steps.ms("promote"),
                "leader marked after its commit"
            );
        }
    }
    steps.tell(&plan, clock).await;
    steps.tidy(writes).await?;
    steps.tidy_route(slice, plan.awaits_step_down).await?;
    Ok(plan
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue))
}

/// What step 4 found: the leaders a fresh list shows, and the pod to promote and the Lease as
/// read then.
struct Check {
    /// The group's pods labeled leader, fresh from the API server.
    leaders: Vec<Pod>,
    /// The resourceVersion of the pod to promote, read fresh (None: gone, or not selected).
    target_version: Option<String>,
    /// The Lease, read fresh, names the pod to promote at the promotion's epoch.
    committed: bool,
}

/// The steps of one pass on one group, and when each ended.
struct Steps<'a> {
    ctx: &'a Context,
    group: &'a LeaderGroup,
    name: String,
    ns: String,
    route: Option<&'a Route>,
    pods: Api<Pod>,
    groups: Api<LeaderGroup>,
    leases: Api<Lease>,
    services: Api<Service>,
    slices: Api<EndpointSlice>,
    /// When this pass's steps began (before the commit): what the steps' ends and the
    /// promotion's deadline count from.
    started: Instant,
    /// Each step's end, by name.
    ends: Mutex<Vec<(&'static str, Duration)>>,
}

impl<'a> Steps<'a> {
    fn new(ctx: &'a Context, ns: &str, group: &'a LeaderGroup, route: Option<&'a Route>) -> Self {
        Steps {
            ctx,
            group,
            name: group.name_any(),
            ns: ns.to_string(),
            route,
            pods: Api::namespaced(ctx.client.clone(), ns),
            groups: Api::namespaced(ctx.client.clone(), ns),
            leases: Api::namespaced(ctx.client.clone(), ns),
            services: Api::namespaced(ctx.client.clone(), ns),
            slices: Api::namespaced(ctx.client.clone(), ns),
            started: Instant::now(),
            ends: Mutex::new(Vec::new()),
        }
    }

    /// Runs `step`, noting when it ended as `name`.
    async fn time<T>(&self, name: &'static str, step: impl Future<Output = T>) -> T {
        let out = step.await;
        if let Ok(mut ends) = self.ends.lock() {
            ends.push((name, self.started.elapsed()));
        }
        out
    }

    /// When step `name` ended, in ms from the start of the commit (0: it did not run).
    fn ms(&self, name: &str) -> f64 {
        self.ends
            .lock()
            .ok()
            .and_then(|ends| ends.iter().rev().find(|(n, _)| *n == name).map(|(_, d)| *d))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }

    /// Step 1: the Lease, conditional on the version observed.
    async fn commit(&self, lease: Option<&Lease>, record: Option<&LeaseRecord>) -> Result<()> {
        let Some(record) = record else {
            return Ok(());
        };
        let owner = self.group.controller_owner_ref(&());
        let lease_name = self.group.lease_name();
        let written = actions::lease::compare_and_swap(
            &self.leases,
            &lease_name,
            lease,
            record,
            Some(&self.name),
            owner,
        )
        .await?;
        let over = lease.and_then(|l| l.metadata.resource_version.clone());
        self.ctx
            .memory
            .lease_written(&ObjectRef::from_obj(self.group), over, written);
        Ok(())
    }

    /// Step 2: the status, if it changes.
    async fn record(&self, status: Option<&LeaderGroupStatus>) -> Result<()> {
        if let Some(status) = status {
            let written = actions::status::record(&self.groups, self.group, status).await?;
            let over = self.group.metadata.resource_version.clone();
            self.ctx.memory.status_written(over, written);
        }
        Ok(())
    }

    /// Step 3: the old leaders lose their label, the deposed ones with their barrier. A 409 on a
    /// release means the pod changed (an older group may have just taken it): decide again, once
    /// every write of the step has ended.
    async fn demote(&self, writes: &PodWrites) -> Result<()> {
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
        deposed
    }

    /// Step 4: the barriers, then, when there is a promotion, a fresh list, so that a stray
    /// leader the cache has not shown yet is demoted before the promotion, the pod to promote
    /// read afresh (its promotion is conditional on this version), and the Lease read afresh
    /// beside them: a decision on a Lease cache that lags behind the Lease (with nothing to
    /// commit, so no precondition to fail) would hand out a token the Lease no longer holds.
    /// Nothing is read when the plan says the pass needs no check (`unchecked_version`).
    async fn bar_and_check(&self, writes: &PodWrites) -> Result<Option<Check>> {
        self.time("barrier", self.raise_barriers(&writes.barriers))
            .await?;
        let Some(promotion) = &writes.promote else {
            return Ok(None);
        };
        if let Some(version) = &writes.unchecked_version {
            return Ok(Some(Check {
                leaders: Vec::new(),
                target_version: Some(version.clone()),
                committed: true,
            }));
        }
        let check = async {
            let lease_name = self.group.lease_name();
            let pods = async {
                let lists = &self.ctx.leader_lists;
                let shared = match writes.list_every_leader {
                    true => Some(lists.every_leader(&self.pods, &self.ns).await?),
                    false => None,
                };
                let every_leader = shared.as_deref().map(Vec::as_slice);
                let selector = &self.group.spec.selector;
                actions::pods::check(
                    &self.pods,
                    &self.name,
                    selector,
                    &promotion.pod,
                    every_leader,
                )
                .await
            };
            let ((leaders, target), lease) =
                futures::try_join!(pods, actions::lease::read(&self.leases, &lease_name))?;
            // A pod created again under the name since the decision is not the one to promote.
            let target = target.filter(|p| promotion.is_incarnation(p));
            Ok(Some(Check {
                leaders,
                target_version: target.and_then(|p| p.resource_version()),
                committed: promotion.is_committed_in(lease.as_ref()),
            }))
        };
        self.time("check", check).await
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

    /// Step 4b: a leader label this plan did not know of is demoted. The
    /// pods demoted and released above may still show theirs in a list taken before those writes
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

    /// Step 5 goes ahead only on what step 4 read: the pod still there, the Lease naming it at
    /// its epoch (a decision on a Lease older than the API server's decides again), and a
    /// decision younger than half the Lease, taken by a replica still active (another may take
    /// over an expired Lease, and this one may have lost its own HA lease meanwhile).
    fn still_current(&self, check: &Check, promotion: &Promotion) -> Result<()> {
        if check.target_version.is_none() {
            debug!(
                pod = %promotion.pod,
                "the pod to promote is gone, or created again, since the decision"
            );
            return Err(ReconcileError::Conflict(ConflictOn::Pod));
        }
        if !check.committed {
            return Err(ReconcileError::Conflict(ConflictOn::Lease));
        }
        if self.started.elapsed() > self.group.half_lease() || !self.ctx.is_active() {
            return Err(ReconcileError::StaleDecision(self.name.clone()));
        }
        Ok(())
    }

    /// Step 5: the leader's marks, conditional on the version step 4 read.
    async fn promote(&self, check: &Check, promotion: &Promotion) -> Result<()> {
        let version = check
            .target_version
            .as_deref()
            .ok_or(ReconcileError::Conflict(ConflictOn::Pod))?;
        let (pod, epoch) = (&promotion.pod, promotion.epoch);
        actions::pods::promote(&self.pods, pod, &self.name, epoch, version).await
    }

    /// Steps 3 and 5b: the slice loses every endpoint but the next leader's, when nobody is
    /// promoted (unless `keep`: a promotion replaces the old endpoint in one write) and when a
    /// promotion failed. Returns the slice as it is after.
    async fn clear_route(&self, keep: bool) -> Result<Option<EndpointSlice>> {
        let Some(route) = self.route else {
            return Ok(None);
        };
        let Some((name, _)) = route.desired_slice().filter(|_| !keep) else {
            return Ok(route.slice.clone());
        };
        let uid = route.leader_uid.as_deref();
        actions::routing::write_slice(&self.slices, name, route.slice.clone(), |current| {
            routing::clear_for_handover(current, uid).map(routing::SliceWrite::Replace)
        })
        .await
    }

    /// Step 5b, after the promotion (or with nothing to promote): the slice as wanted, from `known`, the
    /// slice as last seen. Returns the slice as it is after.
    async fn route(&self, known: Option<EndpointSlice>) -> Result<Option<EndpointSlice>> {
        let Some((name, desired)) = self.route.and_then(Route::desired_slice) else {
            return Ok(known);
        };
        actions::routing::write_slice(&self.slices, name, known, |current| {
            routing::slice_write(current, desired)
        })
        .await
    }

    /// Step 6: the log of the steps, and for a change of leader its metrics and Event, for a
    /// refusal recorded now its Warning Event.
    async fn tell(&self, plan: &Plan, clock: Instant) {
        if let Some(refused) = plan.refused.as_ref().filter(|_| plan.status.is_some()) {
            warn!(reason = refused.reason, message = %refused.message, "group refused");
            actions::events::publish(
                &self.ctx.recorder,
                self.group,
                EventType::Warning,
                refused.reason,
                refused.message.clone(),
                None,
            )
            .await;
        }
        if let Some(t) = &plan.transition {
            self.tell_transition(t, clock).await;
        }
    }

    /// Counts the transition, times the handover from `clock`, logs it with the steps' ends and
    /// publishes an Event (a Warning when no pod leads any more).
    async fn tell_transition(&self, t: &Transition, clock: Instant) {
        let elapsed = clock.elapsed();
        let namespace = self.group.namespace().unwrap_or_default();
        let metrics = &self.ctx.metrics;
        metrics.transition(&namespace, &self.name, t.reason);
        if t.to.is_some() {
            metrics.handover(elapsed);
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
        let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
        // The steps' ends, in ms from the start of the commit; the clock runs from the watch event.
        info!(
            from = ?t.from, to = ?t.to, epoch = t.epoch, reason = t.reason.as_str(),
            elapsed_ms,
            decided_ms = (elapsed_ms - self.ms("promote")).max(0.0),
            commit_ms = self.ms("commit"),
            record_ms = self.ms("record"),
            demote_ms = self.ms("demote"),
            barrier_ms = self.ms("barrier"),
            check_ms = self.ms("check"),
            strays_ms = self.ms("strays"),
            promote_ms = self.ms("promote"),
            "leadership changed"
        );
        let kind = if t.to.is_some() {
            EventType::Normal
        } else {
            EventType::Warning
        };
        actions::events::publish(
            &self.ctx.recorder,
            self.group,
            kind,
            t.reason.as_str(),
            note,
            t.to.as_deref(),
        )
        .await;
    }

    /// Step 6, off the critical path: followers' marks, and the marks of pods that left (a pod
    /// changed since it was seen keeps them until the next pass).
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

    /// Step 6, off the critical path: the Service as wanted, the slice too (when no promotion wrote it, and unless
    /// `keep_slice`: the next leader, not labeled yet, waits for its predecessor's step-down, and
    /// the slice keeps the predecessor until the promotion), and the group's objects no longer
    /// wanted deleted.
    async fn tidy_route(&self, known: Option<EndpointSlice>, keep_slice: bool) -> Result<()> {
        let Some(route) = self.route else {
            return Ok(());
        };
        if let Some((current, routes)) = &route.service
            && !routes.name_taken
        {
            actions::routing::apply_service(&self.services, current.as_ref(), &routes.service)
                .await?;
        }
        if !keep_slice {
            self.route(known).await?;
        }
        actions::routing::delete_all(&self.slices, &route.stale_slices).await?;
        actions::routing::delete_all(&self.services, &route.stale_services).await
    }
}
