//! Late requests cannot promote: the operator's half of the fencing of pod promotions.
//!
//! A request the operator gave up on (its deadline passed, or its process paused after sending
//! it) may still land. A promotion that lands after leadership moved on would label a second
//! leader. Two things make that impossible:
//! - every promotion is conditional on the resourceVersion of its pod read fresh just before it
//!   (`actions::pods::promote`): it writes only if nothing wrote the pod since;
//! - before promoting in a group where a promotion of an earlier decision may still be in flight,
//!   the operator writes every other pod of the group once (annotation `leadergroup.io/fence`,
//!   the epoch about to be handed out), so that such a promotion, conditional on an older
//!   resourceVersion, is refused by the API server. That is the case after this process started
//!   (another incarnation, or another replica, may have sent one), after it regained activity,
//!   and after any of its own requests in the group was abandoned. The pods the same transition
//!   releases are not fenced: the release removes their marks only if they are unchanged, which
//!   changes their resourceVersion as a fence would. A demotion is no such write (a pod without
//!   the leader label is left as it is, its version too): the demoted pods are fenced, and take
//!   their follower marks with that write.
//!
//! [`Fenced`] remembers the groups where no such promotion can be in flight.

use std::collections::HashSet;
use std::sync::Mutex;

use kube::runtime::reflector::ObjectRef;

use crate::crd::LeaderGroup;

/// The groups where no promotion of an earlier decision, by this process or any other, can
/// still land: this process fenced them since it last turned active, and abandoned no request in
/// them since.
#[derive(Default)]
pub struct Fenced(Mutex<HashSet<ObjectRef<LeaderGroup>>>);

impl Fenced {
    /// Whether `group` is fenced (a poisoned lock counts as not: fencing again is only a write).
    pub fn contains(&self, group: &ObjectRef<LeaderGroup>) -> bool {
        self.0.lock().is_ok_and(|set| set.contains(group))
    }

    /// `group` was fenced, and its promotion landed.
    pub fn insert(&self, group: ObjectRef<LeaderGroup>) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(group);
        }
    }

    /// A request in `group` was abandoned: it may still land.
    pub fn remove(&self, group: &ObjectRef<LeaderGroup>) {
        if let Ok(mut set) = self.0.lock() {
            set.remove(group);
        }
    }

    /// This replica stopped being active: another may act meanwhile.
    pub fn clear(&self) {
        if let Ok(mut set) = self.0.lock() {
            set.clear();
        }
    }
}
