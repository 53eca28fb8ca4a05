//! The operator under test (its release binary, started through leadergroup-testenv) and the
//! groups of simulated pods it is measured on.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::PostParams;
use leadergroup_testenv::crd::{leader_group, leader_groups};
use leadergroup_testenv::{Kubelet, OperatorProcess};

use crate::candidates::{Candidates, Fault, Leader, handover};
use crate::error::{Error, Result};
use crate::observe::{LeaderWatch, ProcSample, proc_sample, recheck};

/// How long anything "at once" may take before the run is declared broken.
pub const BOUND: Duration = Duration::from_secs(120);
/// How long every group of a scale step may take to be led.
pub const ALL_LED_BOUND: Duration = Duration::from_secs(240);
/// Requests in flight while a scenario's objects are created.
pub const CREATE_CONCURRENCY: usize = 24;
/// The Lease duration of every benchmarked group (the CRD's default).
pub const LEASE_SECONDS: i32 = 15;
/// How long after the deletion request the simulated kubelet removes the pod (its container
/// exits on SIGTERM at once; the grace period is an upper bound, not a wait).
const KUBELET_FINISH_AFTER: Duration = Duration::from_millis(300);

/// The release binary `name` (its package's name too), next to the bench's own.
pub fn release_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(Error::io("locating the bench binary"))?;
    let path = exe
        .parent()
        .map(|d| d.join(name))
        .ok_or_else(|| Error::Other("the bench binary has no folder".into()))?;
    if !path.is_file() {
        return Err(Error::Other(format!(
            "{} is missing: run `cargo build --release -p {name}` (make bench does)",
            path.display()
        )));
    }
    Ok(path)
}

/// The operator process's CPU time and memory now.
pub fn sample(op: &OperatorProcess, ticks: f64) -> ProcSample {
    op.pid()
        .and_then(|pid| proc_sample(pid, ticks))
        .unwrap_or_default()
}

/// Groups `g-<i>` of three pods each (`g-<i>-<j>`, label `app=g-<i>`) in one namespace, and the
/// independent watch of their leader labels.
pub struct Groups {
    pub namespace: String,
    pub client: Client,
    pub kubelet: Kubelet,
    pub names: Vec<String>,
    pub watch: LeaderWatch,
    next_pod: AtomicUsize,
}

impl Groups {
    /// Creates `count` groups of three Ready pods in a fresh namespace, `concurrency` creations
    /// in flight, their Leases lasting `lease_seconds`, and watches them.
    pub async fn create(
        prefix: &str,
        count: usize,
        concurrency: usize,
        lease_seconds: i32,
    ) -> Result<Groups> {
        let ns = leadergroup_testenv::namespace(prefix).await?;
        let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
        kubelet.ensure_node().await?;
        let names: Vec<String> = (0..count).map(|i| format!("g-{i}")).collect();
        let api = leader_groups(&ns.client, &ns.name);
        let pods = names.iter().flat_map(|g| (0..3).map(move |j| (g, j)));
        // Borrowed by every creation, which in_flight awaits before it returns.
        let (kubelet_ref, api) = (&kubelet, &api);
        in_flight(concurrency, pods, |(g, j)| async move {
            let labels = [("app", g.as_str())];
            kubelet_ref
                .create_ready_pod(&format!("{g}-{j}"), &labels)
                .await?;
            Ok(())
        })
        .await?;
        in_flight(concurrency, &names, |g| async move {
            let group = leader_group(g, "app", g, lease_seconds.unsigned_abs())?;
            api.create(&PostParams::default(), &group).await?;
            Ok(())
        })
        .await?;
        Ok(Groups {
            watch: LeaderWatch::start(&ns.client, &ns.name).await?,
            namespace: ns.name,
            client: ns.client,
            kubelet,
            names,
            next_pod: AtomicUsize::new(3),
        })
    }

