//! The Kubernetes objects the operator's decision reads, built from the model's abstract state:
//! the LeaderGroup, its Lease and the pods, as the fixtures of `src/election/tests.rs` build them.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use leadergroup_operator::crd::{
    BARRIER_ANNOTATION, EPOCH_ANNOTATION, GROUP_ANNOTATION, LeaderGroup, LeaderGroupSpec,
    LeaderGroupStatus, PodSelector, ROLE_FOLLOWER, ROLE_LABEL, ROLE_LEADER, SelectorOperator,
    SelectorRequirement,
};
use leadergroup_operator::lease_record::LeaseRecord;
use leadergroup_operator::lease_sightings::LeaseSeen;

use crate::api::{GroupObj, LeaseObj, PodId, PodObj, ReplicaId, Role, Rv, Status};
use crate::error::ModelError;

pub const GROUP: &str = "pay";
pub const NAMESPACE: &str = "ns";
/// The UID of the group's `incarnation` (a group created again under the name has a new one).
fn group_uid(incarnation: u8) -> String {
    format!("uid-{GROUP}-{incarnation}")
}
/// The label each pod carries with its own name: what a selector edit excludes a pod by.
const POD_LABEL: &str = "pod";
const LEASE_SECONDS: i32 = 15;

/// Time does not pass in the model but for the Lease running out: every decision is taken at
/// the same instant, so that the status the operator writes never differs by a timestamp alone.
/// The node controller's grace period: Kubernetes' default (nodes are not modelled).
pub const NODE_GRACE: std::time::Duration = std::time::Duration::from_secs(50);

pub fn now() -> Timestamp {
    at(1000)
}

