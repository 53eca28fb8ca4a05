//! `kubectl leadergroup switchover GROUP [POD]`: moves leadership to POD (default: the next in
//! the succession) through `spec.preferredLeader`, waits for the handover and says how long it took.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use leadergroup_operator::crd::{LeaderGroup, PodEligibility};
use serde_json::json;

use crate::error::PluginError;
use crate::groups::Groups;

/// How a switchover ended.
pub struct Switched {
    pub from: Option<String>,
    pub to: String,
    pub epoch: i64,
    pub took: Duration,
}

/// Moves leadership of `name` to `pod` (or the next eligible pod) and waits up to `timeout`. With
/// `keep_preference` false the preference is removed again once `pod` leads: it keeps leading as
/// long as it is eligible, and leadership does not come back to it after it fails.
pub async fn switchover(
    groups: &Groups,
    name: &str,
    pod: Option<&str>,
    timeout: Duration,
    keep_preference: bool,
) -> Result<Switched, PluginError> {
    let group = groups.get(name).await?;
    let status = group.status.clone().unwrap_or_default();
    if group.spec.paused {
        return Err(PluginError::Paused {
            group: name.to_owned(),
            namespace: groups.namespace.clone(),
        });
    }
    let leader = status.leader.clone();
    let target = match pod {
        Some(pod) => pod.to_owned(),
        None => status
            .succession
            .iter()
            .find(|p| Some(*p) != leader.as_ref())
            .cloned()
            .ok_or_else(|| PluginError::NoOtherCandidate {
                group: name.to_owned(),
                namespace: groups.namespace.clone(),
                leader: leader.clone().unwrap_or_else(|| "(none)".to_owned()),
            })?,
    };
    if leader.as_deref() == Some(target.as_str()) {
        return Ok(Switched {
            from: leader,
            to: target,
            epoch: status.epoch,
            took: Duration::ZERO,
        });
    }
    if !status.succession.contains(&target) {
        let reason = match status.eligibility.iter().find(|e| e.pod == target) {
            Some(listed) => why_not_eligible(listed),
            None => {
                let pods: Api<Pod> = Api::namespaced(groups.client.clone(), &groups.namespace);
                let found = pods
                    .get_opt(&target)
                    .await
                    .map_err(|e| groups.api_error(name, e))?;
                why_unlisted(found.as_ref(), &group)
            }
        };
        return Err(PluginError::Ineligible {
            pod: target.clone(),
            group: name.to_owned(),
            namespace: groups.namespace.clone(),
            reason,
        });
    }

    let started = Instant::now();
    set_preference(groups, name, Some(&target)).await?;
    let led = groups
        .wait(name, timeout, |g| {
            g.status.as_ref().and_then(|s| s.leader.as_deref()) == Some(target.as_str())
        })
        .await;
    let took = started.elapsed();
    let outcome = match led {
        Ok(Some(g)) => Ok(Switched {
            from: leader,
            to: target.clone(),
            epoch: g.status.map_or(0, |s| s.epoch),
            took,
        }),
        Ok(None) => {
            let now = groups.get(name).await?;
            Err(PluginError::Timeout {
                group: name.to_owned(),
                namespace: groups.namespace.clone(),
                pod: target.clone(),
                leader: now
                    .status
                    .and_then(|s| s.leader)
                    .unwrap_or_else(|| "(none)".to_owned()),
                after: timeout,
            })
        }
        Err(e) => Err(e),
    };
    if !keep_preference {
        set_preference(groups, name, None).await?;
    }
    outcome
}

async fn set_preference(groups: &Groups, name: &str, pod: Option<&str>) -> Result<(), PluginError> {
    let api: Api<LeaderGroup> = groups.api();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"preferredLeader": pod}})),
    )
    .await
    .map(|_| ())
    .map_err(|e| groups.api_error(name, e))
}

/// Why a pod the status lists as not eligible cannot lead, from the operator's own reason.
fn why_not_eligible(listed: &PodEligibility) -> String {
    match (listed.reason.as_str(), &listed.message) {
        ("NotReady" | "NotRunning", Some(message)) => {
            format!("it is not Running and Ready ({message})")
        }
        ("NotReady" | "NotRunning", None) => "it is not Running and Ready".to_owned(),
        ("Terminating", _) => "it is terminating".to_owned(),
        // The operator's message says it in full (an older group holds it, its renewals stopped).
        (_, Some(message)) => message.clone(),
        (reason, None) => reason.to_owned(),
    }
}

/// Why a pod the status does not list cannot lead: it does not exist, or the group does not
/// select it (or the operator has not counted it yet).
fn why_unlisted(pod: Option<&Pod>, group: &LeaderGroup) -> String {
    let Some(pod) = pod else {
        return "no such pod".to_owned();
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    if !group.spec.selector.matches(&labels) {
        return "the group's spec.selector does not select it".to_owned();
    }
    "the operator has not counted it yet (see `kubectl leadergroup status`)".to_owned()
}
