//! The applications of the run: every pod runs the client's `Membership` in this process, one per
//! pod, authenticated as its group's members' ServiceAccount and reaching the API server through a
//! proxy of its own (its node's network, which the faults cut or stall). A pod's `Membership`
//! starts when the pod is created and stops when its container stops; a restart fault stops it
//! and starts a new one in the same pod.
//!
//! Every role change of every `Membership` is recorded on this process's monotonic clock
//! ([`Claims`]): at no instant may two of a group report `Leader` (the application-level
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

/// One pod's application.
struct Member {
    group: usize,
    proxy: Proxy,
    /// `None` while restarting.
    running: Option<Running>,
    /// Its node is cut off (a [`Members::cut`] not yet healed).
    cut: bool,
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
        let proxy = Proxy::start(self.upstream).await?;
        let mut member = Member {
            group: g,
            proxy,
            running: None,
            cut: false,
        };
        member.running = Some(self.run(&member, pod).await?);
        self.pods.lock().await.insert(pod.to_owned(), member);
        Ok(())
    }

    /// Stops the application of `pod` for good (its container stopped).
    pub async fn leave(&self, pod: &str) {
        let member = self.pods.lock().await.remove(pod);
        if let Some(member) = member {
            self.stop(&member, pod, member.running.as_ref());
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
        self.stop(member, pod, running.as_ref());
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
            Some(member) if !member.cut => {
                member.cut = true;
                member.proxy.cut();
                true
            }
            _ => false,
        }
    }

    /// Ends [`Members::cut`]: the hung connections close, new ones flow.
    pub async fn heal(&self, pod: &str) {
        if let Some(member) = self.pods.lock().await.get_mut(pod) {
            member.cut = false;
            member.proxy.heal();
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
                member.proxy.stall();
                true
            }
            None => false,
        }
    }

    /// Stops every application (the run's end).
    pub async fn stop_all(&self) {
        let pods: Vec<(String, Member)> = self.pods.lock().await.drain().collect();
        for (pod, member) in &pods {
            self.stop(member, pod, member.running.as_ref());
        }
    }

    /// A `Membership` for `pod` through its member's proxy, its role changes recorded.
    async fn run(&self, member: &Member, pod: &str) -> Result<Running, Error> {
        let token = self
            .tokens
            .get(member.group)
            .ok_or_else(|| Error::Setup(format!("no token for group {}", member.group)))?;
        let client = self
            .cluster
            .client_with_token_via(token, Some(member.proxy.addr))
            .await?;
        let group = World::group(member.group);
        let membership = Membership::start(client, &self.namespace, pod, Some(group.clone()));
        let mut roles = membership.subscribe();
        let (claims, pod) = (Arc::clone(&self.claims), pod.to_owned());
        let recorder = tokio::spawn(async move {
            loop {
                let role = *roles.borrow_and_update();
                claims.record(&group, &pod, role, Instant::now());
                if roles.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Running {
            _membership: membership,
            recorder,
        })
    }

    /// Records the stop at this instant (before the `Membership` goes), then stops it.
    fn stop(&self, member: &Member, pod: &str, running: Option<&Running>) {
        if let Some(running) = running {
            running.recorder.abort();
            self.claims.record(
                &World::group(member.group),
                pod,
                Role::Unknown,
                Instant::now(),
            );
        }
        // Dropping the Membership (the caller's) stops it; the recorder is gone already.
    }
}

/// Two `Membership`s of one group reporting `Leader` at once.
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

#[derive(Default)]
struct ClaimState {
    /// Per group, per pod reporting `Leader` now: its epoch, and since when.
    leading: BTreeMap<String, BTreeMap<String, (i64, Instant)>>,
    /// Role changes recorded, and how many of them to `Leader`.
    changes: usize,
    leader_reports: usize,
    overlaps: Vec<Overlap>,
}

impl Claims {
    /// `pod` of `group` reports `role` from `now` on.
    pub fn record(&self, group: &str, pod: &str, role: Role, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.changes += 1;
        let leading = state.leading.entry(group.to_owned()).or_default();
        let before = leading.get(pod).map(|(epoch, _)| *epoch);
        let now_epoch = role.leader_epoch().map(i64::from);
        if before == now_epoch {
            return;
        }
        leading.remove(pod);
        let others: Vec<(String, i64)> =
            leading.iter().map(|(p, (e, _))| (p.clone(), *e)).collect();
        if let Some(epoch) = now_epoch {
            leading.insert(pod.to_owned(), (epoch, now));
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
        if before.is_some() {
            // An overlap ends when either side stops reporting Leader (at the epoch it had).
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
        claims.record("g0", "a", leader(1), at(0));
        claims.record("g0", "a", Role::Unknown, at(10));
        claims.record("g0", "b", leader(2), at(20));
        claims.record("g1", "x", leader(1), at(25));
        assert!(claims.report().2.is_empty());
        claims.record("g0", "a", leader(3), at(30));
        claims.record("g0", "b", Role::Follower, at(45));
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
}
