//! The predecessor's step-down. A leader deposed at once (its pod deleted, terminating, NotReady,
//! out of the selector, or a switchover) may still run: if it cannot hear the API server at that
//! moment, its agent or client goes on reporting `Leader` until its confirmation lapses, two
//! thirds of the Lease it last saw. So the Lease names it as the predecessor, and the next leader
//! is labeled only once it has stepped down: its member says so in the Lease after its own role
//! has left `Leader`, or the operator knows it without being told.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use leadergroup_client::Epoch;

use super::Observation;
use super::commit::until;
use crate::lease_record::{LeaseRecord, Predecessor, UNKNOWN_MEMBERS, UNKNOWN_PREDECESSOR};
use crate::marks;

/// The predecessor the Lease names after a decision that gives it to `leader` (at a new epoch when
/// `minted`), with what the operator knows of its step-down; `lapsed` is the holder whose
/// renewals stopped (Heartbeat mode).
pub(super) fn predecessor(
    obs: &Observation<'_>,
    lease: Option<&LeaseRecord>,
    leader: Option<&str>,
    minted: bool,
    lapsed: Option<&str>,
) -> Option<Predecessor> {
    let Some(lease) = lease else {
        return lost_with_the_lease(obs);
    };
    let deposed_now = lease.holder.is_some() && (lease.holder.as_deref() != leader || minted);
    let mut predecessor = if deposed_now {
        match lease.predecessor_after_holder() {
            Some(pending) if pending.pending() => pending,
            other => labeled_beside_another_holder(obs, lease).or(other)?,
        }
    } else {
        lease.predecessor.clone()?
    };
    // The holder itself, named when its Lease was created again: still in its tenure, so no
    // time since the handover has passed for it.
    let holding = !deposed_now
        && lease.epoch == predecessor.epoch.get()
        && lease
            .holder
            .as_deref()
            .is_some_and(|h| predecessor.is_incarnation(h, lease.holder_uid.as_deref()));
    if predecessor.pending() && stepped_down(obs, &predecessor, lapsed, deposed_now || holding) {
        predecessor.stepped_down = true;
    }
    Some(predecessor)
}

/// The predecessor to name in a Lease created again after it was deleted (by hand: the operator
/// never deletes one), which took the acknowledgement and the predecessor it named with it.
/// A last leader that carries its marks at the status's epoch was labeled after every earlier
/// step-down, but its member may have acknowledged and, cut off, never seen the deletion: it is
/// named itself, so that a handover away from it waits for its step-down (timed by the longest
/// duration the status kept: the Lease's went with it). Otherwise, when the group has had a
/// leader (committed and not yet labeled, or nobody leading since), an unknown one is named,
/// which no member can step down for, so the next leader is labeled once a confirmation has
/// lapsed, as after a cut-off predecessor.
fn lost_with_the_lease(obs: &Observation<'_>) -> Option<Predecessor> {
    let status = obs.group.status.as_ref().filter(|s| s.epoch > 0)?;
    let (pod, uid) = match labeled_status_leader(obs) {
        Some((pod, _)) => (pod.name_any(), pod.metadata.uid.clone()),
        None => (UNKNOWN_PREDECESSOR.to_string(), None),
    };
    Some(Predecessor {
        pod,
        uid,
        epoch: Epoch::new(status.epoch)?,
        lease_seconds: longest_known(obs, None),
        // Which of its members acknowledged went with the Lease.
        members: vec![UNKNOWN_MEMBERS.to_string()],
        stepped_down_by: Vec::new(),
        stepped_down: false,
    })
}

/// The pod that carries the group's leader marks at the epoch its status records while the Lease
/// names another holder: someone else rewrote the Lease (its holder and its acknowledgement are no
/// longer that pod's), yet that pod's member may still report `Leader`. It is named as the
/// predecessor, for the longer of the two Leases' confirmations. Also when it leads again at a
/// new epoch: not waited for then (the same incarnation), but its member may report `Leader` at
/// the old epoch until it acknowledges the new one, so a handover away from it before that waits
/// for it too.
fn labeled_beside_another_holder(
    obs: &Observation<'_>,
    lease: &LeaseRecord,
) -> Option<Predecessor> {
    let (pod, epoch) = labeled_status_leader(obs)?;
    let labeled = pod.name_any();
    if lease.holder.as_deref() == Some(labeled.as_str()) {
        return None;
    }
    Some(Predecessor {
        pod: labeled,
        uid: pod.metadata.uid.clone(),
        epoch: Epoch::new(epoch)?,
        lease_seconds: longest_known(obs, Some(lease)),
        // The Lease no longer says which of its members acknowledged.
        members: vec![UNKNOWN_MEMBERS.to_string()],
        stepped_down_by: Vec::new(),
        stepped_down: false,
    })
}

