use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Container, ContainerPort, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStatus, Node, NodeCondition, NodeStatus, Pod, PodCondition, PodIP, PodSpec,
        PodStatus,
    },
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions},
};
use tokio::sync::OnceCell;

use crate::{Error, Result};

/// The fake node every simulated pod is bound to.
pub const NODE_NAME: &str = "testenv-node";

/// The one container of a simulated pod.
const CONTAINER: &str = "app";

/// Never pulled (nothing runs containers here); `.invalid` makes sure it could not be.
const IMAGE: &str = "registry.invalid/leadergroup-testenv/app:1";

/// A simulated kubelet for the pods of one namespace on node [`NODE_NAME`].
///
/// Pods are bound to the node through `spec.nodeName` (no scheduler runs), and their status is
/// written through the `pods/status` subresource with a strategic merge patch, as the kubelet's
/// status manager does, so a controller sees exactly the events it would see in a cluster.
///
/// Deletion follows the kubelet protocol: an ordinary DELETE of a pod on a node only sets
/// `deletionTimestamp` ([`Kubelet::begin_termination`]); the pod is gone once its kubelet deletes
/// it again with grace period 0 ([`Kubelet::finish_termination`]).
///
/// creationTimestamp has 1-second granularity: pods created in quick succession usually share
/// it. A test that needs "older" and "younger" pods must sleep past a second boundary between
/// them (or rely on the tie-breaker by name); creation order is not observable otherwise.
#[derive(Clone)]
pub struct Kubelet {
    pods: Api<Pod>,
    nodes: Api<Node>,
    namespace: String,
    termination_grace_period: Option<i64>,
    container_ports: Option<Vec<ContainerPort>>,
    node_ready: std::sync::Arc<OnceCell<()>>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("namespace", &self.namespace)
            .field("termination_grace_period", &self.termination_grace_period)
            .finish_non_exhaustive()
    }
}

fn now() -> Time {
    Time(Timestamp::now())
}

impl Kubelet {
    /// A kubelet for pods in `namespace`, using `client` (an admin client is what a kubelet's
    /// node credentials amount to here).
    pub fn new(client: Client, namespace: &str) -> Self {
        Kubelet {
            pods: Api::namespaced(client.clone(), namespace),
            nodes: Api::all(client),
            namespace: namespace.to_owned(),
            termination_grace_period: None,
            container_ports: None,
            node_ready: std::sync::Arc::new(OnceCell::new()),
        }
    }

    /// Sets `spec.terminationGracePeriodSeconds` of the pods created from now on (the server's
    /// default is 30). With 0, an ordinary DELETE removes the pod at once.
    pub fn with_termination_grace_period(mut self, seconds: i64) -> Self {
        self.termination_grace_period = Some(seconds);
        self
    }

    /// Sets the ports of the container of the pods created from now on (none by default).
    pub fn with_container_ports(mut self, ports: Vec<ContainerPort>) -> Self {
        self.container_ports = Some(ports);
        self
    }

    /// The pods of this kubelet's namespace.
    pub fn pods(&self) -> &Api<Pod> {
        &self.pods
    }

