//! What this replica remembers of each group between reconciles, in one [`GroupMemory`] per
//! group: whether its barrier is up, its Lease's sighting, its handover clock, its run of
//! failures, and its own last writes until the watches show them. A group deleted is forgotten
//! whole, in [`Memory::forget`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

use super::backoff::{self, Failing};
use crate::crd::LeaderGroup;
use crate::lease_record::LeaseRecord;
use crate::lease_sightings::{LeaseSeen, Now, Sighting, group_of};

/// One group's memory.
#[derive(Default)]
struct GroupMemory {
    /// The UID of the group incarnation whose barrier this replica raised since it last turned
    /// active, abandoning no request in the group since (the barrier, `election::writes`): a group created
    /// again under the name may have its predecessor's promotions in flight.
    barrier_up: Option<Option<String>>,
    /// What this replica saw of the group's Lease, and when.
    sighting: Option<Sighting>,
    /// When the group's handover began: the first pod event for it since its last reconcile.
    handover_started: Option<Instant>,
    /// Its run of refusals or missed deadlines.
    failing: Option<Failing>,
    /// This replica's last write of the group's Lease, until the Lease watch shows a change
    /// (boxed: a memory is kept per group, and most hold none).
    lease_written: Option<Box<Written<Lease>>>,
    /// This replica's last write of the group's status, until the group watch shows a change.
    status_written: Option<Box<Written<LeaderGroup>>>,
}

impl GroupMemory {
    fn is_empty(&self) -> bool {
        self.barrier_up.is_none()
            && self.sighting.is_none()
            && self.handover_started.is_none()
            && self.failing.is_none()
            && self.lease_written.is_none()
            && self.status_written.is_none()
    }
}

/// The object in `written` while `cached` is the version it was written over; once the cache
/// shows another, None, and `written` is emptied.
fn fresher<K: kube::Resource + Clone>(
    written: &mut Option<Box<Written<K>>>,
    cached: Option<&K>,
) -> Option<K> {
    let object = written
        .as_ref()
        .filter(|w| !w.passed_by(cached))
        .map(|w| w.object.clone());
    if object.is_none() {
        *written = None;
    }
    object
}

/// An object as this replica wrote it, and the resourceVersion it was written over (None: created).
/// While the cache still shows that version, the written object is the newer: deciding on the
/// cache would send a write sure to meet a 409, then read both afresh (three requests for none).
struct Written<K> {
    over: Option<String>,
    object: K,
}

impl<K: kube::Resource + Clone> Written<K> {
    /// Whether `seen` (in the cache, or from the watch) is another version than the one written
    /// over: the cache has caught up with the write, or moved past it.
    fn passed_by(&self, seen: Option<&K>) -> bool {
        seen.and_then(|c| c.meta().resource_version.as_deref()) != self.over.as_deref()
    }
}

/// Every group's memory, shared by the reconciles and the watches. A poisoned lock remembers
/// nothing, which only ever costs a barrier, a longer wait or a retry sooner.
#[derive(Default)]
pub struct Memory(Mutex<HashMap<ObjectRef<LeaderGroup>, GroupMemory>>);

impl Memory {
    /// Runs `change` on `group`'s memory, dropping it if nothing is left.
    fn change<T>(
        &self,
        group: &ObjectRef<LeaderGroup>,
        change: impl FnOnce(&mut GroupMemory) -> T,
    ) -> Option<T> {
        let mut groups = self.0.lock().ok()?;
        let memory = groups.entry(group.clone()).or_default();
        let out = change(memory);
        if memory.is_empty() {
            groups.remove(group);
        }
        Some(out)
    }

    /// Reads `group`'s memory.
    fn read<T>(
        &self,
        group: &ObjectRef<LeaderGroup>,
        read: impl FnOnce(&GroupMemory) -> T,
    ) -> Option<T> {
        self.0.lock().ok()?.get(group).map(read)
    }

    /// Forgets everything of a deleted group.
    pub fn forget(&self, group: &ObjectRef<LeaderGroup>) {
        if let Ok(mut groups) = self.0.lock() {
            groups.remove(group);
        }
    }

