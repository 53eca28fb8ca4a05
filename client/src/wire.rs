//! The names the operator writes and everything else reads: the LeaderGroup resource, the marks
//! on pods, the annotations on the group's Lease and the Lease's name, and the one reading of the
//! marks ([`pod`], [`lease`]). The operator, this crate, the agent, the model and the tests all
//! read them from here, so they cannot drift apart; changing one is a change of the wire format
//! that running pods, agents and clients see.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::Epoch;

/// API group of the LeaderGroup resource and prefix of every label and annotation below.
pub const API_GROUP: &str = "leadergroup.io";
/// The LeaderGroup resource's served version.
pub const API_VERSION: &str = "v1alpha1";
/// The resource's kind.
pub const KIND: &str = "LeaderGroup";
/// The resource's plural (its REST path segment).
pub const PLURAL: &str = "leadergroups";

/// Label on every candidate pod: [`ROLE_LEADER`] on the one leader, [`ROLE_FOLLOWER`] on the
/// others.
pub const ROLE_LABEL: &str = "leadergroup.io/role";
/// Value of [`ROLE_LABEL`] on the leader.
pub const ROLE_LEADER: &str = "leader";
/// Value of [`ROLE_LABEL`] on every other candidate.
pub const ROLE_FOLLOWER: &str = "follower";
/// Annotation holding the fencing token (the epoch) as a decimal `i64`, on the leader pod and on
/// the group's Lease; the Lease's is authoritative.
pub const EPOCH_ANNOTATION: &str = "leadergroup.io/epoch";
/// Annotation naming the group on every pod the operator marked.
pub const GROUP_ANNOTATION: &str = "leadergroup.io/group";
/// Label naming the group on its Lease: the operator watches only the Leases that carry it.
pub const LEASE_GROUP_LABEL: &str = "leadergroup.io/group";
/// Annotation on the group's Lease naming the operator replica that last wrote it (the arbiter).
pub const ARBITER_ANNOTATION: &str = "leadergroup.io/arbiter";
/// Annotation on the group's Lease in Heartbeat mode, value [`LIVENESS_HEARTBEAT`]: the leader's
/// agent or client renews the Lease itself.
pub const LIVENESS_ANNOTATION: &str = "leadergroup.io/liveness";
/// Value of [`LIVENESS_ANNOTATION`] in Heartbeat mode.
pub const LIVENESS_HEARTBEAT: &str = "Heartbeat";
/// Annotation on the operator's own Lease naming the replica that released it on shutdown: the
/// replica that takes over knows it stopped on purpose, and takes its groups over at once.
pub const RELEASED_BY_ANNOTATION: &str = "leadergroup.io/released-by";
/// Annotation on the group's Lease: the UID of the holder's pod. Leadership belongs to one pod
/// incarnation: a pod created again under the same name (a StatefulSet's, or a force-deleted
/// one) is another candidate, and never holds its predecessor's token.
pub const HOLDER_UID_ANNOTATION: &str = "leadergroup.io/holder-uid";
/// Annotation on the group's Lease (Heartbeat mode): `<pod UID>@<epoch>`, the incarnation whose
/// renewals stopped for a Lease duration while it led at that epoch. Its pod may still show
/// Ready, so the operator remembers it here, across its own passes and restarts, and does not
/// elect it again until it turns NotReady, is created again under another UID, or renews as
/// holder.
pub const LAPSED_ANNOTATION: &str = "leadergroup.io/lapsed";
/// Annotation on the group's Lease: the epoch at which a member of 0.2.0 (the agent or client of
/// that release, which says no name) acknowledged the holder's leadership, before it first
/// reported `Leader`; such a member reports `Leader` once this says its epoch, whoever wrote it.
/// Members of this version never write it, so that none of 0.2.0 leads on their word: a holder
/// whose unnamed member acknowledged here is waited for as [`UNNAMED_MEMBER`] once deposed.
pub const ACKNOWLEDGED_ANNOTATION: &str = "leadergroup.io/acknowledged";
/// Annotation on the group's Lease: the members (one per process of the holder's pod that follows
/// its role: an agent, the application's `Membership`) that acknowledged at the epoch
/// [`ACKNOWLEDGED_BY_EPOCH_ANNOTATION`] says, comma-separated. A member reports `Leader` only once
/// its own name is here; the operator waits for each of them once it deposes the holder.
pub const ACKNOWLEDGED_BY_ANNOTATION: &str = "leadergroup.io/acknowledged-by";
/// Annotation on the group's Lease: the epoch at which the members [`ACKNOWLEDGED_BY_ANNOTATION`]
/// lists acknowledged (the handshake by name; apart from [`ACKNOWLEDGED_ANNOTATION`], which
/// members of 0.2.0 read).
pub const ACKNOWLEDGED_BY_EPOCH_ANNOTATION: &str = "leadergroup.io/acknowledged-by-epoch";
/// The name under which a member that says none (of 0.2.0) is listed among a predecessor's
/// members and those that stepped down; on the wire it is [`ACKNOWLEDGED_ANNOTATION`] and
/// [`STEPPED_DOWN_ANNOTATION`] at the epoch. A name never starts with it.
pub const UNNAMED_MEMBER: &str = "-";
/// Annotation on the group's Lease: the members of the predecessor that acknowledged (from
/// [`ACKNOWLEDGED_BY_ANNOTATION`], written by the operator when it deposed it): its step-down
/// counts once each of them has said so in [`STEPPED_DOWN_BY_ANNOTATION`].
pub const PREDECESSOR_MEMBERS_ANNOTATION: &str = "leadergroup.io/predecessor-members";
/// Annotation on the group's Lease: the predecessor's members that stepped down, comma-separated,
/// at the epoch [`STEPPED_DOWN_BY_EPOCH_ANNOTATION`] says.
pub const STEPPED_DOWN_BY_ANNOTATION: &str = "leadergroup.io/stepped-down-by";
/// Annotation on the group's Lease: the epoch at which the members
/// [`STEPPED_DOWN_BY_ANNOTATION`] lists stepped down.
pub const STEPPED_DOWN_BY_EPOCH_ANNOTATION: &str = "leadergroup.io/stepped-down-by-epoch";

