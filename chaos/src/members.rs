//! The applications of the run and the members they follow. Every pod runs the client's
//! `Membership` in this process, one per pod (two in some groups' pods,
//! [`crate::plan::members_per_pod`]), authenticated as its group's members' ServiceAccount and
//! each reaching the API server through a proxy of its own (which the faults cut or stall: all of
//! a pod's at once when its node is cut off, or one member's alone). A pod's members start when
//! the pod is created and stop when its container stops; a restart fault stops them and starts
//! new ones in the same pod.
//!
//! Each member has an application, which acts on what it last got: leader only while that
//! publication's [`Publication::role_at`] says so, that is before its `valid_until`. The pod's
//! last member is its agent ([`is_agent`]): a sidecar process whose relay hands each publication
//! to its application and then tells the member it acted on it (the member is gated, as the
//! agent's is); [`Members::pause_agent`] freezes it, and its application runs on with the last
//! publication it got. The first of a pod of two is the application's own, in its process
//! (ungated): its relay never pauses, and its application restarts with it.
//!
//! Every delivery to every application is recorded on this process's monotonic clock
//! ([`Claims`]): at no instant may the applications of two pods of a group act as leader (the
//! application-level guarantee the client and the agent document).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leadergroup_client::{ActedOn, Membership, Publication};
use leadergroup_testenv::{PrivateCluster, Proxy};
use tokio::sync::watch;

use crate::Error;
use crate::world::World;

/// Whether member `index` of a pod of group `g` is the pod's agent (a process beside its
/// application's, which it hands each publication): the last one, the only one of a pod of one.
pub fn is_agent(g: usize, index: usize) -> bool {
    index + 1 == crate::plan::members_per_pod(g)
}

/// Why a member fault found nothing to strike: its pod is gone.
pub const GONE: &str = "its pod is gone";
/// Why: its node is cut off (its kubelet reports nothing either).
pub const CUT_OFF: &str = "its node is cut off";
/// Why: one of its members is cut off alone.
pub const ONE_CUT: &str = "one of its members is cut off";
/// Why: its agent is paused.
pub const PAUSED: &str = "its agent is paused";
/// Why: its members are restarting.
pub const RESTARTING: &str = "its client is restarting already";
/// Why: a pod of one member has no member to cut off alone.
pub const ONE_MEMBER: &str = "a pod of one member";

/// The `Membership`s of the run's pods, and their applications.
pub struct Members {
    cluster: Arc<PrivateCluster>,
    upstream: SocketAddr,
    namespace: String,
    /// Per group: its members' ServiceAccount token.
    tokens: Vec<String>,
    /// Per live pod (created, its container not stopped).
    pods: tokio::sync::Mutex<HashMap<String, Member>>,
    claims: Arc<Claims>,
}

/// One pod's members.
struct Member {
    group: usize,
    /// One proxy per `Membership` of the pod.
    proxies: Vec<Proxy>,
    /// `None` while restarting.
    running: Option<Vec<Running>>,
    /// Its node is cut off (a [`Members::cut`] not yet healed).
    cut: bool,
    /// Its last member alone is cut off (a [`Members::cut_one`] not yet healed).
    one_cut: bool,
    /// Its agent is paused (a [`Members::pause_agent`] not yet resumed).
    paused: bool,
}

impl Member {
    /// Why a fault that needs the pod's connections as they are must skip it now, if it must.
    fn busy(&self) -> Option<&'static str> {
        if self.cut {
            Some(CUT_OFF)
        } else if self.one_cut {
            Some(ONE_CUT)
        } else if self.paused {
            Some(PAUSED)
        } else {
            None
        }
    }
}

/// A `Membership` and the relay that hands its publications to its application.
struct Running {
    /// Held for its life: dropping it stops it (after the relay, which [`Members::stop`] aborts
    /// first, so that the member's last `Unknown` is not delivered as a publication).
    _membership: Membership,
    relay: tokio::task::JoinHandle<()>,
    /// True holds every publication back (the agent frozen).
    pause: watch::Sender<bool>,
}

