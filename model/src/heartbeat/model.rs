//! The Heartbeat model for stateright: its bounded configurations, the actions the checker may
//! take in any order, how each changes the state, and the properties.

use leadergroup_client::role::Role;
use stateright::{Model, Property};

use super::client::{AppRule, GateRule};
use super::clock::{self, Tick};
use super::state::{
    Client, FORGED_EPOCH_STEP, HbLease, HbSpent, HbState, Renewal, SECOND_MEMBER, SteppedDown,
    UNKNOWN_POD, pod_of,
};
use super::{client, operator};
use crate::api::PodId;
use crate::objects::pod_name;

/// A bounded configuration: how long a path may run, the Lease durations, and how many of each
/// fault and edit one path may take.
#[derive(Clone, Debug)]
pub struct HbConfig {
    pub name: &'static str,
    pub pods: u8,
    /// No path runs past this tick.
    pub max_ticks: Tick,
    /// `leaseDurationSeconds` at the start, and what the user's edit sets it to.
    pub duration: u8,
    pub edited_duration: u8,
    pub duration_edits: u8,
    /// Clients cut off from the API server (each may reconnect).
    pub cuts: u8,
    pub restarts: u8,
    /// Restarts (or takeovers) of the operator: its sighting of the Lease is lost.
    pub operator_restarts: u8,
    /// Deletions of the Lease by hand.
    pub lease_deletions: u8,
    /// Edits of `spec.preferredLeader` (naming a pod): a handover the operator makes at once.
    pub preference_edits: u8,
    /// A pod turning NotReady (or Ready again) while its process runs on: a handover at once too.
    pub readiness: u8,
    /// Writes of the Lease by a foreign writer (another holder, a higher epoch, the rest kept).
    pub forgeries: u8,
    /// Patches of the status by hand: `status.leader` names another pod (the epoch kept) and
    /// `longestLeaseSeconds` is gone.
    pub status_patches: u8,
    /// Pods the pod GC sets `phase: Failed` (their node lost) while their processes run on.
    pub pod_gc: u8,
    /// States whose Lease went past this epoch are not explored further.
    pub max_epoch: i64,
    /// `p1` runs a second member (an agent beside the application), with a clock and a name of
    /// its own.
    pub second_member: bool,
    /// The members that run in an agent ([`super::state::Agent`]: they publish, the agent acts
    /// on the publications late, and their step-down waits for it); the others are in-process
    /// `Membership`s. A member is its pod's id, or [`SECOND_MEMBER`] set on it.
    pub agents: &'static [u8],
    /// Pauses of an agent (its member, its loop and its command frozen; its application runs on).
    pub pauses: u8,
    /// How an agent's member gates its step-down (the code as it is, or as it was before).
    pub gate: GateRule,
    /// How an agent's application reads the role (the code as it is, or as it was before).
    pub app: AppRule,
    /// The group's liveness: Heartbeat (its holder's member renews the Lease), or Readiness, the
    /// default mode (the operator renews it, and each member acknowledges with a note).
    pub heartbeat: bool,
    /// The property this configuration is known to break (an open hole): `--first` stops at its
    /// first counterexample, not at the first of any property.
    pub sought: Option<&'static str>,
    /// The property this configuration is built to break: it runs code as it was before a fix.
    pub expected: Option<&'static str>,
}

impl HbConfig {
    /// `make check`'s first: a Lease of 4 s shortened to 2 s, one cut-off, 2 s. The shorter
    /// Lease during a cut-off shows at 2 s: on the code before its fix the operator hands over 2 s after its
    /// rewrite, while the cut-off holder believes `Leader` for 2.67 s after its renewal.
    pub fn heartbeat() -> Self {
        HbConfig {
            name: "heartbeat",
            pods: 2,
            max_ticks: 2,
            duration: 4,
            edited_duration: 2,
            duration_edits: 1,
            cuts: 1,
            restarts: 0,
            operator_restarts: 0,
            lease_deletions: 0,
            preference_edits: 0,
            readiness: 0,
            forgeries: 0,
            status_patches: 0,
            pod_gc: 0,
            second_member: false,
            agents: &[],
            pauses: 0,
            gate: GateRule::BySeq,
            app: AppRule::HonoursValidity,
            max_epoch: 3,
            heartbeat: true,
            sought: None,
            expected: None,
        }
    }

    /// `make check`'s second: a Lease of 2 s, one restart, 2 s. Finding 4 shows at 2 s: on the
    /// client before its fix, a process restarted at 1 s believes `Leader` until 2.33 s, and the
    /// operator hands over at 2 s. The restarted process need not be cut off: a client may
    /// always read nothing more.
    pub fn heartbeat_restart() -> Self {
        HbConfig {
            name: "heartbeat-restart",
            duration: 2,
            edited_duration: 2,
            duration_edits: 0,
            cuts: 0,
            restarts: 1,
            ..HbConfig::heartbeat()
        }
    }

