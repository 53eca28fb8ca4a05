//! Which events of the Lease watch start a reconcile of their group.
//!
//! In Readiness mode the operator renews every group's Lease itself, once a third of its
//! duration, from a reconcile that has already planned the next one. The event of that renewal
//! started a second reconcile that found nothing to do: at 10,000 groups with a 60 s Lease, 500
//! useless reconciles a second, and kube-runtime's queue runs the newest due request first, so
//! they starved the groups still waiting for their first election (6,064 of 10,000 led after
//! 600 s). A change of anything else the operator writes ([`Written`]: holder, epoch,
//! arbiter, mode, duration), a deletion, and in Heartbeat mode every renewal (the holder's, timed by
//! the operator from when it sees it) still start one.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use crate::lease_record::{LeaseRecord, Written};

/// What the Lease watch last showed of each Lease's operator-written part, for the Leases it
/// shows now: an entry goes with its Lease's deletion event, and, for a Lease deleted while the
/// watch was down (no event ever comes), at the end of the relist that no longer shows it.
#[derive(Default)]
pub(super) struct LeaseTriggers {
    last: HashMap<ObjectRef<Lease>, Written>,
    /// During a relist (between `Init` and `InitDone`): the Leases it has shown so far.
    relisted: Option<HashSet<ObjectRef<Lease>>>,
}

impl LeaseTriggers {
    /// Whether `event` should start a reconcile: everything but a Readiness-mode Lease whose
    /// operator-written part is as the last event showed it (a renewal).
    pub(super) fn wants(&mut self, event: &Event<Lease>) -> bool {
        match event {
            Event::Apply(lease) | Event::InitApply(lease) => {
                let key = ObjectRef::from_obj(lease);
                let record = LeaseRecord::from_lease(lease);
                let written = record.written();
                let renewal_only = !record.heartbeat && self.last.get(&key) == Some(&written);
                if let (Event::InitApply(_), Some(relisted)) = (event, self.relisted.as_mut()) {
                    relisted.insert(key.clone());
                }
                self.last.insert(key, written);
                !renewal_only
            }
            Event::Delete(lease) => {
                self.last.remove(&ObjectRef::from_obj(lease));
                true
            }
            Event::Init => {
                self.relisted = Some(HashSet::new());
                true
            }
            Event::InitDone => {
                if let Some(relisted) = self.relisted.take() {
                    self.last.retain(|key, _| relisted.contains(key));
                }
                true
            }
        }
    }

    /// How many Leases it keeps an entry for.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    use super::*;
    use crate::crd::LIVENESS_ANNOTATION;

    fn lease(holder: &str, renewed_secs: i64, heartbeat: bool) -> Lease {
        named("leadergroup-g", holder, renewed_secs, heartbeat)
    }

    fn named(name: &str, holder: &str, renewed_secs: i64, heartbeat: bool) -> Lease {
        let at = |secs: i64| {
            Timestamp::from_second(1_800_000_000 + secs)
                .map(MicroTime)
                .ok()
        };
        let annotations = heartbeat.then(|| {
            [(LIVENESS_ANNOTATION.to_string(), "Heartbeat".to_string())]
                .into_iter()
                .collect()
        });
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                annotations,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                acquire_time: at(0),
                renew_time: at(renewed_secs),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_readiness_renewal_alone_starts_no_reconcile() {
        let mut triggers = LeaseTriggers::default();
        assert!(
            triggers.wants(&Event::Apply(lease("a", 0, false))),
            "first sight"
        );
        assert!(
            !triggers.wants(&Event::Apply(lease("a", 5, false))),
            "renewal"
        );
        assert!(
            !triggers.wants(&Event::InitApply(lease("a", 5, false))),
            "relisted unchanged"
        );
        assert!(
            triggers.wants(&Event::Apply(lease("b", 5, false))),
            "new holder"
        );
        assert!(
            triggers.wants(&Event::Delete(lease("b", 5, false))),
            "deleted"
        );
        assert!(
            triggers.wants(&Event::Apply(lease("b", 5, false))),
            "re-created"
        );
    }

    #[test]
    fn an_entry_goes_with_its_lease_however_it_goes() {
        let mut triggers = LeaseTriggers::default();
        for name in ["leadergroup-a", "leadergroup-b", "leadergroup-c"] {
            triggers.wants(&Event::Apply(named(name, "p", 0, false)));
        }
        assert_eq!(triggers.len(), 3);
        // Deleted while the watch runs: its event removes it.
        triggers.wants(&Event::Delete(named("leadergroup-a", "p", 0, false)));
        assert_eq!(triggers.len(), 2);
        // Deleted while the watch was down: the relist that follows no longer shows it.
        triggers.wants(&Event::Init);
        assert!(
            !triggers.wants(&Event::InitApply(named("leadergroup-c", "p", 5, false))),
            "a relisted renewal still starts no reconcile"
        );
        triggers.wants(&Event::InitDone);
        assert_eq!(triggers.len(), 1, "an entry outlived its Lease");
        assert!(
            triggers.wants(&Event::Apply(named("leadergroup-b", "p", 5, false))),
            "a Lease created again under the name is seen anew"
        );
        // A relist of nothing empties it.
        triggers.wants(&Event::Init);
        triggers.wants(&Event::InitDone);
        assert_eq!(triggers.len(), 0);
    }

    #[test]
    fn every_heartbeat_renewal_starts_a_reconcile() {
        let mut triggers = LeaseTriggers::default();
        assert!(triggers.wants(&Event::Apply(lease("a", 0, true))));
        assert!(triggers.wants(&Event::Apply(lease("a", 5, true))));
        assert!(triggers.wants(&Event::Apply(lease("a", 10, true))));
    }
}
