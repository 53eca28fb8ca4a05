//! Heartbeat mode's memory of a leader whose renewals stopped: its pod may still show Ready, so
//! readiness alone would elect it again as soon as it is no longer the holder (a successor took
//! over, or the Lease was released), and one decision's view of the renewals does not outlive
//! the holder's tenure. The Lease keeps the record instead (annotation `leadergroup.io/lapsed`,
//! the incarnation and the epoch it lapsed at), across passes and operator restarts, until the
//! incarnation shows it is alive again or is gone.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::Observation;
use super::candidates::{Candidates, is_running_ready, is_serving};
use super::heartbeat::Heartbeat;
use super::records::Records;
use crate::crd::Liveness;
use crate::lease_record::Lapsed;

/// What this decision holds against a lapsed leader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Lapse {
    /// The record the Lease carries after this decision.
    pub record: Option<Lapsed>,
    /// The pod it names, as this decision sees it: not eligible.
    pub pod: Option<String>,
}

impl Lapse {
    /// The lapse as of this decision: the holder's own, when its renewals stopped now (a record of
    /// the same incarnation keeps its epoch), else the Lease's record while it stands. A record
    /// falls when its incarnation is gone or created again under another UID, when its pod is seen
    /// not Ready (it has to turn Ready again to be elected, a transition), or when this replica
    /// sees it renew the Lease as holder (a renewal seen since this replica first saw the Lease:
    /// one it took in at its first look may be the one before the lapse).
    pub fn judge(obs: &Observation<'_>, records: &Records, heartbeat: &Heartbeat) -> Lapse {
        if obs.group.spec.liveness != Liveness::Heartbeat {
            return Lapse::default();
        }
        let lease = records.lease.as_ref();
        let recorded = lease.and_then(|l| l.lapsed.clone());
        if let Some(holder) = heartbeat.lapsed() {
            let uid = lease
                .and_then(|l| l.holder_uid.clone())
                .or_else(|| super::pod_uid(obs.pods, holder));
            let record = uid.map(|uid| match recorded {
                Some(r) if r.uid == uid => r,
                _ => Lapsed {
                    uid,
                    epoch: lease.map_or(0, |l| l.epoch),
                },
            });
            return Lapse {
                record,
                pod: Some(holder.to_string()),
            };
        }
        let Some(recorded) = recorded else {
            return Lapse::default();
        };
        let Some(pod) = incarnation(obs.pods, &recorded.uid) else {
            return Lapse::default();
        };
        let name = pod.name_any();
        if !is_running_ready(pod) || renewed_as_holder(obs, heartbeat, &name) {
            return Lapse::default();
        }
        Lapse {
            record: Some(recorded),
            pod: Some(name),
        }
    }

    /// The lapsed holder, kept as the Lease's holder when no other pod may lead: no successor
    /// means no new token either, and only as holder can it renew and so show it is alive again.
    /// Its pod keeps its marks (its client renews only while they say it leads), and the status
    /// says nobody leads. Never a pod that is otherwise ineligible (NotReady, terminating, left the
    /// group).
    pub fn kept_holder(
        &self,
        obs: &Observation<'_>,
        members: &Candidates<'_>,
        records: &Records,
    ) -> Option<String> {
        let pod = self.pod.as_deref()?;
        if obs.group.spec.paused || records.incumbent() != Some(pod) || !members.owns(pod) {
            return None;
        }
        members
            .owned
            .iter()
            .any(|p| p.name_any() == pod && is_serving(p))
            .then(|| pod.to_string())
    }
}

fn incarnation<'a>(pods: &[&'a Pod], uid: &str) -> Option<&'a Pod> {
    pods.iter()
        .copied()
        .find(|p| p.metadata.uid.as_deref() == Some(uid))
}

/// Whether this replica saw `pod`, the holder, renew the Lease since it first saw it, and its
/// renewals are not overdue.
fn renewed_as_holder(obs: &Observation<'_>, heartbeat: &Heartbeat, pod: &str) -> bool {
    let seen = obs.seen();
    matches!(heartbeat, Heartbeat::Renewing { holder, lapsed: false, .. } if holder == pod)
        && seen.renewed_at.is_some_and(|r| r > seen.written_at)
}