impl Members {
    /// No member yet; `tokens`: each group's members' ServiceAccount token.
    pub fn new(
        cluster: Arc<PrivateCluster>,
        namespace: &str,
        tokens: Vec<String>,
    ) -> Result<Members, Error> {
        let server = cluster.server_url().to_owned();
        let upstream = server
            .trim_start_matches("https://")
            .parse()
            .map_err(|e| Error::Setup(format!("the API server's address {server}: {e}")))?;
        Ok(Members {
            cluster,
            upstream,
            namespace: namespace.to_owned(),
            tokens,
            pods: tokio::sync::Mutex::new(HashMap::new()),
            claims: Arc::new(Claims::default()),
        })
    }

    /// What every application acted on.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// Starts the members and applications of the new pod `pod` of group `g`.
    pub async fn join(&self, g: usize, pod: &str) -> Result<(), Error> {
        let mut proxies = Vec::new();
        for _ in 0..crate::plan::members_per_pod(g) {
            proxies.push(Proxy::start(self.upstream).await?);
        }
        let mut member = Member {
            group: g,
            proxies,
            running: None,
            cut: false,
            one_cut: false,
            paused: false,
        };
        member.running = Some(self.run(&member, pod).await?);
        self.pods.lock().await.insert(pod.to_owned(), member);
        Ok(())
    }

    /// Stops the members and applications of `pod` for good (its containers stopped).
    pub async fn leave(&self, pod: &str) {
        let member = self.pods.lock().await.remove(pod);
        if let Some(mut member) = member {
            let running = member.running.take();
            self.stop(&member, pod, running, true);
        }
    }

