//! A pod's client, as `Membership` drives its [`leadergroup_client::belief::Belief`]: it reads its
//! pod and the group's Lease (each a confirmation at the moment of the read, on its own clock),
//! renews the Lease when the Lease asks it to (a compare-and-swap on the version it read), takes
//! in the answers, is cut off and restarts. It may renew at any tick, more often than the real
//! client's every third of the duration: a renewal too many only ever lets the operator see the
//! holder alive for longer.

use leadergroup_client::role::{LeaseMarks, PodMarks, Role};

use super::clock;
use super::objects;
use super::state::{Client, HbState, Renewal, SECOND_MEMBER, SECOND_PROCESS, Stamp, pod_of};
use crate::api::PodId;
use crate::objects::pod_name;

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
}

/// The member reads the group's Lease.
pub fn read_lease(state: &mut HbState, member: u8) {
    let marks = (!state.lease.deleted).then(|| LeaseMarks::of(&objects::lease(&state.lease)));
    let (rv, at) = (state.lease.rv, clock::client(member, state.now));
    if let Some(c) = client_mut(state, member) {
        c.belief.lease_seen(marks, at);
        c.lease_rv = Some(rv);
    }
}

/// The epoch at which the client owes a renewal by the real client's rule (the Lease as it last
/// read it asks, and its pod as it last read it carries the leader's marks at that epoch), if it
/// may send one now (none awaited, none sent this tick, not refused at this version).
pub fn renewable(state: &HbState, member: u8) -> Option<leadergroup_client::Epoch> {
    let c = state.clients.get(state.member_index(member))?;
    if c.cut || c.awaiting || c.last_sent == Some(state.now) || c.lease_rv == c.refused_at {
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
    if c.cut || c.process != renewal.process || !c.awaiting {
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
}

/// A cut-off client gives up awaiting its renewal (its request deadline); the request may
/// still land.
pub fn give_up(state: &mut HbState, member: u8) {
    if let Some(c) = client_mut(state, member) {
        c.awaiting = false;
    }
}

pub fn set_cut(state: &mut HbState, member: u8, cut: bool) {
    if let Some(c) = client_mut(state, member) {
        c.cut = cut;
    }
}

/// The client's process restarts: it knows nothing; its renewals in flight may still land.
pub fn restart(state: &mut HbState, member: u8) {
    if let Some(c) = client_mut(state, member) {
        *c = Client {
            cut: c.cut,
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
