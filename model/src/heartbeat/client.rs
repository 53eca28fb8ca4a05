//! A pod's client, as `Membership` drives its [`leadergroup_client::belief::Belief`]: it reads its
//! pod and the group's Lease (each a confirmation at the moment of the read, on its own clock),
//! renews the Lease when the Lease asks it to (a compare-and-swap on the version it read), takes
//! in the answers, is cut off and restarts. It may renew at any tick, more often than the real
//! client's every third of the duration: a renewal too many only ever lets the operator see the
//! holder alive for longer.

use leadergroup_client::role::{LeaseMarks, PodMarks, Role};

use super::clock;
use super::objects;
use super::state::{Client, HbState, Renewal, Stamp};
use crate::api::PodId;
use crate::objects::pod_name;

fn client_mut(state: &mut HbState, pod: PodId) -> Option<&mut Client> {
    state.clients.get_mut(usize::from(pod))
}

/// The client's role now, by the client crate's own rule.
pub fn role(state: &HbState, pod: PodId) -> Option<Role> {
    let c = state.clients.get(usize::from(pod))?;
    Some(c.belief.role(clock::client(pod, state.now)))
}

/// The client reads its pod (a watch event or a GET: confirmed now).
pub fn read_pod(state: &mut HbState, pod: PodId) {
    let marks = PodMarks::of(&objects::pod(state, pod));
    let at = clock::client(pod, state.now);
    if let Some(c) = client_mut(state, pod) {
        c.belief.pod_seen(Some(marks), at);
    }
}

/// The client reads the group's Lease.
pub fn read_lease(state: &mut HbState, pod: PodId) {
    let marks = (!state.lease.deleted).then(|| LeaseMarks::of(&objects::lease(&state.lease)));
    let (rv, at) = (state.lease.rv, clock::client(pod, state.now));
    if let Some(c) = client_mut(state, pod) {
        c.belief.lease_seen(marks, at);
        c.lease_rv = Some(rv);
    }
}

/// The epoch at which the client owes a renewal by the real client's rule (the Lease as it last
/// read it asks, and its pod as it last read it carries the leader's marks at that epoch), if it
/// may send one now (none awaited, none sent this tick, not refused at this version).
pub fn renewable(state: &HbState, pod: PodId) -> Option<leadergroup_client::Epoch> {
    let c = state.clients.get(usize::from(pod))?;
    if c.cut || c.awaiting || c.last_sent == Some(state.now) || c.lease_rv == c.refused_at {
        return None;
    }
    c.belief.observation().renewal_owed(&pod_name(pod))
}

/// The client sends a renewal of the Lease it read.
pub fn renew(state: &mut HbState, pod: PodId) {
    let Some(epoch) = renewable(state, pod) else {
        return;
    };
    let now = state.now;
    let Some(c) = client_mut(state, pod) else {
        return;
    };
    let Some(expected) = c.lease_rv else {
        return;
    };
    c.awaiting = true;
    c.last_sent = Some(now);
    let process = c.process;
    state.inflight.push(Renewal {
        pod,
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
        state.lease.renewed = Some(Stamp {
            pod: renewal.pod,
            process: renewal.process,
            tick: renewal.sent,
        });
        state.lease.rv = rv;
        Some(rv)
    } else {
        None
    };
    let Some(c) = client_mut(state, renewal.pod) else {
        return;
    };
    if c.cut || c.process != renewal.process || !c.awaiting {
        return;
    }
    c.awaiting = false;
    match written {
        Some(rv) => {
            c.belief
                .renewal_landed(renewal.epoch, clock::client(renewal.pod, renewal.sent));
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
pub fn give_up(state: &mut HbState, pod: PodId) {
    if let Some(c) = client_mut(state, pod) {
        c.awaiting = false;
    }
}

pub fn set_cut(state: &mut HbState, pod: PodId, cut: bool) {
    if let Some(c) = client_mut(state, pod) {
        c.cut = cut;
    }
}

/// The client's process restarts: it knows nothing; its renewals in flight may still land.
pub fn restart(state: &mut HbState, pod: PodId) {
    if let Some(c) = client_mut(state, pod) {
        *c = Client {
            cut: c.cut,
            ..Client::started(&pod_name(pod), c.process + 1)
        };
    }
}
