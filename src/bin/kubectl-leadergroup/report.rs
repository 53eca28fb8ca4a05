//! `kubectl leadergroup status`: what a group's status and its Lease say, as one report, printed
//! as text for a person or as JSON or YAML for a script.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use leadergroup_operator::crd::{HistoryEntry, LeaderGroup, PodEligibility};
use serde::Serialize;

/// One group, as `status` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupReport {
    pub group: String,
    pub namespace: String,
    pub leader: Option<String>,
    pub epoch: i64,
    /// Ready candidates out of all selected, as the status counts them.
    pub ready: Option<String>,
    /// The eligible pods, in the order they would lead.
    pub succession: Vec<String>,
    pub liveness: String,
    pub paused: bool,
    pub preferred_leader: Option<String>,
    pub last_transition: Option<Transition>,
    pub lease: Option<LeaseReport>,
    pub conditions: Vec<ConditionReport>,
    /// Each selected pod, and why it may or may not lead (the status's `eligibility`).
    pub eligibility: Vec<PodEligibility>,
    /// The last changes of leader, newest first (the status's `history`).
    pub history: Vec<HistoryEntry>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub reason: Option<String>,
    pub time: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReport {
    pub name: String,
    pub holder: Option<String>,
    pub duration_seconds: Option<i32>,
    /// Seconds since `renewTime`, on this machine's clock (another machine wrote it: a guide, not
    /// a measurement).
    pub renewed_seconds_ago: Option<f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl GroupReport {
    /// The report of `group` and its Lease (`None`: there is none yet) as of `now`.
    pub fn of(group: &LeaderGroup, lease: Option<&Lease>, now: Timestamp) -> GroupReport {
        let status = group.status.clone().unwrap_or_default();
        let lease = lease.map(|l| {
            let spec = l.spec.clone().unwrap_or_default();
            LeaseReport {
                name: l.name_any(),
                holder: spec.holder_identity.filter(|h| !h.is_empty()),
                duration_seconds: spec.lease_duration_seconds,
                renewed_seconds_ago: spec
                    .renew_time
                    .map(|t| (now - t.0).total(jiff::Unit::Second).unwrap_or(0.0)),
            }
        });
        GroupReport {
            group: group.name_any(),
            namespace: group.namespace().unwrap_or_default(),
            leader: status.leader.clone(),
            epoch: status.epoch,
            ready: status.ready.clone(),
            succession: status.succession.clone(),
            liveness: format!("{:?}", group.spec.liveness),
            paused: group.spec.paused,
            preferred_leader: group
                .spec
                .preferred_leader
                .clone()
                .filter(|p| !p.is_empty()),
            last_transition: status
                .last_transition_reason
                .as_ref()
                .map(|reason| Transition {
                    reason: Some(reason.clone()),
                    time: status
                        .last_transition_time
                        .as_ref()
                        .map(|t| t.0.to_string()),
                }),
            lease,
            conditions: status
                .conditions
                .iter()
                .map(|c| ConditionReport {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect(),
            eligibility: status.eligibility.clone(),
            history: status.history.clone(),
        }
    }

    /// The report for a person: one line per subject.
    pub fn text(&self) -> String {
        let none = || "-".to_owned();
        let mut out = format!("{} (namespace {})\n", self.group, self.namespace);
        let leader = match &self.leader {
            Some(leader) => format!("{leader}, epoch {}", self.epoch),
            None => format!("none (epoch {})", self.epoch),
        };
        out += &format!("  leader:      {leader}\n");
        if let Some(t) = &self.last_transition {
            out += &format!(
                "  last move:   {} at {}\n",
                t.reason.clone().unwrap_or_else(none),
                t.time.clone().unwrap_or_else(none)
            );
        }
        out += &format!(
            "  candidates:  {} ready; succession: {}\n",
            self.ready.clone().unwrap_or_else(none),
            if self.succession.is_empty() {
                none()
            } else {
                self.succession.join(", ")
            }
        );
        out += &format!(
            "  settings:    liveness {}, paused {}, preferred leader {}\n",
            self.liveness,
            if self.paused { "yes" } else { "no" },
            self.preferred_leader.clone().unwrap_or_else(none)
        );
        match &self.lease {
            Some(l) => {
                out += &format!(
                    "  lease:       {}, held by {}, renewed {} ago, duration {}\n",
                    l.name,
                    l.holder.clone().unwrap_or_else(none),
                    l.renewed_seconds_ago
                        .map_or_else(none, |s| format!("{s:.1} s")),
                    l.duration_seconds.map_or_else(none, |d| format!("{d} s"))
                );
            }
            None => out += "  lease:       none yet\n",
        }
        for p in &self.eligibility {
            out += &format!(
                "  pod:         {} {}{}\n",
                p.pod,
                p.reason,
                p.message
                    .as_ref()
                    .map_or(String::new(), |m| format!(": {m}"))
            );
        }
        for c in &self.conditions {
            out += &format!(
                "  condition:   {}={} ({}){}\n",
                c.type_,
                c.status,
                c.reason,
                if c.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.message)
                }
            );
        }
        out
    }
}

/// `kubectl leadergroup history`: the group's last changes of leader, newest first, as a table.
pub fn history_table(history: &[HistoryEntry]) -> String {
    let none = "-".to_owned();
    let mut out = format!(
        "{:<22} {:>6}  {:<24} {:<24} {:<20} {}\n",
        "TIME", "EPOCH", "FROM", "TO", "REASON", "LEADERLESS"
    );
    for h in history {
        out += &format!(
            "{:<22} {:>6}  {:<24} {:<24} {:<20} {}\n",
            h.time.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            h.epoch,
            h.from.as_ref().unwrap_or(&none),
            h.to.as_ref().unwrap_or(&none),
            h.reason,
            h.leaderless_seconds
                .map_or(none.clone(), |s| format!("{s} s"))
        );
    }
    out
}
