//! The run's groups and pods on its own control plane: set up, read back (the leader, a
//! follower, whether a group has settled) and repaired between rounds of faults.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use leadergroup_testenv::invariants::{EPOCH_ANNOTATION, ROLE_LABEL, ROLE_LEADER, eligible, ready};
use leadergroup_testenv::{Kubelet, TestNamespace, wait_until};

use crate::Error;

/// The CRD as the operator's `crd` command prints it (the drift check keeps the file current).
const CRD: &str = include_str!("../../crds/leadergroup.yaml");
/// The label that selects a group's pods; its value is the group's name.
pub const APP_LABEL: &str = "app";
/// Pods per group, kept by the repairs.
pub const PODS_PER_GROUP: usize = 3;

/// The namespace, its simulated kubelet, and the groups `g0`, `g1`, ...
pub struct World {
    pub kubelet: Kubelet,
    pub groups: usize,
    pub pods: Api<Pod>,
    pub leases: Api<Lease>,
    leader_groups: Api<DynamicObject>,
    /// The next pod number of each group (replacements get new names, as a ReplicaSet's do).
    next_pod: std::sync::Mutex<Vec<usize>>,
}

/// What a settled group shows (I2): one leader, the same in the status, the Lease and the label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    pub leader: String,
    pub epoch: i64,
}

