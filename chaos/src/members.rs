//! The applications of the run: every pod runs the client's `Membership` in this process, one per
//! pod (two in some groups' pods, [`crate::plan::members_per_pod`]: an agent beside the
//! application's own), authenticated as its group's members' ServiceAccount and each reaching the
//! API server through a proxy of its own (which the faults cut or stall: all of a pod's at once
//! when its node is cut off, or one member's alone). A pod's `Membership`s start when the pod is created and
//! stop when its container stops; a restart fault stops them and starts new ones in the same pod.
//!
//! Every role change of every `Membership` is recorded on this process's monotonic clock
//! ([`Claims`]): at no instant may two pods of a group report `Leader` (the application-level
//! guarantee the client documents).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leadergroup_client::{Membership, Role};
use leadergroup_testenv::{PrivateCluster, Proxy};

use crate::Error;
use crate::world::World;

/// The `Membership`s of the run's pods.
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

/// One pod's application: its members.
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
}

/// A `Membership` and the task that records its role changes.
struct Running {
    /// Held for its life: dropping it stops it.
    _membership: Membership,
    recorder: tokio::task::JoinHandle<()>,
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

    /// What every `Membership` reported.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// Starts the application of the new pod `pod` of group `g`.
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
        };
        member.running = Some(self.run(&member, pod).await?);
        self.pods.lock().await.insert(pod.to_owned(), member);
        Ok(())
    }

    /// Stops the application of `pod` for good (its container stopped).
    pub async fn leave(&self, pod: &str) {
        let member = self.pods.lock().await.remove(pod);
        if let Some(member) = member {
            self.stop(&member, pod, member.running.as_deref());
        }
    }

    /// Stops the application of `pod` (to be started again by [`Members::start_again`]); false
    /// when it has none running.
    pub async fn stop_for_restart(&self, pod: &str) -> bool {
        let mut pods = self.pods.lock().await;
        let Some(member) = pods.get_mut(pod) else {
            return false;
        };
        let running = member.running.take();
        let stopped = running.is_some();
        self.stop(member, pod, running.as_deref());
        stopped
    }

    /// Starts the application of `pod` again after [`Members::stop_for_restart`], unless the pod
    /// has gone meanwhile.
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

    /// Cuts `pod`'s node off: its connections hold every byte. False when it is cut already (or
    /// gone).
    pub async fn cut(&self, pod: &str) -> bool {
        let mut pods = self.pods.lock().await;
        match pods.get_mut(pod) {
            Some(member) if !member.cut && !member.one_cut => {
                member.cut = true;
                member.proxies.iter().for_each(Proxy::cut);
                true
            }
            _ => false,
        }
    }

    /// Cuts the last of `pod`'s two members off alone (its connection, not its node: the pod's
    /// other member and its kubelet hear the API server). False for a pod of one member, or one
    /// cut already (or gone).
    pub async fn cut_one(&self, pod: &str) -> bool {
        let mut pods = self.pods.lock().await;
        match pods.get_mut(pod) {
            Some(member) if !member.cut && !member.one_cut && member.proxies.len() > 1 => {
                member.one_cut = true;
                if let Some(last) = member.proxies.last() {
                    last.cut();
                }
                true
            }
            _ => false,
        }
    }

    /// Ends [`Members::cut`] or [`Members::cut_one`]: the hung connections close, new ones flow.
    pub async fn heal(&self, pod: &str) {
        if let Some(member) = self.pods.lock().await.get_mut(pod) {
            member.cut = false;
            member.one_cut = false;
            member.proxies.iter().for_each(Proxy::heal);
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

    /// Stops every application (the run's end).
    pub async fn stop_all(&self) {
        let pods: Vec<(String, Member)> = self.pods.lock().await.drain().collect();
        for (pod, member) in &pods {
            self.stop(member, pod, member.running.as_deref());
        }
    }

    /// A `Membership` for `pod` through each of its member's proxies, their role changes
    /// recorded.
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
            let membership = Membership::start(client, &self.namespace, pod, Some(group.clone()));
            let mut roles = membership.subscribe();
            let (claims, pod) = (Arc::clone(&self.claims), pod.to_owned());
            let recorder = tokio::spawn(async move {
                loop {
                    let role = *roles.borrow_and_update();
                    claims.record(&group, (&pod, index), role, Instant::now());
                    if roles.changed().await.is_err() {
                        return;
                    }
                }
            });
            running.push(Running {
                _membership: membership,
                recorder,
            });
        }
        Ok(running)
    }

    /// Records the stops at this instant (before the `Membership`s go), then stops them.
    fn stop(&self, member: &Member, pod: &str, running: Option<&[Running]>) {
        for (index, running) in running.into_iter().flatten().enumerate() {
            running.recorder.abort();
            self.claims.record(
                &World::group(member.group),
                (pod, index),
                Role::Unknown,
                Instant::now(),
            );
        }
        // Dropping the Memberships (the caller's) stops them; the recorders are gone already.
    }
}