    /// Stops the members of `pod` (to be started again by [`Members::start_again`]): an agent's
    /// application runs on with the last publication it got, the application of an in-process
    /// member stops with it. The reason to skip it when it cannot (restarting already, its agent
    /// paused, gone).
    pub async fn stop_for_restart(&self, pod: &str) -> Result<(), &'static str> {
        let mut pods = self.pods.lock().await;
        let member = pods.get_mut(pod).ok_or(GONE)?;
        if member.paused {
            // Its agent's connection is held: a new agent would start behind it.
            return Err(PAUSED);
        }
        let running = member.running.take().ok_or(RESTARTING)?;
        self.stop(member, pod, Some(running), false);
        Ok(())
    }

    /// Starts the members of `pod` again after [`Members::stop_for_restart`], unless the pod has
    /// gone meanwhile.
    pub async fn start_again(&self, pod: &str) -> Result<(), Error> {
        let mut pods = self.pods.lock().await;
        let Some(member) = pods.get_mut(pod) else {
            return Ok(());
        };
        if member.running.is_none() {
            member.running = Some(self.run(member, pod).await?);
        }
        Ok(())
    }

    /// Cuts `pod`'s node off: its connections hold every byte. The reason to skip it when it is
    /// cut already, its agent paused, or gone.
    pub async fn cut(&self, pod: &str) -> Result<(), &'static str> {
        let mut pods = self.pods.lock().await;
        let member = pods.get_mut(pod).ok_or(GONE)?;
        if let Some(why) = member.busy() {
            return Err(why);
        }
        member.cut = true;
        member.proxies.iter().for_each(Proxy::cut);
        Ok(())
    }

    /// Cuts the last of `pod`'s two members off alone (its connection, not its node: the pod's
    /// other member and its kubelet hear the API server). The reason to skip it for a pod of one
    /// member, or one cut or paused already (or gone).
    pub async fn cut_one(&self, pod: &str) -> Result<(), &'static str> {
        let mut pods = self.pods.lock().await;
        let member = pods.get_mut(pod).ok_or(GONE)?;
        if let Some(why) = member.busy() {
            return Err(why);
        }
        let [_, .., last] = member.proxies.as_slice() else {
            return Err(ONE_MEMBER);
        };
        member.one_cut = true;
        last.cut();
        Ok(())
    }

    /// Ends [`Members::cut`] or [`Members::cut_one`]: the hung connections close, new ones flow.
    pub async fn heal(&self, pod: &str) {
        if let Some(member) = self.pods.lock().await.get_mut(pod)
            && (member.cut || member.one_cut)
        {
            member.cut = false;
            member.one_cut = false;
            member.proxies.iter().for_each(Proxy::heal);
        }
    }

    /// Freezes `pod`'s agent, as a SIGSTOP would: its relay hands its application nothing more
    /// and its connection holds every byte (so its member neither hears nor tells the API
    /// server), while the application runs on with the last publication it got. The reason to
    /// skip it when its connections are cut or its agent paused already, its members restarting,
    /// or the pod gone.
    pub async fn pause_agent(&self, pod: &str) -> Result<(), &'static str> {
        let mut pods = self.pods.lock().await;
        let member = pods.get_mut(pod).ok_or(GONE)?;
        if let Some(why) = member.busy() {
            return Err(why);
        }
        let running = member.running.as_ref().ok_or(RESTARTING)?;
        let (Some(agent), Some(proxy)) = (running.last(), member.proxies.last()) else {
            return Err(GONE);
        };
        // The relay first: nothing the held connection still brings in reaches the application.
        agent.pause.send_replace(true);
        proxy.cut();
        member.paused = true;
        Ok(())
    }

    /// Ends [`Members::pause_agent`], as a SIGCONT would: what its connection held is delivered
    /// late, and its relay hands the application the member's latest publication.
    pub async fn resume_agent(&self, pod: &str) {
        let mut pods = self.pods.lock().await;
        let Some(member) = pods.get_mut(pod).filter(|m| m.paused) else {
            return;
        };
        member.paused = false;
        if let Some(proxy) = member.proxies.last() {
            proxy.release();
        }
        if let Some(agent) = member.running.as_ref().and_then(|r| r.last()) {
            agent.pause.send_replace(false);
        }
    }

    /// Whether `pod`'s node is cut off now (its kubelet cannot report either).
    pub async fn is_cut(&self, pod: &str) -> bool {
        self.pods.lock().await.get(pod).is_some_and(|m| m.cut)
    }

    /// Stalls `pod`'s open connections for good; false when it is gone.
    pub async fn stall(&self, pod: &str) -> bool {
        match self.pods.lock().await.get(pod) {
            Some(member) => {
                member.proxies.iter().for_each(Proxy::stall);
                true
            }
            None => false,
        }
    }

    /// Stops every member and application (the run's end).
    pub async fn stop_all(&self) {
        let pods: Vec<(String, Member)> = self.pods.lock().await.drain().collect();
        for (pod, mut member) in pods {
            let running = member.running.take();
            self.stop(&member, &pod, running, true);
        }
    }

    /// A `Membership` for `pod` through each of its proxies, each with the relay that hands its
    /// publications to its application.
    async fn run(&self, member: &Member, pod: &str) -> Result<Vec<Running>, Error> {
        let token = self
            .tokens
            .get(member.group)
            .ok_or_else(|| Error::Setup(format!("no token for group {}", member.group)))?;
        let mut running = Vec::new();
        for (index, proxy) in member.proxies.iter().enumerate() {
            let client = self
                .cluster
                .client_with_token_via(token, Some(proxy.addr))
                .await?;
            let group = World::group(member.group);
            let agent = is_agent(member.group, index);
            // The agent's member steps down only once its application got the publication that
            // says so, as the agent binary's does (its files written); the application's own
            // pauses with it and needs no gate.
            let membership = if agent {
                Membership::start_gated(client, &self.namespace, pod, None, Some(group.clone()))
            } else {
                Membership::start(client, &self.namespace, pod, Some(group.clone()))
            };
            let acted = agent.then(|| membership.acted_on());
            let (pause, paused) = watch::channel(false);
            let app = App {
                group,
                pod: pod.to_owned(),
                index,
            };
            let relay = tokio::spawn(relay(
                membership.publications(),
                paused,
                acted,
                Arc::clone(&self.claims),
                app,
            ));
            running.push(Running {
                _membership: membership,
                relay,
                pause,
            });
        }
        Ok(running)
    }

    /// Stops `running` (the members of `member`'s pod): the relays first, then the members.
    /// `all`: every application of the pod stops too (its containers stopped); otherwise only
    /// those of in-process members, an agent's application running on.
    fn stop(&self, member: &Member, pod: &str, running: Option<Vec<Running>>, all: bool) {
        let group = World::group(member.group);
        for running in running.iter().flatten() {
            running.relay.abort();
        }
        // Dropping them stops the members; their relays are gone already.
        drop(running);
        for index in 0..member.proxies.len() {
            if all || !is_agent(member.group, index) {
                self.claims.stopped(&group, (pod, index));
            }
        }
    }
}

