//! Pod label and annotation patches. Each is a JSON merge patch of only the operator's own keys,
//! so nothing else on the pod is touched, and each is idempotent.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::core::Selector;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::crd::{
    BARRIER_ANNOTATION, EPOCH_ANNOTATION, GROUP_ANNOTATION, PodSelector, ROLE_FOLLOWER, ROLE_LABEL,
    ROLE_LEADER,
};
use crate::election::Barrier;
use crate::error::{ConflictOn, ReconcileError, Result, is_conflict, is_not_found};
use crate::marks;

/// The leader's marks: role=leader, its fencing token, its group; only if the pod is unchanged
/// since `resource_version` (otherwise [`ReconcileError::Conflict`]), so that a promotion landing
/// late, after the pod was written again, cannot land at all (see the barrier, `election::writes`).
pub async fn promote(
    api: &Api<Pod>,
    pod: &str,
    group: &str,
    epoch: i64,
    resource_version: &str,
) -> Result<()> {
    let patch = json!({"metadata": {
        "resourceVersion": resource_version,
        "labels": {ROLE_LABEL: ROLE_LEADER},
        "annotations": {EPOCH_ANNOTATION: epoch.to_string(), GROUP_ANNOTATION: group},
    }});
    conditional(api, pod, patch).await
}

/// Writes the barrier annotation on a pod: its resourceVersion changes, and a promotion of it
/// decided earlier can no longer land. The value is the epoch and the instant of the write, so
/// that no barrier is ever a no-op (the API server leaves the version of a pod that a patch does
/// not change as it was). With `with_follower_marks`, the same write also gives it `group`'s
/// follower marks (as [`mark_follower`]), removing any leader label, so that a candidate about
/// to be marked follower anyway is written once.
pub async fn raise_barrier(api: &Api<Pod>, barrier: &Barrier, group: &str) -> Result<()> {
    let value = format!("{}@{}", barrier.epoch, Timestamp::now().as_nanosecond());
    let patch = if barrier.with_follower_marks {
        json!({"metadata": {
            "labels": {ROLE_LABEL: ROLE_FOLLOWER},
            "annotations": {
                BARRIER_ANNOTATION: value,
                EPOCH_ANNOTATION: Value::Null,
                GROUP_ANNOTATION: group,
            },
        }})
    } else if barrier.clears_marks {
        json!({"metadata": {
            "labels": {ROLE_LABEL: Value::Null},
            "annotations": {
                BARRIER_ANNOTATION: value,
                EPOCH_ANNOTATION: Value::Null,
                GROUP_ANNOTATION: Value::Null,
            },
        }})
    } else {
        json!({"metadata": {"annotations": {BARRIER_ANNOTATION: value}}})
    };
    merge(api, &barrier.pod, patch).await
}

/// A follower's marks: role=follower, no fencing token. Also how a leader is demoted.
pub async fn mark_follower(api: &Api<Pod>, pod: &str, group: &str) -> Result<()> {
    let patch = json!({"metadata": {
        "labels": {ROLE_LABEL: ROLE_FOLLOWER},
        "annotations": {EPOCH_ANNOTATION: Value::Null, GROUP_ANNOTATION: group},
    }});
    merge(api, pod, patch).await
}

/// Removes all of the operator's marks, only if the pod is unchanged since `resource_version`
/// (otherwise [`ReconcileError::Conflict`]): another group may have just taken it.
pub async fn unmark(api: &Api<Pod>, pod: &str, resource_version: Option<&str>) -> Result<()> {
    let mut patch = json!({"metadata": {
        "labels": {ROLE_LABEL: Value::Null},
        "annotations": {
            EPOCH_ANNOTATION: Value::Null,
            GROUP_ANNOTATION: Value::Null,
            BARRIER_ANNOTATION: Value::Null,
        },
    }});
    if let (Some(rv), Some(meta)) = (resource_version, patch.get_mut("metadata")) {
        meta["resourceVersion"] = Value::String(rv.to_string());
    }
    conditional(api, pod, patch).await
}

/// [`merge`], its 409 (a resourceVersion precondition that failed) as [`ReconcileError::Conflict`].
async fn conditional(api: &Api<Pod>, pod: &str, patch: Value) -> Result<()> {
    match merge(api, pod, patch).await {
        Err(ReconcileError::Kube(e)) if is_conflict(&e) => {
            Err(ReconcileError::Conflict(ConflictOn::Pod))
        }
        other => other,
    }
}

