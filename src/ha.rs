//! Operator HA: replicas agree on one active replica through a Lease of their own, written with
//! the same compare-and-swap as the groups' Leases. The active replica renews every third of the
//! duration and stops acting the moment a renewal fails or has not landed within two thirds of the
//! duration (a hung request); a standby takes over once the Lease has run out, timed on its own
//! monotonic clock from when it saw the Lease last change (never from the `renewTime` another
//! machine's clock wrote: [`HolderSighting`]). On shutdown the
//! active replica stops acting, then releases the Lease naming itself (`leadergroup.io/released-by`),
//! so that a standby takes over at once and knows that replica stopped on purpose. A standby that
//! takes the Lease over, released or run out, knows its holder has stopped acting, so it takes
//! over the groups that replica arbitrated at once too, instead of waiting out their Leases
//! ([`Retired`]).

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::reflector::Store;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::actions::lease::{compare_and_swap, read};
use crate::crd::{LeaderGroup, lease_name_for};
use crate::error::Result;
use crate::lease_record::{LeaseRecord, renew_interval};

/// The operator Lease's name unless `--leader-elect-lease-name` says otherwise. It does not start
/// with `leadergroup-`, so it is never the Lease of a group (`leadergroup-<group name>`), whatever
/// the group is called; the dots make it a valid Lease name that is no group's name either.
pub const DEFAULT_LEASE_NAME: &str = "operator.leadergroup.io";

/// Refuses, as the flag's parser, an operator Lease name that a group's Lease could have: the
/// operator and the group would overwrite each other's Lease.
pub fn parse_lease_name(name: &str) -> std::result::Result<String, String> {
    let prefix = lease_name_for("");
    if name.starts_with(&prefix) {
        return Err(format!(
            "names starting with {prefix} are the LeaderGroups' Leases ({prefix}<group name>); choose another, such as {DEFAULT_LEASE_NAME}"
        ));
    }
    Ok(name.to_string())
}

/// The shortest the operator Lease lasts, whatever the groups' Leases: a renewal must then land
/// within 2 s, which a busy API server still does; shorter, the active replica would stand by
/// over a slow answer.
pub const SHORTEST_SECONDS: i32 = 3;

/// How long a standby waits between two reads of another replica's Lease: it sights a renewal at
/// most this late, so it takes over at most this long after the Lease has run out.
const STANDBY_POLL: Duration = Duration::from_millis(500);

/// The operator Lease's duration: that of the shortest group Lease, between [`SHORTEST_SECONDS`]
/// and `longest` (the flag), so that losing the active replica with a leader costs no more than
/// losing the leader alone. Without groups, `longest`.
pub fn duration_for(longest: i32, groups: impl Iterator<Item = i32>) -> i32 {
    groups.min().map_or(longest, |shortest| {
        shortest.max(SHORTEST_SECONDS).min(longest)
    })
}

/// The operator replicas known to have stopped acting: this replica took the operator Lease over
/// from each, either released on shutdown after its last reconcile, or run out (a holder stops
/// acting two thirds of a duration after its last renewal began, before any standby can see its
/// hold run out). They are forgotten when this replica stops being active (another may have become
/// active since).
#[derive(Clone, Debug, Default)]
pub struct Retired(Arc<RwLock<BTreeSet<String>>>);

impl Retired {
    /// The replicas known to have stopped acting, now.
    pub fn snapshot(&self) -> BTreeSet<String> {
        self.0.read().map(|set| set.clone()).unwrap_or_default()
    }

    fn insert(&self, replica: String) {
        if let Ok(mut set) = self.0.write() {
            set.insert(replica);
        }
    }

    fn clear(&self) {
        if let Ok(mut set) = self.0.write() {
            set.clear();
        }
    }
}

/// The operator's own Lease.
pub struct OperatorLease {
    /// Its API (namespaced).
    pub api: Api<Lease>,
    /// Its name.
    pub name: String,
    /// This replica.
    pub identity: String,
    /// The longest it lasts (see [`duration_for`]).
    pub longest_seconds: i32,
    /// The groups, whose shortest Lease sets its duration.
    pub groups: Store<LeaderGroup>,
    /// Filled in when this replica takes the Lease over from one that released it.
    pub retired: Retired,
}

