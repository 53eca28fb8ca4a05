//! The role, and the rule that decides it: a pure function of what the API server last confirmed
//! and of the monotonic clock, tested without a cluster.

use std::{fmt, time::Duration};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use tokio::time::Instant;

use crate::Epoch;
use crate::wire;
/// The previous holder the Lease names: the one type the operator and the members read.
pub use crate::wire::lease::Predecessor;

/// What this pod may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// This pod leads the group with this fencing token, as confirmed by the API server within two
    /// thirds of the Lease duration. Present the epoch to every protected write.
    Leader {
        /// The fencing token.
        epoch: Epoch,
    },
    /// Confirmed: this pod does not lead (another does, or none does).
    Follower,
    /// Not confirmed within two thirds of the Lease duration (API server unreachable, watch stuck,
    /// no permission), or not yet confirmed at all. Act as if not leader.
    Unknown,
}

impl Role {
    /// The epoch when this is [`Role::Leader`].
    pub fn leader_epoch(self) -> Option<Epoch> {
        match self {
            Role::Leader { epoch } => Some(epoch),
            Role::Follower | Role::Unknown => None,
        }
    }

    /// True for [`Role::Leader`].
    pub fn is_leader(self) -> bool {
        self.leader_epoch().is_some()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Leader { epoch } => write!(f, "leader at epoch {epoch}"),
            Role::Follower => f.write_str("follower"),
            Role::Unknown => f.write_str("unknown"),
        }
    }
}

/// The Lease duration assumed until a Lease has been seen (the LeaderGroup's default).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// What the operator's marks on the pod say.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodMarks {
    /// Label `leadergroup.io/role` is `leader`.
    pub leader: bool,
    /// Annotation `leadergroup.io/epoch`, when present and an epoch.
    pub epoch: Option<Epoch>,
    /// Annotation `leadergroup.io/group`.
    pub group: Option<String>,
    /// The pod's UID: which incarnation of the name this is.
    pub uid: Option<String>,
}

impl PodMarks {
    /// Reads the marks of `pod`. An epoch annotation that is not an epoch counts as absent: the
    /// pod is then not leader.
    pub fn of(pod: &Pod) -> PodMarks {
        let meta = &pod.metadata;
        PodMarks {
            leader: wire::pod::is_leader(meta),
            epoch: wire::pod::epoch(meta),
            group: wire::pod::group(meta).map(str::to_owned),
            uid: meta.uid.clone(),
        }
    }
}

/// What the group's Lease says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaseMarks {
    /// Label `leadergroup.io/group`: the group whose Lease this is.
    pub group: Option<String>,
    /// `spec.holderIdentity`: the leader pod's name.
    pub holder: Option<String>,
    /// Annotation `leadergroup.io/holder-uid`: the UID of the holder's pod, when the operator
    /// recorded it.
    pub holder_uid: Option<String>,
    /// Annotation `leadergroup.io/epoch` (authoritative; `leaseTransitions` is only an int32 copy
    /// and is not read).
    pub epoch: Option<Epoch>,
    /// `spec.leaseDurationSeconds`, when positive.
    pub duration: Option<Duration>,
    /// Annotation `leadergroup.io/liveness: Heartbeat`: the group is in Heartbeat mode, and its
    /// leader renews the Lease itself.
    pub heartbeat: bool,
    /// `spec.renewTime` differs from `spec.acquireTime`: the Lease was renewed since its holder
    /// acquired it (the operator writes both alike when it hands the Lease over).
    pub renewed_since_acquired: bool,
    /// Annotation `leadergroup.io/acknowledged-by-epoch`: the epoch at which the members listed
    /// by name acknowledged their leadership.
    pub acknowledged: Option<Epoch>,
    /// Annotation `leadergroup.io/acknowledged-by`: the members that acknowledged.
    pub acknowledged_by: Vec<String>,
    /// The previous holder, while it has not stepped down (annotations
    /// `leadergroup.io/predecessor`, `-uid` and `-epoch`, without `leadergroup.io/stepped-down` at
    /// that epoch from each of its members): the operator labels the next leader only once it has.
    pub awaited: Option<Predecessor>,
}