    /// `make model`'s and the replays': a Lease of 6 s shortened to 3 s, one cut-off, one
    /// restart, 9 s.
    pub fn heartbeat_large() -> Self {
        HbConfig {
            name: "heartbeat-large",
            max_ticks: 9,
            duration: 6,
            edited_duration: 3,
            duration_edits: 1,
            cuts: 1,
            restarts: 1,
            ..HbConfig::heartbeat()
        }
    }

    /// A handover the operator makes at once (a `preferredLeader` edit, or the leader's pod
    /// NotReady while its process runs), with the old leader's client cut off or simply not yet
    /// told: it believes `Leader` up to two thirds of the Lease after its last confirmation, and
    /// the successor is labeled only once it stepped down. Not in `make check` (too large; its
    /// replays are).
    pub fn immediate_handover() -> Self {
        HbConfig {
            name: "immediate-handover",
            max_ticks: 4,
            duration: 6,
            edited_duration: 6,
            duration_edits: 0,
            cuts: 1,
            restarts: 0,
            preference_edits: 1,
            readiness: 1,
            sought: Some(ONE_LEADER_AT_A_TIME),
            ..HbConfig::heartbeat()
        }
    }

    /// A foreign write of the Lease (another holder, an epoch higher), with the leader's client
    /// cut off or simply not yet told, then a `preferredLeader` edit: the Lease no longer names
    /// the pod that carries the leader's marks, and the handover must still wait for it.
    pub fn foreign_write() -> Self {
        HbConfig {
            name: "foreign-write",
            readiness: 0,
            forgeries: 1,
            max_epoch: 1 + FORGED_EPOCH_STEP + 2,
            ..HbConfig::immediate_handover()
        }
    }

    /// A Lease shortened while its leader's client is cut off, then an operator restart (its
    /// sighting lost) and a `preferredLeader` edit: neither the silence nor the step-down may be
    /// timed by the shorter Lease the holder never saw.
    pub fn shortened_handover() -> Self {
        HbConfig {
            name: "shortened-handover",
            max_ticks: 4,
            duration: 6,
            edited_duration: 3,
            duration_edits: 1,
            operator_restarts: 1,
            readiness: 0,
            ..HbConfig::immediate_handover()
        }
    }

    /// The Lease deleted by hand while its leader's client is cut off (it never sees the
    /// deletion), before or after a `preferredLeader` edit and a Lease shortened from 6 s to
    /// 3 s: the Lease created again must still make the handover wait for that leader, as long
    /// as the longest Lease it may have seen.
    pub fn lease_deleted() -> Self {
        HbConfig {
            name: "lease-deleted",
            max_ticks: 4,
            edited_duration: 3,
            duration_edits: 1,
            lease_deletions: 1,
            readiness: 0,
            ..HbConfig::immediate_handover()
        }
    }

    /// The leader's pod set `Failed` by the pod GC while its client, cut off, runs on (a node
    /// lost, its containers never reported stopped): the handover must still wait for the
    /// client's belief to lapse.
    pub fn pod_gc() -> Self {
        HbConfig {
            name: "pod-gc",
            max_ticks: 4,
            pod_gc: 1,
            preference_edits: 0,
            readiness: 0,
            ..HbConfig::immediate_handover()
        }
    }

    /// The status patched by hand (another pod named leader at the leader's epoch, the longest
    /// Lease duration gone) while the leader's client is cut off, then a `preferredLeader` edit
    /// and a Lease deletion: no epoch twice, and the handover still waits for the leader.
    pub fn status_patched() -> Self {
        HbConfig {
            name: "status-patched",
            max_ticks: 4,
            status_patches: 1,
            lease_deletions: 1,
            readiness: 0,
            ..HbConfig::immediate_handover()
        }
    }

    /// `p1` runs two members, one of them cut off (or simply not yet told) while the other
    /// hears the API server, then a `preferredLeader` edit: the handover must wait until neither
    /// may still believe `Leader`.
    pub fn two_members() -> Self {
        HbConfig {
            name: "two-members",
            max_ticks: 4,
            second_member: true,
            readiness: 0,
            ..HbConfig::immediate_handover()
        }
    }