/// Which application: its group, its pod, its member's index there.
struct App {
    group: String,
    pod: String,
    index: usize,
}

/// Hands every publication of a member to its application (recorded in `claims`) unless paused,
/// the latest one on resuming; for an agent, then tells the member it was acted on.
async fn relay(
    mut publications: watch::Receiver<Publication>,
    mut paused: watch::Receiver<bool>,
    acted: Option<ActedOn>,
    claims: Arc<Claims>,
    app: App,
) {
    let mut delivered = None;
    loop {
        if !*paused.borrow_and_update() {
            let publication = *publications.borrow_and_update();
            if delivered != Some(publication.seq) {
                claims.delivered(&app.group, (&app.pod, app.index), publication);
                delivered = Some(publication.seq);
                if let Some(acted) = &acted {
                    acted.publication(publication.seq).await;
                }
            }
        }
        // Either sender gone: the member stopped, and so does its relay.
        tokio::select! {
            changed = publications.changed() => if changed.is_err() { return },
            changed = paused.changed() => if changed.is_err() { return },
        }
    }
}

/// Two applications of one group, in two pods, acting as leader at once.
#[derive(Clone, Debug)]
pub struct Overlap {
    pub group: String,
    /// The one that acted as leader first, and its epoch.
    pub first: (String, i64),
    /// The one that acted as leader while the first still did.
    pub second: (String, i64),
    pub since: Instant,
    /// `None`: still open at the end of the run.
    pub length: Option<Duration>,
}

/// What every application acted on, on one clock.
#[derive(Default)]
pub struct Claims {
    state: Mutex<ClaimState>,
}

/// An application: its pod, and its member's index there.
type AppKey = (String, usize);

/// An application acting as leader.
#[derive(Clone, Copy, Debug)]
struct Acting {
    epoch: i64,
    /// Its last publication's `valid_until`: it stops acting then unless a newer one came.
    until: Option<Instant>,
}

/// What [`Claims::report`] tells.
#[derive(Clone, Debug, Default)]
pub struct ClaimsReport {
    /// Publications handed to applications.
    pub deliveries: usize,
    /// Of them, those that made an application start acting as leader.
    pub leader_starts: usize,
    /// Leaderships an application ended at its publication's `valid_until`, having got nothing
    /// newer by then (its agent paused, cut off or restarting, or its member lapsing).
    pub lapsed: usize,
    /// Two applications of a group acting as leader at once.
    pub overlaps: Vec<Overlap>,
}

#[derive(Default)]
struct ClaimState {
    /// Per group, per application acting as leader now: its epoch and until when.
    leading: BTreeMap<String, BTreeMap<AppKey, Acting>>,
    deliveries: usize,
    leader_starts: usize,
    lapsed: usize,
    overlaps: Vec<Overlap>,
}

impl Claims {
    /// The application of member `index` of `pod` got `publication`, now.
    pub fn delivered(&self, group: &str, (pod, index): (&str, usize), publication: Publication) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Read under the lock: the events of all applications are applied in the order of
        // their instants, which the validity's lapses are ordered against.
        let now = Instant::now();
        state.deliver(group, (pod, index), publication, now);
    }

    /// The application of member `index` of `pod` stopped, now.
    pub fn stopped(&self, group: &str, (pod, index): (&str, usize)) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        state.lapse(group, now);
        state.act(group, (pod, index), None, now);
    }

    /// What the applications acted on, every lapse up to now applied.
    pub fn report(&self) -> ClaimsReport {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let groups: Vec<String> = state.leading.keys().cloned().collect();
        for group in groups {
            state.lapse(&group, now);
        }
        ClaimsReport {
            deliveries: state.deliveries,
            leader_starts: state.leader_starts,
            lapsed: state.lapsed,
            overlaps: state.overlaps.clone(),
        }
    }
}

