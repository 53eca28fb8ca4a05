//! The Heartbeat model's paths as a person reads them: each step numbered with its tick, the API
//! calls of the clients and the operator, and what each client believes after it.

use std::fmt;

use leadergroup_client::role::Role;

use super::model::{HbAction, HeartbeatModel};
use super::state::{FORGED_EPOCH_STEP, HbLease, HbState, INTRUDER, Renewal, SECOND_MEMBER, pod_of};
use super::{client, clock::Tick};
use crate::objects::pod_name;
use crate::run::Explained;

/// A member as a person reads it: `p1's client`, or `p1's second member`.
fn member(m: u8) -> String {
    if m & SECOND_MEMBER == 0 {
        format!("{}'s client", pod_name(m))
    } else {
        format!("{}'s second member", pod_name(pod_of(m)))
    }
}

impl fmt::Display for Renewal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (process {})'s PUT Lease (renewTime moved, epoch {}) if rv={}, sent at {}s",
            member(self.member),
            self.process,
            self.epoch,
            self.expected,
            self.sent
        )
    }
}

impl fmt::Display for HbAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HbAction::Tick => write!(f, "a second passes"),
            HbAction::Operator => write!(f, "the operator reads the Lease and decides"),
            HbAction::ReadPod(m) => write!(f, "{} GETs its pod", member(*m)),
            HbAction::ReadLease(m) => write!(f, "{} GETs the Lease", member(*m)),
            HbAction::Renew(m) => write!(f, "{} sends a renewal", member(*m)),
            HbAction::Deliver(r) => write!(f, "API server applies {r}"),
            HbAction::GiveUp(m) => {
                write!(f, "{} gives up awaiting its renewal", member(*m))
            }
            HbAction::Cut(m) => write!(f, "{} is cut off", member(*m)),
            HbAction::Reconnect(m) => write!(f, "{} reconnects", member(*m)),
            HbAction::Restart(m) => write!(f, "{} restarts", member(*m)),
            HbAction::DeleteLease => write!(f, "user deletes the Lease"),
            HbAction::OperatorRestart => {
                write!(
                    f,
                    "the operator restarts: its sightings of the Lease are lost"
                )
            }
            HbAction::EditDuration(d) => {
                write!(f, "user sets spec.leaseDurationSeconds={d}")
            }
            HbAction::Prefer(p) => write!(f, "user sets spec.preferredLeader={}", pod_name(*p)),
            HbAction::Forge => write!(
                f,
                "a foreign writer puts holder {INTRUDER} in the Lease, its epoch {FORGED_EPOCH_STEP} higher, the rest kept"
            ),
            HbAction::PatchStatus(p) => write!(
                f,
                "user patches the status: leader {}, the epoch kept, longestLeaseSeconds dropped",
                pod_name(*p)
            ),
            HbAction::PodGc(p) => write!(
                f,
                "pod GC: {} Failed, NotReady (its node lost; its process runs on)",
                pod_name(*p)
            ),
            HbAction::SetReady(p, ready) => write!(
                f,
                "kubelet: {} {} (its process runs on)",
                pod_name(*p),
                if *ready { "Ready" } else { "NotReady" }
            ),
        }
    }
}

fn lease(l: &HbLease) -> String {
    let renewed = l.renewed.map_or("not renewed".to_string(), |s| {
        format!("renewed by {}'s client at {}s", pod_name(s.pod), s.tick)
    });
    let longest = l
        .longest
        .map_or(String::new(), |s| format!(" (longest {s}s)"));
    format!(
        "Lease {}@{} {}s{longest}, acquired at {}s, {renewed}, rv={}",
        l.holder_name(),
        l.epoch,
        l.duration,
        l.acquired,
        l.rv
    )
}

fn roles(s: &HbState) -> String {
    s.members()
        .into_iter()
        .map(|m| {
            let role = match client::role(s, m) {
                Some(Role::Leader { epoch }) => format!("Leader@{epoch}"),
                Some(r) => r.to_string(),
                None => "-".to_string(),
            };
            if m & SECOND_MEMBER == 0 {
                format!("{}: {role}", pod_name(m))
            } else {
                format!("{}': {role}", pod_name(pod_of(m)))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn at(t: Tick) -> String {
    format!("[{t:>2}s]")
}

/// The path with versions as the API server numbers them, one numbered line per step.
pub fn path(model: &HeartbeatModel, states: &[HbState], actions: &[HbAction]) -> String {
    let raw = model.raw();
    let mut out = String::new();
    let Some(mut cur) = Some(raw.start()) else {
        return out;
    };
    if states.is_empty() {
        return out;
    }
    out.push_str(&format!("   start: {}\n", lease(&cur.lease)));
    for (i, action) in actions.iter().enumerate() {
        // The checker's actions carry renumbered versions: find the raw renewal it stands for.
        let action = match action {
            HbAction::Deliver(r) => cur
                .inflight
                .iter()
                .find(|x| x.member == r.member && x.process == r.process && x.sent == r.sent)
                .cloned()
                .map_or(action.clone(), HbAction::Deliver),
            a => a.clone(),
        };
        let Some(next) = raw.step(&cur, &action) else {
            out.push_str(&format!("{:>3}. {action} (not possible here)\n", i + 1));
            break;
        };
        if action == HbAction::Tick {
            cur = next;
            continue;
        }
        out.push_str(&format!("{:>3}. {} {action}\n", i + 1, at(cur.now)));
        if next.lease != cur.lease {
            out.push_str(&format!("         {}\n", lease(&next.lease)));
        }
        if next.marks != cur.marks || next.ready != cur.ready {
            let marks: Vec<String> = next
                .marks
                .iter()
                .zip(&next.ready)
                .enumerate()
                .map(|(p, (m, ready))| {
                    let name = pod_name(u8::try_from(p).unwrap_or(0));
                    let ready = if *ready { "" } else { " NotReady" };
                    m.map_or(format!("{name}[follower{ready}]"), |e| {
                        format!("{name}[leader@{e}{ready}]")
                    })
                })
                .collect();
            out.push_str(&format!("         pods: {}\n", marks.join(" ")));
        }
        cur = next;
        out.push_str(&format!("         believed: {}\n", roles(&cur)));
    }
    let believed = super::model::believed_leaders(&cur);
    if believed.len() > 1 {
        let who: Vec<String> = believed
            .iter()
            .map(|(p, e)| format!("{}'s client Leader@{e}", pod_name(*p)))
            .collect();
        out.push_str(&format!(
            "   => {} at once: {}\n",
            at(cur.now),
            who.join(", ")
        ));
    }
    let stale = super::model::stale_leaders(&cur);
    for (p, e) in stale {
        out.push_str(&format!(
            "   => {} {}'s client believes Leader@{e} while {} holds the Lease at {}\n",
            at(cur.now),
            pod_name(p),
            cur.lease.holder_name(),
            cur.lease.epoch
        ));
    }
    out
}

impl Explained for HeartbeatModel {
    fn config_name(&self) -> &'static str {
        self.config.name
    }

    fn explain(&self, states: &[HbState], actions: &[HbAction]) -> String {
        path(self, states, actions)
    }

    fn sought(&self) -> Option<&'static str> {
        self.config.sought
    }
}
