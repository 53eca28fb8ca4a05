//! What the tests ask of a pod: its condition as a kubelet reports it (Running, Ready,
//! terminating, eligible for election) and the operator's marks on it (role, epoch, group).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use leadergroup_client::wire::{EPOCH_ANNOTATION, GROUP_ANNOTATION, ROLE_LABEL, ROLE_LEADER};

/// The pod's Ready condition is True.
pub fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's phase is Running.
pub fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The pod has a deletionTimestamp.
pub fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Running, Ready and not terminating: what the operator may elect (the selector and older
/// groups aside; docs/concepts.md, "How it elects").
pub fn eligible(pod: &Pod) -> bool {
    !terminating(pod) && running(pod) && ready(pod)
}

/// The pod's role label (`leader`, `follower`), if any.
pub fn role(pod: &Pod) -> Option<&str> {
    pod.labels().get(ROLE_LABEL).map(String::as_str)
}

/// The pod is labeled leader.
pub fn is_leader(pod: &Pod) -> bool {
    role(pod) == Some(ROLE_LEADER)
}

/// The pod's epoch annotation, when it holds an epoch.
pub fn epoch(pod: &Pod) -> Option<i64> {
    pod.annotations()
        .get(EPOCH_ANNOTATION)
        .and_then(|e| e.parse().ok())
}

/// The group the operator's marks on the pod belong to (its group annotation).
pub fn marked_group(pod: &Pod) -> Option<&str> {
    pod.annotations().get(GROUP_ANNOTATION).map(String::as_str)
}

/// The node the pod is bound to.
pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// The pod's first container's status, if the kubelet reported one.
fn first_container(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
}

/// The first container's restart count (0 before it started).
pub fn restarts(pod: &Pod) -> i32 {
    first_container(pod).map_or(0, |c| c.restart_count)
}

/// The first container is running (started, not terminated).
pub fn container_running(pod: &Pod) -> bool {
    first_container(pod)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some() && s.terminated.is_none())
}

/// The first container's id without its runtime's scheme (`containerd://`), once started.
pub fn container_id(pod: &Pod) -> Option<String> {
    let id = first_container(pod)?.container_id.as_deref()?;
    Some(id.strip_prefix("containerd://").unwrap_or(id).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn eligible_is_running_ready_and_not_terminating() {
        let status = |phase: &str, ready: &str| serde_json::json!({"phase": phase, "conditions": [{"type": "Ready", "status": ready}]});
        let running_ready = pod(
            serde_json::json!({"metadata": {"name": "a"}, "status": status("Running", "True")}),
        );
        assert!(eligible(&running_ready));
        let not_ready = pod(
            serde_json::json!({"metadata": {"name": "a"}, "status": status("Running", "False")}),
        );
        assert!(!eligible(&not_ready));
        let pending = pod(
            serde_json::json!({"metadata": {"name": "a"}, "status": status("Pending", "True")}),
        );
        assert!(!eligible(&pending));
        let leaving = pod(serde_json::json!({
            "metadata": {"name": "a", "deletionTimestamp": "2020-01-01T00:00:00Z"},
            "status": status("Running", "True"),
        }));
        assert!(!eligible(&leaving));
    }

    #[test]
    fn the_marks_read_back() {
        let p = pod(serde_json::json!({"metadata": {
            "name": "a",
            "labels": {ROLE_LABEL: ROLE_LEADER},
            "annotations": {EPOCH_ANNOTATION: "4", GROUP_ANNOTATION: "pay"},
        }}));
        assert!(is_leader(&p));
        assert_eq!((epoch(&p), marked_group(&p)), (Some(4), Some("pay")));
    }
}