    /// `p1`'s member runs in an agent, whose application reads its files; `p2`'s is an
    /// in-process `Membership`. The agent acts on each publication late (its own steps) and may
    /// be paused while its application runs on; a Lease of 1 s (a confirmation holds 0.67 s, so
    /// that one tick shows what two thirds of a Lease do), 1 pause, 1 `preferredLeader` edit,
    /// 1 s, epochs up to 2 (one handover). Finding 1 of issue 48 shows at 1 s: the successor
    /// leads (after a lapse, or two thirds of the Lease after a switchover) while a paused or
    /// lagging agent's files still say `leader`.
    pub fn agent_paused() -> Self {
        HbConfig {
            name: "agent-paused",
            max_ticks: 1,
            max_epoch: 2,
            duration: 1,
            edited_duration: 1,
            duration_edits: 0,
            cuts: 0,
            preference_edits: 1,
            agents: &[0],
            pauses: 1,
            ..HbConfig::heartbeat()
        }
    }

    /// [`HbConfig::agent_paused`] with the application before commit 146e1dd: it ignores the
    /// validity (nothing carried one), so it acts as leader on the last role it read.
    pub fn agent_paused_before_fix() -> Self {
        HbConfig {
            name: "agent-paused-before-fix",
            app: AppRule::IgnoresValidity,
            expected: Some(APP_ONE_LEADER),
            ..HbConfig::agent_paused()
        }
    }

    /// `p2`'s member runs in an agent, `p1`'s in-process: `p2` follows, leads, and is deposed
    /// again (2 `preferredLeader` edits), so that its agent's publications come back to a role
    /// it acted on before, while its command for `leader` has not run yet. A Lease of 3 s, all
    /// at 0 s (time does not pass). Finding 2 of issue 48 shows at 0 s.
    pub fn agent_returns() -> Self {
        HbConfig {
            name: "agent-returns",
            max_ticks: 0,
            duration: 3,
            edited_duration: 3,
            duration_edits: 0,
            cuts: 0,
            preference_edits: 2,
            agents: &[1],
            ..HbConfig::heartbeat()
        }
    }

    /// [`HbConfig::agent_returns`] with the step-down gate before commit 146e1dd: released once
    /// the role acted on equals the role published, by value.
    pub fn agent_returns_before_fix() -> Self {
        HbConfig {
            name: "agent-returns-before-fix",
            gate: GateRule::ByValue,
            expected: Some(APP_ONE_LEADER),
            ..HbConfig::agent_returns()
        }
    }

    /// `p1` runs an in-process `Membership` and an agent beside it (two members of one pod,
    /// each acknowledging and stepping down under its own name); `p2` an in-process one. As
    /// [`HbConfig::agent_paused`]: 1 pause of the agent, 1 `preferredLeader` edit, a Lease of
    /// 1 s, 1 s.
    pub fn agent_beside_membership() -> Self {
        HbConfig {
            name: "agent-beside-membership",
            max_ticks: 0,
            second_member: true,
            agents: &[SECOND_MEMBER],
            ..HbConfig::agent_paused()
        }
    }

    /// The larger run of the agents: both pods' members in agents (each acting late, one of
    /// them paused once), a Lease of 3 s (a confirmation holds 2 s, as the operator's wait
    /// after a switchover), 1 `preferredLeader` edit, 2 s, epochs up to 3.
    /// `make model MODEL_ARGS='--config agents-large'`.
    pub fn agents_large() -> Self {
        HbConfig {
            name: "agents-large",
            max_ticks: 2,
            max_epoch: 3,
            duration: 3,
            edited_duration: 3,
            agents: &[0, 1],
            ..HbConfig::agent_paused()
        }
    }

    /// Readiness mode, the default: the operator renews the Lease, each member acknowledges its
    /// leadership with a note of its own and steps down with another. The leader's pod turns
    /// NotReady (a handover at once) while its member is cut off or simply not yet told; a Lease
    /// of 1 s (a confirmation holds 0.67 s, so that one tick shows what two thirds of a Lease
    /// do), 1 s, epochs up to 2. The handshake most users run, with the client crate's own
    /// member: the successor leads only once the old leader stepped down or its confirmation ran
    /// out.
    pub fn readiness_handshake() -> Self {
        HbConfig {
            name: "readiness-handshake",
            heartbeat: false,
            max_ticks: 1,
            max_epoch: 2,
            duration: 1,
            edited_duration: 1,
            duration_edits: 0,
            cuts: 1,
            readiness: 1,
            ..HbConfig::heartbeat()
        }
    }

    /// [`HbConfig::agent_paused`] in Readiness mode: `p1`'s member in an agent that acts late and
    /// may be paused while its application runs on, `p2`'s in-process; 1 `preferredLeader` edit,
    /// a Lease of 1 s, 1 s.
    pub fn readiness_agent_paused() -> Self {
        HbConfig {
            name: "readiness-agent-paused",
            heartbeat: false,
            ..HbConfig::agent_paused()
        }
    }

    /// [`HbConfig::agent_beside_membership`] in Readiness mode: two members of `p1` (an
    /// in-process `Membership` and an agent beside it), each acknowledging and stepping down
    /// under its own name.
    pub fn readiness_two_members() -> Self {
        HbConfig {
            name: "readiness-two-members",
            heartbeat: false,
            ..HbConfig::agent_beside_membership()
        }
    }