fn at(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

pub fn pod_name(pod: PodId) -> String {
    format!("p{}", u32::from(pod) + 1)
}

pub fn replica_name(replica: ReplicaId) -> String {
    match replica {
        0 => "op-a".to_string(),
        1 => "op-b".to_string(),
        r => format!("op-{r}"),
    }
}

/// The pod index of a name the decision returned.
pub fn pod_id(name: &str) -> Result<PodId, ModelError> {
    name.strip_prefix('p')
        .and_then(|n| n.parse::<u8>().ok())
        .and_then(|n| n.checked_sub(1))
        .ok_or_else(|| ModelError::UnknownPod(name.to_string()))
}

pub fn rv_string(rv: Rv) -> String {
    rv.to_string()
}

pub fn parse_rv(rv: &str) -> Result<Rv, ModelError> {
    rv.parse()
        .map_err(|_| ModelError::ResourceVersion(rv.to_string()))
}

/// The selector: the group's pods (`app=pay`), less those the user's edits exclude by name.
fn selector(excluded: u8, pods: usize) -> PodSelector {
    let values: Vec<String> = (0..pods)
        .filter_map(|p| u8::try_from(p).ok())
        .filter(|p| excluded & (1 << p) != 0)
        .map(pod_name)
        .collect();
    PodSelector {
        match_labels: [("app".to_string(), GROUP.to_string())].into(),
        match_expressions: if values.is_empty() {
            Vec::new()
        } else {
            vec![SelectorRequirement {
                key: POD_LABEL.to_string(),
                operator: SelectorOperator::NotIn,
                values,
            }]
        },
    }
}

pub fn group(obj: &GroupObj, pods: usize) -> Result<LeaderGroup, ModelError> {
    let mut g = LeaderGroup::new(
        GROUP,
        LeaderGroupSpec {
            selector: selector(obj.spec.excluded, pods),
            lease_duration_seconds: LEASE_SECONDS,
            preferred_leader: obj.spec.preferred.map(pod_name),
            paused: obj.spec.paused,
            liveness: Default::default(),
            service: None,
            history_limit: leadergroup_operator::crd::DEFAULT_HISTORY_LIMIT,
        },
    );
    g.metadata.namespace = Some(NAMESPACE.into());
    g.metadata.uid = Some(group_uid(obj.incarnation));
    g.metadata.generation = Some(obj.generation);
    g.metadata.creation_timestamp = Some(Time(at(0)));
    g.metadata.resource_version = Some(rv_string(obj.rv));
    g.status = obj.status.as_ref().map(status_of).transpose()?;
    Ok(g)
}

fn status_of(status: &Status) -> Result<LeaderGroupStatus, ModelError> {
    Ok(serde_json::from_str(&status.json)?)
}

/// The model's record of a status the operator decided to write.
pub fn status(status: &LeaderGroupStatus) -> Result<Status, ModelError> {
    Ok(Status {
        json: serde_json::to_string(status)?,
        leader: status.leader.as_deref().map(pod_id).transpose()?,
        epoch: status.epoch,
    })
}

/// When the Lease was renewed: a second ago, or longer ago than its duration.
fn renewed(obj: &LeaseObj) -> Timestamp {
    if obj.expired {
        at(1000 - i64::from(LEASE_SECONDS) - 1)
    } else {
        at(999)
    }
}

/// What the deciding replica saw of the Lease on its own clock: its renewal, when it was made
/// (the replicas share one clock in the model).
pub fn lease_seen(obj: &LeaseObj) -> LeaseSeen {
    LeaseSeen {
        written_at: renewed(obj),
        renewed_at: None,
        not_before: None,
    }
}

pub fn lease(obj: &LeaseObj) -> Lease {
    // Released by a deleted group's finalizer: no times either.
    let renewed = obj.owner.map(|_| renewed(obj));
    let record = LeaseRecord {
        holder: obj.holder.map(pod_name),
        holder_uid: obj.holder_uid.clone(),
        epoch: obj.epoch,
        duration_seconds: LEASE_SECONDS,
        longest_seconds: None,
        acquire_time: renewed,
        renew_time: renewed,
        // Released by a deleted group's finalizer: no arbiter either.
        arbiter: obj.owner.map(|_| replica_name(obj.arbiter)),
        heartbeat: false,
        released_by: None,
        lapsed: None,
        acknowledged: false,
        acknowledged_by: Vec::new(),
        predecessor: None,
    };
    lease_of(&record, obj.owner, obj.rv)
}

/// The group's Lease holding `record`, owned by the group's incarnation `owner` (none: released),
/// at version `rv`.
pub fn lease_of(record: &LeaseRecord, owner: Option<u8>, rv: Rv) -> Lease {
    let owner = owner.map(|incarnation| OwnerReference {
        api_version: "leadergroup.io/v1alpha1".into(),
        kind: "LeaderGroup".into(),
        uid: group_uid(incarnation),
        name: GROUP.into(),
        controller: Some(true),
        ..Default::default()
    });
    let mut l = record.apply_to(
        None,
        &format!("leadergroup-{GROUP}"),
        NAMESPACE,
        Some(GROUP),
        owner,
    );
    l.metadata.resource_version = Some(rv_string(rv));
    l
}

pub fn pod(id: PodId, obj: &PodObj) -> Pod {
    let name = pod_name(id);
    let mut labels: BTreeMap<String, String> = [
        ("app".to_string(), GROUP.to_string()),
        (POD_LABEL.to_string(), name.clone()),
    ]
    .into();
    if let Some(role) = obj.role {
        let value = match role {
            Role::Leader => ROLE_LEADER,
            Role::Follower => ROLE_FOLLOWER,
        };
        labels.insert(ROLE_LABEL.to_string(), value.to_string());
    }
    let mut annotations = BTreeMap::new();
    if let Some(e) = obj.epoch {
        annotations.insert(EPOCH_ANNOTATION.to_string(), e.to_string());
    }
    if obj.marked {
        annotations.insert(GROUP_ANNOTATION.to_string(), GROUP.to_string());
    }
    if let Some(e) = obj.barrier {
        annotations.insert(BARRIER_ANNOTATION.to_string(), e.to_string());
    }
    let created = 10 + 100 * i64::from(obj.incarnation) + i64::from(id);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NAMESPACE.into()),
            uid: Some(format!("uid-{name}-{}", obj.incarnation)),
            creation_timestamp: Some(Time(at(created))),
            labels: Some(labels),
            annotations: Some(annotations),
            resource_version: Some(rv_string(obj.rv)),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if obj.ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}
