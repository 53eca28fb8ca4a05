//! The Kubernetes objects of the Heartbeat model, built from its state as the API server would
//! return them: the group in Heartbeat mode, its Lease and its pods (the Readiness model's
//! `crate::objects` builds them in Readiness mode).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use leadergroup_client::Epoch;
use leadergroup_operator::crd::{LeaderGroup, LeaderGroupStatus, Liveness};
use leadergroup_operator::lease_record::{LeaseRecord, Predecessor, UNKNOWN_PREDECESSOR};

use super::clock;
use super::state::{HbLease, HbState, UNKNOWN_POD, listed_name, member_name};
use crate::api::{GroupObj, PodId, PodObj, Role, Spec};
use crate::error::ModelError;
use crate::objects::{self, pod_name};

/// The one operator replica of this model.
pub const ARBITER: &str = "op-a";

/// The pod's UID (its pods are never re-created: a restart is the client's, not the pod's).
pub fn pod_uid(pod: PodId) -> String {
    format!("uid-{}-0", pod_name(pod))
}

/// The Lease's record, its times as the operator and the holder's client wrote them.
pub fn lease_record(lease: &HbLease) -> LeaseRecord {
    let acquired = clock::operator_wall(lease.acquired);
    LeaseRecord {
        holder: Some(lease.holder_name()),
        holder_uid: Some(pod_uid(lease.holder)),
        epoch: lease.epoch,
        duration_seconds: i32::from(lease.duration),
        longest_seconds: lease.longest.map(i32::from),
        acquire_time: Some(acquired),
        renew_time: Some(match lease.heartbeat {
            true => lease
                .renewed
                .map_or(acquired, |s| clock::client_wall(s.pod, s.process, s.tick)),
            false => lease
                .operator_renewed
                .map_or(acquired, clock::operator_wall),
        }),
        arbiter: Some(ARBITER.to_string()),
        heartbeat: lease.heartbeat,
        released_by: None,
        // The model does not keep the lapse record (`leadergroup.io/lapsed`) in its Lease.
        lapsed: None,
        // The holder's client acknowledges with its renewals (the client crate's renewal writes
        // the annotation, with the epoch), and a Lease is renewed only by its holder at its epoch
        // (in Readiness mode, with a note of its own, at the epoch the Lease holds then).
        // A foreign write keeps the annotation but moves the epoch: it acknowledges no longer.
        acknowledged: lease.renewed.is_some() && !lease.forged,
        // The last renewal's member, and the one before it if another member of the same pod
        // wrote it at this epoch (two members: each acknowledges under its own name).
        acknowledged_by: lease
            .also_renewed
            .into_iter()
            .chain(lease.renewed)
            .filter(|_| !lease.forged && lease.renewed.is_some())
            .map(|s| member_name(&pod_name(s.pod), s.process))
            .collect(),
        predecessor: lease.predecessor.as_ref().map(|p| {
            let names = |members: &[super::state::MemberName]| {
                members.iter().copied().map(listed_name).collect()
            };
            Predecessor {
                pod: if p.pod == UNKNOWN_POD {
                    UNKNOWN_PREDECESSOR.to_string()
                } else {
                    pod_name(p.pod)
                },
                uid: (p.pod != UNKNOWN_POD).then(|| pod_uid(p.pod)),
                // The model's epochs are small and positive.
                epoch: Epoch::try_from(p.epoch).unwrap_or(Epoch::ZERO),
                lease_seconds: i32::from(p.duration),
                members: names(&p.members),
                stepped_down_by: names(&p.stepped_down_by),
                stepped_down: p.stepped_down,
            }
        }),
    }
}

pub fn lease(lease: &HbLease) -> Lease {
    objects::lease_of(&lease_record(lease), Some(0), lease.rv)
}

/// The pod with the marks the state gives it, as the Readiness model builds its pods; `Failed`
/// once the pod GC set it (its containers' statuses as last reported: running).
pub fn pod(state: &HbState, id: PodId) -> Pod {
    let epoch = state.marks.get(usize::from(id)).copied().flatten();
    let mut pod = objects::pod(
        id,
        &PodObj {
            incarnation: 0,
            ready: state.ready.get(usize::from(id)).copied().unwrap_or(true),
            role: Some(if epoch.is_some() {
                Role::Leader
            } else {
                Role::Follower
            }),
            epoch,
            marked: true,
            barrier: None,
            rv: 1,
        },
    );
    if state.failed.get(usize::from(id)) == Some(&true)
        && let Some(status) = pod.status.as_mut()
    {
        status.phase = Some("Failed".into());
    }
    pod
}

/// The group in the model's liveness mode, with its spec's Lease duration and its status's
/// leader.
pub fn group(state: &HbState) -> Result<LeaderGroup, ModelError> {
    let mut g = objects::group(
        &GroupObj {
            incarnation: 0,
            spec: Spec {
                preferred: state.preferred,
                ..Spec::default()
            },
            generation: 1,
            status: None,
            rv: 1,
        },
        state.marks.len(),
    )?;
    g.spec.liveness = match state.heartbeat {
        true => Liveness::Heartbeat,
        false => Liveness::Readiness,
    };
    g.spec.lease_duration_seconds = i32::from(state.spec_duration);
    let (leader, epoch) = state.status;
    g.status = Some(LeaderGroupStatus {
        leader: Some(pod_name(leader)),
        leader_uid: Some(pod_uid(leader)),
        epoch,
        longest_lease_seconds: state.status_longest.map(i32::from),
        ..LeaderGroupStatus::default()
    });
    Ok(g)
}