/// The longest Lease duration a member of the group may time itself by, as far as the operator
/// knows: the spec's, the longest of `lease`'s tenure, and the longest the status kept (which
/// outlives a Lease deleted by hand).
fn longest_known(obs: &Observation<'_>, lease: Option<&LeaseRecord>) -> i32 {
    let kept = obs
        .group
        .status
        .as_ref()
        .and_then(|s| s.longest_lease_seconds);
    obs.group
        .spec
        .lease_duration_seconds
        .max(lease.map_or(0, LeaseRecord::longest_seen))
        .max(kept.unwrap_or(0))
}

/// The pod the status names as the leader, with the status's epoch, if it carries the group's
/// leader marks at that epoch.
fn labeled_status_leader<'a>(obs: &Observation<'a>) -> Option<(&'a Pod, i64)> {
    let status = obs.group.status.as_ref().filter(|s| s.epoch > 0)?;
    let leader = status.leader.as_deref()?;
    let group = obs.group.name_any();
    obs.pods
        .iter()
        .copied()
        .find(|p| p.name_any() == leader && marks::leads_for_at(p, &group, status.epoch))
        .map(|p| (p, status.epoch))
}

/// Whether the operator knows, without its member's word, that the predecessor no longer reports
/// `Leader`; `untimed`: it was not deposed before now, so no confirmation of its has lapsed.
fn stepped_down(
    obs: &Observation<'_>,
    predecessor: &Predecessor,
    lapsed: Option<&str>,
    untimed: bool,
) -> bool {
    // Its renewals stopped for a whole Lease: its member's own rule (a renewal of its own within
    // two thirds of the Lease) stopped it a third of a Lease ago.
    if lapsed == Some(predecessor.pod.as_str()) {
        return true;
    }
    let incarnation = obs.pods.iter().find(|p| {
        p.name_any() == predecessor.pod
            && (predecessor.uid.is_none() || p.metadata.uid == predecessor.uid)
    });
    if incarnation.is_some_and(|pod| runs_nothing(pod)) {
        return true;
    }
    // Its confirmation has lapsed since this replica saw the Lease leave it (only ever later
    // than the handover itself).
    !untimed && until(obs.seen().written_at, obs.now) >= predecessor.validity()
}

/// Whether the predecessor keeps `leader` from being labeled now, and if so for how long at the
/// most: until its confirmation lapses, timed from the handover as this replica saw it (from now,
/// when this decision makes it).
pub(super) fn awaited(
    obs: &Observation<'_>,
    before: Option<&LeaseRecord>,
    after: Option<&LeaseRecord>,
    leader: Option<&str>,
) -> Option<Duration> {
    let after = after?;
    let predecessor = after.predecessor.as_ref().filter(|p| p.pending())?;
    // The same incarnation again: one member, which leaves `Leader` at its old epoch before it
    // reports the new one.
    if predecessor.is_incarnation(leader?, after.holder_uid.as_deref()) {
        return None;
    }
    let already = before.and_then(|l| l.predecessor.as_ref()) == Some(predecessor);
    let waited = if already {
        until(obs.seen().written_at, obs.now)
    } else {
        Duration::ZERO
    };
    Some(predecessor.validity().saturating_sub(waited))
}

/// A pod whose every container, sidecars included, has stopped: no process of it reports
/// anything. Its phase says nothing of that (the pod GC sets `Failed` on the pods of a lost node
/// while their containers may still run), and a pod whose containers the kubelet has not
/// reported is not taken for one.
fn runs_nothing(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    let init = status
        .init_container_statuses
        .as_deref()
        .unwrap_or_default();
    !containers.is_empty()
        && containers
            .iter()
            .chain(init)
            .all(|c| c.state.as_ref().is_none_or(|s| s.running.is_none()))
}
