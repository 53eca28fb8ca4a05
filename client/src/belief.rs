//! What a member believes: the [`Observation`] the role rule reads, and how each thing the member
//! sees (its pod, its group's Lease, a renewal of its own that landed) changes it. Pure, the clock
//! passed in: [`crate::Membership`] feeds it from its watches and renewals, and the model checker
//! (`model/`) drives the very same code through its interleavings.

use tokio::time::Instant;

use crate::Epoch;
use crate::publication::{Gate, Note};
use crate::role::{
    Confirmed, LeaseMarks, LeaseObservation, Observation, PodMarks, Renewed, Role, decide,
};

/// One member's belief about its role.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Belief {
    /// The pod's name.
    pod: String,
    /// This member's name among the pod's members: its acknowledgement and its step-down are
    /// its own, not another process's of the same pod.
    member: String,
    /// The UID of this member's pod: given, or the first one it saw. A pod created again under
    /// the name is another incarnation, and this member never leads for it.
    uid: Option<String>,
    observation: Observation,
    /// The epoch at which the Lease was last seen asking this pod to renew it: the role's renewal
    /// clock for it has been anchored.
    anchored: Option<Epoch>,
}

impl Belief {
    /// A member called `member` of the pod `pod` that has confirmed nothing yet (a process that
    /// just started).
    pub fn new(pod: impl Into<String>, member: impl Into<String>, group_known: bool) -> Belief {
        Belief {
            pod: pod.into(),
            member: member.into(),
            uid: None,
            observation: Observation::new(group_known),
            anchored: None,
        }
    }

    /// A member of the pod incarnation of UID `uid` only (a process given its pod's UID).
    pub fn of_incarnation(mut self, uid: Option<String>) -> Belief {
        self.uid = uid;
        self
    }

    /// This member's name.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// What the role rule reads.
    pub fn observation(&self) -> &Observation {
        &self.observation
    }

    /// The role at `now`.
    pub fn role(&self, now: Instant) -> Role {
        decide(&self.pod, &self.member, &self.observation, now)
    }

    /// The note this member owes the operator in the Lease as last confirmed: its acknowledgement
    /// while it holds the Lease in Readiness mode without one and carries the leader's marks, or
    /// its step-down while the Lease names it as the predecessor and its role no longer says
    /// `Leader` at that epoch. `gate`: a consumer that acts on each publication after the fact
    /// (the agent); the step-down then waits until it has acted on the publication made now.
    pub fn note_owed(&self, gate: Option<&Gate>, now: Instant) -> Option<Note> {
        let observation = &self.observation;
        let LeaseObservation::Confirmed(Confirmed {
            state: Some(lease), ..
        }) = &observation.lease
        else {
            return None;
        };
        let uid = observation.pod.as_ref()?.state.as_ref()?.uid.as_deref();
        if let Some(epoch) = observation.acknowledgement_owed(&self.pod, &self.member) {
            return Some(Note::Acknowledged(epoch));
        }
        let epoch = lease.step_down_asked_of(&self.pod, uid, &self.member)?;
        (self.role(now).leader_epoch() != Some(epoch)).then_some(())?;
        gate.is_none_or(|g| g.released(epoch))
            .then_some(Note::SteppedDown(epoch))
    }

    /// The pod as confirmed at `at` (`None`: confirmed absent). A pod of the name under another
    /// UID than this member's is not its pod: it is confirmed absent.
    pub fn pod_seen(&mut self, marks: Option<PodMarks>, at: Instant) {
        if self.uid.is_none() {
            self.uid = marks.as_ref().and_then(|m| m.uid.clone());
        }
        let mine = |m: &PodMarks| self.uid.is_none() || m.uid == self.uid;
        let state = marks.filter(mine);
        self.observation.pod = Some(Confirmed { state, at });
    }

    /// Reading the pod was refused: nothing about it is confirmed any more.
    pub fn pod_refused(&mut self) {
        self.observation.pod = None;
    }

    /// The group the pod belongs to changed (or became known, or unknown): nothing of the old
    /// group's Lease holds.
    pub fn group_changed(&mut self, group_known: bool) {
        self.observation.renewed = None;
        self.anchored = None;
        self.observation.lease = if group_known {
            LeaseObservation::Unconfirmed
        } else {
            LeaseObservation::NoGroup
        };
    }

    /// The group's Lease as confirmed at `at` (`None`: confirmed absent).
    pub fn lease_seen(&mut self, marks: Option<LeaseMarks>, at: Instant) {
        self.anchor_renewals(marks.as_ref(), at);
        if let Some(duration) = marks.as_ref().and_then(|m| m.duration) {
            self.observation.lease_duration = duration;
        }
        self.observation.lease = LeaseObservation::Confirmed(Confirmed { state: marks, at });
    }

    /// Reading the Lease was refused: it is not confirmed any more.
    pub fn lease_refused(&mut self) {
        self.observation.lease = LeaseObservation::Unconfirmed;
    }

    /// A renewal of this member's at `epoch`, sent at `sent`, landed.
    pub fn renewal_landed(&mut self, epoch: Epoch, sent: Instant) {
        if self.anchored == Some(epoch) {
            let at = self
                .observation
                .renewed
                .filter(|r| r.epoch == epoch)
                .map_or(sent, |r| r.at.max(sent));
            self.observation.renewed = Some(Renewed { epoch, at });
        }
    }

    /// In Heartbeat mode, the role's clock starts when the Lease is first seen naming this pod at
    /// an epoch, if nobody has renewed it yet (the operator gives a new leader a whole duration
    /// to renew, from its own write). A Lease already renewed at that epoch was renewed by an
    /// earlier process of this pod (this one restarted), and the operator counts the silence from
    /// that renewal: the clock then starts only when a renewal of this process lands. It stops
    /// when the Lease no longer asks this pod to renew.
    fn anchor_renewals(&mut self, lease: Option<&LeaseMarks>, at: Instant) {
        match lease.and_then(|l| l.renewal_asked_of(&self.pod).map(|e| (e, l))) {
            Some((epoch, _)) if self.anchored == Some(epoch) => {}
            Some((epoch, lease)) => {
                self.anchored = Some(epoch);
                self.observation.renewed =
                    (!lease.renewed_since_acquired).then_some(Renewed { epoch, at });
            }
            None => {
                self.anchored = None;
                self.observation.renewed = None;
            }
        }
    }
}