    /// Waits, for at most `bound`, until the watch sees every group led; returns when the last
    /// leader label was seen.
    pub async fn wait_all_led(&self, bound: Duration) -> Result<SystemTime> {
        recheck("every group led", bound, || {
            let seen: Option<Vec<SystemTime>> = self
                .names
                .iter()
                .map(|g| Some(self.watch.leader(g)?.at))
                .collect();
            seen?.into_iter().max()
        })
        .await
    }

    /// The groups led now.
    pub fn led(&self) -> usize {
        self.names
            .iter()
            .filter(|g| self.watch.leader(g).is_some())
            .count()
    }

    /// A handover by `fault` of each group `picks` names by its index, 150 ms apart:
    /// milliseconds until the watch sees another pod labeled leader.
    pub async fn handovers(
        &self,
        picks: impl IntoIterator<Item = usize>,
        fault: Fault,
    ) -> Result<Vec<f64>> {
        let mut samples = Vec::new();
        for i in picks {
            let (set, group, finish) = (self, self.names[i].as_str(), None);
            samples.push(handover(&mut OneGroup { set, group, finish }, fault).await?);
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        Ok(samples)
    }
}

/// One group of a [`Groups`], as a handover drives it: a crash turns the leader NotReady, a
/// graceful exit deletes its pod (the simulated kubelet removes it shortly after) and a
/// replacement is created afterwards, as its ReplicaSet would.
struct OneGroup<'a> {
    set: &'a Groups,
    group: &'a str,
    /// The simulated kubelet's removal of a deleted pod.
    finish: Option<tokio::task::JoinHandle<Result<(), leadergroup_testenv::Error>>>,
}

impl Candidates for OneGroup<'_> {
    async fn leader(&mut self) -> Result<Leader> {
        let group = self.group;
        let seen = self.set.watch.leader(group);
        let pod = seen
            .ok_or_else(|| Error::Other(format!("{group} has no leader")))?
            .pod;
        let identity = pod.clone();
        Ok(Leader { identity, pod })
    }

    async fn strike(&mut self, leader: &Leader, fault: Fault) -> Result<SystemTime> {
        let (t0, kubelet, pod) = (
            SystemTime::now(),
            self.set.kubelet.clone(),
            leader.pod.clone(),
        );
        if fault == Fault::Crash {
            kubelet.set_ready(&pod, false).await?;
            return Ok(t0);
        }
        kubelet.begin_termination(&pod).await?;
        self.finish = Some(tokio::spawn(async move {
            tokio::time::sleep(KUBELET_FINISH_AFTER).await;
            kubelet.finish_termination(&pod).await
        }));
        Ok(t0)
    }

    async fn new_leader(&mut self, leader: &Leader, _t0: SystemTime) -> Result<SystemTime> {
        let watch = &self.set.watch;
        Ok(watch
            .wait_new_leader(self.group, Some(&leader.pod), BOUND)
            .await?
            .at)
    }

    async fn recover(&mut self, leader: Leader, _: Fault, _: bool) -> Result<()> {
        let Some(finish) = self.finish.take() else {
            self.set.kubelet.set_ready(&leader.pod, true).await?;
            return Ok(());
        };
        finish
            .await
            .map_err(|e| Error::Other(format!("simulated kubelet task: {e}")))??;
        let n = self.set.next_pod.fetch_add(1, Ordering::Relaxed);
        let (pod, labels) = (format!("{}-{n}", self.group), [("app", self.group)]);
        self.set.kubelet.create_ready_pod(&pod, &labels).await?;
        Ok(())
    }
}

/// Runs `f` on every item, `concurrency` at a time, until the first error.
pub async fn in_flight<T, F: Future<Output = Result<()>>>(
    concurrency: usize,
    items: impl IntoIterator<Item = T>,
    f: impl FnMut(T) -> F,
) -> Result<()> {
    let stream = futures::stream::iter(items)
        .map(f)
        .buffer_unordered(concurrency);
    stream.try_collect::<Vec<()>>().await.map(drop)
}