    /// Whether `group`'s barrier is up for this incarnation of it.
    pub fn barrier_up(&self, group: &LeaderGroup) -> bool {
        let uid = group.uid();
        self.read(&ObjectRef::from_obj(group), |m| {
            m.barrier_up.as_ref() == Some(&uid)
        })
        .unwrap_or(false)
    }

    /// `group`'s barrier went up, and its promotion landed.
    pub fn barrier_raised(&self, group: &LeaderGroup) {
        let uid = group.uid();
        self.change(&ObjectRef::from_obj(group), |m| m.barrier_up = Some(uid));
    }

    /// A request in `group` was abandoned (it may still land), or a pass failed: its barrier is
    /// down.
    pub fn barrier_down(&self, group: &ObjectRef<LeaderGroup>) {
        self.change(group, |m| m.barrier_up = None);
    }

    /// This replica turned active: another may have acted meanwhile, so no group's barrier is up.
    pub fn every_barrier_down(&self) {
        if let Ok(mut groups) = self.0.lock() {
            groups.values_mut().for_each(|m| m.barrier_up = None);
            groups.retain(|_, m| !m.is_empty());
        }
    }

    /// Notes the group's Lease as read at `now` and says when its state was first seen, on the
    /// wall clock as it reads at `now` (see [`Now`]). `None` when there is no Lease (or the lock
    /// is poisoned: the decision then treats the Lease as seen just now, which only ever waits
    /// longer).
    pub fn lease_seen(
        &self,
        group: &ObjectRef<LeaderGroup>,
        lease: Option<&Lease>,
        now: Now,
    ) -> Option<LeaseSeen> {
        self.change(group, |m| {
            let Some(lease) = lease else {
                m.sighting = None;
                return None;
            };
            let record = LeaseRecord::from_lease(lease);
            let sighting = match m.sighting.take() {
                Some(mut s) => {
                    s.update(&record, now.monotonic);
                    s
                }
                None => Sighting::first(&record, now.monotonic),
            };
            let seen = sighting.seen(&now);
            m.sighting = Some(sighting);
            Some(seen)
        })
        .flatten()
    }

    /// Notes what the Lease watch shows as it arrives, on every replica, active or standing by:
    /// a replica that turns active then times another replica's Leases from the renewals it saw
    /// (Readiness mode: the decision defers to that replica until a duration after the last
    /// one), not from its first look, which would hold the groups of a crashed replica for one
    /// more duration.
    pub fn lease_watched(&self, event: &Event<Lease>) {
        match event {
            Event::Apply(lease) | Event::InitApply(lease) => {
                if let Some(group) = group_of(lease) {
                    self.lease_seen(&group, Some(lease), Now::read());
                    self.change_existing(&group, |m| {
                        m.lease_written.take_if(|w| w.passed_by(Some(lease)));
                    });
                }
            }
            Event::Delete(lease) => {
                if let Some(group) = group_of(lease) {
                    self.change_existing(&group, |m| {
                        m.sighting = None;
                        m.lease_written = None;
                    });
                }
            }
            Event::Init | Event::InitDone => {}
        }
    }

    /// Notes this replica's write of `group`'s Lease: `written` as the API server answered, over
    /// the version `over` (None: created).
    pub fn lease_written(
        &self,
        group: &ObjectRef<LeaderGroup>,
        over: Option<String>,
        written: Lease,
    ) {
        self.change(group, |m| {
            m.lease_written = Some(Box::new(Written {
                over,
                object: written,
            }))
        });
    }

    /// Notes this replica's write of `group`'s status, `written` over version `over`.
    pub fn status_written(&self, over: Option<String>, written: LeaderGroup) {
        self.change(&ObjectRef::from_obj(&written), |m| {
            m.status_written = Some(Box::new(Written {
                over,
                object: written,
            }))
        });
    }

    /// The group's Lease as this replica last wrote it while the cache still shows it as it was
    /// before that write; else `cached`.
    pub fn fresher_lease(
        &self,
        group: &ObjectRef<LeaderGroup>,
        cached: Option<Lease>,
    ) -> Option<Lease> {
        let written =
            self.change_existing(group, |m| fresher(&mut m.lease_written, cached.as_ref()));
        written.flatten().or(cached)
    }