impl LeaseMarks {
    /// Reads the marks of `lease`.
    pub fn of(lease: &Lease) -> LeaseMarks {
        let spec = lease.spec.as_ref();
        LeaseMarks {
            group: wire::lease::group(lease).map(str::to_owned),
            holder: wire::lease::holder(lease).map(str::to_owned),
            holder_uid: wire::lease::holder_uid(lease).map(str::to_owned),
            epoch: wire::lease::epoch(lease),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0)
                .map(Duration::from_secs),
            heartbeat: wire::lease::heartbeat(lease),
            renewed_since_acquired: spec
                .is_some_and(|s| s.renew_time.is_some() && s.renew_time != s.acquire_time),
            acknowledged: wire::lease::acknowledged(lease),
            acknowledged_by: wire::lease::acknowledged_by(lease),
            awaited: wire::lease::predecessor(lease).filter(Predecessor::pending),
        }
    }

    /// Whether the Lease names the pod `pod_name` of UID `uid` as its holder (the same
    /// incarnation, when it records one), at which epoch.
    pub fn held_by(&self, pod_name: &str, uid: Option<&str>) -> Option<Epoch> {
        let same_incarnation = self.holder_uid.is_none() || self.holder_uid.as_deref() == uid;
        self.epoch
            .filter(|_| self.holder.as_deref() == Some(pod_name) && same_incarnation)
    }

    /// Whether `member` acknowledged at `epoch`.
    pub fn acknowledged_by(&self, member: &str, epoch: Epoch) -> bool {
        self.acknowledged == Some(epoch) && self.acknowledged_by.iter().any(|m| m == member)
    }

    /// The epoch at which this Lease asks `member` of the pod `pod_name` of UID `uid` to
    /// acknowledge its leadership: the pod holds the Lease, this member has not acknowledged
    /// yet, and the group is in Readiness mode (in Heartbeat mode the holder's renewals carry
    /// the acknowledgement).
    pub fn acknowledgement_asked_of(
        &self,
        pod_name: &str,
        uid: Option<&str>,
        member: &str,
    ) -> Option<Epoch> {
        let epoch = self.held_by(pod_name, uid)?;
        (!self.heartbeat && !self.acknowledged_by(member, epoch)).then_some(epoch)
    }

    /// The epoch at which this Lease asks `member` of the pod `pod_name` of UID `uid` to say it
    /// stepped down: the pod is the predecessor the operator waits for (the same incarnation,
    /// when the Lease recorded one), and this member acknowledged (or none said its name) and
    /// has not said so yet.
    pub fn step_down_asked_of(
        &self,
        pod_name: &str,
        uid: Option<&str>,
        member: &str,
    ) -> Option<Epoch> {
        let awaited = self.awaited.as_ref()?;
        let same_incarnation = awaited.uid.is_none() || awaited.uid.as_deref() == uid;
        let mine = awaited.members.is_empty() || awaited.members.iter().any(|m| m == member);
        let said = awaited.stepped_down_by.iter().any(|m| m == member);
        (awaited.pod == pod_name && same_incarnation && mine && !said).then_some(awaited.epoch)
    }

    /// The epoch at which this Lease asks `pod_name` to renew it: it holds it and the group is in
    /// Heartbeat mode.
    pub fn renewal_asked_of(&self, pod_name: &str) -> Option<Epoch> {
        self.epoch
            .filter(|_| self.heartbeat && self.holder.as_deref() == Some(pod_name))
    }
}

/// In Heartbeat mode, the last renewal of the Lease by this pod that landed, by the instant it
/// was sent; before the first, the instant the Lease was first confirmed naming this pod at the
/// epoch (the operator gives a new leader a whole duration to start renewing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Renewed {
    /// The epoch renewed at.
    pub epoch: Epoch,
    /// When.
    pub at: Instant,
}