/// When this replica last saw another replica's hold of the operator Lease change, on its own
/// monotonic clock. The holder's `renewTime` is stamped by the holder's clock, which may be
/// minutes off this one (or step): compared with the local time, a holder whose clock runs behind
/// looks expired while it still acts, and one whose clock runs ahead holds a crashed replica's
/// Lease for as long. So the Lease runs out a duration after this replica saw its last change
/// (any write moves its resourceVersion): late, never early, and by the duration written in the
/// version it saw (a holder that shortens it stops acting by the shorter window at once). A standby
/// reads the Lease every [`STANDBY_POLL`], so a crash failover waits one duration after the last
/// renewal and at most that much more, not one more duration from its first look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct HolderSighting {
    /// The Lease's resourceVersion when last seen to change, and when that was.
    last: Option<(String, tokio::time::Instant)>,
}

impl HolderSighting {
    /// Takes in the Lease as read at `at` (answered then: any renewal it shows landed earlier) and
    /// says when it runs out, for a holder whose Lease lasts `duration`.
    fn expires_at(
        &mut self,
        version: &str,
        at: tokio::time::Instant,
        duration: Duration,
    ) -> tokio::time::Instant {
        let seen = match &self.last {
            Some((v, seen)) if v == version => *seen,
            _ => {
                self.last = Some((version.to_string(), at));
                at
            }
        };
        seen + duration
    }
}