    /// The group as this replica last wrote its status while the cache still shows it as it was
    /// before that write; else `cached`.
    pub fn fresher_group(&self, cached: LeaderGroup) -> LeaderGroup {
        let group = ObjectRef::from_obj(&cached);
        let written =
            self.change_existing(&group, |m| fresher(&mut m.status_written, Some(&cached)));
        written.flatten().unwrap_or(cached)
    }

    /// The group watch showed a change of `group`: the cache has caught up with any write.
    pub fn group_watched(&self, event: &Event<LeaderGroup>) {
        match event {
            Event::Apply(g) => {
                self.change_existing(&ObjectRef::from_obj(g), |m| {
                    m.status_written.take_if(|w| w.passed_by(Some(g)));
                });
            }
            Event::Delete(g) => {
                self.change_existing(&ObjectRef::from_obj(g), |m| m.status_written = None);
            }
            _ => {}
        }
    }

    /// Runs `change` on `group`'s memory only if there is one, dropping it if nothing is left:
    /// a watch event, or a reconcile's look for its own writes, allocates no memory for a group.
    fn change_existing<T>(
        &self,
        group: &ObjectRef<LeaderGroup>,
        change: impl FnOnce(&mut GroupMemory) -> T,
    ) -> Option<T> {
        let mut groups = self.0.lock().ok()?;
        let memory = groups.get_mut(group)?;
        let out = change(memory);
        if memory.is_empty() {
            groups.remove(group);
        }
        Some(out)
    }

    /// Starts the group's handover clock, unless it is already running.
    pub fn start_handover(&self, group: &ObjectRef<LeaderGroup>) {
        self.change(group, |m| {
            m.handover_started.get_or_insert_with(Instant::now);
        });
    }

    /// Stops the group's handover clock and returns when it started, if it was running.
    pub fn take_handover(&self, group: &ObjectRef<LeaderGroup>) -> Option<Instant> {
        self.change(group, |m| m.handover_started.take()).flatten()
    }

    /// Counts a failure of `group` at `generation` that backs off; returns the wait before the
    /// next try, at most `cap`.
    pub fn failed(
        &self,
        group: &ObjectRef<LeaderGroup>,
        generation: Option<i64>,
        cap: Duration,
    ) -> Duration {
        self.change(group, |m| {
            m.failing
                .get_or_insert_with(|| Failing::new(generation))
                .failed(generation, cap)
        })
        .unwrap_or(backoff::FIRST)
    }

    /// Counts a missed deadline of `group`; returns how many in a row.
    pub fn missed_deadline(&self, group: &ObjectRef<LeaderGroup>) -> u32 {
        self.change(group, |m| {
            m.failing
                .get_or_insert_with(|| Failing::new(None))
                .missed_deadline()
        })
        .unwrap_or(0)
    }

    /// How many deadlines in a row `group` has missed.
    pub fn missed_deadlines(&self, group: &ObjectRef<LeaderGroup>) -> u32 {
        self.read(group, |m| m.failing.as_ref().map_or(0, |f| f.stale))
            .unwrap_or(0)
    }

    /// Ends `group`'s run of failures: its reconcile succeeded.
    pub fn succeeded(&self, group: &ObjectRef<LeaderGroup>) {
        self.change(group, |m| m.failing = None);
    }

    /// How long `group` at `generation` must still wait, if it is in a run of permanent errors
    /// and its spec has not changed since.
    pub fn waiting(
        &self,
        group: &ObjectRef<LeaderGroup>,
        generation: Option<i64>,
    ) -> Option<Duration> {
        self.read(group, |m| m.failing.as_ref()?.waiting(generation))
            .flatten()
    }

    /// How many consecutive permanent errors `group` has met.
    pub fn failures(&self, group: &ObjectRef<LeaderGroup>) -> u32 {
        self.read(group, |m| m.failing.as_ref().map_or(0, |f| f.failures))
            .unwrap_or(0)
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
        let memory = Memory::default();
        memory.barrier_raised(&group("uid-1"));
        assert!(memory.barrier_up(&group("uid-1")));
        assert!(!memory.barrier_up(&group("uid-2")), "another incarnation");
        memory.barrier_down(&ObjectRef::from_obj(&group("uid-2")));
        assert!(!memory.barrier_up(&group("uid-1")), "the name is forgotten");
    }

