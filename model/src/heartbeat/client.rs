//! A pod's client, as `Membership` drives its [`leadergroup_client::belief::Belief`]: it reads its
//! pod and the group's Lease (each a confirmation at the moment of the read, on its own clock),
//! renews the Lease when the Lease asks it to (a compare-and-swap on the version it read), writes
//! the step-down the crate's own `Belief::note_owed` says it owes, takes in the answers, is cut
//! off and restarts. It may renew at any tick, more often than the real client's every third of
//! the duration: a renewal too many only ever lets the operator see the holder alive for longer.
//!
//! An agent's member ([`Agent`]) also publishes after each step, by the crate's own
//! `Publication::next`, and its agent acts on the publications in steps of its own (it takes the
//! last one, then its command runs), its step-down gated on them by the crate's `Gate`; the agent
//! may be paused while its application runs on.

use leadergroup_client::publication::{Gate, Note};
use leadergroup_client::role::{LeaseMarks, PodMarks, Role};

use super::clock;
use super::objects;
use super::state::{
    Agent, Client, HbPredecessor, HbState, Renewal, SECOND_MEMBER, SECOND_PROCESS, Stamp,
    SteppedDown, pod_of,
};
use crate::api::PodId;
use crate::objects::pod_name;

/// How an agent's member gates its step-down on what the agent acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateRule {
    /// The crate's `Gate`: the agent acted on the very publication made now (its sequence
    /// number).
    BySeq,
    /// As before commit 146e1dd (issue 48, finding 2): the role acted on last equals the role
    /// published now, compared by value.
    ByValue,
}

/// How an agent's application reads the role the agent's files hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppRule {
    /// It stops at the publication's `valid_until` (`Publication::role_at`), on its clock.
    HonoursValidity,
    /// As before commit 146e1dd (issue 48, finding 1): nothing it read carried an expiry, and it
    /// acted on the last role until told another.
    IgnoresValidity,
}

// Each function takes a member (a pod's id for its first member, [`SECOND_MEMBER`] set for its
// second); each member's process has a monotonic clock of its own.

fn client_mut(state: &mut HbState, member: u8) -> Option<&mut Client> {
    let i = state.member_index(member);
    state.clients.get_mut(i)
}

/// The member's role now, by the client crate's own rule.
pub fn role(state: &HbState, member: u8) -> Option<Role> {
    let c = state.clients.get(state.member_index(member))?;
    Some(c.belief.role(clock::client(member, state.now)))
}

/// The member reads its pod (a watch event or a GET: confirmed now).
pub fn read_pod(state: &mut HbState, member: u8) {
    let marks = PodMarks::of(&objects::pod(state, pod_of(member)));
    let at = clock::client(member, state.now);
    if let Some(c) = client_mut(state, member) {
        c.belief.pod_seen(Some(marks), at);
    }
    publish(state, member);
}

/// The member reads the group's Lease.
pub fn read_lease(state: &mut HbState, member: u8) {
    let marks = (!state.lease.deleted).then(|| LeaseMarks::of(&objects::lease(&state.lease)));
    let (rv, at) = (state.lease.rv, clock::client(member, state.now));
    if let Some(c) = client_mut(state, member) {
        c.belief.lease_seen(marks, at);
        c.lease_rv = Some(rv);
    }
    publish(state, member);
}

/// An agent's member publishes its role now, as `Membership` does after each update and when
/// its role lapses: by the crate's own `Publication::next`, with the instant its observation
/// lapses. A paused member publishes nothing.
pub fn publish(state: &mut HbState, member: u8) {
    let now = clock::client(member, state.now);
    let Some(c) = client_mut(state, member) else {
        return;
    };
    if c.paused {
        return;
    }
    let role = c.belief.role(now);
    let lapses_at = c.belief.observation().lapses_at();
    if let Some(agent) = &mut c.agent
        && let Some(next) = agent.published.next(role, lapses_at)
    {
        agent.published = next;
    }
}

