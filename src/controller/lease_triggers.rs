//! Which events of the Lease watch start a reconcile of their group: not the operator's own
//! Readiness-mode renewals (the reconcile that sent one planned the next already, and at scale
//! these useless reconciles starve the groups awaiting their first election). A change of
//! anything else the operator writes ([`Written`]), a deletion, and in Heartbeat mode every
//! renewal (the holder's, timed from when the operator sees it) start one.

use std::collections::HashMap;

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::watcher::Event;

use crate::lease_record::{LeaseRecord, Written};
use crate::relist::{Change, Key, Relist, key};

/// What the Lease watch last showed of each Lease's operator-written part, for the Leases it
/// shows now: an entry goes with its Lease's deletion event, and, for a Lease deleted while the
/// watch was down (no event ever comes), at the end of the relist that no longer shows it.
#[derive(Default)]
pub(super) struct LeaseTriggers {
    last: HashMap<Key, Written>,
    /// The watch's relist in progress.
    relist: Relist,
}

impl LeaseTriggers {
    /// Whether `event` should start a reconcile: everything but a Readiness-mode Lease whose
    /// operator-written part is as the last event showed it (a renewal).
    pub(super) fn wants(&mut self, event: &Event<Lease>) -> bool {
        match self.relist.follow(event) {
            Change::File(lease) => {
                let Some(key) = key(lease) else {
                    return true;
                };
                let record = LeaseRecord::from_lease(lease);
                let written = record.written();
                let renewal_only = !record.heartbeat && self.last.get(&key) == Some(&written);
                self.last.insert(key, written);
                !renewal_only
            }
            Change::Remove(lease) => {
                if let Some(key) = key(lease) {
                    self.last.remove(&key);
                }
                true
            }
            Change::Retain(listed) => {
                self.last.retain(|key, _| listed.contains(key));
                true
            }
            Change::Nothing => true,
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
