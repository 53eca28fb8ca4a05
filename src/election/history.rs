//! `status.history`: the last changes of leader, newest first, as many as `spec.historyLimit`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Observation, Transition};
use crate::crd::{HistoryEntry, LeaderGroupStatus};

/// The history after this decision: `transition`, if any, in front of the recorded one, cut to
/// the group's limit (a lowered limit drops the oldest entries at the next write).
pub(super) fn after(
    obs: &Observation<'_>,
    current: &LeaderGroupStatus,
    transition: Option<&Transition>,
) -> Vec<HistoryEntry> {
    let limit = usize::try_from(obs.group.spec.history_limit).unwrap_or(0);
    let entry = transition.map(|t| HistoryEntry {
        epoch: t.epoch,
        from: t.from.clone(),
        to: t.to.clone(),
        reason: t.reason.as_str().to_string(),
        time: Time(obs.now),
        leaderless_seconds: leaderless_seconds(obs, current, t),
    });
    entry
        .into_iter()
        .chain(current.history.iter().cloned())
        .take(limit)
        .collect()
}

/// How long the group had no leader, when `t` ends such a time: since the recorded change that
/// left it without one, or since its creation when it never had one.
fn leaderless_seconds(
    obs: &Observation<'_>,
    current: &LeaderGroupStatus,
    t: &Transition,
) -> Option<i64> {
    if t.from.is_some() || t.to.is_none() {
        return None;
    }
    let since = current.last_transition_time.as_ref().or(obs
        .group
        .metadata
        .creation_timestamp
        .as_ref())?;
    Some(obs.now.duration_since(since.0).as_secs().max(0))
}
