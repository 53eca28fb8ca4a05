//! Counterexamples as a person reads them: a numbered sequence of API calls and events, with
//! what each request did at the API server and what each replica sent.

use std::fmt;

use stateright::Model;

use crate::api::{Effect, PodPatch, Request, Role};
use crate::model::{Action, LeaderGroupModel};
use crate::objects::{pod_name, replica_name};
use crate::state::{Msg, State};

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::LeaseCas {
                expected,
                holder,
                epoch,
                arbiter,
                ..
            } => {
                let holder = holder.map_or("nobody".to_string(), pod_name);
                let what = format!(
                    "holder {holder}, epoch {epoch}, arbiter {}",
                    replica_name(*arbiter)
                );
                match expected {
                    None => write!(f, "CREATE Lease ({what})"),
                    Some(rv) => write!(f, "PUT Lease ({what}) if rv={rv}"),
                }
            }
            Request::Status { expected, status } => {
                let leader = status.leader.map_or("nobody".to_string(), pod_name);
                write!(
                    f,
                    "PUT group/status (leader {leader}, epoch {}) if rv={expected}",
                    status.epoch
                )
            }
            Request::Patch {
                pod,
                patch,
                precondition,
            } => {
                let what = match patch {
                    PodPatch::Promote { epoch } => format!("promote: role=leader, epoch={epoch}"),
                    PodPatch::Follower => "mark follower: role=follower, no epoch".to_string(),
                    PodPatch::Barrier {
                        epoch,
                        follower: true,
                        ..
                    } => format!("barrier {epoch} + role=follower, no epoch"),
                    PodPatch::Barrier {
                        epoch, clear: true, ..
                    } => format!("barrier {epoch}, no marks"),
                    PodPatch::Barrier { epoch, .. } => format!("barrier {epoch}"),
                    PodPatch::Unmark => "unmark: no marks".to_string(),
                };
                write!(f, "PATCH pod {} ({what})", pod_name(*pod))?;
                if let Some(rv) = precondition {
                    write!(f, " if rv={rv}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}'s {}", replica_name(self.from), self.req)?;
        if self.awaited.is_none() {
            write!(f, " [abandoned by its sender]")?;
        }
        Ok(())
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Reconcile(r) => {
                write!(f, "{} observes its caches and decides", replica_name(*r))
            }
            Action::Check(r) => write!(
                f,
                "{} lists the leaders and reads the pod and the Lease afresh (step 4's check)",
                replica_name(*r)
            ),
            Action::Deliver(m) => write!(f, "API server applies {m}"),
            Action::Fail(m) => write!(
                f,
                "{} gets a 5xx/reset for its {} (the server still holds it)",
                replica_name(m.from),
                m.req
            ),
            Action::Deadline(r) => write!(f, "{}'s reconcile hits its deadline", replica_name(*r)),
            Action::Crash(r) => write!(f, "{} crashes and restarts", replica_name(*r)),
            Action::Failover(r) => write!(
                f,
                "HA Lease moves: {} is active (the other pauses, its requests in flight)",
                replica_name(*r)
            ),
            Action::Sync(r) => write!(f, "{}'s watch caches catch up", replica_name(*r)),
            Action::Expire => write!(f, "time passes: the group Lease runs out"),
            Action::SetReady(p, true) => write!(f, "kubelet: {} Ready", pod_name(*p)),
            Action::SetReady(p, false) => write!(f, "kubelet: {} NotReady", pod_name(*p)),
            Action::DeletePod(p) => write!(f, "user deletes pod {}", pod_name(*p)),
            Action::RecreatePod(p) => {
                write!(f, "pod {} created again (new uid, no marks)", pod_name(*p))
            }
            Action::ToggleSelected(p) => write!(
                f,
                "user edits spec.selector: toggles {} in or out",
                pod_name(*p)
            ),
            Action::Prefer(Some(p)) => write!(f, "user sets spec.preferredLeader={}", pod_name(*p)),
            Action::Prefer(None) => write!(f, "user clears spec.preferredLeader"),
            Action::Pause(p) => write!(f, "user sets spec.paused={p}"),
            Action::EndFaults => write!(f, "no fault or edit happens any more"),
            Action::RecreateGroup => write!(
                f,
                "user deletes the group (the active replica's finalizer unmarks its pods) and creates it again"
            ),
        }
    }
}

