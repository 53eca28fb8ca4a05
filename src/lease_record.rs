//! What a `coordination.k8s.io/v1` Lease says, as plain data: the holder, the 64-bit epoch (the
//! authoritative fencing token, in an annotation), the times, and which operator replica wrote it.
//! Both the groups' Leases and the operator's own HA Lease are read and written through this.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};

use leadergroup_client::Epoch;
use leadergroup_client::wire::{
    self, ACKNOWLEDGED_BY_ANNOTATION, ACKNOWLEDGED_BY_EPOCH_ANNOTATION,
    PREDECESSOR_MEMBERS_ANNOTATION, STEPPED_DOWN_BY_ANNOTATION, STEPPED_DOWN_BY_EPOCH_ANNOTATION,
    UNNAMED_MEMBER,
};

use crate::crd::{
    ACKNOWLEDGED_ANNOTATION, ARBITER_ANNOTATION, EPOCH_ANNOTATION, HOLDER_UID_ANNOTATION,
    LAPSED_ANNOTATION, LEASE_GROUP_LABEL, LIVENESS_ANNOTATION, LIVENESS_HEARTBEAT,
    LONGEST_LEASE_SECONDS_ANNOTATION, PREDECESSOR_ANNOTATION, PREDECESSOR_EPOCH_ANNOTATION,
    PREDECESSOR_LEASE_SECONDS_ANNOTATION, PREDECESSOR_UID_ANNOTATION, RELEASED_BY_ANNOTATION,
    STEPPED_DOWN_ANNOTATION,
};

/// The previous holder of a group's Lease, and whether it is known to no longer report
/// `Leader`: the client crate's, which its members read the same Lease into.
pub use leadergroup_client::wire::lease::Predecessor;

/// The content of a Lease that the operator writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Who holds it: the leader pod (groups) or the active operator replica (HA).
    pub holder: Option<String>,
    /// The UID of the holder's pod (group Leases): the incarnation that holds it.
    pub holder_uid: Option<String>,
    /// The fencing token of the holder; grows by one at every change of holder.
    pub epoch: i64,
    /// Validity without renewal.
    pub duration_seconds: i32,
    /// The longest `duration_seconds` of this holder's tenure, when longer than the current one
    /// (a shortened Lease): its member may still time itself by it ([`LeaseRecord::longest_seen`]).
    pub longest_seconds: Option<i32>,
    /// When the current holder acquired it.
    pub acquire_time: Option<Timestamp>,
    /// Last renewal.
    pub renew_time: Option<Timestamp>,
    /// The operator replica that wrote it last (for group Leases).
    pub arbiter: Option<String>,
    /// Its holder renews it itself (group in Heartbeat mode): annotation
    /// `leadergroup.io/liveness: Heartbeat`, which the agent and the client read.
    pub heartbeat: bool,
    /// The operator replica that gave the Lease up on purpose (the operator's own Lease, released
    /// on shutdown): it has stopped acting.
    pub released_by: Option<String>,
    /// The pod incarnation whose heartbeat lapsed (group Leases in Heartbeat mode): not elected
    /// again while the record stands. Not part of [`Written`]: writing it restarts no clock.
    pub lapsed: Option<Lapsed>,
    /// The holder's member (its agent or client) acknowledged its leadership at this epoch
    /// (annotation `leadergroup.io/acknowledged`): deposed, it is waited for as the predecessor.
    pub acknowledged: bool,
    /// The holder's members that acknowledged (annotation `leadergroup.io/acknowledged-by`):
    /// deposed, it has stepped down once each of them said so. Empty: a member that did not
    /// say its name.
    pub acknowledged_by: Vec<String>,
    /// The last holder that acknowledged its leadership, once deposed (group Leases): the next
    /// leader is labeled only once it has stepped down.
    pub predecessor: Option<Predecessor>,
}

/// The predecessor named in a Lease created again after it was deleted with the one it named:
/// not a pod name (those allow no parentheses), so no member is ever asked to step down for it.
pub const UNKNOWN_PREDECESSOR: &str = "(unknown)";

/// The members of a predecessor the operator could not read (its Lease deleted or rewritten by
/// someone else): no member's name, so no member's step-down completes it, only the operator's
/// own knowledge (its containers stopped, its confirmation lapsed).
pub const UNKNOWN_MEMBERS: &str = "(unknown)";