    pub fn named(name: &str) -> Option<Self> {
        [
            HbConfig::heartbeat(),
            HbConfig::heartbeat_restart(),
            HbConfig::heartbeat_large(),
            HbConfig::immediate_handover(),
            HbConfig::foreign_write(),
            HbConfig::shortened_handover(),
            HbConfig::lease_deleted(),
            HbConfig::pod_gc(),
            HbConfig::status_patched(),
            HbConfig::two_members(),
            HbConfig::agent_paused(),
            HbConfig::agent_paused_before_fix(),
            HbConfig::agent_returns(),
            HbConfig::agent_returns_before_fix(),
            HbConfig::agent_beside_membership(),
            HbConfig::agents_large(),
            HbConfig::readiness_handshake(),
            HbConfig::readiness_agent_paused(),
            HbConfig::readiness_two_members(),
        ]
        .into_iter()
        .find(|c| c.name == name)
    }
}

/// What the checker may make happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HbAction {
    /// A second passes, on every clock alike.
    Tick,
    /// The operator observes the Lease, decides and writes.
    Operator,
    ReadPod(PodId),
    ReadLease(PodId),
    Renew(PodId),
    /// The API server applies a renewal, and answers its client if it still can.
    Deliver(Renewal),
    /// A cut-off client stops awaiting its renewal.
    GiveUp(PodId),
    Cut(PodId),
    Reconnect(PodId),
    /// The pod's client (or agent) process restarts.
    Restart(PodId),
    /// The operator restarts, or another replica takes over: what it saw of the Lease is lost.
    OperatorRestart,
    /// Someone deletes the Lease by hand.
    DeleteLease,
    /// The user sets `spec.leaseDurationSeconds`.
    EditDuration(u8),
    /// The user sets `spec.preferredLeader` to the pod.
    Prefer(PodId),
    /// The pod turns Ready or NotReady; its process (and client) runs on.
    SetReady(PodId, bool),
    /// A foreign writer rewrites the Lease.
    Forge,
    /// Someone patches the status to name the pod as leader, the epoch kept and the longest
    /// Lease duration dropped.
    PatchStatus(PodId),
    /// The pod GC sets the pod `Failed` (and NotReady); its process runs on.
    PodGc(PodId),
    /// The member writes the step-down it owes.
    StepDown(u8),
    /// The API server applies a member's step-down, and answers it if it still can.
    DeliverStepDown(SteppedDown),
    /// An agent takes its member's last publication: its files say it from now on.
    Take(u8),
    /// An agent's command for the oldest publication it took has run: it has acted on it.
    Ran(u8),
    /// An agent is frozen, its application running on.
    Pause(u8),
    Resume(u8),
}

#[derive(Clone, Debug)]
pub struct HeartbeatModel {
    pub config: HbConfig,
    /// Renumber versions and sort requests (the checker); off to print a counterexample.
    pub canonical: bool,
}

impl HeartbeatModel {
    pub fn new(config: HbConfig) -> Self {
        HeartbeatModel {
            config,
            canonical: true,
        }
    }

    /// The same model, its versions numbered as the API server would.
    pub fn raw(&self) -> Self {
        HeartbeatModel {
            config: self.config.clone(),
            canonical: false,
        }
    }

    /// `p1` leads at epoch 1: the operator wrote its Lease at tick 0, and both clients start.
    pub fn start(&self) -> HbState {
        let pods = usize::from(self.config.pods);
        let mut state = HbState {
            heartbeat: self.config.heartbeat,
            now: 0,
            lease: HbLease {
                holder: 0,
                epoch: 1,
                duration: self.config.duration,
                longest: None,
                acquired: 0,
                renewed: None,
                also_renewed: None,
                predecessor: None,
                forged: false,
                deleted: false,
                heartbeat: self.config.heartbeat,
                operator_renewed: None,
                rv: 1,
            },
            marks: (0..pods).map(|p| (p == 0).then_some(1)).collect(),
            ready: vec![true; pods],
            failed: vec![false; pods],
            preferred: None,
            spec_duration: self.config.duration,
            status: (0, 1),
            status_longest: Some(self.config.duration),
            sighting: None,
            clients: (0..self.config.pods)
                .map(|p| (p, Client::started(&pod_name(p), 0)))
                .chain(
                    self.config
                        .second_member
                        .then(|| (client::second_of(0), client::second_member(0))),
                )
                .map(|(m, c)| {
                    if self.config.agents.contains(&m) {
                        c.with_agent()
                    } else {
                        c
                    }
                })
                .collect(),
            inflight: Vec::new(),
            notes: Vec::new(),
            spent: HbSpent::default(),
            anomaly: false,
        };
        if operator::reconcile(&mut state).is_err() {
            state.anomaly = true;
        }
        self.finish(state)
    }