/// One pod's marks, as `kubectl get pod --show-labels` would hint them.
fn marks(s: &State) -> String {
    s.server
        .pods()
        .map(|(id, p)| {
            let role = match (p.role, p.marked) {
                (Some(Role::Leader), _) => "leader",
                (Some(Role::Follower), _) => "follower",
                (None, _) => "-",
            };
            let epoch = p.epoch.map_or(String::new(), |e| format!("@{e}"));
            let ready = if p.ready { "" } else { " NotReady" };
            format!("{}[{role}{epoch} rv={}{ready}]", pod_name(id), p.rv)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The Lease, the status and the barrier flags.
fn records(s: &State) -> String {
    let lease = match &s.server.lease {
        None => "no Lease".to_string(),
        Some(l) => format!(
            "Lease {}@{} by {} rv={}",
            l.holder.map_or("nobody".to_string(), pod_name),
            l.epoch,
            replica_name(l.arbiter),
            l.rv
        ),
    };
    let status = match &s.server.group.status {
        None => "no status".to_string(),
        Some(st) => format!(
            "status {}@{}",
            st.leader.map_or("nobody".to_string(), pod_name),
            st.epoch
        ),
    };
    let flags: Vec<String> = s
        .replicas
        .iter()
        .enumerate()
        .map(|(r, rep)| {
            let r = u8::try_from(r).unwrap_or(0);
            let active = if s.active == Some(r) { " (active)" } else { "" };
            let flag = if rep.barrier_up.is_some() {
                "up"
            } else {
                "down"
            };
            format!("{}{active} barrier {flag}", replica_name(r))
        })
        .collect();
    format!("{lease}; {status}; {}", flags.join(", "))
}

/// What the step did, beyond its own description: the server's answer, the requests sent.
fn effect(before: &State, action: &Action, after: &State) -> Vec<String> {
    let mut notes = Vec::new();
    if let Action::Deliver(m) = action {
        let mut world = before.server.clone();
        let mut ghost = before.ghost.clone();
        let rv = before.clone().next_rv();
        let (_, effect) = world.apply(&m.req, rv, &mut ghost);
        notes.push(match effect {
            Effect::Written => format!("applied (new rv={rv})"),
            Effect::Unchanged => "accepted, nothing changed: rv unchanged".to_string(),
            Effect::Gone => "pod gone (404, taken as done)".to_string(),
            Effect::Refused => "409 Conflict".to_string(),
        });
    }
    if *action == Action::RecreateGroup {
        notes.push(match (&before.server.lease, &after.server.lease) {
            (Some(_), None) => "the finalizer deletes the Lease".to_string(),
            (_, Some(l)) => format!("the Lease is left released at epoch {}", l.epoch),
            (None, None) => "no Lease".to_string(),
        });
    }
    for m in &after.inflight {
        let new = before.inflight.iter().filter(|x| *x == m).count()
            < after.inflight.iter().filter(|x| *x == m).count();
        if new && m.awaited.is_some() {
            notes.push(format!("sends {}", m.req));
        }
    }
    for (r, (b, a)) in before.replicas.iter().zip(&after.replicas).enumerate() {
        if b.barrier_up != a.barrier_up {
            let r = u8::try_from(r).unwrap_or(0);
            notes.push(format!(
                "{}'s barrier flag {}",
                replica_name(r),
                if a.barrier_up.is_some() {
                    "goes up"
                } else {
                    "comes down"
                }
            ));
        }
    }
    notes
}

/// The path, replayed with versions as the API server numbers them, one numbered line per step.
pub fn path(model: &LeaderGroupModel, states: &[State], actions: &[Action]) -> String {
    let raw = model.raw();
    let mut out = String::new();
    let Some(first) = states.first() else {
        return out;
    };
    // Replay in API-server numbering: at each step, the raw action whose outcome is the checker's.
    let mut cur = first.clone();
    out.push_str(&format!("   start: {}\n", records(&cur)));
    out.push_str(&format!("          pods: {}\n", marks(&cur)));
    for (i, (action, want)) in actions.iter().zip(states.iter().skip(1)).enumerate() {
        let mut options = Vec::new();
        raw.actions(&cur, &mut options);
        let found = options.into_iter().find_map(|a| {
            let next = raw.step(&cur, &a)?;
            (model.canonical && next.clone().canonical() == *want
                || !model.canonical && next == *want)
                .then_some((a, next))
        });
        let (a, next) = match found {
            Some(x) => x,
            None => match raw.step(&cur, action) {
                Some(next) => (action.clone(), next),
                None => break,
            },
        };
        out.push_str(&format!("{:>3}. {a}\n", i + 1));
        for note in effect(&cur, &a, &next) {
            out.push_str(&format!("       {note}\n"));
        }
        if next.server.pods != cur.server.pods {
            out.push_str(&format!("       pods: {}\n", marks(&next)));
        }
        if crate::properties::i3(&cur) && !crate::properties::i3(&next) {
            out.push_str(&format!(
                "   => I3 broken: an epoch handed before, or below the highest handed ({}); epochs handed: {}\n",
                cur.ghost.last_handed,
                handed(&next)
            ));
        }
        cur = next;
    }
    let leaders = crate::properties::leaders(&cur);
    if leaders.len() > 1 {
        let names: Vec<String> = leaders
            .iter()
            .map(|(p, e)| format!("{}@{}", pod_name(*p), e.unwrap_or(0)))
            .collect();
        out.push_str(&format!(
            "   => {} pods labeled leader: {}\n",
            leaders.len(),
            names.join(", ")
        ));
    }
    out
}

/// The epochs each pod name was handed so far, for a counterexample to I3.
fn handed(s: &State) -> String {
    s.ghost
        .handed
        .iter()
        .enumerate()
        .map(|(p, mask)| {
            let epochs: Vec<String> = (0..32)
                .filter(|e| mask & (1u32 << e) != 0)
                .map(|e| e.to_string())
                .collect();
            format!(
                "{} {{{}}}",
                pod_name(u8::try_from(p).unwrap_or(0)),
                epochs.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