/// A leader incarnation whose renewals stopped for a Lease duration: annotation
/// `leadergroup.io/lapsed`, `<pod UID>@<epoch>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lapsed {
    /// The UID of its pod.
    pub uid: String,
    /// The epoch it led at when it lapsed.
    pub epoch: i64,
}

impl Lapsed {
    /// Reads the annotation's value; `None` when it is not `<UID>@<epoch>`.
    fn parse(value: &str) -> Option<Lapsed> {
        let (uid, epoch) = value.rsplit_once('@')?;
        (!uid.is_empty()).then_some(())?;
        Some(Lapsed {
            uid: uid.to_string(),
            epoch: epoch.parse().ok()?,
        })
    }

    fn value(&self) -> String {
        format!("{}@{}", self.uid, self.epoch)
    }
}

/// What an operator replica writes in a group's Lease: the holder renews it without changing
/// any of this, so a change here is a new write of the operator, and a moved `renewTime` alone a
/// renewal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Written {
    holder: Option<String>,
    holder_uid: Option<String>,
    epoch: i64,
    arbiter: Option<String>,
    heartbeat: bool,
    duration_seconds: i32,
}

impl Written {
    /// The same holder (and incarnation) at the same epoch: a rewrite of its tenure, not a new one.
    pub fn same_tenure(&self, other: &Written) -> bool {
        self.holder.is_some()
            && self.holder == other.holder
            && self.holder_uid == other.holder_uid
            && self.epoch == other.epoch
    }

    pub fn duration_seconds(&self) -> i32 {
        self.duration_seconds
    }
}

impl LeaseRecord {
    /// Reads a Lease, its annotations as the members read them ([`wire::lease`]). On top of that,
    /// the operator's own reading of the epoch: a Lease whose annotation gives none (written by
    /// hand or by another tool) falls back to `leaseTransitions`, and the higher of the two
    /// counts, so that a token is never lowered.
    pub fn from_lease(lease: &Lease) -> Self {
        let annotations = lease.metadata.annotations.as_ref();
        let spec = lease.spec.clone().unwrap_or_default();
        let annotated = wire::lease::epoch(lease).map_or(0, Epoch::get);
        let epoch = annotated.max(i64::from(spec.lease_transitions.unwrap_or(0)));
        let at_epoch = |e: Option<Epoch>| e.is_some_and(|e| e.get() == epoch);
        let named = at_epoch(wire::lease::acknowledged(lease));
        // A member of 0.2.0 acknowledges without a name: it is waited for all the same.
        let unnamed = at_epoch(wire::lease::acknowledged_unnamed(lease));
        let mut acknowledged_by = match named {
            true => wire::lease::acknowledged_by(lease),
            false => Vec::new(),
        };
        // Listed beside names; alone, none listed (as 0.2.0 wrote it).
        if unnamed && !acknowledged_by.is_empty() {
            acknowledged_by.push(UNNAMED_MEMBER.to_owned());
            acknowledged_by.sort();
        }
        LeaseRecord {
            holder: wire::lease::holder(lease).map(str::to_owned),
            holder_uid: wire::lease::holder_uid(lease).map(str::to_owned),
            epoch,
            duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            longest_seconds: wire::lease::longest_lease_seconds(lease),
            acquire_time: spec.acquire_time.map(|t| t.0),
            renew_time: spec.renew_time.map(|t| t.0),
            arbiter: annotations.and_then(|a| a.get(ARBITER_ANNOTATION)).cloned(),
            heartbeat: wire::lease::heartbeat(lease),
            released_by: annotations
                .and_then(|a| a.get(RELEASED_BY_ANNOTATION))
                .cloned(),
            lapsed: annotations
                .and_then(|a| a.get(LAPSED_ANNOTATION))
                .and_then(|v| Lapsed::parse(v)),
            acknowledged: named || unnamed,
            acknowledged_by,
            predecessor: wire::lease::predecessor(lease),
        }
    }

    /// Whether the holder has renewed it since it acquired it, as far as its content tells: in
    /// Heartbeat mode the operator writes `renewTime` only together with `acquireTime`, so a
    /// different `renewTime` was written by the holder (compared for inequality, not order: the
    /// holder's clock may be behind).
    pub fn renewed_by_holder(&self) -> bool {
        self.heartbeat && self.holder.is_some() && self.renew_time != self.acquire_time
    }

