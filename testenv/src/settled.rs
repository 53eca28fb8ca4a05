//! I2, "the group has settled": once the operator has converged, its status, the group's Lease
//! and the pods' marks all name the same leader at the same epoch. One rule for every test, the
//! chaos run and the end-to-end tests:
//!
//! a group is settled on leader `L` at epoch `e` exactly when
//! 1. its status names `L` as leader at `status.epoch = e`;
//! 2. its Lease (`leadergroup-<group>`) exists, its `holderIdentity` is `L` and its epoch
//!    annotation is `e`;
//! 3. the pods labeled leader that carry the group's annotation are `L` alone, and `L`'s epoch
//!    annotation is `e`;
//! 4. `L` is eligible (Running, Ready, not terminating), unless the group is paused: a paused
//!    group keeps its leader whatever happens to it, any other group hands leadership over (or
//!    drops it) once its leader is not eligible.
//!
//! Pods are counted by the group annotation, not by the selector: a pod that left the selector
//! and still carries the group's leader label is a second leader all the same.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::{Api, Client, ResourceExt};
use leadergroup_client::wire::{EPOCH_ANNOTATION, lease_name_for};

use crate::crd::leader_groups;
use crate::pods::{eligible, epoch, is_leader, marked_group};
use crate::{Error, Result, wait_until};

/// A group settled on a leader (I2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The leader pod's name.
    pub leader: String,
    /// Its epoch, the same in the status, the Lease and the pod.
    pub epoch: i64,
}

/// Judges I2 on one state of the group: the LeaderGroup as the API server returned it (`None`
/// when it does not exist), its Lease, and the pods of the namespace. `Err` says what is not
/// settled, with everything that was looked at.
pub fn judge_settled(
    group: &str,
    leader_group: Option<&DynamicObject>,
    lease: Option<&Lease>,
    pods: &[Pod],
) -> Result<Settled, String> {
    let status = leader_group.map(|g| &g.data["status"]);
    let leader = status.and_then(|s| s["leader"].as_str());
    let status_epoch = status.and_then(|s| s["epoch"].as_i64());
    let paused = leader_group.is_some_and(|g| g.data["spec"]["paused"].as_bool() == Some(true));
    let holder = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.as_deref());
    let lease_epoch = lease
        .and_then(|l| l.annotations().get(EPOCH_ANNOTATION))
        .and_then(|e| e.parse::<i64>().ok());
    let labeled: Vec<(String, Option<i64>, bool)> = pods
        .iter()
        .filter(|p| is_leader(p) && marked_group(p) == Some(group))
        .map(|p| (p.name_any(), epoch(p), eligible(p)))
        .collect();
    if let (Some(l), Some(e)) = (leader, status_epoch)
        && holder == Some(l)
        && lease_epoch == Some(e)
        && let [(pod, Some(pod_epoch), pod_eligible)] = labeled.as_slice()
        && pod == l
        && *pod_epoch == e
        && (*pod_eligible || paused)
    {
        return Ok(Settled {
            leader: l.to_owned(),
            epoch: e,
        });
    }
    Err(format!(
        "{group}: status leader {leader:?} epoch {status_epoch:?}{}, Lease holder {holder:?} \
         epoch {lease_epoch:?}, labeled leaders (pod, epoch, eligible) {labeled:?}",
        if paused { " (paused)" } else { "" }
    ))
}

/// Whether `group` of `namespace` is settled now (see [`judge_settled`]): `Ok(Err(why))` when
/// it is not, `Err` when the API server could not be read.
pub async fn settled(
    client: &Client,
    namespace: &str,
    group: &str,
) -> Result<Result<Settled, String>> {
    let leader_group = leader_groups(client, namespace)
        .get_opt(group)
        .await
        .map_err(Error::kube(format!(
            "reading LeaderGroup {namespace}/{group}"
        )))?;
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(&lease_name_for(group))
        .await
        .map_err(Error::kube(format!(
            "reading the Lease of {namespace}/{group}"
        )))?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&Default::default())
        .await
        .map_err(Error::kube(format!("listing the pods of {namespace}")))?;
    Ok(judge_settled(
        group,
        leader_group.as_ref(),
        lease.as_ref(),
        &pods.items,
    ))
}

/// Waits until `group` has settled (I2) on a leader `accept` accepts; the timeout's error says
/// the last state seen.
pub async fn wait_settled(
    client: &Client,
    namespace: &str,
    group: &str,
    what: &str,
    within: Duration,
    accept: impl Fn(&Settled) -> bool,
) -> Result<Settled> {
    wait_until(what, within, || async {
        match settled(client, namespace, group).await? {
            Ok(s) if accept(&s) => Ok(Some(s)),
            Ok(s) => Err(Error::Unexpected(format!(
                "settled on {s:?}, not the one awaited"
            ))),
            Err(why) => Err(Error::Unexpected(why)),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use leadergroup_client::wire::{GROUP_ANNOTATION, ROLE_LABEL, ROLE_LEADER};
    use serde_json::json;

    fn group(leader: &str, epoch: i64, paused: bool) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "leadergroup.io/v1alpha1", "kind": "LeaderGroup",
            "metadata": {"name": "pay"},
            "spec": {"paused": paused},
            "status": {"leader": leader, "epoch": epoch},
        }))
        .unwrap()
    }

    fn lease(holder: &str, epoch: i64) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "leadergroup-pay", "annotations": {EPOCH_ANNOTATION: epoch.to_string()}},
            "spec": {"holderIdentity": holder},
        }))
        .unwrap()
    }

    fn leader_pod(name: &str, epoch: i64, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {ROLE_LABEL: ROLE_LEADER},
                "annotations": {EPOCH_ANNOTATION: epoch.to_string(), GROUP_ANNOTATION: "pay"},
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    #[test]
    fn status_lease_and_label_agreeing_is_settled() {
        let judged = judge_settled(
            "pay",
            Some(&group("a", 3, false)),
            Some(&lease("a", 3)),
            &[leader_pod("a", 3, true)],
        );
        assert_eq!(
            judged,
            Ok(Settled {
                leader: "a".into(),
                epoch: 3
            })
        );
    }

    #[test]
    fn any_disagreement_is_not_settled() {
        let g = group("a", 3, false);
        let cases: [(Option<Lease>, Vec<Pod>); 5] = [
            (None, vec![leader_pod("a", 3, true)]),
            (Some(lease("b", 3)), vec![leader_pod("a", 3, true)]),
            (Some(lease("a", 2)), vec![leader_pod("a", 3, true)]),
            (
                Some(lease("a", 3)),
                vec![leader_pod("a", 3, true), leader_pod("b", 2, true)],
            ),
            (Some(lease("a", 3)), vec![leader_pod("a", 3, false)]),
        ];
        for (lease, pods) in cases {
            assert!(
                judge_settled("pay", Some(&g), lease.as_ref(), &pods).is_err(),
                "{pods:?}"
            );
        }
    }

    #[test]
    fn a_paused_group_keeps_a_leader_that_is_not_ready() {
        let judged = judge_settled(
            "pay",
            Some(&group("a", 3, true)),
            Some(&lease("a", 3)),
            &[leader_pod("a", 3, false)],
        );
        assert!(judged.is_ok(), "{judged:?}");
    }
}