impl ClaimState {
    /// `publication` reaches the application `(pod, index)` of `group` at `now` (no earlier than
    /// any event before).
    fn deliver(
        &mut self,
        group: &str,
        (pod, index): (&str, usize),
        publication: Publication,
        now: Instant,
    ) {
        self.lapse(group, now);
        self.deliveries += 1;
        let acting = publication
            .role_at(tokio::time::Instant::from_std(now))
            .leader_epoch()
            .map(|epoch| Acting {
                epoch: epoch.get(),
                until: publication.valid_until.map(tokio::time::Instant::into_std),
            });
        self.act(group, (pod, index), acting, now);
    }

    /// The application `(pod, index)` of `group` acts on `acting` from `now` on (every lapse
    /// before applied). Two applications of one pod acting as leader together are no overlap:
    /// they are one leader.
    fn act(
        &mut self,
        group: &str,
        (pod, index): (&str, usize),
        acting: Option<Acting>,
        now: Instant,
    ) {
        let key = (pod.to_owned(), index);
        let leading = self.leading.entry(group.to_owned()).or_default();
        let before = leading.get(&key).map(|a| a.epoch);
        if before == acting.map(|a| a.epoch) {
            // The same leadership, or none still: only its validity may have moved.
            if let (Some(a), Some(held)) = (acting, leading.get_mut(&key)) {
                *held = a;
            }
            return;
        }
        leading.remove(&key);
        let others: Vec<(String, i64)> = leading
            .iter()
            .filter(|((p, _), _)| p != pod)
            .map(|((p, _), a)| (p.clone(), a.epoch))
            .collect();
        if let Some(a) = acting {
            leading.insert(key, a);
            self.leader_starts += 1;
            for first in others {
                self.overlaps.push(Overlap {
                    group: group.to_owned(),
                    first,
                    second: (pod.to_owned(), a.epoch),
                    since: now,
                    length: None,
                });
            }
        }
        if before.is_some() {
            self.stopped_leading(group, pod, now);
        }
    }

    /// Every application of `group` whose leadership's validity passed by `now` stops acting as
    /// leader at that instant, in the order they lapsed.
    fn lapse(&mut self, group: &str, now: Instant) {
        let Some(leading) = self.leading.get_mut(group) else {
            return;
        };
        let mut lapsed: Vec<(Instant, AppKey)> = leading
            .iter()
            .filter_map(|(key, a)| a.until.filter(|u| *u <= now).map(|u| (u, key.clone())))
            .collect();
        lapsed.sort();
        for (until, key) in lapsed {
            if let Some(leading) = self.leading.get_mut(group) {
                leading.remove(&key);
            }
            self.lapsed += 1;
            self.stopped_leading(group, &key.0, until);
        }
    }

