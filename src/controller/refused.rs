//! A permanent refusal of the API server ([`crate::retry::Permanent`]) said on the group itself:
//! the `Reconciled` condition False with the refusal, and one Warning Event when the condition
//! changes (not one per retry); the condition removed once a reconcile succeeds.

use jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use tracing::{debug, warn};

use super::Context;
use crate::actions;
use crate::crd::LeaderGroup;
use crate::election::{self, RECONCILED};
use crate::retry::Permanent;

/// Records `refusal` on the group, from a fresh read of it, and publishes an Event when the
/// condition changed. A failure to say it is logged: the backoff goes on all the same.
pub(super) async fn report(ctx: &Context, api: &Api<LeaderGroup>, name: &str, refusal: &Permanent) {
    let group = match api.get_status(name).await {
        Ok(group) => group,
        Err(e) => {
            warn!(group = name, error = %e, "reading the group to record a refusal failed");
            return;
        }
    };
    let message = refusal.describe();
    let reason = refusal.kind.as_str();
    let current = group.status.clone().unwrap_or_default();
    let Some(next) = election::api_refused(
        &current,
        group.metadata.generation,
        reason,
        &message,
        Timestamp::now(),
    ) else {
        return;
    };
    if let Err(e) = actions::status::record(api, &group, &next).await {
        warn!(group = name, error = %e, "recording a refusal in the group's status failed");
        return;
    }
    actions::events::publish(
        &ctx.recorder,
        &group,
        EventType::Warning,
        reason,
        message,
        None,
    )
    .await;
}

/// Removes the `Reconciled` condition once a reconcile of `group` succeeded, if the status
/// still carries it.
pub(super) async fn clear(api: &Api<LeaderGroup>, group: &LeaderGroup) {
    if group
        .status
        .as_ref()
        .and_then(|s| s.condition(RECONCILED))
        .is_none()
    {
        return;
    }
    let name = group.name_any();
    // The reconcile may have written the status since the cache's copy: read it afresh.
    let fresh = match api.get_status(&name).await {
        Ok(fresh) => fresh,
        Err(e) => {
            debug!(group = %name, error = %e, "reading the group to clear its refusal failed");
            return;
        }
    };
    let generation = fresh.metadata.generation;
    let accepted = |s| election::api_accepted(s, generation, Timestamp::now());
    let Some(next) = fresh.status.as_ref().and_then(accepted) else {
        return;
    };
    if let Err(e) = actions::status::record(api, &fresh, &next).await {
        debug!(group = %name, error = %e, "clearing the group's refusal failed; the next reconcile does");
    }
}