    fn finish(&self, state: HbState) -> HbState {
        if self.canonical {
            state.canonical(
                self.config.app == AppRule::HonoursValidity,
                self.config.gate == GateRule::BySeq,
            )
        } else {
            state
        }
    }

    fn pods(&self) -> impl Iterator<Item = PodId> {
        0..self.config.pods
    }

    fn enabled(&self, s: &HbState, actions: &mut Vec<HbAction>) {
        let c = &self.config;
        if s.now < c.max_ticks {
            actions.push(HbAction::Tick);
        }
        actions.push(HbAction::Operator);
        // The members' actions take a member (the pod's id, or its second member's).
        for m in s.members() {
            let Some(cl) = s.clients.get(s.member_index(m)) else {
                continue;
            };
            if cl.paused {
                actions.push(HbAction::Resume(m));
            } else {
                if cl.cut {
                    actions.push(HbAction::Reconnect(m));
                    if cl.awaiting || cl.noting {
                        actions.push(HbAction::GiveUp(m));
                    }
                } else {
                    actions.push(HbAction::ReadPod(m));
                    actions.push(HbAction::ReadLease(m));
                    if client::renewable(s, m).is_some() {
                        actions.push(HbAction::Renew(m));
                    }
                    if client::note_owed(s, m, c.gate).is_some() {
                        actions.push(HbAction::StepDown(m));
                    }
                    if s.spent.cuts < c.cuts {
                        actions.push(HbAction::Cut(m));
                    }
                }
                if client::takes(s, m) {
                    actions.push(HbAction::Take(m));
                }
                if client::runs(s, m) {
                    actions.push(HbAction::Ran(m));
                }
                if cl.agent.is_some() && s.spent.pauses < c.pauses {
                    actions.push(HbAction::Pause(m));
                }
            }
            if s.spent.restarts < c.restarts {
                actions.push(HbAction::Restart(m));
            }
        }
        for p in self.pods() {
            if s.spent.preference_edits < c.preference_edits && s.preferred != Some(p) {
                actions.push(HbAction::Prefer(p));
            }
            if s.spent.readiness < c.readiness
                && let Some(ready) = s.ready.get(usize::from(p))
            {
                actions.push(HbAction::SetReady(p, !ready));
            }
            if s.spent.status_patches < c.status_patches && s.status.0 != p {
                actions.push(HbAction::PatchStatus(p));
            }
            if s.spent.pod_gc < c.pod_gc && s.failed.get(usize::from(p)) == Some(&false) {
                actions.push(HbAction::PodGc(p));
            }
        }
        let mut seen: Vec<&Renewal> = Vec::new();
        for r in &s.inflight {
            if !seen.contains(&r) {
                seen.push(r);
                actions.push(HbAction::Deliver(r.clone()));
            }
        }
        let mut seen: Vec<&SteppedDown> = Vec::new();
        for n in &s.notes {
            if !seen.contains(&n) {
                seen.push(n);
                actions.push(HbAction::DeliverStepDown(n.clone()));
            }
        }
        if s.spent.forgeries < c.forgeries {
            actions.push(HbAction::Forge);
        }
        if s.spent.operator_restarts < c.operator_restarts && s.sighting.is_some() {
            actions.push(HbAction::OperatorRestart);
        }
        if s.spent.lease_deletions < c.lease_deletions && !s.lease.deleted {
            actions.push(HbAction::DeleteLease);
        }
        if s.spent.duration_edits < c.duration_edits && s.spec_duration != c.edited_duration {
            actions.push(HbAction::EditDuration(c.edited_duration));
        }
    }