    /// Registers node [`NODE_NAME`] (Ready) unless it exists. Called by the `create_*` methods;
    /// nothing requires the Node object, but a cluster where pods sit on a missing node is not
    /// one a controller would ever see.
    pub async fn ensure_node(&self) -> Result<()> {
        self.node_ready
            .get_or_try_init(|| async {
                let node = Node {
                    metadata: ObjectMeta {
                        name: Some(NODE_NAME.to_owned()),
                        labels: Some(
                            [("kubernetes.io/hostname".to_owned(), NODE_NAME.to_owned())].into(),
                        ),
                        ..ObjectMeta::default()
                    },
                    ..Node::default()
                };
                match self.nodes.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    // Another test (or test binary) registered it first.
                    Err(kube::Error::Api(s)) if s.is_already_exists() => return Ok(()),
                    Err(e) => return Err(Error::kube(format!("registering node {NODE_NAME}"))(e)),
                }
                let status = NodeStatus {
                    conditions: Some(vec![NodeCondition {
                        type_: "Ready".to_owned(),
                        status: "True".to_owned(),
                        reason: Some("KubeletReady".to_owned()),
                        message: Some("simulated by leadergroup-testenv".to_owned()),
                        last_heartbeat_time: Some(now()),
                        last_transition_time: Some(now()),
                    }]),
                    ..NodeStatus::default()
                };
                self.nodes
                    .patch_status(
                        NODE_NAME,
                        &PatchParams::default(),
                        &Patch::Merge(serde_json::json!({ "status": status })),
                    )
                    .await
                    .map_err(Error::kube(format!("reporting node {NODE_NAME} Ready")))?;
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Creates pod `name` with `labels`, bound to [`NODE_NAME`], in phase `Pending` with no
    /// status yet (what the API server holds before the kubelet first reports).
    pub async fn create_pod(&self, name: &str, labels: &[(&str, &str)]) -> Result<Pod> {
        self.ensure_node().await?;
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(NODE_NAME.to_owned()),
                termination_grace_period_seconds: self.termination_grace_period,
                containers: vec![Container {
                    name: CONTAINER.to_owned(),
                    image: Some(IMAGE.to_owned()),
                    ports: self.container_ports.clone(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        self.pods
            .create(&PostParams::default(), &pod)
            .await
            .map_err(Error::kube(format!(
                "creating pod {}/{name}",
                self.namespace
            )))
    }

    /// Creates pod `name` and reports it `Running` and `Ready=True`, as a kubelet does once the
    /// containers started and the readiness probe passed.
    pub async fn create_ready_pod(&self, name: &str, labels: &[(&str, &str)]) -> Result<Pod> {
        self.create_pod(name, labels).await?;
        self.report(name, "Running", true).await
    }

    /// Reports the readiness of pod `name` (phase `Running`): conditions `Ready` and
    /// `ContainersReady`, and the container's `ready`, as a readiness probe flipping would.
    pub async fn set_ready(&self, name: &str, ready: bool) -> Result<Pod> {
        self.report(name, "Running", ready).await
    }

    /// Reports phase `phase` (`Pending`, `Running`, `Succeeded`, `Failed`) for pod `name`, keeping
    /// its readiness in `Running` and making it not Ready otherwise (terminated containers are
    /// never ready).
    pub async fn set_phase(&self, name: &str, phase: &str) -> Result<Pod> {
        let ready = phase == "Running" && self.is_ready(name).await?;
        self.report(name, phase, ready).await
    }

    async fn is_ready(&self, name: &str) -> Result<bool> {
        let pod = self.get(name).await?;
        Ok(pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"))
    }

    async fn get(&self, name: &str) -> Result<Pod> {
        self.pods.get(name).await.map_err(Error::kube(format!(
            "reading pod {}/{name}",
            self.namespace
        )))
    }

    /// Writes the status a kubelet would report for `phase` and `ready`. lastTransitionTime moves
    /// only for conditions whose status changes, as the kubelet does.
    async fn report(&self, name: &str, phase: &str, ready: bool) -> Result<Pod> {
        let pod = self.get(name).await?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let old = pod.status.unwrap_or_default();
        let old_conditions = old.conditions.unwrap_or_default();
        let running = phase == "Running";
        let started = old.start_time.unwrap_or_else(now);
        let condition = |type_: &str, status: bool| {
            let status = if status { "True" } else { "False" };
            let since = old_conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or_else(now);
            PodCondition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                last_transition_time: Some(since),
                ..PodCondition::default()
            }
        };
        let state = match phase {
            "Running" => Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(started.clone()),
                }),
                ..ContainerState::default()
            }),
            "Succeeded" | "Failed" => Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: if phase == "Succeeded" { 0 } else { 1 },
                    reason: Some(
                        if phase == "Succeeded" {
                            "Completed"
                        } else {
                            "Error"
                        }
                        .to_owned(),
                    ),
                    started_at: Some(started.clone()),
                    finished_at: Some(now()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            _ => None,
        };
        let ip = pod_ip(&uid);
        let status = PodStatus {
            phase: Some(phase.to_owned()),
            conditions: Some(vec![
                condition("PodScheduled", true),
                condition("Initialized", true),
                condition("PodReadyToStartContainers", phase != "Pending"),
                condition("ContainersReady", ready),
                condition("Ready", ready),
            ]),
            container_statuses: Some(vec![ContainerStatus {
                name: CONTAINER.to_owned(),
                image: IMAGE.to_owned(),
                image_id: String::new(),
                ready,
                started: Some(running),
                restart_count: 0,
                state,
                ..ContainerStatus::default()
            }]),
            host_ip: Some("10.0.1.1".to_owned()),
            pod_ip: Some(ip.clone()),
            pod_ips: Some(vec![PodIP { ip }]),
            start_time: Some(started),
            ..PodStatus::default()
        };
        // The uid precondition is what the kubelet sends too: never patch a namesake that
        // replaced the pod meanwhile.
        let patch = serde_json::json!({
            "metadata": { "uid": uid },
            "status": status,
        });
        self.pods
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(Error::kube(format!(
                "reporting pod {}/{name} phase {phase} ready={ready}",
                self.namespace
            )))
    }

    /// Deletes pod `name` as a user or controller would (default grace period). The API server
    /// only sets `deletionTimestamp` and `deletionGracePeriodSeconds` on a pod bound to a node and
    /// waits for its kubelet; that pod is returned. `None` when the server removed the pod at once
    /// (grace period 0, or the pod already `Succeeded`/`Failed`).
    ///
    /// A real kubelet would now stop the containers, which makes the pod not Ready: call
    /// [`Kubelet::set_ready`] with `false` to simulate that, then [`Kubelet::finish_termination`].
    pub async fn begin_termination(&self, name: &str) -> Result<Option<Pod>> {
        let answer = self
            .pods
            .delete(name, &DeleteParams::default())
            .await
            .map_err(Error::kube(format!(
                "deleting pod {}/{name}",
                self.namespace
            )))?;
        Ok(answer.left())
    }

    /// Removes pod `name` for good, as its kubelet does once the containers stopped: DELETE with
    /// grace period 0 and the pod's uid as precondition.
    pub async fn finish_termination(&self, name: &str) -> Result<()> {
        let uid = self.get(name).await?.metadata.uid;
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.delete(name, &params).await
    }

    /// Removes pod `name` at once, skipping graceful termination (`kubectl delete --force
    /// --grace-period=0`).
    ///
    /// Watchers still see two events, as in any cluster: first MODIFIED with `deletionTimestamp`
    /// set and `deletionGracePeriodSeconds: 0` (the API server records the deletion before it
    /// removes a pod bound to a node), then DELETED. [`Kubelet::finish_termination`] ends the same
    /// way. A controller that must tell "deleted" from "terminating" can read
    /// `deletionGracePeriodSeconds == 0` as "gone in a moment".
    pub async fn delete_now(&self, name: &str) -> Result<()> {
        self.delete(name, &DeleteParams::default().grace_period(0))
            .await
    }

    async fn delete(&self, name: &str, params: &DeleteParams) -> Result<()> {
        self.pods
            .delete(name, params)
            .await
            .map(|_| ())
            .map_err(Error::kube(format!(
                "deleting pod {}/{name} with grace period 0",
                self.namespace
            )))
    }
}

/// A stable pod IP in 10.244.0.0/16 derived from the uid, so pods look distinct in `-o wide`.
fn pod_ip(uid: &str) -> String {
    let h = uid
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("10.244.{}.{}", (h >> 8) % 256, h % 254 + 1)
}