    /// An application of `pod` stopped acting as leader at `at`: an overlap ends when either
    /// side stops, that is when no application of its pod acts as leader any more.
    fn stopped_leading(&mut self, group: &str, pod: &str, at: Instant) {
        let pod_still_leads = self
            .leading
            .get(group)
            .is_some_and(|l| l.keys().any(|(p, _)| p == pod));
        if pod_still_leads {
            return;
        }
        for o in self.overlaps.iter_mut().filter(|o| o.length.is_none()) {
            if o.group == group && (o.first.0 == pod || o.second.0 == pod) {
                o.length = Some(at.saturating_duration_since(o.since));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leadergroup_client::{Epoch, Role};

    /// A publication of `role`, valid until `until` (a leader's).
    fn publication(seq: u64, role: Role, until: Option<Instant>) -> Publication {
        Publication {
            role,
            seq,
            valid_until: until.map(tokio::time::Instant::from_std),
        }
    }

    fn leader(epoch: u32) -> Role {
        Role::Leader {
            epoch: Epoch::from(epoch),
        }
    }

    /// A leader's publication at `epoch`, valid until `until`.
    fn lead(seq: u64, epoch: u32, until: Instant) -> Publication {
        publication(seq, leader(epoch), Some(until))
    }

    fn report(state: &ClaimState) -> (usize, usize, usize, Vec<Overlap>) {
        (
            state.deliveries,
            state.leader_starts,
            state.lapsed,
            state.overlaps.clone(),
        )
    }

    #[test]
    fn a_handover_in_order_is_no_overlap_and_one_out_of_order_is_timed() {
        let mut s = ClaimState::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let far = Some(at(10_000));
        s.deliver("g0", ("a", 0), publication(1, leader(1), far), at(0));
        s.deliver("g0", ("a", 0), publication(2, Role::Unknown, None), at(10));
        s.deliver("g0", ("b", 0), publication(1, leader(2), far), at(20));
        s.deliver("g1", ("x", 0), publication(1, leader(1), far), at(25));
        assert!(s.overlaps.is_empty());
        s.deliver("g0", ("a", 0), publication(3, leader(3), far), at(30));
        s.deliver("g0", ("b", 0), publication(2, Role::Follower, None), at(45));
        let (deliveries, leaders, lapsed, overlaps) = report(&s);
        assert_eq!((deliveries, leaders, lapsed), (6, 4, 0));
        assert_eq!(overlaps.len(), 1);
        let o = &overlaps[0];
        assert_eq!(
            (o.first.clone(), o.second.clone()),
            (("b".into(), 2), ("a".into(), 3))
        );
        assert_eq!(o.length, Some(Duration::from_millis(15)));
    }

    #[test]
    fn two_members_of_one_pod_are_one_leader_and_each_keeps_an_overlap_open() {
        let mut s = ClaimState::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let far = Some(at(10_000));
        s.deliver("g0", ("a", 0), publication(1, leader(1), far), at(0));
        s.deliver("g0", ("a", 1), publication(1, leader(1), far), at(1));
        assert!(s.overlaps.is_empty(), "one pod, one leader");
        // a's first application stops; its second, whose agent is paused, still acts as leader
        // when b leads.
        s.deliver("g0", ("a", 0), publication(2, Role::Follower, None), at(10));
        s.deliver("g0", ("b", 0), publication(1, leader(2), far), at(20));
        s.deliver("g0", ("b", 1), publication(1, leader(2), far), at(21));
        s.deliver("g0", ("a", 1), publication(2, Role::Unknown, None), at(50));
        let overlaps = report(&s).3;
        assert_eq!(overlaps.len(), 2, "{overlaps:?}");
        assert_eq!(overlaps[0].second, ("b".into(), 2));
        assert_eq!(overlaps[0].length, Some(Duration::from_millis(30)));
    }

    /// The agent paused: its application hears nothing more, and stops at the validity of the
    /// last publication it got. A successor from then on is no overlap; one before it is, and
    /// the overlap ends at the validity, not when the check next looks.
    #[test]
    fn an_application_stops_acting_at_its_publications_validity() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut s = ClaimState::default();
        s.deliver("g0", ("a", 1), lead(1, 1, at(100)), at(0));
        // A renewal moves the validity: the same leadership.
        s.deliver("g0", ("a", 1), lead(2, 1, at(200)), at(90));
        s.deliver("g0", ("b", 1), lead(1, 2, at(900)), at(200));
        let (deliveries, leaders, lapsed, overlaps) = report(&s);
        assert_eq!((deliveries, leaders, lapsed), (3, 2, 1));
        assert!(overlaps.is_empty(), "{overlaps:?}");

        let mut s = ClaimState::default();
        s.deliver("g0", ("a", 1), lead(1, 1, at(100)), at(0));
        s.deliver("g0", ("b", 1), lead(1, 2, at(900)), at(60));
        // Nothing more from a's agent: the next event past its validity closes the overlap at it.
        s.deliver(
            "g0",
            ("c", 0),
            publication(1, Role::Follower, None),
            at(500),
        );
        let overlaps = report(&s).3;
        assert_eq!(overlaps.len(), 1, "{overlaps:?}");
        assert_eq!(overlaps[0].length, Some(Duration::from_millis(40)));
        assert_eq!(s.lapsed, 1);
    }

    /// A publication already past its validity when it arrives (delivered late by a resumed
    /// agent) never makes its application act as leader.
    #[test]
    fn a_leader_publication_delivered_after_its_validity_is_not_acted_on() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut s = ClaimState::default();
        s.deliver("g0", ("b", 0), lead(1, 2, at(900)), at(0));
        s.deliver("g0", ("a", 1), lead(5, 1, at(100)), at(150));
        assert!(s.overlaps.is_empty());
        assert_eq!(s.leader_starts, 1);
    }
}