/// The note the member owes, by the crate's own `Belief::note_owed` (an agent's member gated by
/// what its agent acted on, as `gate` says), if it may send it now: it hears the API server,
/// awaits no other, and was not answered at this version of the Lease. Its epoch, and whether it
/// is an acknowledgement (Readiness mode) rather than a step-down. In Heartbeat mode the
/// acknowledgement is the renewal's, never a note.
pub fn note_owed(
    state: &HbState,
    member: u8,
    gate: GateRule,
) -> Option<(leadergroup_client::Epoch, bool)> {
    let c = state.clients.get(state.member_index(member))?;
    if !c.hears() || c.noting || c.lease_rv.is_none() || c.lease_rv == c.noted_at {
        return None;
    }
    let now = clock::client(member, state.now);
    let note = match (&c.agent, gate) {
        (None, _) => c.belief.note_owed(None, now),
        (Some(agent), GateRule::BySeq) => {
            let gate = Gate {
                published: agent.published,
                acted: agent.acted.map(|p| p.seq),
            };
            c.belief.note_owed(Some(&gate), now)
        }
        (Some(agent), GateRule::ByValue) => c
            .belief
            .note_owed(None, now)
            .filter(|note| released_by_value(agent, note)),
    };
    match note? {
        Note::SteppedDown(epoch) => Some((epoch, false)),
        Note::Acknowledged(epoch) => (!state.heartbeat).then_some((epoch, true)),
    }
}

/// The gate before commit 146e1dd: released once the role acted on last equals the role
/// published now, by value, and that role does not lead at the epoch stepped down from.
fn released_by_value(agent: &Agent, note: &Note) -> bool {
    match note {
        Note::SteppedDown(epoch) => {
            let published = agent.published.role;
            agent.acted.map(|p| p.role) == Some(published)
                && published.leader_epoch() != Some(*epoch)
        }
        Note::Acknowledged(_) => true,
    }
}

/// The member writes the note it owes in the Lease it read (a replace at that version).
pub fn step_down(state: &mut HbState, member: u8, gate: GateRule) {
    let Some((epoch, acknowledges)) = note_owed(state, member, gate) else {
        return;
    };
    let Some(c) = client_mut(state, member) else {
        return;
    };
    let Some(expected) = c.lease_rv else {
        return;
    };
    c.noting = true;
    let process = c.process;
    state.notes.push(SteppedDown {
        member,
        process,
        expected,
        epoch,
        acknowledges,
    });
}

/// The API server applies a note, if the version still holds: a step-down adds the member's
/// name to those that stepped down at the epoch; an acknowledgement (Readiness mode) adds it to
/// those that acknowledged at the Lease's epoch, as the client crate writes it. It answers its
/// member if that process still awaits it and can hear: written or refused, it does not write
/// again on that version.
pub fn deliver_step_down(state: &mut HbState, note: &SteppedDown) {
    let landed = !state.lease.deleted && state.lease.rv == note.expected;
    if landed && note.acknowledges {
        let pod = pod_of(note.member);
        // The other member of the pod keeps its acknowledgement (the real Lease lists each).
        state.lease.also_renewed = state
            .lease
            .renewed
            .filter(|r| r.pod == pod && r.process != note.process);
        state.lease.renewed = Some(Stamp {
            pod,
            process: note.process,
            tick: state.now,
        });
        state.lease.rv = state.next_rv();
    } else if landed {
        let name = (pod_of(note.member), note.process);
        if let Some(p) = state.lease.predecessor.take() {
            let epoch = i64::from(note.epoch);
            state.lease.predecessor = Some(if p.epoch == epoch {
                let mut stepped_down_by = p.stepped_down_by.clone();
                stepped_down_by.push(name);
                HbPredecessor {
                    stepped_down_by,
                    ..p
                }
                .normalized()
            } else {
                p
            });
        }
        state.lease.rv = state.next_rv();
    }
    let Some(c) = client_mut(state, note.member) else {
        return;
    };
    if !c.hears() || c.process != note.process || !c.noting {
        return;
    }
    c.noting = false;
    c.noted_at = Some(note.expected);
}

/// Whether the member's agent has a publication to take: one made since the last it took.
pub fn takes(state: &HbState, member: u8) -> bool {
    state
        .clients
        .get(state.member_index(member))
        .filter(|c| !c.paused)
        .and_then(|c| c.agent.as_ref())
        .is_some_and(|a| a.last_taken().map(|p| p.seq) != Some(a.published.seq))
}

/// The agent takes the publication made last: its files and `/role` say it (the application
/// reads it from now on), and its command is queued for it.
pub fn take(state: &mut HbState, member: u8) {
    if !takes(state, member) {
        return;
    }
    if let Some(agent) = client_mut(state, member).and_then(|c| c.agent.as_mut()) {
        agent.held = agent.published;
        agent.running.push(agent.published);
    }
}

/// Whether the member's agent has a command still to run.
pub fn runs(state: &HbState, member: u8) -> bool {
    state
        .clients
        .get(state.member_index(member))
        .filter(|c| !c.paused)
        .and_then(|c| c.agent.as_ref())
        .is_some_and(|a| !a.running.is_empty())
}