/// Pods labeled leader that carry `group`'s marks, read from the API server, not the cache.
///
/// The list is narrowed on the server by the group's own selector: listing every leader of the
/// namespace made each election read every other group's leader (quadratic at 1000 groups). A
/// pod that left the selector while carrying the group's leader marks (the old leader, or a late
/// promotion that landed there) is released in step 3 from what the cache shows.
pub async fn labeled_leaders(
    api: &Api<Pod>,
    group: &str,
    selector: &PodSelector,
) -> Result<Vec<Pod>> {
    let role = format!("{ROLE_LABEL}={ROLE_LEADER}");
    let narrowed = match Selector::try_from(selector.to_label_selector()) {
        Ok(s) if !selector.is_empty() => format!("{role},{s}"),
        _ => role,
    };
    list_marked(api, &narrowed, group).await
}

/// Every pod of the namespace labeled leader, whatever group marked it (a list shared by the
/// checks that want it at once: `controller::leader_lists`).
pub async fn leaders_of_namespace(api: &Api<Pod>) -> Result<Vec<Pod>> {
    list_metadata(api, &format!("{ROLE_LABEL}={ROLE_LEADER}")).await
}

/// Step 4's fresh reads: the group's pods labeled leader and `pod`, the pod to promote, as the
/// API server has them now (None: gone, or no longer selected). With `every_leader` (the
/// namespace's leaders, from a list that started after the caller asked), the leaders are those
/// of them that carry the group's annotation, selected or not, beside a read of `pod`. Otherwise
/// one list of the pods the selector matches answers both; a selector that cannot be sent
/// (empty) takes the leaders' list and a read of `pod`.
pub async fn check(
    api: &Api<Pod>,
    group: &str,
    selector: &PodSelector,
    pod: &str,
    every_leader: Option<&[Pod]>,
) -> Result<(Vec<Pod>, Option<Pod>)> {
    let selected = match Selector::try_from(selector.to_label_selector()) {
        Ok(s) if !selector.is_empty() && every_leader.is_none() => s.to_string(),
        _ => {
            let leaders = async {
                match every_leader {
                    Some(listed) => Ok(listed
                        .iter()
                        .filter(|p| marks::is_marked_for(p, group))
                        .cloned()
                        .collect()),
                    None => labeled_leaders(api, group, selector).await,
                }
            };
            let target = async { Ok(api.get_metadata_opt(pod).await?.map(metadata_only)) };
            let (leaders, target) = futures::try_join!(leaders, target)?;
            let target = target.filter(|p| selector.matches(p.labels()));
            return Ok((leaders, target));
        }
    };
    let pods = list_metadata(api, &selected).await?;
    let mut target = None;
    let mut leaders = Vec::new();
    for p in pods {
        if p.metadata.name.as_deref() == Some(pod) {
            target = Some(p.clone());
        }
        if marks::leads_for(&p, group) {
            leaders.push(p);
        }
    }
    Ok((leaders, target))
}

/// Pods carrying any of the operator's role labels, read from the API server.
pub async fn marked(api: &Api<Pod>, group: &str) -> Result<Vec<Pod>> {
    list_marked(api, ROLE_LABEL, group).await
}

/// Pods matching `label_selector` that carry `group`'s annotation (the label alone does not say
/// which group marked a pod), their metadata alone ([`list_metadata`]).
async fn list_marked(api: &Api<Pod>, label_selector: &str, group: &str) -> Result<Vec<Pod>> {
    let pods = list_metadata(api, label_selector).await?;
    Ok(pods
        .into_iter()
        .filter(|p| marks::is_marked_for(p, group))
        .collect())
}

/// The pods matching `label_selector`, as pods that hold only their metadata: every read of step
/// 4 and of the cleanup needs names, versions and marks alone, and a metadata-only list is a
/// fraction of the bytes (the first election of 1,000 groups listed every leader of the
/// namespace 1,000 times: 1.5 GB of full pods, and the peak of the operator's heap).
async fn list_metadata(api: &Api<Pod>, label_selector: &str) -> Result<Vec<Pod>> {
    let list = api
        .list_metadata(&ListParams::default().labels(label_selector))
        .await?;
    Ok(list.items.into_iter().map(metadata_only).collect())
}

/// A pod of which only the metadata is known.
fn metadata_only(meta: PartialObjectMeta<Pod>) -> Pod {
    Pod {
        metadata: meta.metadata,
        ..Pod::default()
    }
}

/// A merge patch that tolerates the pod being gone (there is nothing left to mark).
async fn merge(api: &Api<Pod>, pod: &str, patch: Value) -> Result<()> {
    match api
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