    #[test]
    fn a_deleted_group_is_forgotten_whole() {
        let memory = Memory::default();
        let g = group("uid-1");
        let r = ObjectRef::from_obj(&g);
        memory.barrier_raised(&g);
        memory.start_handover(&r);
        memory.failed(&r, Some(1), backoff::CAP);
        memory.forget(&r);
        assert!(
            !memory.barrier_up(&g),
            "a group created again may need its barrier"
        );
        assert_eq!(memory.take_handover(&r), None);
        assert_eq!(memory.failures(&r), 0);
        assert_eq!(memory.waiting(&r, Some(1)), None);
        assert!(memory.0.lock().unwrap().is_empty(), "nothing left behind");
    }

    fn at_version<K: kube::Resource>(mut object: K, version: &str) -> K {
        object.meta_mut().resource_version = Some(version.into());
        object
    }

    #[test]
    fn a_groups_memory_stays_small() {
        // One per group: 10,000 of them at the scale the benchmark runs.
        assert!(
            std::mem::size_of::<GroupMemory>() <= 320,
            "{} bytes",
            std::mem::size_of::<GroupMemory>()
        );
    }

    #[test]
    fn its_own_write_stands_in_for_the_cache_until_the_cache_shows_another_version() {
        let memory = Memory::default();
        let cached = at_version(group("uid-1"), "10");
        let written = at_version(group("uid-1"), "11");
        memory.status_written(Some("10".into()), written);
        let fresher = |g: &LeaderGroup| memory.fresher_group(g.clone()).metadata.resource_version;
        assert_eq!(fresher(&cached).as_deref(), Some("11"), "the cache lags");
        // The watch brings the version written over, late: still lagging.
        memory.group_watched(&Event::Apply(cached.clone()));
        assert_eq!(fresher(&cached).as_deref(), Some("11"));
        // The cache caught up (or someone else wrote since): the cache, and nothing kept.
        let edited = at_version(group("uid-1"), "12");
        memory.group_watched(&Event::Apply(edited.clone()));
        assert_eq!(fresher(&cached).as_deref(), Some("10"));
        assert!(memory.0.lock().unwrap().is_empty(), "nothing left behind");

        // The Lease, created (written over nothing): while the cache has none, the written one.
        let r = ObjectRef::from_obj(&cached);
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "leadergroup-g", "namespace": "ns", "resourceVersion": "13"},
        }))
        .unwrap();
        memory.lease_written(&r, None, lease.clone());
        let seen = memory.fresher_lease(&r, None);
        assert_eq!(
            seen.and_then(|l| l.metadata.resource_version).as_deref(),
            Some("13")
        );
        memory.lease_watched(&Event::Apply(lease.clone()));
        let cached_lease = at_version(lease, "14");
        let seen = memory.fresher_lease(&r, Some(cached_lease));
        assert_eq!(
            seen.and_then(|l| l.metadata.resource_version).as_deref(),
            Some("14")
        );
    }

    #[test]
    fn a_success_or_a_new_spec_resets_the_run() {
        let memory = Memory::default();
        let g = ObjectRef::new("g").within("ns");
        assert_eq!(memory.failed(&g, Some(1), backoff::CAP), backoff::FIRST);
        assert_eq!(memory.failed(&g, Some(1), backoff::CAP), backoff::FIRST * 2);
        assert!(memory.waiting(&g, Some(1)).is_some());
        // A new generation is tried at once, and starts its own run.
        assert_eq!(memory.waiting(&g, Some(2)), None);
        assert_eq!(memory.failed(&g, Some(2), backoff::CAP), backoff::FIRST);
        assert_eq!(memory.missed_deadline(&g), 1);
        assert_eq!(memory.missed_deadline(&g), 2);
        memory.succeeded(&g);
        assert_eq!(memory.waiting(&g, Some(2)), None);
        assert_eq!(memory.failures(&g), 0);
        assert_eq!(memory.missed_deadlines(&g), 0);
        assert!(memory.0.lock().unwrap().is_empty());
    }
}
