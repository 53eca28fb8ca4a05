//! The group deleted and created again. The finalizer (`src/controller/cleanup.rs`) runs on the
//! active replica: it lists the pods carrying the group's role label and marks afresh and
//! removes the marks of each, then leaves the Lease released (no holder, no arbiter, no owner,
//! its epoch kept); the user then creates the group again under its name (a new UID, no status).
//! The model takes the finalizer's writes and the new group as one step. Requests the replicas
//! sent before may still land after it: that, and the replicas' caches that still show the old
//! group, is what the step explores.

use crate::api::{GroupObj, Spec, World};

/// Whether the finalizer deletes the Lease instead of releasing it: the behaviour before the
/// Lease was kept for the next group of the name (`Config::finalizer_deletes_lease`), kept to
/// show the checker's counterexample to I3 across re-creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseOnDeletion {
    Released,
    Deleted,
}

/// The finalizer's writes, and the group created again: `next_rv` hands out a version per write.
pub fn delete_and_recreate(
    world: &mut World,
    lease: LeaseOnDeletion,
    mut next_rv: impl FnMut() -> u32,
) {
    for pod in world.pods.iter_mut().flatten() {
        if pod.role.is_some() && pod.marked {
            pod.role = None;
            pod.epoch = None;
            pod.marked = false;
            pod.barrier = None;
            pod.rv = next_rv();
        }
    }
    let incarnation = world.group.incarnation;
    match lease {
        LeaseOnDeletion::Released => {
            if let Some(l) = world
                .lease
                .as_mut()
                .filter(|l| l.owner == Some(incarnation))
            {
                l.holder = None;
                l.holder_uid = None;
                l.owner = None;
                l.rv = next_rv();
            }
        }
        LeaseOnDeletion::Deleted => {
            if world
                .lease
                .as_ref()
                .is_some_and(|l| l.owner == Some(incarnation))
            {
                world.lease = None;
            }
        }
    }
    world.group = GroupObj {
        incarnation: incarnation + 1,
        spec: Spec::default(),
        generation: 1,
        status: None,
        rv: next_rv(),
    };
}