    /// The predecessor once the current holder gives the Lease up: the holder itself, still to
    /// step down, if its member acknowledged its leadership; else (nobody holds it, or a holder
    /// without a member, which never reported `Leader`) the predecessor it already names.
    ///
    /// A pending predecessor of another pod is kept even then: the holder was never labeled
    /// (the label waits for that step-down), so it never reported `Leader`, and a member that
    /// acknowledged before its label must not take the place of one still waited for.
    pub fn predecessor_after_holder(&self) -> Option<Predecessor> {
        let waited_for_another = |holder: &str| {
            self.predecessor.as_ref().is_some_and(|p| {
                p.pending() && !p.is_incarnation(holder, self.holder_uid.as_deref())
            })
        };
        match &self.holder {
            Some(pod) if self.acknowledged && !waited_for_another(pod) => {
                // Still waited for as its own predecessor (its Lease was created again, or
                // rewritten by someone else): the members awaited then are awaited still, with
                // those that acknowledged since.
                let earlier = self.predecessor.as_ref().filter(|p| p.pending());
                let mut members = self.acknowledged_by.clone();
                members.extend(earlier.iter().flat_map(|p| p.members.iter().cloned()));
                members.sort();
                members.dedup();
                Some(Predecessor {
                    pod: pod.clone(),
                    uid: self.holder_uid.clone(),
                    // Never negative as read from a Lease; were it, still waited for.
                    epoch: Epoch::new(self.epoch).unwrap_or(Epoch::ZERO),
                    lease_seconds: self
                        .longest_seen()
                        .max(earlier.map_or(0, |p| p.lease_seconds)),
                    members,
                    stepped_down_by: Vec::new(),
                    stepped_down: false,
                })
            }
            _ => self.predecessor.clone(),
        }
    }

    /// The longest `leaseDurationSeconds` the holder's member may have seen in its tenure: the
    /// current one, or a longer one it had before it was shortened.
    pub fn longest_seen(&self) -> i32 {
        self.longest_seconds.unwrap_or(0).max(self.duration_seconds)
    }

    /// What of it an operator replica writes ([`Written`]).
    pub fn written(&self) -> Written {
        Written {
            holder: self.holder.clone(),
            holder_uid: self.holder_uid.clone(),
            epoch: self.epoch,
            arbiter: self.arbiter.clone(),
            heartbeat: self.heartbeat,
            duration_seconds: self.duration_seconds,
        }
    }

