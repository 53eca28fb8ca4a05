//! Late requests cannot promote: the barrier, the operator's defence against its own promotions
//! landing late. (The application's fence, which refuses a deposed leader's writes by epoch, is
//! the client crate's `fence`; the two are distinct.)
//!
//! A request the operator gave up on (its deadline passed, or its process paused after sending
//! it) may still land. A promotion that lands after leadership moved on would label a second
//! leader. Two things make that impossible:
//! - every promotion is conditional on the resourceVersion of its pod read fresh just before it
//!   (`actions::pods::promote`): it writes only if nothing wrote the pod since;
//! - before promoting in a group where a promotion of an earlier decision may still be in flight,
//!   the operator writes every other pod of the group once (the barrier: annotation
//!   [`BARRIER_ANNOTATION`](crate::crd::BARRIER_ANNOTATION), the epoch about to be handed out), so
//!   that such a promotion, conditional on an older resourceVersion, is refused by the API
//!   server. That is the case after this process started (another incarnation, or another
//!   replica, may have sent one), after it regained activity, after any of its own requests
//!   in the group was abandoned, and after a pass in the group failed (it may have moved the
//!   Lease off a pod whose demotion then failed). Which pod gets the barrier is decided by the pure
//!   [`Plan::writes`](crate::election::Plan::writes).
//!
//! [`Barriers`] remembers the groups where no such promotion can be in flight.

use std::collections::HashSet;
use std::sync::Mutex;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::crd::LeaderGroup;

/// A group incarnation: a group created again under the name (its UID differs) may have its
/// predecessor's promotions in flight, whatever this replica knew of the name.
type Incarnation = (ObjectRef<LeaderGroup>, Option<String>);

fn incarnation(group: &LeaderGroup) -> Incarnation {
    (ObjectRef::from_obj(group), group.uid())
}

/// The groups where no promotion of an earlier decision, by this process or any other, can
/// still land: this process raised their barrier since it last turned active, and abandoned no
/// request in them since.
#[derive(Default)]
pub struct Barriers(Mutex<HashSet<Incarnation>>);

impl Barriers {
    /// Whether `group`'s barrier is up (a poisoned lock counts as not: raising it again is only
    /// a write).
    pub fn is_up(&self, group: &LeaderGroup) -> bool {
        self.0
            .lock()
            .is_ok_and(|set| set.contains(&incarnation(group)))
    }

    /// `group`'s barrier went up, and its promotion landed.
    pub fn insert(&self, group: &LeaderGroup) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(incarnation(group));
        }
    }

    /// A request in `group` was abandoned (it may still land), or the group is gone: every
    /// incarnation of its name.
    pub fn remove(&self, group: &ObjectRef<LeaderGroup>) {
        if let Ok(mut set) = self.0.lock() {
            set.retain(|(name, _)| name != group);
        }
    }

    /// This replica stopped being active: another may act meanwhile.
    pub fn clear(&self) {
        if let Ok(mut set) = self.0.lock() {
            set.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(uid: &str) -> LeaderGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "leadergroup.io/v1alpha1", "kind": "LeaderGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": uid},
            "spec": {"selector": {"matchLabels": {"app": "g"}}},
        }))
        .expect("a group")
    }

    #[test]
    fn a_group_created_again_under_the_name_starts_with_its_barrier_down() {
        let barriers = Barriers::default();
        barriers.insert(&group("uid-1"));
        assert!(barriers.is_up(&group("uid-1")));
        assert!(!barriers.is_up(&group("uid-2")), "another incarnation");
        barriers.remove(&ObjectRef::from_obj(&group("uid-2")));
        assert!(!barriers.is_up(&group("uid-1")), "the name is forgotten");
    }
}
