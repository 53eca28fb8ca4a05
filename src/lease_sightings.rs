//! What this operator replica saw of each group's Lease, and when, on its own clock.
//!
//! In Heartbeat mode the leader renews its group's Lease from another machine, whose clock may be
//! seconds off this one. The operator therefore never compares the `renewTime` that machine wrote
//! with its own time: it notes when it saw each renewal arrive, and times the leader's silence
//! from there. A replica that starts (or takes over) knows nothing of the past, so it gives the
//! holder a whole Lease duration from its first sighting: late, never early.
//!
//! The sightings are kept on the monotonic clock, and handed to the decision in the frame of the
//! wall clock of the moment: a step of the wall clock (NTP, a VM resumed) between two sightings
//! moves neither the silence nor the handover.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::crd::{LeaderGroup, lease_name_for};
use crate::lease_record::{LeaseRecord, Written};

/// When this replica saw the group's Lease reach its current state, on its own clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseSeen {
    /// When it first saw the current holder, epoch, arbiter, mode and duration: the last write
    /// of an operator replica, or this replica's first sighting of the Lease.
    pub written_at: Timestamp,
    /// When it last saw the holder renew the Lease at this epoch; `None` while it has seen no
    /// renewal (nor, at the first sighting, any sign in the Lease of an earlier one).
    pub renewed_at: Option<Timestamp>,
    /// No earlier than this may the holder be taken for silent: when the operator rewrote the
    /// Lease of a holder (a new `leaseDurationSeconds`, arbiter or mode), the holder may not have
    /// seen the rewrite (cut off), and keeps timing itself by the Lease it last renewed. So the
    /// deadline that Lease gave it stands, until a renewal shows the holder read the new one (a
    /// renewal is conditional on the version it read).
    pub not_before: Option<Timestamp>,
}

/// The moment of a sighting on both clocks: the wall clock for the decision (which writes it into
/// objects), the monotonic one for every interval.
#[derive(Clone, Copy, Debug)]
pub struct Now {
    pub wall: Timestamp,
    pub monotonic: Instant,
}

impl Now {
    pub fn read() -> Now {
        Now {
            wall: Timestamp::now(),
            monotonic: Instant::now(),
        }
    }

    /// `then`, a moment of the monotonic clock (past or future), on the wall clock as it reads
    /// now.
    fn wall_of(&self, then: Instant) -> Timestamp {
        let moved = if then >= self.monotonic {
            self.wall.checked_add(then - self.monotonic)
        } else {
            self.wall.checked_sub(self.monotonic - then)
        };
        moved.unwrap_or(if then >= self.monotonic {
            Timestamp::MAX
        } else {
            Timestamp::MIN
        })
    }
}

/// One Lease's sighting: what this replica last saw of it and when, on its monotonic clock.
/// Public so that the model checker (`model/`) times a holder's silence with this very code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sighting {
    written: Written,
    renew_time: Option<Timestamp>,
    written_at: Instant,
    renewed_at: Option<Instant>,
    /// See [`LeaseSeen::not_before`].
    not_before: Option<Instant>,
}

impl Sighting {
    /// The first sighting of the Lease, as read at `now`. A Lease shortened in its holder's
    /// tenure says how long it was ([`LeaseRecord::longest_seen`]): the holder may time itself by
    /// that, so it is not taken for silent sooner, whichever replica saw the shortening.
    pub fn first(record: &LeaseRecord, now: Instant) -> Sighting {
        let longest = record.longest_seen();
        Sighting {
            written: record.written(),
            renew_time: record.renew_time,
            written_at: now,
            renewed_at: record.renewed_by_holder().then_some(now),
            not_before: (longest > record.duration_seconds)
                .then(|| now + Duration::from_secs(u64::try_from(longest).unwrap_or(0))),
        }
    }

    /// The deadline this sighting gives the holder: a Lease duration after its last renewal seen
    /// (or the write, before any), or `not_before` if later.
    fn holders_deadline(&self) -> Instant {
        let duration =
            Duration::from_secs(u64::try_from(self.written.duration_seconds()).unwrap_or(0));
        let deadline = self.renewed_at.unwrap_or(self.written_at) + duration;
        self.not_before.map_or(deadline, |n| n.max(deadline))
    }

