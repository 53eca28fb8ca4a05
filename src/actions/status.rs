//! Status writes, conditional on the group's resourceVersion so that a stale writer can never
//! lower the recorded epoch.

use kube::api::PostParams;
use kube::{Api, ResourceExt};

use crate::crd::{LeaderGroup, LeaderGroupStatus};
use crate::error::{ConflictOn, ReconcileError, Result, is_conflict};

/// Writes `status` if the group is still at the resourceVersion it was read at. A replace rather
/// than a merge patch: fields that became empty must disappear, and the resourceVersion in the
/// body is the precondition.
pub async fn record(
    api: &Api<LeaderGroup>,
    group: &LeaderGroup,
    status: &LeaderGroupStatus,
) -> Result<LeaderGroup> {
    let mut next = group.clone();
    next.metadata.managed_fields = None;
    next.status = Some(status.clone());
    api.replace_status(&group.name_any(), &PostParams::default(), &next)
        .await
        .map_err(|e| {
            if is_conflict(&e) {
                ReconcileError::Conflict(ConflictOn::Status)
            } else {
                e.into()
            }
        })
}