/// The agent's command for the oldest publication queued has run: the member is told it acted
/// on that one (in order).
pub fn ran(state: &mut HbState, member: u8) {
    if !runs(state, member) {
        return;
    }
    if let Some(agent) = client_mut(state, member).and_then(|c| c.agent.as_mut()) {
        agent.acted = Some(agent.running.remove(0));
    }
}

/// The agent (its member, its loop, its command) is frozen, or thawed: its requests' deadlines
/// have passed by then (their answers, if any, were lost), and its member, waking, publishes
/// what it believes now.
pub fn set_paused(state: &mut HbState, member: u8, paused: bool) {
    if let Some(c) = client_mut(state, member) {
        c.paused = paused;
        if !paused {
            c.awaiting = false;
            c.noting = false;
        }
    }
    publish(state, member);
}

/// The epoch at which the client owes a renewal by the real client's rule (the Lease as it last
/// read it asks, and its pod as it last read it carries the leader's marks at that epoch), if it
/// may send one now (none awaited, none sent this tick, not refused at this version).
pub fn renewable(state: &HbState, member: u8) -> Option<leadergroup_client::Epoch> {
    let c = state.clients.get(state.member_index(member))?;
    if !c.hears() || c.awaiting || c.last_sent == Some(state.now) || c.lease_rv == c.refused_at {
        return None;
    }
    c.belief
        .observation()
        .renewal_owed(&pod_name(pod_of(member)))
}

/// The member sends a renewal of the Lease it read.
pub fn renew(state: &mut HbState, member: u8) {
    let Some(epoch) = renewable(state, member) else {
        return;
    };
    let now = state.now;
    let Some(c) = client_mut(state, member) else {
        return;
    };
    let Some(expected) = c.lease_rv else {
        return;
    };
    c.awaiting = true;
    c.last_sent = Some(now);
    let process = c.process;
    state.inflight.push(Renewal {
        member,
        process,
        expected,
        epoch,
        sent: now,
    });
}

/// The API server applies a renewal (it moves `renewTime` only, if the version still holds),
/// and answers its client if that process still awaits it and can hear.
pub fn deliver(state: &mut HbState, renewal: &Renewal) {
    let landed = !state.lease.deleted && state.lease.rv == renewal.expected;
    let written = if landed {
        let rv = state.next_rv();
        // The other member of the pod keeps its acknowledgement (the real Lease lists each).
        state.lease.also_renewed = state
            .lease
            .renewed
            .filter(|r| r.pod == pod_of(renewal.member) && r.process != renewal.process);
        state.lease.renewed = Some(Stamp {
            pod: pod_of(renewal.member),
            process: renewal.process,
            tick: renewal.sent,
        });
        state.lease.rv = rv;
        Some(rv)
    } else {
        None
    };
    let Some(c) = client_mut(state, renewal.member) else {
        return;
    };
    if !c.hears() || c.process != renewal.process || !c.awaiting {
        return;
    }
    c.awaiting = false;
    match written {
        Some(rv) => {
            c.belief
                .renewal_landed(renewal.epoch, clock::client(renewal.member, renewal.sent));
            // The next renewal is conditional on this write, unless a read showed a newer one.
            if c.lease_rv == Some(renewal.expected) {
                c.lease_rv = Some(rv);
            }
        }
        None => c.refused_at = Some(renewal.expected),
    }
    publish(state, renewal.member);
}

/// A cut-off client gives up awaiting its renewal and its step-down (their request deadlines);
/// the requests may still land.
pub fn give_up(state: &mut HbState, member: u8) {
    if let Some(c) = client_mut(state, member) {
        c.awaiting = false;
        c.noting = false;
    }
}

pub fn set_cut(state: &mut HbState, member: u8, cut: bool) {
    if let Some(c) = client_mut(state, member) {
        c.cut = cut;
    }
}

/// The client's process restarts: it knows nothing; its writes in flight may still land. An
/// agent restarts with its member, its files saying `unknown` again.
pub fn restart(state: &mut HbState, member: u8) {
    if let Some(c) = client_mut(state, member) {
        *c = Client {
            cut: c.cut,
            agent: c.agent.as_ref().map(|_| Agent::started()),
            ..Client::started(&pod_name(pod_of(member)), c.process + 1)
        };
    }
}

/// The second member of `pod`, started with the first.
pub fn second_member(pod: PodId) -> Client {
    Client::started(&pod_name(pod), SECOND_PROCESS)
}

/// The id of `pod`'s second member.
pub fn second_of(pod: PodId) -> u8 {
    pod | SECOND_MEMBER
}