    /// Takes in the Lease as read now: a new write starts over, a moved `renewTime` alone is a
    /// renewal by the holder.
    pub fn update(&mut self, record: &LeaseRecord, now: Instant) {
        let written = record.written();
        if self.written != written {
            let same_tenure = self.written.same_tenure(&written);
            let not_before = same_tenure.then(|| self.holders_deadline());
            *self = Sighting::first(record, now);
            self.not_before = self.not_before.max(not_before);
        } else if self.renew_time != record.renew_time {
            self.renew_time = record.renew_time;
            self.renewed_at = Some(now);
            self.not_before = None;
        }
    }

    /// What the decision reads of this sighting, on the wall clock as it reads at `now`.
    pub fn seen(&self, now: &Now) -> LeaseSeen {
        LeaseSeen {
            written_at: now.wall_of(self.written_at),
            renewed_at: self.renewed_at.map(|r| now.wall_of(r)),
            not_before: self.not_before.map(|n| now.wall_of(n)),
        }
    }
}

/// The group whose Lease `lease` is: its label names it, and its name is that group's Lease name.
pub fn group_of(lease: &Lease) -> Option<ObjectRef<LeaderGroup>> {
    let group = leadergroup_client::wire::lease::group(lease)?;
    let ns = lease.namespace()?;
    (lease.name_any() == lease_name_for(group)).then(|| ObjectRef::new(group).within(&ns))
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;
    use std::time::Duration;

    use jiff::SignedDuration;

    use super::*;
    use crate::controller::memory::Memory;

    fn t(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
    }

    /// The monotonic clock's reading at `secs`, on a base shared by the tests.
    fn m(secs: i64) -> Instant {
        static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
        *BASE + Duration::from_secs(u64::try_from(secs).expect("a test time is not negative"))
    }

    /// The same moment on both clocks: no step of the wall clock.
    fn at(secs: i64) -> Now {
        Now {
            wall: t(secs),
            monotonic: m(secs),
        }
    }

    fn record(holder: &str, epoch: i64, renewed: i64) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.into()),
            holder_uid: None,
            epoch,
            duration_seconds: 15,
            longest_seconds: None,
            acquire_time: Some(t(0)),
            renew_time: Some(t(renewed)),
            arbiter: Some("op-1".into()),
            heartbeat: true,
            released_by: None,
            lapsed: None,
            acknowledged: false,
            acknowledged_by: Vec::new(),
            predecessor: None,
        }
    }

    fn sight(sightings: &Memory, record: &LeaseRecord, now: i64) -> (Timestamp, Option<Timestamp>) {
        sight_at(sightings, record, at(now))
    }

    fn sight_at(
        sightings: &Memory,
        record: &LeaseRecord,
        now: Now,
    ) -> (Timestamp, Option<Timestamp>) {
        let group = ObjectRef::new("pay").within("ns");
        let lease = record.apply_to(None, "leadergroup-pay", "ns", None, None);
        let seen = sightings
            .lease_seen(&group, Some(&lease), now)
            .expect("a Lease is seen");
        (seen.written_at, seen.renewed_at)
    }

    #[test]
    fn a_step_of_the_wall_clock_moves_no_silence() {
        let s = Memory::default();
        sight(&s, &record("a", 1, 0), 100);
        sight(&s, &record("a", 1, 4), 104);
        // Six seconds later the wall clock has jumped an hour ahead: the renewal seen six
        // seconds ago is six seconds old, not an hour.
        let stepped = Now {
            wall: t(110 + 3600),
            monotonic: m(110),
        };
        assert_eq!(
            sight_at(&s, &record("a", 1, 4), stepped),
            (t(3600 + 100), Some(t(3600 + 104)))
        );
        // And an hour back: no renewal seems to come from the future.
        let back = Now {
            wall: t(111 - 3600),
            monotonic: m(111),
        };
        assert_eq!(
            sight_at(&s, &record("a", 1, 4), back),
            (t(100 - 3600), Some(t(104 - 3600)))
        );
    }

    #[test]
    fn renewals_are_timed_when_seen_whatever_renew_time_says() {
        let s = Memory::default();
        assert_eq!(sight(&s, &record("a", 1, 0), 100), (t(100), None));
        // The holder's clock is an hour behind: its renewal still counts when it arrives.
        assert_eq!(
            sight(&s, &record("a", 1, -3600), 104),
            (t(100), Some(t(104)))
        );
        // Read again unchanged: nothing moves.
        assert_eq!(
            sight(&s, &record("a", 1, -3600), 110),
            (t(100), Some(t(104)))
        );
        assert_eq!(
            sight(&s, &record("a", 1, -3595), 111),
            (t(100), Some(t(111)))
        );
    }

    #[test]
    fn a_rewrite_of_the_holders_tenure_keeps_its_deadline_until_it_renews() {
        let s = Memory::default();
        let group = ObjectRef::new("pay").within("ns");
        let observe = |record: &LeaseRecord, now: i64| {
            let lease = record.apply_to(None, "leadergroup-pay", "ns", None, None);
            s.lease_seen(&group, Some(&lease), at(now))
                .expect("a Lease is seen")
        };
        observe(&record("a", 1, 0), 100);
        observe(&record("a", 1, 4), 104);
        // The operator shortens the Lease to 3 s at 106: the holder, perhaps cut off, still
        // times itself by the 15 s Lease it renewed at 104.
        let shorter = LeaseRecord {
            duration_seconds: 3,
            ..record("a", 1, 4)
        };
        let seen = observe(&shorter, 106);
        assert_eq!(seen.not_before, Some(t(104 + 15)));
        // A renewal of the new Lease shows the holder read it: the new duration alone counts.
        let renewed = LeaseRecord {
            renew_time: Some(t(108)),
            ..shorter.clone()
        };
        assert_eq!(observe(&renewed, 108).not_before, None);
        // A new holder is a new tenure: nothing carries over.
        let moved = LeaseRecord {
            holder: Some("b".into()),
            epoch: 2,
            ..shorter
        };
        assert_eq!(observe(&moved, 109).not_before, None);
    }

    #[test]
    fn a_replica_that_first_sees_a_shortened_lease_gives_the_holder_the_longest_duration() {
        // Another replica (or this one before a restart) saw the 30 s Lease shortened to 3 s;
        // the Lease says so. The holder may time itself by the 30 s: not silent before 130.
        let s = Memory::default();
        let group = ObjectRef::new("pay").within("ns");
        let shortened = LeaseRecord {
            duration_seconds: 3,
            longest_seconds: Some(30),
            ..record("a", 1, 0)
        };
        let lease = shortened.apply_to(None, "leadergroup-pay", "ns", None, None);
        let seen = s.lease_seen(&group, Some(&lease), at(100)).expect("seen");
        assert_eq!(seen.not_before, Some(t(130)));
        // A renewal of the shortened Lease shows the holder read it.
        let renewed = LeaseRecord {
            renew_time: Some(t(101)),
            ..shortened
        };
        let lease = renewed.apply_to(None, "leadergroup-pay", "ns", None, None);
        let seen = s.lease_seen(&group, Some(&lease), at(101)).expect("seen");
        assert_eq!(seen.not_before, None);
    }

    #[test]
    fn a_new_holder_or_epoch_starts_over() {
        let s = Memory::default();
        sight(&s, &record("a", 1, 0), 100);
        sight(&s, &record("a", 1, 5), 105);
        assert_eq!(sight(&s, &record("b", 2, 0), 120), (t(120), None));
        let mut arbiter = record("b", 2, 0);
        arbiter.arbiter = Some("op-2".into());
        assert_eq!(sight(&s, &arbiter, 130), (t(130), None));
    }

    #[test]
    fn a_first_sighting_believes_the_lease_about_earlier_renewals() {
        let s = Memory::default();
        // renewTime differs from acquireTime: the holder renewed before this replica looked.
        assert_eq!(sight(&s, &record("a", 1, 7), 100), (t(100), Some(t(100))));
        let readiness = LeaseRecord {
            heartbeat: false,
            ..record("a", 1, 7)
        };
        let other = Memory::default();
        assert_eq!(sight(&other, &readiness, 100), (t(100), None));
    }

    #[test]
    fn a_deleted_lease_or_group_is_forgotten() {
        let s = Memory::default();
        let group = ObjectRef::new("pay").within("ns");
        sight(&s, &record("a", 1, 0), 100);
        assert_eq!(s.lease_seen(&group, None, at(101)), None);
        assert_eq!(sight(&s, &record("a", 1, 0), 102), (t(102), None));
        s.forget(&group);
        assert_eq!(sight(&s, &record("a", 1, 0), 103), (t(103), None));
    }
}
