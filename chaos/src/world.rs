//! The run's groups and pods on its own control plane: set up, read back (the leader, a
//! follower, whether a group has settled), edited as a user would, and repaired between rounds of
//! faults. Each pod's application (its `Membership`, [`Members`]) lives and dies with the pod.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use leadergroup_testenv::crd::{leader_group, leader_groups, shipped_crd};
use leadergroup_testenv::pods::{is_leader, ready};
use leadergroup_testenv::{
    Kubelet, MemberRules, PrivateCluster, Settled, TestNamespace, install_crd, member_account,
};

use crate::Error;
use crate::members::Members;
use crate::plan::heartbeat;

/// The label that selects a group's pods; its value is the group's name.
pub const APP_LABEL: &str = "app";
/// A label with the pod's own name, for a selector that leaves one pod out.
pub const POD_LABEL: &str = "pod";
/// Pods per group, kept by the repairs.
pub const PODS_PER_GROUP: usize = 3;

/// The namespace, its simulated kubelet, and the groups `g0`, `g1`, ...
pub struct World {
    pub kubelet: Kubelet,
    pub groups: usize,
    pub pods: Api<Pod>,
    pub leases: Api<Lease>,
    /// The Leases as each group's members see them: group `g`'s through its ServiceAccount
    /// `member-g<g>`, whose Role (the documented one) may update that group's Lease.
    member_leases: Vec<Api<Lease>>,
    leader_groups: Api<DynamicObject>,
    /// The pods' applications.
    pub members: Members,
    client: Client,
    namespace: String,
    /// The next pod number of each group (replacements get new names, as a ReplicaSet's do).
    next_pod: std::sync::Mutex<Vec<usize>>,
}

impl World {
    /// The CRD installed, `groups` groups' pods created Ready, each running its application
    /// (not the groups themselves yet).
    pub async fn new(
        ns: TestNamespace,
        cp: &Arc<PrivateCluster>,
        groups: usize,
    ) -> Result<World, Error> {
        let client = ns.client.clone();
        install_crd(&client, &shipped_crd()?).await?;
        let mut member_leases = Vec::new();
        let mut tokens = Vec::new();
        for g in 0..groups {
            let group = Self::group(g);
            let token = member_account(
                &ns,
                &format!("member-{group}"),
                &group,
                MemberRules::DOCUMENTED,
            )
            .await?;
            let member = cp.client_with_token(&token).await?;
            member_leases.push(Api::namespaced(member, &ns.name));
            tokens.push(token);
        }
        let world = World {
            kubelet: Kubelet::new(client.clone(), &ns.name),
            pods: Api::namespaced(client.clone(), &ns.name),
            leases: Api::namespaced(client.clone(), &ns.name),
            member_leases,
            leader_groups: leader_groups(&client, &ns.name),
            members: Members::new(Arc::clone(cp), &ns.name, tokens)?,
            client,
            namespace: ns.name.clone(),
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

    /// The `liveness` group `g` runs with (but for an edit's while).
    pub fn liveness(g: usize) -> &'static str {
        if heartbeat(g) {
            "Heartbeat"
        } else {
            "Readiness"
        }
    }

    /// Creates the groups (Lease `lease_seconds`), the odd-numbered ones in Heartbeat mode.
    pub async fn create_groups(&self, lease_seconds: u32) -> Result<(), Error> {
        for g in 0..self.groups {
            let name = Self::group(g);
            let mut object = leader_group(&name, APP_LABEL, &name, lease_seconds)?;
            object.data["spec"]["liveness"] = Self::liveness(g).into();
            self.leader_groups
                .create(&Default::default(), &object)
                .await
                .map_err(Error::kube(format!("creating LeaderGroup {name}")))?;
        }
        Ok(())
    }

    /// A user's edit of group `g`'s spec: a JSON merge patch of `spec` (`null` removes a field).
    pub async fn edit_spec(&self, g: usize, spec: serde_json::Value) -> Result<(), Error> {
        let name = Self::group(g);
        self.leader_groups
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": spec })),
            )
            .await
            .map_err(Error::kube(format!("editing LeaderGroup {name}")))?;
        Ok(())
    }

    /// A hand patch of group `g`'s status (what the `ImplausibleEpoch` runbook does): a JSON merge
    /// patch of `status`.
    pub async fn patch_status(&self, g: usize, status: serde_json::Value) -> Result<(), Error> {
        let name = Self::group(g);
        self.leader_groups
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await
            .map_err(Error::kube(format!(
                "patching the status of LeaderGroup {name}"
            )))?;
        Ok(())
    }

    /// Group `g`'s Lease through its members' ServiceAccount.
    pub fn member_leases(&self, g: usize) -> Result<&Api<Lease>, Error> {
        self.member_leases
            .get(g)
            .ok_or_else(|| Error::Setup(format!("no group {g}")))
    }

    /// A new Ready pod for group `g`, `g<g>-<n>`, and its application.
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
            .create_ready_pod(&name, &[(APP_LABEL, app.as_str()), (POD_LABEL, &name)])
            .await?;
        self.members.join(g, &name).await?;
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
                self.members.leave(&name).await;
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

    /// Group `g`'s settled state (I2, [`leadergroup_testenv::judge_settled`]), or why it is not
    /// settled.
    pub async fn settled(&self, g: usize) -> Result<Settled, String> {
        leadergroup_testenv::settled(&self.client, &self.namespace, &Self::group(g))
            .await
            .map_err(|e| e.to_string())?
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