/// The members an annotation lists (comma-separated), sorted and without repeats.
pub fn members(value: Option<&String>) -> Vec<String> {
    let mut listed: Vec<String> = value
        .map(|v| {
            v.split(',')
                .filter(|m| !m.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    listed.sort();
    listed.dedup();
    listed
}

/// `listed` with `member` added, as an annotation's value.
pub fn with_member(listed: Option<&String>, member: &str) -> String {
    let mut all = members(listed);
    all.push(member.to_owned());
    all.sort();
    all.dedup();
    all.join(",")
}

/// Annotations on the group's Lease naming the previous holder (its pod, the pod's UID, its epoch
/// and the `leaseDurationSeconds` its tenure ran under), written when a holder that acknowledged
/// its leadership is deposed: until that pod is known to no longer report `Leader`, the next
/// leader is not labeled.
pub const PREDECESSOR_ANNOTATION: &str = "leadergroup.io/predecessor";
/// See [`PREDECESSOR_ANNOTATION`].
pub const PREDECESSOR_UID_ANNOTATION: &str = "leadergroup.io/predecessor-uid";
/// See [`PREDECESSOR_ANNOTATION`].
pub const PREDECESSOR_EPOCH_ANNOTATION: &str = "leadergroup.io/predecessor-epoch";
/// See [`PREDECESSOR_ANNOTATION`].
pub const PREDECESSOR_LEASE_SECONDS_ANNOTATION: &str = "leadergroup.io/predecessor-lease-seconds";
/// Annotation on the group's Lease: the longest `leaseDurationSeconds` the Lease had in the holder's
/// tenure, written only while it is longer than the current one. The holder's member, cut off,
/// times its confirmation by the Lease it last saw; a shortened Lease must not shorten the wait
/// for it.
pub const LONGEST_LEASE_SECONDS_ANNOTATION: &str = "leadergroup.io/longest-lease-seconds";
/// Annotation on the group's Lease: the predecessor's epoch, once its unnamed member (of 0.2.0,
/// [`UNNAMED_MEMBER`]) no longer reports `Leader` at it. That member writes it after its own role
/// has left `Leader`; the operator writes it when it knows without being told (a lapsed
/// heartbeat, a pod with no running container, or two thirds of the predecessor's Lease gone by
/// since the handover). Members of this version say so by name instead.
pub const STEPPED_DOWN_ANNOTATION: &str = "leadergroup.io/stepped-down";
/// Annotation of the operator's barrier: written on a group's pods before a promotion while an
/// earlier promotion may still be in flight, and on every leader it deposes, it changes their
/// resourceVersion, which that promotion is conditional on. Its wire name predates the word
/// barrier, and pods of running groups carry it. Not the same thing as
/// [`FENCED_OBJECT_EPOCH_ANNOTATION`].
pub const BARRIER_ANNOTATION: &str = "leadergroup.io/fence";
/// Annotation on an application's object guarded by `fence::replace_fenced`: the highest epoch
/// that object has accepted. Written by applications through this crate, never by the operator;
/// not the same thing as [`BARRIER_ANNOTATION`].
pub const FENCED_OBJECT_EPOCH_ANNOTATION: &str = "leadergroup.io/fence-epoch";
/// Finalizer that removes the operator's marks from pods and deletes the Lease.
pub const FINALIZER: &str = "leadergroup.io/cleanup";
/// The group's Lease is named this prefix followed by the group's name ([`lease_name_for`]).
pub const LEASE_PREFIX: &str = "leadergroup-";

/// Name of the Lease of the group called `group`.
pub fn lease_name_for(group: &str) -> String {
    format!("{LEASE_PREFIX}{group}")
}

/// An annotation's value, if the object carries it.
fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The operator's marks on a pod, read the one way every reader reads them.
pub mod pod {
    use super::{
        EPOCH_ANNOTATION, Epoch, GROUP_ANNOTATION, ObjectMeta, ROLE_LABEL, ROLE_LEADER, annotation,
    };

    /// The pod's role label: `leader`, `follower`, or none.
    pub fn role(meta: &ObjectMeta) -> Option<&str> {
        meta.labels.as_ref()?.get(ROLE_LABEL).map(String::as_str)
    }

    /// Whether the pod is labeled `leadergroup.io/role=leader`.
    pub fn is_leader(meta: &ObjectMeta) -> bool {
        role(meta) == Some(ROLE_LEADER)
    }

    /// The fencing token the pod carries: its epoch annotation, if that is an epoch (decimal
    /// digits, as the operator writes it; anything else carries no token).
    pub fn epoch(meta: &ObjectMeta) -> Option<Epoch> {
        annotation(meta, EPOCH_ANNOTATION)?.parse().ok()
    }

    /// The group whose marks the pod carries: its group annotation, unless empty (no group has
    /// an empty name).
    pub fn group(meta: &ObjectMeta) -> Option<&str> {
        annotation(meta, GROUP_ANNOTATION).filter(|g| !g.is_empty())
    }
}

/// The group's Lease, read the one way every reader reads it: the operator and the members. An
/// epoch is an [`Epoch`] wherever it is written (decimal digits, as the operator writes it; a sign
/// or a space makes it no epoch). The operator alone also counts `leaseTransitions` when the
/// annotation gives no epoch (never reusing a count another elector left), on top of this.
pub mod lease {
    use std::time::Duration;

    use super::{
        ACKNOWLEDGED_ANNOTATION, ACKNOWLEDGED_BY_ANNOTATION, ACKNOWLEDGED_BY_EPOCH_ANNOTATION,
        EPOCH_ANNOTATION, Epoch, HOLDER_UID_ANNOTATION, LEASE_GROUP_LABEL, LIVENESS_ANNOTATION,
        LIVENESS_HEARTBEAT, LONGEST_LEASE_SECONDS_ANNOTATION, Lease, PREDECESSOR_ANNOTATION,
        PREDECESSOR_EPOCH_ANNOTATION, PREDECESSOR_LEASE_SECONDS_ANNOTATION,
        PREDECESSOR_MEMBERS_ANNOTATION, PREDECESSOR_UID_ANNOTATION, STEPPED_DOWN_ANNOTATION,
        STEPPED_DOWN_BY_ANNOTATION, STEPPED_DOWN_BY_EPOCH_ANNOTATION, UNNAMED_MEMBER, annotation,
        members,
    };

    /// The group the Lease belongs to: its group label, unless empty.
    pub fn group(lease: &Lease) -> Option<&str> {
        let labels = lease.metadata.labels.as_ref()?;
        labels
            .get(LEASE_GROUP_LABEL)
            .map(String::as_str)
            .filter(|g| !g.is_empty())
    }

    /// `spec.holderIdentity`, unless empty: the holder's pod name.
    pub fn holder(lease: &Lease) -> Option<&str> {
        let spec = lease.spec.as_ref()?;
        spec.holder_identity.as_deref().filter(|h| !h.is_empty())
    }

    /// The UID of the holder's pod, when the operator recorded it.
    pub fn holder_uid(lease: &Lease) -> Option<&str> {
        annotation(&lease.metadata, HOLDER_UID_ANNOTATION)
    }

    /// Whether the group is in Heartbeat mode: its holder renews the Lease.
    pub fn heartbeat(lease: &Lease) -> bool {
        annotation(&lease.metadata, LIVENESS_ANNOTATION) == Some(LIVENESS_HEARTBEAT)
    }

    /// The members that acknowledged the holder's leadership by name, sorted (at
    /// [`acknowledged`]'s epoch).
    pub fn acknowledged_by(lease: &Lease) -> Vec<String> {
        let listed = lease.metadata.annotations.as_ref();
        let mut names = members(listed.and_then(|a| a.get(ACKNOWLEDGED_BY_ANNOTATION)));
        names.retain(|m| m != UNNAMED_MEMBER);
        names
    }

    /// An annotation's value, if it is an epoch.
    fn epoch_at(lease: &Lease, key: &str) -> Option<Epoch> {
        annotation(&lease.metadata, key)?.parse().ok()
    }

    /// The holder's fencing token: the epoch annotation, if it is an epoch.
    pub fn epoch(lease: &Lease) -> Option<Epoch> {
        epoch_at(lease, EPOCH_ANNOTATION)
    }

    /// The epoch at which the holder's members listed by name acknowledged, if it is an epoch.
    pub fn acknowledged(lease: &Lease) -> Option<Epoch> {
        epoch_at(lease, ACKNOWLEDGED_BY_EPOCH_ANNOTATION)
    }

    /// The epoch at which an unnamed member (of 0.2.0) acknowledged, if it is an epoch.
    pub fn acknowledged_unnamed(lease: &Lease) -> Option<Epoch> {
        epoch_at(lease, ACKNOWLEDGED_ANNOTATION)
    }

    /// The longest `leaseDurationSeconds` of the holder's tenure, when the operator recorded one
    /// (only while longer than the current one).
    pub fn longest_lease_seconds(lease: &Lease) -> Option<i32> {
        annotation(&lease.metadata, LONGEST_LEASE_SECONDS_ANNOTATION)?
            .parse()
            .ok()
    }

    /// The previous holder the Lease names, stepped down or not; none when its pod or its epoch
    /// is missing, or the epoch is not one (only the operator writes them).
    pub fn predecessor(lease: &Lease) -> Option<Predecessor> {
        let meta = &lease.metadata;
        let epoch = epoch_at(lease, PREDECESSOR_EPOCH_ANNOTATION)?;
        let listed = |key| members(meta.annotations.as_ref().and_then(|a| a.get(key)));
        let awaited = listed(PREDECESSOR_MEMBERS_ANNOTATION);
        // Names listed at another epoch said so of another predecessor.
        let mut stepped_down_by = match epoch_at(lease, STEPPED_DOWN_BY_EPOCH_ANNOTATION) {
            Some(at) if at == epoch => listed(STEPPED_DOWN_BY_ANNOTATION),
            _ => Vec::new(),
        };
        stepped_down_by.retain(|m| m != UNNAMED_MEMBER);
        // The unnamed member (0.2.0): listed as `-` beside names, or alone as nobody listed.
        let unnamed_awaited = awaited.is_empty() || awaited.iter().any(|m| m == UNNAMED_MEMBER);
        let unnamed_said = epoch_at(lease, STEPPED_DOWN_ANNOTATION) == Some(epoch);
        let named_said = awaited
            .iter()
            .filter(|m| *m != UNNAMED_MEMBER)
            .all(|m| stepped_down_by.contains(m));
        if unnamed_said && !awaited.is_empty() && unnamed_awaited {
            stepped_down_by.push(UNNAMED_MEMBER.to_owned());
            stepped_down_by.sort();
        }
        Some(Predecessor {
            pod: annotation(meta, PREDECESSOR_ANNOTATION)?.to_owned(),
            uid: annotation(meta, PREDECESSOR_UID_ANNOTATION).map(str::to_owned),
            epoch,
            lease_seconds: annotation(meta, PREDECESSOR_LEASE_SECONDS_ANNOTATION)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            stepped_down: named_said && (!unnamed_awaited || unnamed_said),
            stepped_down_by,
            members: awaited,
        })
    }

    /// A previous holder of the group's Lease (annotations `leadergroup.io/predecessor`, `-uid`,
    /// `-epoch`, `-lease-seconds`, `-members`), written by the operator when it deposes a holder
    /// that acknowledged: until it has stepped down, the next leader is not labeled.
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    pub struct Predecessor {
        /// Its pod's name.
        pub pod: String,
        /// Its pod's UID, when recorded: only that incarnation's members may say it stepped
        /// down.
        pub uid: Option<String>,
        /// The epoch it held.
        pub epoch: Epoch,
        /// The `leaseDurationSeconds` of the Lease it last saw (0 when not written): its
        /// members' confirmation holds for two thirds of it, whatever the group's spec says since.
        pub lease_seconds: i32,
        /// Its members that acknowledged, each waited for ([`UNNAMED_MEMBER`] beside names, or
        /// none listed: one of 0.2.0, which said no name).
        pub members: Vec<String>,
        /// Its members that said they stepped down at `epoch` (annotation
        /// `leadergroup.io/stepped-down-by` while `-by-epoch` is `epoch`; [`UNNAMED_MEMBER`]
        /// while `leadergroup.io/stepped-down` is).
        pub stepped_down_by: Vec<String>,
        /// It no longer reports `Leader` at `epoch`: each of `members` said so.
        pub stepped_down: bool,
    }

    impl Predecessor {
        /// How long after the handover its members may still report `Leader` without being
        /// told: their confirmation's validity, two thirds of the Lease it last saw.
        pub fn validity(&self) -> Duration {
            Duration::from_millis(u64::try_from(self.lease_seconds).unwrap_or(0) * 2000 / 3)
        }

        /// Still to step down.
        pub fn pending(&self) -> bool {
            !self.stepped_down
        }

        /// Whether the pod `pod` of UID `uid` is this predecessor's incarnation: the same name
        /// and the same recorded UID. A pod created again under the name (after a forced
        /// deletion, its old process may still run) is another.
        pub fn is_incarnation(&self, pod: &str, uid: Option<&str>) -> bool {
            self.pod == pod && self.uid.as_deref() == uid
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mark_is_in_the_api_group() {
        for name in [
            ROLE_LABEL,
            EPOCH_ANNOTATION,
            GROUP_ANNOTATION,
            LEASE_GROUP_LABEL,
            ARBITER_ANNOTATION,
            LIVENESS_ANNOTATION,
            RELEASED_BY_ANNOTATION,
            HOLDER_UID_ANNOTATION,
            ACKNOWLEDGED_ANNOTATION,
            PREDECESSOR_ANNOTATION,
            PREDECESSOR_UID_ANNOTATION,
            PREDECESSOR_EPOCH_ANNOTATION,
            PREDECESSOR_LEASE_SECONDS_ANNOTATION,
            LONGEST_LEASE_SECONDS_ANNOTATION,
            ACKNOWLEDGED_BY_ANNOTATION,
            PREDECESSOR_MEMBERS_ANNOTATION,
            STEPPED_DOWN_BY_ANNOTATION,
            STEPPED_DOWN_ANNOTATION,
            BARRIER_ANNOTATION,
            FENCED_OBJECT_EPOCH_ANNOTATION,
            FINALIZER,
        ] {
            assert_eq!(name.split_once('/').map(|(g, _)| g), Some(API_GROUP));
        }
    }

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_pods_marks_read_back_and_empty_or_malformed_ones_are_none() {
        let leader = meta(
            &[(ROLE_LABEL, ROLE_LEADER)],
            &[(EPOCH_ANNOTATION, "12"), (GROUP_ANNOTATION, "pay")],
        );
        assert!(pod::is_leader(&leader));
        assert_eq!(pod::epoch(&leader), Some(Epoch::from(12u32)));
        assert_eq!(pod::group(&leader), Some("pay"));
        let odd = meta(&[], &[(EPOCH_ANNOTATION, "+12"), (GROUP_ANNOTATION, "")]);
        assert_eq!(
            (pod::role(&odd), pod::epoch(&odd), pod::group(&odd)),
            (None, None, None)
        );
        let plain = ObjectMeta::default();
        assert_eq!((pod::epoch(&plain), pod::group(&plain)), (None, None));
    }

    #[test]
    fn a_leases_holder_and_group_read_back_and_empty_ones_are_none() {
        let mut lease = Lease {
            metadata: meta(
                &[(LEASE_GROUP_LABEL, "pay")],
                &[
                    (LIVENESS_ANNOTATION, LIVENESS_HEARTBEAT),
                    (ACKNOWLEDGED_BY_ANNOTATION, "b,a,a"),
                ],
            ),
            ..Lease::default()
        };
        assert_eq!(lease::group(&lease), Some("pay"));
        assert!(lease::heartbeat(&lease));
        assert_eq!(lease::acknowledged_by(&lease), ["a", "b"]);
        assert_eq!(lease::holder(&lease), None);
        lease.metadata = meta(&[(LEASE_GROUP_LABEL, "")], &[]);
        assert_eq!(lease::group(&lease), None);
        assert!(!lease::heartbeat(&lease));
    }

    fn lease_with(annotations: &[(&str, &str)]) -> Lease {
        Lease {
            metadata: meta(&[], annotations),
            ..Lease::default()
        }
    }

    /// Every epoch of the Lease is read by the one rule, whichever annotation holds it: decimal
    /// digits up to `i64::MAX`, and nothing else (i64's own parser takes a sign).
    #[test]
    fn a_leases_epochs_are_read_by_one_rule_wherever_they_are() {
        let e = |n: i64| Epoch::new(n);
        let table: &[(&str, Option<Epoch>)] = &[
            ("7", e(7)),
            ("0", e(0)),
            ("007", e(7)),
            ("9223372036854775807", e(i64::MAX)),
            ("9223372036854775808", None),
            ("+7", None),
            ("-1", None),
            (" 7", None),
            ("7 ", None),
            ("", None),
            ("seven", None),
            ("7.0", None),
        ];
        for &(value, expected) in table {
            let holder = lease_with(&[(EPOCH_ANNOTATION, value)]);
            assert_eq!(lease::epoch(&holder), expected, "epoch {value:?}");
            let acknowledged = lease_with(&[(ACKNOWLEDGED_BY_EPOCH_ANNOTATION, value)]);
            assert_eq!(
                lease::acknowledged(&acknowledged),
                expected,
                "acknowledged {value:?}"
            );
            let unnamed = lease_with(&[(ACKNOWLEDGED_ANNOTATION, value)]);
            assert_eq!(
                lease::acknowledged_unnamed(&unnamed),
                expected,
                "acknowledged without a name {value:?}"
            );
            let named = lease_with(&[
                (PREDECESSOR_ANNOTATION, "pod-b"),
                (PREDECESSOR_EPOCH_ANNOTATION, value),
            ]);
            assert_eq!(
                lease::predecessor(&named).map(|p| p.epoch),
                expected,
                "predecessor epoch {value:?}"
            );
            // A step-down counts only at the predecessor's epoch, read by the same rule.
            let said = lease_with(&[
                (PREDECESSOR_ANNOTATION, "pod-b"),
                (PREDECESSOR_EPOCH_ANNOTATION, "7"),
                (STEPPED_DOWN_ANNOTATION, value),
            ]);
            let pending = lease::predecessor(&said).map(|p| p.pending());
            assert_eq!(pending, Some(expected != e(7)), "stepped down {value:?}");
        }
        assert_eq!(lease::epoch(&Lease::default()), None);
    }

    /// The predecessor's step-down: each member that acknowledged says so at its epoch; names
    /// listed at another epoch said so of another predecessor.
    #[test]
    fn a_predecessor_steps_down_once_each_member_said_so_at_its_epoch() {
        let named = |more: &[(&'static str, &'static str)]| {
            let mut all = vec![
                (PREDECESSOR_ANNOTATION, "pod-b"),
                (PREDECESSOR_UID_ANNOTATION, "uid-b"),
                (PREDECESSOR_EPOCH_ANNOTATION, "6"),
                (PREDECESSOR_LEASE_SECONDS_ANNOTATION, "30"),
            ];
            all.extend_from_slice(more);
            lease::predecessor(&lease_with(&all)).expect("named")
        };
        /// The annotations beside the predecessor, whether it is pending, the names counted.
        type Row<'a> = (&'a [(&'a str, &'a str)], bool, &'a [&'a str]);
        let table: &[Row<'_>] = &[
            (&[], true, &[]),
            (&[(PREDECESSOR_MEMBERS_ANNOTATION, "b,a")], true, &[]),
            (
                &[
                    (PREDECESSOR_MEMBERS_ANNOTATION, "a,b"),
                    (STEPPED_DOWN_BY_EPOCH_ANNOTATION, "6"),
                    (STEPPED_DOWN_BY_ANNOTATION, "a"),
                ],
                true,
                &["a"],
            ),
            (
                &[
                    (PREDECESSOR_MEMBERS_ANNOTATION, "a,b"),
                    (STEPPED_DOWN_BY_EPOCH_ANNOTATION, "6"),
                    (STEPPED_DOWN_BY_ANNOTATION, "b,a"),
                ],
                false,
                &["a", "b"],
            ),
            (
                &[
                    (PREDECESSOR_MEMBERS_ANNOTATION, "a,b"),
                    (STEPPED_DOWN_BY_EPOCH_ANNOTATION, "5"),
                    (STEPPED_DOWN_BY_ANNOTATION, "a,b"),
                ],
                true,
                &[],
            ),
            // The unnamed member's key is not a name's: both named, the epoch alone ends nothing.
            (
                &[
                    (PREDECESSOR_MEMBERS_ANNOTATION, "a,b"),
                    (STEPPED_DOWN_ANNOTATION, "6"),
                ],
                true,
                &[],
            ),
            // A member that did not say its name (0.2.0): none listed, or `-`; the epoch alone.
            (&[(STEPPED_DOWN_ANNOTATION, "6")], false, &[]),
            (
                &[
                    (PREDECESSOR_MEMBERS_ANNOTATION, "-,a"),
                    (STEPPED_DOWN_BY_EPOCH_ANNOTATION, "6"),
                    (STEPPED_DOWN_BY_ANNOTATION, "a"),
                ],
                true,
                &["a"],
            ),
            (
                &[
                    (PREDECESSOR_MEMBERS_ANNOTATION, "-,a"),
                    (STEPPED_DOWN_ANNOTATION, "6"),
                    (STEPPED_DOWN_BY_EPOCH_ANNOTATION, "6"),
                    (STEPPED_DOWN_BY_ANNOTATION, "a"),
                ],
                false,
                &["-", "a"],
            ),
        ];
        for &(more, pending, said) in table {
            let p = named(more);
            let counted: Vec<&str> = p.stepped_down_by.iter().map(String::as_str).collect();
            assert_eq!(
                (p.pending(), counted.as_slice()),
                (pending, said),
                "{more:?}"
            );
        }
        let p = named(&[(PREDECESSOR_MEMBERS_ANNOTATION, "b,a")]);
        assert_eq!(
            (p.pod.as_str(), p.uid.as_deref(), p.members.as_slice()),
            (
                "pod-b",
                Some("uid-b"),
                ["a".to_owned(), "b".to_owned()].as_slice()
            )
        );
        assert_eq!(p.validity(), std::time::Duration::from_secs(20));
        assert!(p.is_incarnation("pod-b", Some("uid-b")));
        assert!(!p.is_incarnation("pod-b", Some("uid-c")));
        assert_eq!(named(&[]).lease_seconds, 30);
        let unreadable = lease_with(&[
            (PREDECESSOR_ANNOTATION, "pod-b"),
            (PREDECESSOR_EPOCH_ANNOTATION, "6"),
            (PREDECESSOR_LEASE_SECONDS_ANNOTATION, "thirty"),
        ]);
        assert_eq!(
            lease::predecessor(&unreadable).map(|p| p.lease_seconds),
            Some(0)
        );
        // No pod, or no epoch: no predecessor.
        let no_pod = lease_with(&[(PREDECESSOR_EPOCH_ANNOTATION, "6")]);
        let no_epoch = lease_with(&[(PREDECESSOR_ANNOTATION, "pod-b")]);
        assert_eq!(lease::predecessor(&no_pod), None);
        assert_eq!(lease::predecessor(&no_epoch), None);
    }

    #[test]
    fn the_longest_lease_seconds_read_back_and_a_malformed_one_is_none() {
        let longest =
            |v| lease::longest_lease_seconds(&lease_with(&[(LONGEST_LEASE_SECONDS_ANNOTATION, v)]));
        assert_eq!(longest("30"), Some(30));
        assert_eq!(longest("thirty"), None);
        assert_eq!(lease::longest_lease_seconds(&Lease::default()), None);
    }

    #[test]
    fn the_lease_of_a_group_is_the_prefix_and_its_name() {
        assert_eq!(lease_name_for("payments"), "leadergroup-payments");
    }
}
