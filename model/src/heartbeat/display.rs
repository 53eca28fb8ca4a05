//! The Heartbeat model's paths as a person reads them: each step numbered with its tick, the API
//! calls of the clients and the operator, and what each client believes after it.

use std::fmt;

use leadergroup_client::role::Role;

use leadergroup_client::publication::Publication;

use super::client::AppRule;
use super::model::{HbAction, HeartbeatModel};
use super::state::{
    FORGED_EPOCH_STEP, HbLease, HbState, INTRUDER, Renewal, SECOND_MEMBER, SteppedDown, pod_of,
};
use super::{client, clock, clock::Tick};
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

impl fmt::Display for SteppedDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.acknowledges {
            true => "acknowledged",
            false => "stepped-down",
        };
        write!(
            f,
            "{} (process {})'s PUT Lease ({what} {}, its name added) if rv={}",
            member(self.member),
            self.process,
            self.epoch,
            self.expected
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
            HbAction::StepDown(m) => write!(f, "{} sends its step-down", member(*m)),
            HbAction::DeliverStepDown(n) => write!(f, "API server applies {n}"),
            HbAction::Take(m) => write!(
                f,
                "{}'s agent takes its last publication (its files say it)",
                member(*m)
            ),
            HbAction::Ran(m) => write!(
                f,
                "{}'s agent has run its command for the oldest publication it took",
                member(*m)
            ),
            HbAction::Pause(m) => write!(
                f,
                "{}'s agent is paused (its application runs on)",
                member(*m)
            ),
            HbAction::Resume(m) => write!(f, "{}'s agent resumes", member(*m)),
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
    let renewed = match l.heartbeat {
        true => l.renewed.map_or("not renewed".to_string(), |s| {
            format!("renewed by {}'s client at {}s", pod_name(s.pod), s.tick)
        }),
        false => {
            let acked = l.renewed.map_or("not acknowledged".to_string(), |s| {
                format!(
                    "acknowledged by {}'s client at {}s",
                    pod_name(s.pod),
                    s.tick
                )
            });
            let renewed = l.operator_renewed.map_or(String::new(), |t| {
                format!(", renewed by the operator at {t}s")
            });
            format!("Readiness, {acked}{renewed}")
        }
    };
    let longest = l
        .longest
        .map_or(String::new(), |s| format!(" (longest {s}s)"));
    let names = |members: &[super::state::MemberName]| {
        members
            .iter()
            .copied()
            .map(super::state::listed_name)
            .collect::<Vec<_>>()
            .join(",")
    };
    let predecessor = l.predecessor.as_ref().map_or(String::new(), |p| {
        let who = if p.pod == super::state::UNKNOWN_POD {
            "(unknown)".to_string()
        } else {
            pod_name(p.pod)
        };
        let state = if p.stepped_down {
            "stepped down".to_string()
        } else if p.stepped_down_by.is_empty() {
            "awaited".to_string()
        } else {
            format!("awaited, stepped down by {}", names(&p.stepped_down_by))
        };
        format!(
            ", predecessor {who}@{} [{}] {state}",
            p.epoch,
            names(&p.members)
        )
    });
    format!(
        "Lease {}@{} {}s{longest}, acquired at {}s, {renewed}{predecessor}, rv={}",
        l.holder_name(),
        l.epoch,
        l.duration,
        l.acquired,
        l.rv
    )
}

fn role_text(role: Role) -> String {
    match role {
        Role::Leader { epoch } => format!("Leader@{epoch}"),
        r => r.to_string(),
    }
}

/// A publication as an application reads it: the role, and while leader until when, on the
/// publishing member's clock.
fn publication(m: u8, p: &Publication) -> String {
    match p.valid_until {
        Some(until) => format!(
            "{} until {}s",
            role_text(p.role),
            fmt_secs(clock::client_secs(m, until))
        ),
        None => role_text(p.role),
    }
}

fn fmt_secs(secs: f64) -> String {
    let text = format!("{secs:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn roles(s: &HbState) -> String {
    s.members()
        .into_iter()
        .map(|m| {
            let mut role = client::role(s, m).map_or("-".to_string(), role_text);
            let c = s.clients.get(s.member_index(m));
            if let Some(agent) = c.and_then(|c| c.agent.as_ref()) {
                let paused = if c.is_some_and(|c| c.paused) {
                    ", paused"
                } else {
                    ""
                };
                role.push_str(&format!(
                    " (agent{paused}: published #{} {}, files {}, acted on #{})",
                    agent.published.seq,
                    publication(m, &agent.published),
                    publication(m, &agent.held),
                    agent.acted.map_or("-".to_string(), |p| format!(
                        "{} {}",
                        p.seq,
                        role_text(p.role)
                    ))
                ));
            }
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
        // The checker's actions carry renumbered versions: find the raw write it stands for.
        let action = match action {
            HbAction::Deliver(r) => cur
                .inflight
                .iter()
                .find(|x| x.member == r.member && x.process == r.process && x.sent == r.sent)
                .cloned()
                .map_or(action.clone(), HbAction::Deliver),
            HbAction::DeliverStepDown(n) => cur
                .notes
                .iter()
                .find(|x| x.member == n.member && x.process == n.process && x.epoch == n.epoch)
                .cloned()
                .map_or(action.clone(), HbAction::DeliverStepDown),
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
        let acting = super::model::acting_leaders(&next, model.config.app);
        let acted_before = super::model::acting_leaders(&cur, model.config.app).len() > 1;
        cur = next;
        out.push_str(&format!("         believed: {}\n", roles(&cur)));
        if acting.len() > 1 && !acted_before {
            let who: Vec<String> = acting
                .iter()
                .map(|(p, e)| format!("{}@{e}", pod_name(*p)))
                .collect();
            out.push_str(&format!(
                "         two pods' applications act as leader: {}\n",
                who.join(", ")
            ));
        }
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
    let acting = super::model::acting_leaders(&cur, model.config.app);
    if acting.len() > 1 {
        let who: Vec<String> = acting
            .iter()
            .map(|(p, e)| format!("{}'s application as leader@{e}", pod_name(*p)))
            .collect();
        let rule = match model.config.app {
            AppRule::HonoursValidity => "",
            AppRule::IgnoresValidity => " (the application ignores validUntil)",
        };
        out.push_str(&format!(
            "   => {} at once: {}{rule}\n",
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
        self.config.sought.or(self.config.expected)
    }

    fn expected(&self) -> Option<&'static str> {
        self.config.expected
    }
}