/// A state the API server showed (`None`: the object does not exist), and when: the instant the
/// GET that returned it was sent, or for a watch event, the instant the last GET its stream is
/// newer than was sent (an event may arrive long after its writing).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Confirmed<T> {
    /// The state; `None` when the object was confirmed absent.
    pub state: Option<T>,
    /// When it was confirmed, on the monotonic clock.
    pub at: Instant,
}

/// The Lease's side of an [`Observation`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per member, replaced in place; a box would only add an allocation per read"
)]
pub enum LeaseObservation {
    /// The group is not known yet (not given, and the pod carries no `leadergroup.io/group`
    /// annotation): there is no Lease to read, and the pod leads nothing.
    NoGroup,
    /// The group is known, but its Lease has not been confirmed (or the permission to read it was
    /// refused).
    Unconfirmed,
    /// The Lease as last confirmed.
    Confirmed(Confirmed<LeaseMarks>),
}

/// Everything the role rule reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Observation {
    /// The pod as last confirmed; `None` before the first confirmation.
    pub pod: Option<Confirmed<PodMarks>>,
    /// The Lease as last confirmed.
    pub lease: LeaseObservation,
    /// The Lease's duration, as last seen (kept when the Lease later lapses or disappears);
    /// [`DEFAULT_LEASE_DURATION`] before any.
    pub lease_duration: Duration,
    /// In Heartbeat mode, this pod's last renewal of the Lease that landed.
    pub renewed: Option<Renewed>,
}

impl Observation {
    /// Nothing confirmed yet.
    pub fn new(group_known: bool) -> Observation {
        Observation {
            pod: None,
            lease: if group_known {
                LeaseObservation::Unconfirmed
            } else {
                LeaseObservation::NoGroup
            },
            lease_duration: DEFAULT_LEASE_DURATION,
            renewed: None,
        }
    }