    /// The state after `action`, not yet renumbered. `None`: nothing changes.
    pub fn step(&self, last: &HbState, action: &HbAction) -> Option<HbState> {
        let mut s = last.clone();
        match action {
            HbAction::Tick => {
                s.now += 1;
                // Each member's lapse wakes it (unless paused): it publishes what it believes.
                for m in s.members() {
                    client::publish(&mut s, m);
                }
            }
            HbAction::Operator => match operator::reconcile(&mut s) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(_) => s.anomaly = true,
            },
            HbAction::ReadPod(p) => client::read_pod(&mut s, *p),
            HbAction::ReadLease(p) => client::read_lease(&mut s, *p),
            HbAction::Renew(p) => client::renew(&mut s, *p),
            HbAction::Deliver(r) => {
                let i = s.inflight.iter().position(|x| x == r)?;
                let renewal = s.inflight.remove(i);
                client::deliver(&mut s, &renewal);
            }
            HbAction::GiveUp(p) => client::give_up(&mut s, *p),
            HbAction::Cut(p) => {
                s.spent.cuts += 1;
                client::set_cut(&mut s, *p, true);
            }
            HbAction::Reconnect(p) => client::set_cut(&mut s, *p, false),
            HbAction::Restart(p) => {
                s.spent.restarts += 1;
                client::restart(&mut s, *p);
            }
            HbAction::DeleteLease => {
                s.spent.lease_deletions += 1;
                s.lease.deleted = true;
                s.lease.rv = s.next_rv();
            }
            HbAction::OperatorRestart => {
                s.spent.operator_restarts += 1;
                s.sighting = None;
            }
            HbAction::EditDuration(d) => {
                s.spent.duration_edits += 1;
                s.spec_duration = *d;
            }
            HbAction::Prefer(p) => {
                s.spent.preference_edits += 1;
                s.preferred = Some(*p);
            }
            HbAction::SetReady(p, ready) => {
                s.spent.readiness += 1;
                if let Some(r) = s.ready.get_mut(usize::from(*p)) {
                    *r = *ready;
                }
            }
            HbAction::PatchStatus(p) => {
                s.spent.status_patches += 1;
                s.status.0 = *p;
                s.status_longest = None;
            }
            HbAction::PodGc(p) => {
                s.spent.pod_gc += 1;
                if let Some(f) = s.failed.get_mut(usize::from(*p)) {
                    *f = true;
                }
                if let Some(r) = s.ready.get_mut(usize::from(*p)) {
                    *r = false;
                }
            }
            HbAction::StepDown(m) => client::step_down(&mut s, *m, self.config.gate),
            HbAction::DeliverStepDown(n) => {
                let i = s.notes.iter().position(|x| x == n)?;
                let note = s.notes.remove(i);
                client::deliver_step_down(&mut s, &note);
            }
            HbAction::Take(m) => client::take(&mut s, *m),
            HbAction::Ran(m) => client::ran(&mut s, *m),
            HbAction::Pause(m) => {
                s.spent.pauses += 1;
                client::set_paused(&mut s, *m, true);
            }
            HbAction::Resume(m) => client::set_paused(&mut s, *m, false),
            HbAction::Forge => {
                s.spent.forgeries += 1;
                s.lease.forged = true;
                s.lease.epoch += FORGED_EPOCH_STEP;
                s.lease.rv = s.next_rv();
            }
        }
        (&s != last).then_some(s)
    }
}

pub const NO_STALE_LEADER: &str =
    "heartbeat: no client believes Leader once a successor holds the Lease and it is not awaited";
pub const ONE_LEADER_AT_A_TIME: &str =
    "heartbeat: at most one client believes Leader at any instant";
pub const CONSISTENT: &str = "heartbeat model consistent";
pub const CLIENT_LEADS: &str = "sometimes a client believes Leader";
/// In the configurations without a `preferredLeader` edit or a readiness change, only a lapsed
/// heartbeat hands the Lease over.
pub const HANDED_OVER: &str = "sometimes the Lease is handed over";
pub const SUCCESSOR_LEADS: &str = "sometimes a successor's client believes Leader";
/// The guarantee where the application reads its role: an agent's application acts as leader
/// while the publication its agent's files hold says `Leader` and (if it honours it) its
/// validity has not ended on its clock; an in-process `Membership`'s while its role is `Leader`.
pub const APP_ONE_LEADER: &str =
    "application: at no instant do two pods' applications act as leader";
pub const APP_LEADS: &str = "sometimes an agent's application acts as leader";
pub const AGENT_STEPS_DOWN: &str = "sometimes an agent's member sends its step-down";

/// The clients that believe `Leader` at an epoch the Lease no longer holds, with that epoch. A
/// foreign writer's holder is no successor: no pod leads under it, and the client learns of it
/// at its next read of the Lease (the property of one believer at a time still holds then).
pub fn stale_leaders(s: &HbState) -> Vec<(PodId, i64)> {
    if s.lease.forged {
        return Vec::new();
    }
    let mut stale: Vec<(PodId, i64)> = s
        .members()
        .into_iter()
        .filter_map(|m| match client::role(s, m) {
            Some(Role::Leader { epoch })
                if i64::from(epoch) != s.lease.epoch
                    && !awaited(s, pod_of(m), i64::from(epoch)) =>
            {
                Some((pod_of(m), i64::from(epoch)))
            }
            _ => None,
        })
        .collect();
    stale.sort_unstable();
    stale.dedup();
    stale
}

