//! What happens to the group's objects besides the operator: the kubelet turns pods Ready or
//! NotReady, pods are deleted and created again under the same name, the user edits the spec
//! (the selector, the preferred leader, paused), and time makes the Lease run out.

use crate::api::{PodId, PodObj, Spec, World};

/// The kubelet reports a pod Ready or NotReady (a status write: a new version).
pub fn set_ready(world: &mut World, pod: PodId, ready: bool, rv: u32) {
    if let Some(p) = world.pod_mut(pod) {
        p.ready = ready;
        p.rv = rv;
    }
}

pub fn delete_pod(world: &mut World, pod: PodId) {
    if let Some(slot) = world.pods.get_mut(usize::from(pod)) {
        *slot = None;
    }
}

/// A pod of the same name created again: a new object, Ready, without marks, younger.
pub fn recreate_pod(world: &mut World, pod: PodId, incarnation: u8, rv: u32) {
    if let Some(slot) = world.pods.get_mut(usize::from(pod)) {
        *slot = Some(PodObj {
            incarnation,
            ready: true,
            role: None,
            epoch: None,
            marked: false,
            barrier: None,
            rv,
        });
    }
}

/// A spec edit: a new generation and a new version.
pub fn edit_spec(world: &mut World, spec: Spec, rv: u32) {
    world.group.spec = spec;
    world.group.generation += 1;
    world.group.rv = rv;
}

/// The Lease's duration passes without a write. (No new version: nothing was written.) Every
/// view of it runs out together: a cache holds the Lease as written at that time or earlier.
pub fn expire<'a>(worlds: impl Iterator<Item = &'a mut World>) {
    for world in worlds {
        if let Some(l) = &mut world.lease {
            l.expired = true;
        }
    }
}