    /// When the Lease runs out without renewal; a Lease never renewed has already run out.
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.renew_time.and_then(|t| {
            t.checked_add(SignedDuration::from_secs(i64::from(self.duration_seconds)))
                .ok()
        })
    }

    /// True when nobody has renewed it within its duration.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_none_or(|t| t <= now)
    }

    /// When it should be renewed next: one [`renew_interval`] after the last renewal.
    pub fn renew_due_at(&self) -> Option<Timestamp> {
        let interval = renew_interval(self.duration_seconds);
        self.renew_time.and_then(|t| t.checked_add(interval).ok())
    }

    /// Writes this record onto `base` (the Lease as read, to keep its resourceVersion and whatever
    /// else it holds), or onto a new Lease called `name`; `owner`, when given, becomes its only
    /// owner.
    pub fn apply_to(
        &self,
        base: Option<&Lease>,
        name: &str,
        namespace: &str,
        group_label: Option<&str>,
        owner: Option<OwnerReference>,
    ) -> Lease {
        let mut lease = base.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        // The owner named here is the only one: a Lease an earlier group of the name left is
        // taken over with its first write.
        if let Some(owner) = owner {
            lease.metadata.owner_references = Some(vec![owner]);
        }
        if let Some(group) = group_label {
            lease
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LEASE_GROUP_LABEL.to_string(), group.to_string());
        }
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(EPOCH_ANNOTATION.to_string(), self.epoch.to_string());
        match &self.arbiter {
            Some(arbiter) => annotations.insert(ARBITER_ANNOTATION.to_string(), arbiter.clone()),
            None => annotations.remove(ARBITER_ANNOTATION),
        };
        if self.heartbeat {
            annotations.insert(
                LIVENESS_ANNOTATION.to_string(),
                LIVENESS_HEARTBEAT.to_string(),
            );
        } else {
            annotations.remove(LIVENESS_ANNOTATION);
        }
        match &self.holder_uid {
            Some(uid) => annotations.insert(HOLDER_UID_ANNOTATION.to_string(), uid.clone()),
            None => annotations.remove(HOLDER_UID_ANNOTATION),
        };
        match &self.released_by {
            Some(replica) => {
                annotations.insert(RELEASED_BY_ANNOTATION.to_string(), replica.clone())
            }
            None => annotations.remove(RELEASED_BY_ANNOTATION),
        };
        match &self.lapsed {
            Some(lapsed) => annotations.insert(LAPSED_ANNOTATION.to_string(), lapsed.value()),
            None => annotations.remove(LAPSED_ANNOTATION),
        };
        // The unnamed member's acknowledgement (0.2.0) and the names' stay apart: a member of
        // 0.2.0 takes `leadergroup.io/acknowledged` for its own, whoever wrote it.
        let named: Vec<&str> = self
            .acknowledged_by
            .iter()
            .map(String::as_str)
            .filter(|m| *m != UNNAMED_MEMBER)
            .collect();
        let unnamed = self.acknowledged
            && (named.is_empty() || self.acknowledged_by.iter().any(|m| m == UNNAMED_MEMBER));
        let mut set = |key: &str, value| set_annotation(annotations, key, value);
        let epoch = self.epoch.to_string();
        set(ACKNOWLEDGED_ANNOTATION, unnamed.then(|| epoch.clone()));
        let by_name = self.acknowledged && !named.is_empty();
        set(
            ACKNOWLEDGED_BY_EPOCH_ANNOTATION,
            by_name.then(|| epoch.clone()),
        );
        set(ACKNOWLEDGED_BY_ANNOTATION, by_name.then(|| named.join(",")));
        match self.longest_seconds.filter(|l| *l > self.duration_seconds) {
            Some(longest) => annotations.insert(
                LONGEST_LEASE_SECONDS_ANNOTATION.to_string(),
                longest.to_string(),
            ),
            None => annotations.remove(LONGEST_LEASE_SECONDS_ANNOTATION),
        };
        write_predecessor(annotations, self.predecessor.as_ref());
        lease.spec = Some(LeaseSpec {
            holder_identity: self.holder.clone(),
            lease_duration_seconds: Some(self.duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(i32::try_from(self.epoch).unwrap_or(i32::MAX)),
            ..lease.spec.take().unwrap_or_default()
        });
        lease
    }
}

/// Sets annotation `key` to `value`, or removes it when `None`.
fn set_annotation(annotations: &mut BTreeMap<String, String>, key: &str, value: Option<String>) {
    match value {
        Some(v) => annotations.insert(key.to_string(), v),
        None => annotations.remove(key),
    };
}

fn write_predecessor(annotations: &mut BTreeMap<String, String>, p: Option<&Predecessor>) {
    let mut set = |key: &str, value| set_annotation(annotations, key, value);
    set(PREDECESSOR_ANNOTATION, p.map(|p| p.pod.clone()));
    set(PREDECESSOR_UID_ANNOTATION, p.and_then(|p| p.uid.clone()));
    set(PREDECESSOR_EPOCH_ANNOTATION, p.map(|p| p.epoch.to_string()));
    set(
        PREDECESSOR_LEASE_SECONDS_ANNOTATION,
        p.map(|p| p.lease_seconds.to_string()),
    );
    let listed = |names: &[String]| (!names.is_empty()).then(|| names.join(","));
    set(
        PREDECESSOR_MEMBERS_ANNOTATION,
        p.and_then(|p| listed(&p.members)),
    );
    // What its members wrote stays as long as it is about this predecessor; a step-down the
    // operator knows of without them counts for each of them.
    let said = p.map(|p| {
        let mut said = p.stepped_down_by.clone();
        if p.stepped_down {
            said.extend(p.members.iter().cloned());
            said.sort();
            said.dedup();
        }
        said
    });
    // The names at their epoch; the unnamed member (0.2.0) as `leadergroup.io/stepped-down`,
    // which only it reads: a name's step-down must not end its wait.
    let named: Option<Vec<String>> = said
        .as_ref()
        .map(|s| s.iter().filter(|m| *m != UNNAMED_MEMBER).cloned().collect());
    let epoch = |when: bool| p.filter(|_| when).map(|p| p.epoch.to_string());
    let by_name = named.as_ref().is_some_and(|n| !n.is_empty());
    set(
        STEPPED_DOWN_BY_ANNOTATION,
        named.as_deref().and_then(listed),
    );
    set(STEPPED_DOWN_BY_EPOCH_ANNOTATION, epoch(by_name));
    // None listed: one unnamed member, whose step-down is the whole predecessor's.
    let unnamed = p.is_some_and(|p| p.members.is_empty() && p.stepped_down)
        || said
            .as_ref()
            .is_some_and(|s| s.iter().any(|m| m == UNNAMED_MEMBER));
    set(STEPPED_DOWN_ANNOTATION, epoch(unnamed));
}