/// Whether the Lease still waits for `pod`'s step-down from `epoch`: deposed at once, it may
/// believe `Leader` until it steps down or its belief lapses, and its successor is not labeled
/// until then (the other property, one believer at a time, is what that wait keeps).
fn awaited(s: &HbState, pod: PodId, epoch: i64) -> bool {
    // An unknown predecessor (a Lease created again that could not name it) stands for every
    // leader up to its epoch: the wait is for whichever of them may still believe.
    s.lease.predecessor.as_ref().is_some_and(|p| {
        let named =
            (p.pod == pod && p.epoch == epoch) || (p.pod == UNKNOWN_POD && epoch <= p.epoch);
        named && !p.stepped_down
    })
}

/// The pods whose members believe `Leader` now, with the epoch (two members of one pod are one
/// leader: the first of them that believes).
pub fn believed_leaders(s: &HbState) -> Vec<(PodId, i64)> {
    let mut leaders: Vec<(PodId, i64)> = Vec::new();
    for m in s.members() {
        if let Some(Role::Leader { epoch }) = client::role(s, m)
            && !leaders.iter().any(|(p, _)| *p == pod_of(m))
        {
            leaders.push((pod_of(m), i64::from(epoch)));
        }
    }
    leaders
}

fn any_leader(s: &HbState) -> bool {
    !believed_leaders(s).is_empty()
}

/// The pods whose applications act as leader now, with the epoch they act at (an agent's
/// application by the publication it holds, an in-process member's by its role).
pub fn acting_leaders(s: &HbState, app: AppRule) -> Vec<(PodId, i64)> {
    let mut leaders: Vec<(PodId, i64)> = Vec::new();
    for m in s.members() {
        let Some(c) = s.clients.get(s.member_index(m)) else {
            continue;
        };
        let now = clock::client(m, s.now);
        let role = match &c.agent {
            Some(agent) if agent.app_leads(now, app == AppRule::HonoursValidity) => agent.held.role,
            Some(_) => Role::Unknown,
            None => c.belief.role(now),
        };
        if let Role::Leader { epoch } = role
            && !leaders.iter().any(|(p, _)| *p == pod_of(m))
        {
            leaders.push((pod_of(m), i64::from(epoch)));
        }
    }
    leaders
}

/// Whether an agent's application acts as leader now.
fn agent_app_leads(s: &HbState, app: AppRule) -> bool {
    s.members().into_iter().any(|m| {
        s.clients
            .get(s.member_index(m))
            .and_then(|c| c.agent.as_ref())
            .is_some_and(|a| a.app_leads(clock::client(m, s.now), app == AppRule::HonoursValidity))
    })
}

impl Model for HeartbeatModel {
    type State = HbState;
    type Action = HbAction;

    fn init_states(&self) -> Vec<HbState> {
        vec![self.start()]
    }

    fn actions(&self, state: &HbState, actions: &mut Vec<HbAction>) {
        self.enabled(state, actions);
    }