/// Two `Membership`s of one group, in two pods, reporting `Leader` at once.
#[derive(Clone, Debug)]
pub struct Overlap {
    pub group: String,
    /// The one that reported `Leader` first, and its epoch.
    pub first: (String, i64),
    /// The one that reported `Leader` while the first still did.
    pub second: (String, i64),
    pub since: Instant,
    /// `None`: still open at the end of the run.
    pub length: Option<Duration>,
}

/// Every `Membership`'s reports of `Leader`, on one clock.
#[derive(Default)]
pub struct Claims {
    state: Mutex<ClaimState>,
}

/// A member: its pod, and its index among the pod's members.
type MemberKey = (String, usize);

#[derive(Default)]
struct ClaimState {
    /// Per group, per member (its pod and its index there) reporting `Leader` now: its epoch,
    /// and since when.
    leading: BTreeMap<String, BTreeMap<MemberKey, (i64, Instant)>>,
    /// Role changes recorded, and how many of them to `Leader`.
    changes: usize,
    leader_reports: usize,
    overlaps: Vec<Overlap>,
}

impl Claims {
    /// The member `index` of `pod` of `group` reports `role` from `now` on. Two members of one
    /// pod reporting `Leader` together are no overlap: they are one leader.
    pub fn record(&self, group: &str, (pod, index): (&str, usize), role: Role, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.changes += 1;
        let leading = state.leading.entry(group.to_owned()).or_default();
        let key = (pod.to_owned(), index);
        let before = leading.get(&key).map(|(epoch, _)| *epoch);
        let now_epoch = role.leader_epoch().map(i64::from);
        if before == now_epoch {
            return;
        }
        leading.remove(&key);
        let others: Vec<(String, i64)> = leading
            .iter()
            .filter(|((p, _), _)| p != pod)
            .map(|((p, _), (e, _))| (p.clone(), *e))
            .collect();
        if let Some(epoch) = now_epoch {
            leading.insert(key, (epoch, now));
        }
        let pod_still_leads = leading.keys().any(|(p, _)| p == pod);
        if let Some(epoch) = now_epoch {
            state.leader_reports += 1;
            for first in others {
                state.overlaps.push(Overlap {
                    group: group.to_owned(),
                    first,
                    second: (pod.to_owned(), epoch),
                    since: now,
                    length: None,
                });
            }
        }
        // An overlap ends when either side stops reporting Leader (at the epoch it had): when
        // no member of its pod does any more.
        if before.is_some() && !pod_still_leads {
            for o in state.overlaps.iter_mut().filter(|o| o.length.is_none()) {
                if o.group == group && (o.first.0 == pod || o.second.0 == pod) {
                    o.length = Some(now.saturating_duration_since(o.since));
                }
            }
        }
    }

    /// Role changes recorded, of them to `Leader`, and the overlaps.
    pub fn report(&self) -> (usize, usize, Vec<Overlap>) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (state.changes, state.leader_reports, state.overlaps.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leadergroup_client::Epoch;

    fn leader(epoch: u32) -> Role {
        Role::Leader {
            epoch: Epoch::from(epoch),
        }
    }

    #[test]
    fn a_handover_in_order_is_no_overlap_and_one_out_of_order_is_timed() {
        let claims = Claims::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        claims.record("g0", ("a", 0), leader(1), at(0));
        claims.record("g0", ("a", 0), Role::Unknown, at(10));
        claims.record("g0", ("b", 0), leader(2), at(20));
        claims.record("g1", ("x", 0), leader(1), at(25));
        assert!(claims.report().2.is_empty());
        claims.record("g0", ("a", 0), leader(3), at(30));
        claims.record("g0", ("b", 0), Role::Follower, at(45));
        let (changes, leaders, overlaps) = claims.report();
        assert_eq!((changes, leaders), (6, 4));
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
        let claims = Claims::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        claims.record("g0", ("a", 0), leader(1), at(0));
        claims.record("g0", ("a", 1), leader(1), at(1));
        assert!(claims.report().2.is_empty(), "one pod, one leader");
        // a's first member steps down; its second, cut off, still reports Leader when b leads.
        claims.record("g0", ("a", 0), Role::Follower, at(10));
        claims.record("g0", ("b", 0), leader(2), at(20));
        claims.record("g0", ("b", 1), leader(2), at(21));
        claims.record("g0", ("a", 1), Role::Unknown, at(50));
        let overlaps = claims.report().2;
        assert_eq!(overlaps.len(), 2, "{overlaps:?}");
        assert_eq!(overlaps[0].second, ("b".into(), 2));
        assert_eq!(overlaps[0].length, Some(Duration::from_millis(30)));
    }
}
