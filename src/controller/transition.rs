//! The transition protocol (DESIGN.md, "The transition protocol"), run for one group: observe
//! (the group, its namespace's groups, the pods that concern it and its Lease), decide
//! ([`election::decide`], pure), then act on the plan in protocol order:
//! 1. commit the Lease;
//! 2. record the status;
//! 3. demote the old leader (or release it, if the group no longer holds it);
//! 4. fence the group's other pods if an earlier promotion may still be in flight, check a fresh
//!    list for stray leaders, and read the pod to promote afresh;
//! 5. promote the new leader, conditional on that read, once 2, 3 and 4 (which run together
//!    after the commit) have all landed and the strays are demoted;
//! 6. tell (an Event, metrics).
//!
//! A 409 at any step means someone else moved first: observe afresh and decide again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::Context;
use crate::actions;
use crate::crd::{LeaderGroup, LeaderGroupStatus};
use crate::election::{self, Decision, Observation, Plan, Transition};
use crate::error::{ConflictOn, ReconcileError, Result};
use crate::lease_sightings::LeaseSeen;

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
            now: self.now,
        })
    }
}

/// The observe step: the group and its Lease as given, with the rest of what the decision reads
/// from the watch caches, and when this replica saw the Lease reach that state.
fn observe(ctx: &Context, ns: &str, group: LeaderGroup, lease: Option<Lease>) -> Snapshot {
    let now = Timestamp::now();
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
        now,
        retired: ctx.retired.snapshot(),
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
            refuse(ctx, ns, group, status, "LeaseNotOwned").await?;
            let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            for pod in &demote {
                warn!(%pod, "demoting the leader of a group refused for a Lease it does not own");
                actions::pods::mark_follower(&pods_api, pod, &group.name_any()).await?;
            }
            Ok(Action::requeue(again))
        }
        Decision::InvalidSelector { status, .. } => {
            refuse(ctx, ns, group, status, "InvalidSelector")
                .await
                .map(|()| Action::await_change())
        }
        Decision::Act(plan) => execute(ctx, ns, group, seen.lease.as_ref(), *plan, clock).await,
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
/// precondition.
///
/// Steps 2 to 4 (record; demote and release; fence and check) do not depend on one another, so
/// they go out together once the commit landed, and the promotion waits for all three: the
/// critical path is commit, check, promote (three round trips) instead of five. What the order
/// guarantees still holds: the token is in the Lease and the status before it is handed out, the
/// old leader has lost its label before the new one gets it, and the check's list is taken after
/// the commit (a stray it cannot show yet is equally missed in sequence; the fence covers the
/// promotions still in flight). The writes of one step to several pods go out together too.
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
    // When this decision's steps began (before the commit): what the promotion's deadline counts from.
    let acting_since = Instant::now();
    let mut steps = StepTimes::default();

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
    steps.commit = acting_since.elapsed();
    // Pods that step 3 writes: their leader labels are gone once that write lands.
    let released = |pod: &String| plan.release.iter().any(|(released, _)| released == pod);
    let demoted = |pod: &String| plan.demote.contains(pod) || released(pod);
    // An earlier promotion in this group may still be in flight (see crate::fence): fence the
    // pods it could be for. Not those released: the release removes their marks only if they
    // are unchanged, a change of resourceVersion as good as a fence (racing it, a fence would
    // fail its precondition). The demoted ones take their follower marks with the fence instead:
    // a demotion of a pod that carries no leader label changes nothing, not even its version.
    let group_ref = ObjectRef::from_obj(group);
    let fence = plan.promote.is_some() && !ctx.fenced.contains(&group_ref);
    let fenced: Vec<&String> = if fence {
        plan.fence.iter().filter(|pod| !released(pod)).collect()
    } else {
        Vec::new()
    };
    // 2. Record.
    let record = async {
        if let Some(status) = &plan.status {
            actions::status::record(&groups_api, group, status).await?;
        }
        Ok::<_, ReconcileError>(acting_since.elapsed())
    };
    // 3. Demote; a 409 on a release means the pod changed (an older group may have just taken
    // it): decide again.
    let demote = async {
        let demote = try_join_all(
            plan.demote
                .iter()
                .filter(|pod| !fenced.contains(pod))
                .map(|pod| actions::pods::mark_follower(&pods_api, pod, &name)),
        );
        let release = try_join_all(
            plan.release
                .iter()
                .map(|(pod, rv)| actions::pods::unmark(&pods_api, pod, Some(rv))),
        );
        futures::try_join!(demote, release)?;
        Ok::<_, ReconcileError>(acting_since.elapsed())
    };
    // 4. Fence, then check: a fresh list, so that a stray leader the cache has not shown yet is
    // demoted before the promotion; and the pod to promote, fresh: its promotion is conditional
    // on this version. A candidate about to be marked follower takes that mark with its fence.
    let check = async {
        let Some(promotion) = &plan.promote else {
            return Ok::<_, ReconcileError>(None);
        };
        try_join_all(fenced.iter().map(|pod| {
            actions::pods::fence(
                &pods_api,
                pod,
                promotion.epoch,
                (plan.mark_followers.contains(pod) || plan.demote.contains(pod))
                    .then_some(name.as_str()),
            )
        }))
        .await?;
        let fenced_at = acting_since.elapsed();
        let checked =
            actions::pods::check(&pods_api, &name, &group.spec.selector, &promotion.pod).await?;
        Ok(Some((checked, fenced_at, acting_since.elapsed())))
    };
    // All three run to their end even when one fails: a request dropped in flight could still
    // land after the decision taken afresh (a late demotion of a pod promoted again).
    let (recorded_at, demoted_at, checked) = futures::join!(record, demote, check);
    let (recorded_at, demoted_at, checked) = (recorded_at?, demoted_at?, checked?);
    steps.record = recorded_at;
    steps.demote = demoted_at;
    if let (Some(promotion), Some(((strays, target), fenced_at, checked_at))) =
        (&plan.promote, checked)
    {
        steps.fence = fenced_at;
        steps.check = checked_at;
        // A stray is a leader label this plan did not know of: the pods demoted and released
        // above may still show theirs in a list taken before those writes landed.
        let known = |pod: &String| *pod == promotion.pod || demoted(pod);
        try_join_all(
            strays
                .iter()
                .map(|stray| stray.name_any())
                .filter(|stray| !known(stray))
                .map(|stray| {
                    let pods_api = &pods_api;
                    let name = &name;
                    async move {
                        warn!(pod = %stray, "demoting a stray leader label");
                        actions::pods::mark_follower(pods_api, &stray, name).await
                    }
                }),
        )
        .await?;
        steps.strays = acting_since.elapsed();
        let Some(version) = target.and_then(|p| p.resource_version()) else {
            // Gone since the decision: decide again.
            return Err(ReconcileError::Conflict(ConflictOn::Pod));
        };
        // Never promote on a decision older than half the Lease: another replica may take over
        // an expired Lease, and this one may have lost its own HA lease meanwhile.
        if acting_since.elapsed() > group.half_lease() || !ctx.is_active() {
            return Err(ReconcileError::StaleDecision(name));
        }
        // 5. Promote.
        actions::pods::promote(&pods_api, &promotion.pod, &name, promotion.epoch, &version).await?;
        steps.promote = acting_since.elapsed();
        if fence {
            ctx.fenced.insert(group_ref);
        }
    }
    // 6. Tell.
    if let Some(t) = &plan.transition {
        tell(ctx, group, t, clock, &steps).await;
    }
    // Off the critical path: followers' marks, and the marks of pods that left.
    try_join_all(
        plan.mark_followers
            .iter()
            .filter(|pod| !fenced.contains(pod))
            .map(|pod| actions::pods::mark_follower(&pods_api, pod, &name)),
    )
    .await?;
    try_join_all(plan.unmark.iter().map(|(pod, rv)| {
        let pods_api = &pods_api;
        async move {
            match actions::pods::unmark(pods_api, pod, Some(rv)).await {
                Err(ReconcileError::Conflict(_)) => {
                    debug!(%pod, "pod changed before its marks were removed; next pass");
                    Ok(())
                }
                other => other,
            }
        }
    }))
    .await?;
    Ok(Action::requeue(plan.requeue_after))
}

/// When each step of a transition ended, from the start of the commit: the profile of a
/// handover, logged with it. Record, demote and fence-then-check run together after the commit.
#[derive(Default)]
struct StepTimes {
    commit: Duration,
    record: Duration,
    demote: Duration,
    fence: Duration,
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
    // The steps' ends, in ms from the start of the commit; the clock runs from the watch event.
    info!(
        from = ?t.from, to = ?t.to, epoch = t.epoch, reason = t.reason.as_str(),
        elapsed_ms = ms(elapsed),
        decided_ms = ms(elapsed.saturating_sub(steps.promote)),
        commit_ms = ms(steps.commit),
        record_ms = ms(steps.record),
        demote_ms = ms(steps.demote),
        fence_ms = ms(steps.fence),
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