impl World {
    /// The CRD installed, `groups` groups' pods created Ready (not the groups themselves yet).
    pub async fn new(ns: TestNamespace, groups: usize) -> Result<World, Error> {
        let client = ns.client.clone();
        install_crd(&client).await?;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "leadergroup.io",
            "v1alpha1",
            "LeaderGroup",
        ));
        let world = World {
            kubelet: Kubelet::new(client.clone(), &ns.name),
            pods: Api::namespaced(client.clone(), &ns.name),
            leases: Api::namespaced(client.clone(), &ns.name),
            leader_groups: Api::namespaced_with(client, &ns.name, &resource),
            next_pod: std::sync::Mutex::new(vec![0; groups]),
            groups,
        };
        for g in 0..groups {
            for _ in 0..PODS_PER_GROUP {
                world.add_pod(g).await?;
            }
        }
        Ok(world)
    }

    /// The name of group `g`.
    pub fn group(g: usize) -> String {
        format!("g{g}")
    }

    /// Creates the groups (Lease `lease_seconds`).
    pub async fn create_groups(&self, lease_seconds: u32) -> Result<(), Error> {
        for g in 0..self.groups {
            let name = Self::group(g);
            let object: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "leadergroup.io/v1alpha1",
                "kind": "LeaderGroup",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {APP_LABEL: name}},
                    "leaseDurationSeconds": lease_seconds,
                },
            }))
            .map_err(|e| Error::Setup(format!("the LeaderGroup {name}: {e}")))?;
            self.leader_groups
                .create(&Default::default(), &object)
                .await
                .map_err(Error::kube(format!("creating LeaderGroup {name}")))?;
        }
        Ok(())
    }

    /// A new Ready pod for group `g`: `g<g>-<n>`.
    pub async fn add_pod(&self, g: usize) -> Result<String, Error> {
        let n = {
            let mut next = self
                .next_pod
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = next.get(g).copied().unwrap_or(0);
            if let Some(slot) = next.get_mut(g) {
                *slot += 1;
            }
            n
        };
        let name = format!("{}-{n}", Self::group(g));
        let app = Self::group(g);
        self.kubelet
            .create_ready_pod(&name, &[(APP_LABEL, app.as_str())])
            .await?;
        Ok(name)
    }

    /// Group `g`'s pods, as the API server has them now.
    pub async fn group_pods(&self, g: usize) -> Result<Vec<Pod>, Error> {
        let selector = format!("{APP_LABEL}={}", Self::group(g));
        let list = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(Error::kube(format!(
                "listing the pods of {}",
                Self::group(g)
            )))?;
        Ok(list.items)
    }

    /// The pod the fault targets: the (not terminating) leader, or the first follower by name.
    pub async fn target(&self, g: usize, leader: bool) -> Result<Option<String>, Error> {
        let pods = self.group_pods(g).await?;
        let mut candidates: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| is_leader(p) == leader)
            .collect();
        candidates.sort_by_key(|p| p.name_any());
        Ok(candidates.first().map(|p| p.name_any()))
    }

    /// [`World::target`], waiting up to a second for one (a group between two leaders has none
    /// labeled for a moment): the fault strikes the next leader rather than being skipped.
    pub async fn wait_target(&self, g: usize, leader: bool) -> Result<Option<String>, Error> {
        for _ in 0..20 {
            if let Some(pod) = self.target(g, leader).await? {
                return Ok(Some(pod));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(None)
    }

    /// Undoes what the faults left behind in group `g`: terminating pods removed, every pod Ready,
    /// [`PODS_PER_GROUP`] pods.
    pub async fn repair(&self, g: usize) -> Result<(), Error> {
        let pods = self.group_pods(g).await?;
        let mut live = 0;
        for p in &pods {
            let name = p.name_any();
            if p.metadata.deletion_timestamp.is_some() {
                // Gone already (the fault's own task finished it) is fine.
                let _ = self.kubelet.finish_termination(&name).await;
            } else {
                live += 1;
                if !ready(p) {
                    self.kubelet.set_ready(&name, true).await?;
                }
            }
        }
        for _ in live..PODS_PER_GROUP {
            self.add_pod(g).await?;
        }
        Ok(())
    }

    /// Group `g`'s settled state (I2), or why it is not settled.
    pub async fn settled(&self, g: usize) -> Result<Settled, String> {
        let name = Self::group(g);
        let group = self
            .leader_groups
            .get(&name)
            .await
            .map_err(|e| e.to_string())?;
        let status = &group.data["status"];
        let leader = status["leader"].as_str().map(str::to_owned);
        let epoch = status["epoch"].as_i64();
        let lease = self
            .leases
            .get_opt(&format!("leadergroup-{name}"))
            .await
            .map_err(|e| e.to_string())?;
        let holder = lease
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone());
        let lease_epoch = lease
            .as_ref()
            .and_then(|l| l.annotations().get(EPOCH_ANNOTATION))
            .and_then(|e| e.parse::<i64>().ok());
        let pods = self.group_pods(g).await.map_err(|e| e.to_string())?;
        let labeled: Vec<(String, Option<i64>, bool)> = pods
            .iter()
            .filter(|p| is_leader(p))
            .map(|p| (p.name_any(), pod_epoch(p), eligible(p)))
            .collect();
        match (&leader, epoch) {
            (Some(l), Some(e))
                if holder.as_ref() == Some(l)
                    && lease_epoch == Some(e)
                    && labeled == vec![(l.clone(), Some(e), true)] =>
            {
                Ok(Settled {
                    leader: l.clone(),
                    epoch: e,
                })
            }
            _ => Err(format!(
                "{name}: status leader {leader:?} epoch {epoch:?}, Lease holder {holder:?} epoch \
                 {lease_epoch:?}, labeled leaders (pod, epoch, eligible) {labeled:?}"
            )),
        }
    }

    /// Waits until every group has settled (I2), at most `within`; the settled states, or every
    /// unsettled group's state at the deadline.
    pub async fn wait_all_settled(&self, within: Duration) -> Result<Vec<Settled>, String> {
        let mut last: BTreeMap<usize, String> = BTreeMap::new();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut all = Vec::new();
            last.clear();
            for g in 0..self.groups {
                match self.settled(g).await {
                    Ok(s) => all.push(s),
                    Err(why) => {
                        last.insert(g, why);
                    }
                }
            }
            if last.is_empty() {
                return Ok(all);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(last.into_values().collect::<Vec<_>>().join("; "));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn is_leader(pod: &Pod) -> bool {
    pod.labels().get(ROLE_LABEL).map(String::as_str) == Some(ROLE_LEADER)
}

fn pod_epoch(pod: &Pod) -> Option<i64> {
    pod.annotations()
        .get(EPOCH_ANNOTATION)
        .and_then(|e| e.parse().ok())
}

/// Server-side apply of the CRD, then waits until LeaderGroups are served.
async fn install_crd(client: &Client) -> Result<(), Error> {
    let crd: CustomResourceDefinition = serde_yaml_ng::from_str(CRD)
        .map_err(|e| Error::Setup(format!("crds/leadergroup.yaml: {e}")))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("leadergroup-chaos").force(),
        &Patch::Apply(&crd),
    )
    .await
    .map_err(Error::kube("installing the CRD"))?;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "leadergroup.io",
        "v1alpha1",
        "LeaderGroup",
    ));
    let groups: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    wait_until("LeaderGroups served", Duration::from_secs(30), || async {
        groups.list(&Default::default()).await.map(|_| Some(()))
    })
    .await?;
    Ok(())
}