/// How often a Lease of `duration_seconds` is renewed: every third of its duration, so that a
/// renewal or two may fail before it runs out. A nonsensical negative duration renews at once.
pub fn renew_interval(duration_seconds: i32) -> Duration {
    Duration::from_millis(u64::try_from(duration_seconds).unwrap_or(0) * 1000 / 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Safety round five, finding 4: a member of 0.2.0 beside one of this version. The 0.2.0
    /// member reports `Leader` on `leadergroup.io/acknowledged` at its epoch, whoever wrote it,
    /// and steps down with `leadergroup.io/stepped-down` alone: the operator never writes that
    /// key for a named acknowledgement, and waits for the unnamed member's step-down beside the
    /// named ones'.
    #[test]
    fn a_member_of_0_2_0_is_waited_for_beside_the_named_ones_and_never_rides_on_them() {
        // Named only: nothing a 0.2.0 member would take for its own acknowledgement.
        let named = LeaseRecord {
            acknowledged: true,
            acknowledged_by: vec!["app".into()],
            ..record(6)
        };
        let lease = named.apply_to(None, "l", "ns", None, None);
        let annotations = lease.metadata.annotations.clone().unwrap();
        assert!(
            !annotations.contains_key(ACKNOWLEDGED_ANNOTATION),
            "{annotations:?}"
        );
        assert_eq!(LeaseRecord::from_lease(&lease), named);

        // The 0.2.0 member acknowledged too, its way: the epoch, no name.
        let mut both = lease.clone();
        both.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ACKNOWLEDGED_ANNOTATION.into(), "6".into());
        let read = LeaseRecord::from_lease(&both);
        assert_eq!(read.acknowledged_by, [UNNAMED_MEMBER, "app"]);
        let deposed = read.predecessor_after_holder().expect("it acknowledged");
        assert_eq!(deposed.members, [UNNAMED_MEMBER, "app"]);
        let r = LeaseRecord {
            holder: Some("pod-c".into()),
            acknowledged: false,
            acknowledged_by: Vec::new(),
            predecessor: Some(deposed),
            ..record(7)
        };
        let mut next = r.apply_to(Some(&both), "l", "ns", None, None);
        assert_eq!(LeaseRecord::from_lease(&next), r);
        let set = |lease: &mut Lease, key: &str, value: &str| {
            let a = lease.metadata.annotations.as_mut().unwrap();
            a.insert(key.into(), value.into());
        };
        // The named member's step-down does not end the unnamed one's wait.
        set(&mut next, STEPPED_DOWN_BY_EPOCH_ANNOTATION, "6");
        set(&mut next, STEPPED_DOWN_BY_ANNOTATION, "app");
        let pending = LeaseRecord::from_lease(&next).predecessor.unwrap();
        assert!(pending.pending(), "{pending:?}");
        // Rewritten by the operator meanwhile: still pending, and no word of the 0.2.0 member's.
        let again = LeaseRecord::from_lease(&next).apply_to(Some(&next), "l", "ns", None, None);
        let kept = again.metadata.annotations.clone().unwrap();
        assert!(!kept.contains_key(STEPPED_DOWN_ANNOTATION), "{kept:?}");
        assert!(
            LeaseRecord::from_lease(&again)
                .predecessor
                .unwrap()
                .pending()
        );
        set(&mut next, STEPPED_DOWN_ANNOTATION, "6");
        assert!(
            !LeaseRecord::from_lease(&next)
                .predecessor
                .unwrap()
                .pending()
        );
    }

    fn record(epoch: i64) -> LeaseRecord {
        LeaseRecord {
            holder: Some("pod-a".into()),
            holder_uid: None,
            epoch,
            duration_seconds: 15,
            longest_seconds: None,
            acquire_time: Some(Timestamp::UNIX_EPOCH),
            renew_time: Some(Timestamp::UNIX_EPOCH),
            arbiter: Some("op-1".into()),
            heartbeat: false,
            released_by: None,
            lapsed: None,
            acknowledged: false,
            acknowledged_by: Vec::new(),
            predecessor: None,
        }
    }

    #[test]
    fn the_lapsed_incarnation_round_trips_and_a_malformed_one_reads_as_none() {
        let r = LeaseRecord {
            lapsed: Some(Lapsed {
                uid: "uid-a".into(),
                epoch: 4,
            }),
            ..record(4)
        };
        let mut lease = r.apply_to(None, "l", "ns", None, None);
        assert_eq!(
            lease.metadata.annotations.as_ref().unwrap()[LAPSED_ANNOTATION],
            "uid-a@4"
        );
        assert_eq!(LeaseRecord::from_lease(&lease), r);
        for bad in ["uid-a", "@4", "uid-a@four"] {
            lease
                .metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(LAPSED_ANNOTATION.into(), bad.into());
            assert_eq!(LeaseRecord::from_lease(&lease).lapsed, None, "{bad}");
        }
        let cleared = LeaseRecord { lapsed: None, ..r };
        let back = cleared.apply_to(Some(&lease), "l", "ns", None, None);
        assert!(
            !back
                .metadata
                .annotations
                .unwrap()
                .contains_key(LAPSED_ANNOTATION)
        );
    }

    #[test]
    fn round_trips_through_a_lease() {
        let r = record(7);
        let lease = r.apply_to(None, "leadergroup-g", "ns", Some("g"), None);
        assert_eq!(LeaseRecord::from_lease(&lease), r);
        assert_eq!(lease.metadata.labels.unwrap()[LEASE_GROUP_LABEL], "g");
    }

    #[test]
    fn heartbeat_mode_round_trips_and_tells_a_holder_renewal_apart() {
        let r = LeaseRecord {
            heartbeat: true,
            ..record(3)
        };
        let lease = r.apply_to(None, "l", "ns", None, None);
        assert_eq!(
            lease.metadata.annotations.as_ref().unwrap()[LIVENESS_ANNOTATION],
            "Heartbeat"
        );
        let read = LeaseRecord::from_lease(&lease);
        assert_eq!(read, r);
        assert!(!read.renewed_by_holder(), "acquired and not renewed since");
        let renewed = LeaseRecord {
            renew_time: Some(Timestamp::UNIX_EPOCH + SignedDuration::from_secs(4)),
            ..read.clone()
        };
        assert!(renewed.renewed_by_holder());
        let behind = LeaseRecord {
            renew_time: Some(Timestamp::UNIX_EPOCH - SignedDuration::from_secs(4)),
            ..read.clone()
        };
        assert!(behind.renewed_by_holder(), "a holder whose clock is behind");
        let readiness = LeaseRecord {
            heartbeat: false,
            ..renewed
        };
        let back = readiness.apply_to(Some(&lease), "l", "ns", None, None);
        assert!(
            !back
                .metadata
                .annotations
                .unwrap()
                .contains_key(LIVENESS_ANNOTATION)
        );
        assert!(
            !readiness.renewed_by_holder(),
            "Readiness: the operator renews"
        );
    }

    #[test]
    fn the_predecessor_round_trips_and_a_step_down_counts_only_at_its_epoch() {
        let predecessor = Predecessor {
            pod: "pod-b".into(),
            uid: Some("uid-b".into()),
            epoch: Epoch::from(6u32),
            lease_seconds: 30,
            members: Vec::new(),
            stepped_down_by: Vec::new(),
            stepped_down: false,
        };
        let r = LeaseRecord {
            acknowledged: true,
            predecessor: Some(predecessor.clone()),
            ..record(7)
        };
        assert_eq!(predecessor.validity(), Duration::from_secs(20));
        let mut lease = r.apply_to(None, "l", "ns", None, None);
        assert_eq!(LeaseRecord::from_lease(&lease), r);
        let annotations = lease.metadata.annotations.as_mut().unwrap();
        annotations.insert(STEPPED_DOWN_ANNOTATION.into(), "5".into());
        assert!(
            LeaseRecord::from_lease(&lease)
                .predecessor
                .unwrap()
                .pending(),
            "a step-down from an earlier epoch"
        );
        let annotations = lease.metadata.annotations.as_mut().unwrap();
        annotations.insert(STEPPED_DOWN_ANNOTATION.into(), "6".into());
        let read = LeaseRecord::from_lease(&lease);
        assert!(!read.predecessor.as_ref().unwrap().pending());
        let none = LeaseRecord {
            predecessor: None,
            ..read
        };
        let cleared = none.apply_to(Some(&lease), "l", "ns", None, None);
        let left = cleared.metadata.annotations.unwrap();
        assert!(
            left.keys()
                .all(|k| !k.contains("predecessor") && !k.contains("stepped-down"))
        );
    }

    #[test]
    fn a_predecessor_with_two_members_steps_down_once_each_said_so() {
        let holder = LeaseRecord {
            acknowledged: true,
            acknowledged_by: vec!["agent".into(), "app".into()],
            ..record(6)
        };
        let deposed = holder.predecessor_after_holder().expect("it acknowledged");
        assert_eq!(deposed.members, ["agent", "app"]);
        let r = LeaseRecord {
            holder: Some("pod-c".into()),
            acknowledged: false,
            acknowledged_by: Vec::new(),
            predecessor: Some(deposed.clone()),
            ..record(7)
        };
        let mut lease = r.apply_to(None, "l", "ns", None, None);
        assert_eq!(LeaseRecord::from_lease(&lease), r);
        let say = |lease: &mut Lease, by: &str| {
            let a = lease.metadata.annotations.as_mut().unwrap();
            a.insert(STEPPED_DOWN_BY_EPOCH_ANNOTATION.into(), "6".into());
            a.insert(STEPPED_DOWN_BY_ANNOTATION.into(), by.into());
        };
        say(&mut lease, "agent");
        let read = LeaseRecord::from_lease(&lease).predecessor.unwrap();
        assert!(read.pending(), "the application has not said so");
        // Rewritten by the operator meanwhile: the agent's word stays.
        let again = LeaseRecord::from_lease(&lease).apply_to(Some(&lease), "l", "ns", None, None);
        assert_eq!(
            LeaseRecord::from_lease(&again).predecessor,
            Some(read.clone())
        );
        say(&mut lease, "agent,app");
        assert!(
            !LeaseRecord::from_lease(&lease)
                .predecessor
                .unwrap()
                .pending()
        );
        // Known by the operator without them (a lapse): it counts for each.
        let known = LeaseRecord {
            predecessor: Some(Predecessor {
                stepped_down: true,
                ..deposed
            }),
            ..r
        };
        let written = known.apply_to(None, "l", "ns", None, None);
        assert!(
            !LeaseRecord::from_lease(&written)
                .predecessor
                .unwrap()
                .pending()
        );
    }

    /// The operator and the members read one Lease one way: an annotation that is not an epoch
    /// (a sign, a space; what i64's own parser takes) is refused by both, wherever it is, and the
    /// operator alone then falls back to `leaseTransitions` (none here).
    #[test]
    fn the_operator_reads_a_lease_as_its_members_do() {
        use leadergroup_client::role::LeaseMarks;
        let cases: &[&[(&str, &str)]] = &[
            &[
                (EPOCH_ANNOTATION, "+7"),
                (ACKNOWLEDGED_BY_EPOCH_ANNOTATION, "7"),
                (ACKNOWLEDGED_BY_ANNOTATION, "m1"),
            ],
            &[(EPOCH_ANNOTATION, "-1")],
            &[(EPOCH_ANNOTATION, " 7")],
            &[
                (EPOCH_ANNOTATION, "7"),
                (ACKNOWLEDGED_BY_EPOCH_ANNOTATION, "+7"),
                (ACKNOWLEDGED_BY_ANNOTATION, "m1"),
            ],
            &[
                (EPOCH_ANNOTATION, "7"),
                (ACKNOWLEDGED_BY_EPOCH_ANNOTATION, "7"),
                (ACKNOWLEDGED_BY_ANNOTATION, "m1"),
            ],
            &[
                (EPOCH_ANNOTATION, "7"),
                (PREDECESSOR_ANNOTATION, "pod-b"),
                (PREDECESSOR_EPOCH_ANNOTATION, "+6"),
            ],
            &[
                (EPOCH_ANNOTATION, "7"),
                (PREDECESSOR_ANNOTATION, "pod-b"),
                (PREDECESSOR_EPOCH_ANNOTATION, "6"),
                (STEPPED_DOWN_ANNOTATION, "+6"),
            ],
            &[
                (EPOCH_ANNOTATION, "7"),
                (PREDECESSOR_ANNOTATION, "pod-b"),
                (PREDECESSOR_EPOCH_ANNOTATION, "6"),
            ],
        ];
        let mut disagree = Vec::new();
        for annotations in cases {
            let mut lease = record(0).apply_to(None, "l", "ns", Some("g"), None);
            lease.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            if let Some(spec) = lease.spec.as_mut() {
                spec.lease_transitions = None;
            }
            let operator = LeaseRecord::from_lease(&lease);
            let member = LeaseMarks::of(&lease);
            let readings = [
                (
                    "epoch",
                    operator.epoch.to_string(),
                    member.epoch.map_or("0".to_string(), |e| e.to_string()),
                ),
                (
                    // By name: what a member of this version reads (the unnamed acknowledgement
                    // of 0.2.0 is the operator's alone to wait for).
                    "acknowledged",
                    (operator.acknowledged && !operator.acknowledged_by.is_empty()).to_string(),
                    (member.epoch.is_some() && member.acknowledged == member.epoch).to_string(),
                ),
                (
                    "awaited predecessor",
                    format!(
                        "{:?}",
                        operator
                            .predecessor
                            .filter(|p| p.pending())
                            .map(|p| (p.pod, p.epoch.to_string()))
                    ),
                    format!("{:?}", member.awaited.map(|p| (p.pod, p.epoch.to_string()))),
                ),
            ];
            for (field, by_operator, by_member) in readings {
                if by_operator != by_member {
                    disagree.push(format!(
                        "{annotations:?}: {field}: operator {by_operator}, member {by_member}"
                    ));
                }
            }
        }
        assert!(disagree.is_empty(), "{}", disagree.join("\n"));

        // `+7` beside a count of transitions: no epoch to either; the operator alone counts.
        let mut signed = record(3).apply_to(None, "l", "ns", Some("g"), None);
        if let Some(a) = signed.metadata.annotations.as_mut() {
            a.insert(EPOCH_ANNOTATION.into(), "+7".into());
        }
        assert_eq!(LeaseMarks::of(&signed).epoch, None);
        assert_eq!(LeaseRecord::from_lease(&signed).epoch, 3);
    }

    #[test]
    fn epoch_beyond_int32_is_kept_in_the_annotation() {
        let big = i64::from(i32::MAX) + 10;
        let lease = record(big).apply_to(None, "l", "ns", None, None);
        assert_eq!(
            lease.spec.as_ref().unwrap().lease_transitions,
            Some(i32::MAX)
        );
        assert_eq!(LeaseRecord::from_lease(&lease).epoch, big);
    }

    #[test]
    fn a_lease_without_the_annotation_falls_back_to_transitions() {
        let mut lease = record(5).apply_to(None, "l", "ns", None, None);
        lease.metadata.annotations = None;
        assert_eq!(LeaseRecord::from_lease(&lease).epoch, 5);
    }

    #[test]
    fn expiry_and_renewal_follow_the_duration() {
        let r = record(1);
        let t0 = Timestamp::UNIX_EPOCH;
        assert_eq!(r.renew_due_at(), Some(t0 + SignedDuration::from_secs(5)));
        assert!(!r.is_expired(t0 + SignedDuration::from_secs(14)));
        assert!(r.is_expired(t0 + SignedDuration::from_secs(15)));
        let never = LeaseRecord {
            renew_time: None,
            ..r
        };
        assert!(never.is_expired(t0));
    }

    #[test]
    fn a_lease_is_renewed_every_third_of_its_duration() {
        assert_eq!(renew_interval(15), Duration::from_secs(5));
        assert_eq!(renew_interval(1), Duration::from_millis(333));
        assert_eq!(renew_interval(3600), Duration::from_secs(1200));
        assert_eq!(renew_interval(0), Duration::ZERO);
        assert_eq!(renew_interval(-15), Duration::ZERO);
    }
}