impl OperatorLease {
    /// Tries to hold the Lease until `stop` turns true, telling `active` whether this replica holds
    /// it, from when `synced` turns true: a replica whose caches are still listing could not act
    /// on the Lease, and would keep a warm standby from taking over (a container the kubelet
    /// restarts comes back under its pod's name, the holder's identity).
    pub async fn run(
        self,
        active: watch::Sender<bool>,
        mut synced: watch::Receiver<bool>,
        mut stop: watch::Receiver<bool>,
    ) {
        tokio::select! {
            _ = synced.wait_for(|s| *s) => {}
            _ = stop.changed() => return,
        }
        let mut sighting = HolderSighting::default();
        let mut renew_by: Option<tokio::time::Instant> = None;
        loop {
            let started = tokio::time::Instant::now();
            let duration = self.duration_seconds();
            let third = renew_interval(duration);
            // While holding, each renewal must land within two thirds of the duration after the
            // last successful one began: a request that hangs (API server unreachable, connection
            // stuck) would otherwise keep this replica active long after a standby may have taken
            // over the Lease. The last third is margin for clock and scheduling skew. A round that
            // shortens the Lease is bound by the new window at once: a standby times the Lease
            // from the write, whenever its answer comes back.
            let renew_window = third * 2;
            let deadline = round_deadline(renew_by, started, duration);
            let round = tokio::time::timeout_at(deadline, self.try_hold(&mut sighting, duration))
                .await
                .ok();
            let wait = match round {
                Some(Ok((true, _)))
                    if !in_time(started, tokio::time::Instant::now(), renew_window) =>
                {
                    // The Lease says renewed at the round's start: an answer this late leaves no
                    // time to act before a standby may take the Lease over.
                    warn!(
                        window_ms = renew_window.as_millis() as u64,
                        "operator Lease renewed too late to act on; standing by"
                    );
                    renew_by = None;
                    let _ = active.send(false);
                    Duration::ZERO
                }
                Some(Ok((holds, wait))) => {
                    if holds != *active.borrow() {
                        info!(identity = %self.identity, active = holds, duration_s = duration, "operator leadership changed");
                    }
                    renew_by = holds.then_some(started + renew_window);
                    let _ = active.send(holds);
                    if holds { wait } else { wait.min(STANDBY_POLL) }
                }
                Some(Err(e)) => {
                    // Not renewed: stop acting now rather than act on a Lease that may be lost.
                    warn!(error = %e, "operator Lease not renewed; standing by");
                    renew_by = None;
                    let _ = active.send(false);
                    Duration::from_millis(200)
                }
                None => {
                    warn!(
                        window_ms = renew_window.as_millis() as u64,
                        "operator Lease not renewed in time; standing by"
                    );
                    renew_by = None;
                    let _ = active.send(false);
                    Duration::from_millis(200)
                }
            };
            if renew_by.is_none() {
                // Not holding: another replica may act meanwhile.
                self.retired.clear();
            }
            tokio::select! {
                _ = tokio::time::sleep(wait.max(Duration::from_millis(50))) => {}
                _ = stop.changed() => break,
            }
        }
        let _ = active.send(false);
        let third = renew_interval(self.longest_seconds);
        match tokio::time::timeout(third, self.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(error = %e, "releasing the operator Lease failed; a standby takes over when it runs out")
            }
            Err(_) => warn!(
                "releasing the operator Lease got no answer in time; a standby takes over when it runs out"
            ),
        }
    }

    /// The duration this replica writes now: the shortest group Lease it knows (see
    /// [`duration_for`]).
    fn duration_seconds(&self) -> i32 {
        let groups = self.groups.state();
        duration_for(
            self.longest_seconds,
            groups.iter().map(|g| g.spec.lease_duration_seconds),
        )
    }

    /// One round: renew or acquire if possible. Returns whether this replica holds the Lease and
    /// how long until the next round should run.
    async fn try_hold(
        &self,
        sighting: &mut HolderSighting,
        duration_seconds: i32,
    ) -> Result<(bool, Duration)> {
        let now = Timestamp::now();
        let current = read(&self.api, &self.name).await?;
        let answered = tokio::time::Instant::now();
        let record = current.as_ref().map(LeaseRecord::from_lease);
        let mine = record
            .as_ref()
            .is_some_and(|r| r.holder.as_deref() == Some(&self.identity));
        // Another replica's hold: how long it still has, by this replica's sightings.
        let held_for = current
            .as_ref()
            .zip(record.as_ref())
            .filter(|(_, r)| r.holder.is_some() && !mine)
            .and_then(|(lease, r)| {
                let version = lease
                    .metadata
                    .resource_version
                    .as_deref()
                    .unwrap_or_default();
                let duration = Duration::from_secs(u64::try_from(r.duration_seconds).unwrap_or(0));
                let until = sighting.expires_at(version, answered, duration);
                (until > answered).then(|| until - answered)
            });
        if let Some(left) = held_for {
            return Ok((false, left));
        }
        let previous = record.clone();
        let released_by = previous
            .as_ref()
            .filter(|r| r.holder.is_none())
            .and_then(|r| r.released_by.clone());
        // Past `held_for`, another holder's hold has run out: that replica stopped acting two thirds
        // of a duration after its last renewal began, before this replica could see the Lease run
        // out, so the groups it arbitrated need not wait out their own Leases either.
        let ran_out = previous
            .as_ref()
            .and_then(|r| r.holder.clone())
            .filter(|holder| *holder != self.identity);
        let next = LeaseRecord {
            holder: Some(self.identity.clone()),
            holder_uid: None,
            epoch: previous.as_ref().map_or(0, |r| r.epoch) + i64::from(!mine),
            duration_seconds,
            longest_seconds: None,
            acquire_time: if mine {
                previous.and_then(|r| r.acquire_time)
            } else {
                Some(now)
            },
            renew_time: Some(now),
            arbiter: None,
            heartbeat: false,
            released_by: None,
            lapsed: None,
            acknowledged: false,
            acknowledged_by: Vec::new(),
            predecessor: None,
        };
        compare_and_swap(&self.api, &self.name, current.as_ref(), &next, None, None).await?;
        if let Some(replica) = released_by.filter(|r| *r != self.identity) {
            info!(%replica, "took over from a replica that stopped on purpose: its groups are taken over at once");
            self.retired.insert(replica);
        }
        if let Some(replica) = ran_out {
            info!(%replica, "took over from a replica whose hold ran out: its groups are taken over at once");
            self.retired.insert(replica);
        }
        Ok((true, renew_interval(duration_seconds)))
    }

    /// Gives the Lease up if this replica holds it.
    async fn release(&self) -> Result<()> {
        let Some(current) = read(&self.api, &self.name).await? else {
            return Ok(());
        };
        let record = LeaseRecord::from_lease(&current);
        if record.holder.as_deref() != Some(&self.identity) {
            return Ok(());
        }
        let released = LeaseRecord {
            holder: None,
            holder_uid: None,
            acquire_time: None,
            released_by: Some(self.identity.clone()),
            lapsed: None,
            ..record
        };
        compare_and_swap(&self.api, &self.name, Some(&current), &released, None, None).await?;
        info!(identity = %self.identity, "operator Lease released");
        Ok(())
    }
}

