//! `status.eligibility`: whether each selected pod may lead, and if not why, in a form a person
//! (or `kubectl get -o jsonpath`) can read without knowing the rules.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::candidates::{Candidates, is_running_ready};
use crate::crd::{MAX_ELIGIBILITY_ENTRIES, PodEligibility};

/// Eligible pods first, in succession order with the leader in front, then the others in
/// succession order; at most [`MAX_ELIGIBILITY_ENTRIES`].
pub(super) fn of(members: &Candidates<'_>, leader: Option<&str>) -> Vec<PodEligibility> {
    let leader_first = members
        .succession
        .iter()
        .filter(|p| Some(p.name_any().as_str()) == leader)
        .chain(
            members
                .succession
                .iter()
                .filter(|p| Some(p.name_any().as_str()) != leader),
        )
        .map(|p| {
            let name = p.name_any();
            let reason = if Some(name.as_str()) == leader {
                "Leader"
            } else {
                "Eligible"
            };
            entry(name, true, reason, None)
        });
    let ineligible = members
        .matched
        .iter()
        .filter(|p| !members.is_eligible(&p.name_any()))
        .map(|p| why_not(members, p));
    leader_first
        .chain(ineligible)
        .take(MAX_ELIGIBILITY_ENTRIES)
        .collect()
}

/// Why `pod`, a candidate outside the succession, may not lead: the first rule it breaks.
fn why_not(members: &Candidates<'_>, pod: &Pod) -> PodEligibility {
    let name = pod.name_any();
    if let Some((_, group)) = members
        .overlapped
        .iter()
        .find(|(p, _)| p.name_any() == name)
    {
        let message = format!("the older group {group} selects it too and holds it");
        return entry(name, false, "HeldByOlderGroup", Some(message));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return entry(name, false, "Terminating", None);
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Running") {
        let message = format!("phase {}", phase.unwrap_or("unknown"));
        return entry(name, false, "NotRunning", Some(message));
    }
    if !is_running_ready(pod) {
        return entry(name, false, "NotReady", None);
    }
    if members.lapsed.as_deref() == Some(name.as_str()) {
        let message = "it led and stopped renewing the Lease for a Lease duration; it may lead \
                       again once it renews as holder, turns NotReady and Ready again, or is \
                       created again"
            .to_string();
        return entry(name, false, "HeartbeatLost", Some(message));
    }
    // Not reached: a Running, Ready pod the group holds is in the succession unless it lapsed.
    entry(name, false, "NotEligible", None)
}

fn entry(pod: String, eligible: bool, reason: &str, message: Option<String>) -> PodEligibility {
    PodEligibility {
        pod,
        eligible,
        reason: reason.to_string(),
        message,
    }
}