    /// How long a confirmation holds: two thirds of the Lease duration.
    pub fn validity(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    /// The Lease as last confirmed, when it exists.
    fn confirmed_lease(&self) -> Option<&LeaseMarks> {
        match &self.lease {
            LeaseObservation::Confirmed(confirmed) => confirmed.state.as_ref(),
            _ => None,
        }
    }

    /// The pod as last confirmed, when it exists.
    fn confirmed_pod(&self) -> Option<&PodMarks> {
        self.pod.as_ref()?.state.as_ref()
    }

    /// `epoch`, when the pod as last confirmed carries the leader's marks at it: the operator
    /// labels a new holder only once its predecessor has stepped down, so a pod's own label is
    /// its sign that no earlier leader is still waited for.
    fn marked_leader_at(&self, epoch: Epoch) -> Option<Epoch> {
        let pod = self.confirmed_pod()?;
        (pod.leader && pod.epoch == Some(epoch)).then_some(epoch)
    }

    /// The epoch at which the member of `pod_name` owes the Lease its acknowledgement: the Lease
    /// asks it ([`LeaseMarks::acknowledgement_asked_of`]) and the pod carries the leader's marks
    /// at that epoch. Acknowledged any earlier, a holder deposed before its label would take the
    /// place of a predecessor the operator still waits for.
    pub fn acknowledgement_owed(&self, pod_name: &str, member: &str) -> Option<Epoch> {
        let uid = self.confirmed_pod()?.uid.as_deref();
        let epoch = self
            .confirmed_lease()?
            .acknowledgement_asked_of(pod_name, uid, member)?;
        self.marked_leader_at(epoch)
    }

    /// The epoch at which the member of `pod_name` owes the Lease a renewal: the Lease asks it
    /// ([`LeaseMarks::renewal_asked_of`]) and the pod carries the leader's marks at that epoch.
    pub fn renewal_owed(&self, pod_name: &str) -> Option<Epoch> {
        let epoch = self.confirmed_lease()?.renewal_asked_of(pod_name)?;
        self.marked_leader_at(epoch)
    }

    /// The oldest confirmation the rule relies on (`None`: something is not confirmed at all).
    fn confirmed_since(&self) -> Option<Instant> {
        let pod = self.pod.as_ref()?.at;
        match &self.lease {
            LeaseObservation::NoGroup => Some(pod),
            LeaseObservation::Unconfirmed => None,
            LeaseObservation::Confirmed(lease) => Some(pod.min(lease.at)),
        }
    }

    /// When the role decided from this observation turns [`Role::Unknown`] unless something is
    /// confirmed again: two thirds of the Lease duration after the oldest confirmation, or in
    /// Heartbeat mode after the last renewal that landed if that is earlier. `None` when it is
    /// `Unknown` already for want of a confirmation.
    pub fn lapses_at(&self) -> Option<Instant> {
        let confirmed = self.confirmed_since()? + self.validity();
        let renewal = self
            .renewed
            .filter(|_| self.heartbeat_asked())
            .map(|r| r.at + self.validity());
        Some(renewal.map_or(confirmed, |r| r.min(confirmed)))
    }

    /// Whether the confirmed Lease asks its holder to renew it.
    fn heartbeat_asked(&self) -> bool {
        matches!(&self.lease, LeaseObservation::Confirmed(Confirmed { state: Some(l), .. }) if l.heartbeat)
    }

    /// Whether a renewal at `epoch` landed within two thirds of the duration before `now`.
    fn renewed_recently(&self, epoch: Epoch, now: Instant) -> bool {
        self.renewed
            .is_some_and(|r| r.epoch == epoch && now < r.at + self.validity())
    }
}

/// The role rule.
///
/// - [`Role::Unknown`] before the pod and the group's Lease have both been confirmed, and from
///   the instant two thirds of the Lease duration have passed since the older of the two
///   confirmations.
/// - [`Role::Leader`] at epoch `e` only while the pod carries `leadergroup.io/role=leader` and
///   epoch annotation `e` AND the Lease names `pod_name` as holder at epoch `e` (and, when it
///   records one, this pod's UID: a pod created again under the name is not its predecessor;
///   and the pod's group annotation names the Lease's group: marks another group put on the pod
///   lead that group, not this one).
/// - In Heartbeat mode (the Lease says so), [`Role::Unknown`] instead of leader when no renewal
///   of this pod's at `e` has landed within two thirds of the Lease duration: the operator hands
///   over once a whole duration passes without one.
/// - [`Role::Unknown`] instead of leader until the Lease shows this member's acknowledgement at
///   `e` (annotation `leadergroup.io/acknowledged`; in Heartbeat mode its first renewal writes
///   it): only then does the operator, deposing it at once, wait for its step-down before it
///   labels the next leader.
/// - [`Role::Follower`] otherwise (the pod is gone, or not in a group, or the marks disagree: the
///   operator is between two steps of a transition, which never makes two leaders).
pub fn decide(pod_name: &str, member: &str, observation: &Observation, now: Instant) -> Role {
    let Some(lapses_at) = observation.lapses_at() else {
        return Role::Unknown;
    };
    if now >= lapses_at {
        return Role::Unknown;
    }
    let (Some(pod), LeaseObservation::Confirmed(lease)) = (
        observation.pod.as_ref().and_then(|p| p.state.as_ref()),
        &observation.lease,
    ) else {
        return Role::Follower;
    };
    let Some(lease) = lease.state.as_ref() else {
        return Role::Follower;
    };
    match pod.epoch {
        Some(epoch)
            if pod.leader
                && lease.holder.as_deref() == Some(pod_name)
                && lease
                    .holder_uid
                    .as_ref()
                    .is_none_or(|uid| pod.uid.as_ref() == Some(uid))
                && lease
                    .group
                    .as_ref()
                    .is_none_or(|group| pod.group.as_ref() == Some(group))
                && lease.epoch == Some(epoch) =>
        {
            if lease.heartbeat && !observation.renewed_recently(epoch, now) {
                Role::Unknown
            } else if !lease.acknowledged_by(member, epoch) {
                // Until its own acknowledgement has landed, the operator would not wait for this
                // member's step-down if it deposed it at once (another member of the pod may
                // have acknowledged: that one's step-down says nothing of this one).
                Role::Unknown
            } else {
                Role::Leader { epoch }
            }
        }
        _ => Role::Follower,
    }
}

#[cfg(test)]
mod tests;