/// When a round that began at `started` and writes `duration_seconds` must have its answer: by the
/// holder's window, shortened at once to two thirds of the new duration when that is shorter (a
/// standby may take over a new duration after the write lands). Not holding, within a duration.
fn round_deadline(
    renew_by: Option<tokio::time::Instant>,
    started: tokio::time::Instant,
    duration_seconds: i32,
) -> tokio::time::Instant {
    let third = renew_interval(duration_seconds);
    match renew_by {
        Some(by) => by.min(started + third * 2),
        None => started + third * 3,
    }
}

/// Whether a renewal whose round began at `started` and was answered at `answered` still leaves
/// this replica time to act: the renewal stamps `renewTime` when the round begins (the Timestamp is
/// read before the request), and a standby may take the Lease over a duration after that, so the
/// holder acts at most two thirds of it (`window`) from the round's start, however late the answer.
fn in_time(
    started: tokio::time::Instant,
    answered: tokio::time::Instant,
    window: Duration,
) -> bool {
    answered < started + window
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_answered_after_the_window_does_not_make_the_replica_active() {
        // Found by the chaos run: after a kube-apiserver restart, an acquisition answered 3 s
        // after its round began (Lease 4 s) made a replica active 1 s before the other one took
        // the Lease over, as it may a duration after the stamped renewTime: both active for 285 ms.
        let started = tokio::time::Instant::now();
        let window = Duration::from_millis(2666);
        assert!(in_time(
            started,
            started + Duration::from_millis(2665),
            window
        ));
        assert!(!in_time(started, started + window, window));
        assert!(!in_time(started, started + Duration::from_secs(3), window));
    }

    #[test]
    fn another_replicas_hold_runs_out_a_duration_after_its_last_change_was_seen() {
        let start = tokio::time::Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let duration = Duration::from_secs(15);
        let mut sighting = HolderSighting::default();
        // First look: a whole duration from now, whatever renewTime said.
        assert_eq!(sighting.expires_at("7", at(0), duration), at(15));
        // Read again unchanged: no renewal, the deadline stands.
        assert_eq!(sighting.expires_at("7", at(5), duration), at(15));
        // A renewal seen at 10: a duration from then.
        assert_eq!(sighting.expires_at("9", at(10), duration), at(25));
        assert_eq!(sighting.expires_at("9", at(24), duration), at(25));
    }

    #[test]
    fn the_operator_lease_lasts_the_shortest_group_lease_within_its_bounds() {
        assert_eq!(duration_for(15, [30, 5, 15].into_iter()), 5);
        assert_eq!(duration_for(15, [1, 30].into_iter()), SHORTEST_SECONDS);
        assert_eq!(duration_for(15, [60].into_iter()), 15);
        assert_eq!(duration_for(15, std::iter::empty()), 15);
        // A flag under the floor is taken as given.
        assert_eq!(duration_for(2, [1].into_iter()), 2);
    }

    #[test]
    fn a_renewal_that_shortens_the_lease_is_bound_by_the_shorter_window_at_once() {
        let start = tokio::time::Instant::now();
        let ms = |n: u64| Duration::from_millis(n);
        // Holding a 15 s Lease renewed at 0 (window until 10 s), the round at 5 s writes 3 s: a
        // standby may take over 3 s after that write lands, so the answer must come by 7 s.
        let renew_by = Some(start + ms(10_000));
        assert_eq!(
            round_deadline(renew_by, start + ms(5_000), 3),
            start + ms(7_000)
        );
        // Lengthened, the old window still bounds the round.
        assert_eq!(
            round_deadline(Some(start + ms(2_000)), start + ms(1_000), 15),
            start + ms(2_000)
        );
        // Not holding: within a duration.
        assert_eq!(round_deadline(None, start, 6), start + ms(6_000));
    }

    #[test]
    fn a_group_lease_name_is_refused_and_the_default_is_not_one() {
        assert!(parse_lease_name("leadergroup-operator").is_err());
        assert!(parse_lease_name(&lease_name_for("operator")).is_err());
        assert_eq!(
            parse_lease_name(DEFAULT_LEASE_NAME).as_deref(),
            Ok(DEFAULT_LEASE_NAME)
        );
        assert_eq!(
            parse_lease_name("my-operator").as_deref(),
            Ok("my-operator")
        );
    }
}