    fn next_state(&self, last: &HbState, action: HbAction) -> Option<HbState> {
        self.step(last, &action).map(|s| self.finish(s))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::always(NO_STALE_LEADER, |_, s| stale_leaders(s).is_empty()),
            Property::always(ONE_LEADER_AT_A_TIME, |_, s| believed_leaders(s).len() <= 1),
            Property::always(APP_ONE_LEADER, |m: &HeartbeatModel, s| {
                acting_leaders(s, m.config.app).len() <= 1
            }),
            Property::always(CONSISTENT, |_, s: &HbState| !s.anomaly),
            Property::sometimes(CLIENT_LEADS, |_, s| any_leader(s)),
            Property::sometimes(HANDED_OVER, |_, s: &HbState| s.lease.epoch >= 2),
            Property::sometimes(SUCCESSOR_LEADS, |_, s: &HbState| {
                s.lease.epoch >= 2 && any_leader(s)
            }),
        ];
        // So that the agents' properties are not vacuous: an agent's application leads, and an
        // agent's member's own step-down (gated) goes out.
        if !self.config.agents.is_empty() {
            p.push(Property::sometimes(APP_LEADS, |m: &HeartbeatModel, s| {
                agent_app_leads(s, m.config.app)
            }));
            p.push(Property::sometimes(AGENT_STEPS_DOWN, |_, s: &HbState| {
                s.notes.iter().filter(|n| !n.acknowledges).any(|n| {
                    s.clients
                        .get(s.member_index(n.member))
                        .is_some_and(|c| c.agent.is_some())
                })
            }));
        }
        p
    }

    fn within_boundary(&self, state: &HbState) -> bool {
        state.lease.epoch <= self.config.max_epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run;

    /// Explores `config` exhaustively: no client believes `Leader` once a successor holds the
    /// Lease, never two at once, and the handover is reachable (the properties are not vacuous).
    fn check_holds(config: HbConfig) {
        let model = HeartbeatModel::new(config);
        let report = run::check(model.clone(), 2, run::Search::DepthFirst, false, None);
        println!("{}", run::render(&report, &model));
        assert!(report.complete, "the checker stopped before the end");
        assert!(report.found(NO_STALE_LEADER).is_none());
        assert!(report.found(ONE_LEADER_AT_A_TIME).is_none());
        assert!(report.found(CONSISTENT).is_none());
        assert!(report.found(CLIENT_LEADS).is_some());
        assert!(report.found(HANDED_OVER).is_some());
        assert!(report.found(SUCCESSOR_LEADS).is_some());
    }

    /// Explores a configuration with agents exhaustively: besides what [`check_holds`] asks,
    /// never two pods' applications act as leader at once, and the agent's application leads
    /// and its member's gated step-down goes out (the properties are not vacuous).
    fn agents_hold(config: HbConfig) {
        let model = HeartbeatModel::new(config);
        let report = run::check(model.clone(), 2, run::Search::DepthFirst, false, None);
        println!("{}", run::render(&report, &model));
        assert!(report.complete, "the checker stopped before the end");
        assert_eq!(run::failures(&report, &model), Vec::<String>::new());
        assert!(report.found(APP_ONE_LEADER).is_none());
        assert!(report.found(CLIENT_LEADS).is_some());
        assert!(report.found(SUCCESSOR_LEADS).is_some());
        assert!(report.found(APP_LEADS).is_some());
        assert!(report.found(AGENT_STEPS_DOWN).is_some());
    }

    /// A configuration of the code before commit 146e1dd, searched breadth first until the
    /// first counterexample: two pods' applications act as leader at once (its expected
    /// outcome, so the run passes), and the path, printed.
    fn breaks_the_application_guarantee(config: HbConfig) -> String {
        let model = HeartbeatModel::new(config);
        let report = run::check(model.clone(), 2, run::Search::FirstFailure, false, None);
        let text = run::render(&report, &model);
        println!("{text}");
        assert!(report.found(APP_ONE_LEADER).is_some(), "{text}");
        assert_eq!(run::failures(&report, &model), Vec::<String>::new());
        // The members' own beliefs never overlap: only what the applications read does.
        assert!(report.found(ONE_LEADER_AT_A_TIME).is_none(), "{text}");
        text
    }

    /// The agent's application stops at the validity of the role it read, however late its
    /// agent acts and while it is paused: 353,964 states.
    #[test]
    fn agent_paused_check_holds() {
        agents_hold(HbConfig::agent_paused());
    }

    /// The step-down of an agent whose publications come back to a role it acted on waits for
    /// the very publication made then: 24,251 states.
    #[test]
    fn agent_returns_check_holds() {
        agents_hold(HbConfig::agent_returns());
    }

    /// Two members of `p1`, an in-process `Membership` and an agent beside it, each waited for
    /// under its own name, the agent's step-down gated on its publications: 292,948 states.
    #[test]
    fn agent_beside_membership_check_holds() {
        agents_hold(HbConfig::agent_beside_membership());
    }

    /// Finding 1 of issue 48: an application that ignores the validity acts as leader on the
    /// `leader` its late (or paused) agent's files still say, beside the successor.
    #[test]
    fn an_application_ignoring_the_validity_acts_beside_the_successor() {
        let text = breaks_the_application_guarantee(HbConfig::agent_paused_before_fix());
        assert!(text.contains("ignores validUntil"), "{text}");
    }

    /// Finding 2 of issue 48: with the gate comparing roles by value, the agent's member steps
    /// down once its publications come back to `follower`, which it acted on before, while
    /// its files still say `leader` (valid for two thirds of the Lease): the successor is
    /// labeled at once.
    #[test]
    fn a_gate_by_value_lets_the_successor_lead_beside_the_agents_application() {
        let text = breaks_the_application_guarantee(HbConfig::agent_returns_before_fix());
        assert!(text.contains("sends its step-down"), "{text}");
    }

    /// The Readiness handshake with the client crate's own member: a leader's pod NotReady
    /// while its member is cut off.
    #[test]
    fn readiness_handshake_check_holds() {
        check_holds(HbConfig::readiness_handshake());
    }

    /// An agent's member in Readiness mode, late and paused.
    #[test]
    fn readiness_agent_paused_check_holds() {
        agents_hold(HbConfig::readiness_agent_paused());
    }

    /// Two members of one pod in Readiness mode, each acknowledging under its own name.
    #[test]
    fn readiness_two_members_check_holds() {
        agents_hold(HbConfig::readiness_two_members());
    }

    /// `make check`'s first Heartbeat configuration: 86,311 states.
    #[test]
    fn heartbeat_check_holds() {
        check_holds(HbConfig::heartbeat());
    }

    /// `make check`'s second: 35,675 states.
    #[test]
    fn heartbeat_restart_check_holds() {
        check_holds(HbConfig::heartbeat_restart());
    }
}
