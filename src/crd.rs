//! The `LeaderGroup` custom resource. Doc comments here become the CRD's field descriptions, and
//! the schema attributes are what the API server enforces at `kubectl apply`.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, Time,
};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The names on the wire live in the client crate, which the agent, the applications and the
// tests read too; re-exported here under the names the operator's modules use.
pub use leadergroup_client::wire::{
    ACKNOWLEDGED_ANNOTATION, ACKNOWLEDGED_BY_EPOCH_ANNOTATION, API_GROUP as GROUP,
    ARBITER_ANNOTATION, BARRIER_ANNOTATION, EPOCH_ANNOTATION, FINALIZER, GROUP_ANNOTATION,
    HOLDER_UID_ANNOTATION, LAPSED_ANNOTATION, LEASE_GROUP_LABEL, LIVENESS_ANNOTATION,
    LIVENESS_HEARTBEAT, LONGEST_LEASE_SECONDS_ANNOTATION, PREDECESSOR_ANNOTATION,
    PREDECESSOR_EPOCH_ANNOTATION, PREDECESSOR_LEASE_SECONDS_ANNOTATION, PREDECESSOR_UID_ANNOTATION,
    RELEASED_BY_ANNOTATION, ROLE_FOLLOWER, ROLE_LABEL, ROLE_LEADER, STEPPED_DOWN_ANNOTATION,
    STEPPED_DOWN_BY_EPOCH_ANNOTATION, lease_name_for,
};

/// Default for `spec.leaseDurationSeconds`.
pub const DEFAULT_LEASE_DURATION_SECONDS: i32 = 15;

/// Default for `spec.historyLimit`.
pub const DEFAULT_HISTORY_LIMIT: i32 = 10;

/// At most this many pods are listed in `status.eligibility`: the status stays small whatever
/// the group's size (`status.candidates` still counts them all).
pub const MAX_ELIGIBILITY_ENTRIES: usize = 20;

/// A DNS label, the format of a label value's or name's segments.
const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A label key: an optional DNS subdomain prefix and a name of at most 63 characters.
const LABEL_KEY_RULE: &str = r"self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && size(k) <= 317)";

/// Elects exactly one Ready pod among those selected, records the choice in a Lease, labels it
/// `leadergroup.io/role=leader` and hands it a fencing token (the epoch).
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "leadergroup.io",
    version = "v1alpha1",
    kind = "LeaderGroup",
    plural = "leadergroups",
    shortname = "lg",
    namespaced,
    status = "LeaderGroupStatus",
    validation = Rule::new("size(self.metadata.name) <= 63").message("metadata.name must be at most 63 characters: it is the value of the label leadergroup.io/group on the group's Lease"),
    validation = Rule::new("!has(self.spec.service) || has(self.spec.service.name) || size(self.metadata.name) <= 56").message("metadata.name must be at most 56 characters when spec.service.name is not set: the Service is named <metadata.name>-leader, at most 63 characters"),
    doc = "A group of pods of which exactly one Ready pod leads, fenced by a monotonic epoch.",
    printcolumn(name = "Leader", type_ = "string", json_path = ".status.leader", description = "The pod that leads"),
    printcolumn(name = "Epoch", type_ = "integer", json_path = ".status.epoch", description = "Fencing token of the current leader"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.ready", description = "Eligible candidates / candidates"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Lease", type_ = "string", json_path = ".status.leaseName", priority = "1", description = "The Lease recording the leader"),
    printcolumn(name = "Liveness", type_ = "string", json_path = ".spec.liveness", priority = "1", description = "How a dead leader is noticed: Readiness or Heartbeat"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.lastTransitionReason", priority = "1", description = "Why leadership last changed")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(LABEL_MODE_RULE).message(LABEL_MODE_MESSAGE))]
pub struct LeaderGroupSpec {
    /// Selects the candidate pods in the group's namespace. Required and not empty: an empty
    /// selector would make every pod of the namespace a candidate.
    pub selector: PodSelector,

    /// How long the Lease stays valid without renewal, in seconds (1 to 3600). The operator renews
    /// it every third of this while the leader holds.
    #[serde(default = "default_lease_duration_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub lease_duration_seconds: i32,

    /// Name of a pod that should lead whenever it is eligible; leadership moves to it when it
    /// becomes eligible. Empty or absent: no preference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
    )]
    pub preferred_leader: Option<String>,

    /// True stops all transitions (for maintenance): the current leader keeps its label and the
    /// Lease is still renewed, but nothing moves until it is false again.
    #[serde(default)]
    pub paused: bool,

    /// How a dead leader is noticed. `Readiness` (the default): its pod's deletion, termination,
    /// NotReady or leaving the selector; a lost node is noticed only when the node controller
    /// marks its pods NotReady (50 s by default). `Heartbeat`: in addition, the leader's
    /// leadergroup-agent or leadergroup-client renews the Lease itself every third of
    /// `leaseDurationSeconds`, the operator stops renewing it, and leadership moves once no
    /// renewal has been seen for `leaseDurationSeconds`. A leader that never renews (no agent in
    /// its pod) keeps leading under Readiness rules and the `Heartbeat` condition says so.
    #[serde(default)]
    pub liveness: Liveness,

    /// A Service the operator creates and owns, through which clients reach the leader and only
    /// the leader. Absent: no Service (the leader label is written in any case, for a Service of
    /// one's own). Removing it removes the Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<LeaderService>,

    /// How many changes of leader `status.history` keeps (0 to 100), newest first.
    #[serde(default = "default_history_limit")]
    #[schemars(range(min = 0, max = 100))]
    pub history_limit: i32,
}

/// A Service selects by equality on labels only: in `Label` mode the group's selector must be
/// `matchLabels`, or the Service would also select the leaders of other groups.
const LABEL_MODE_RULE: &str = "!has(self.service) || self.service.mode != 'Label' || !has(self.selector.matchExpressions) || size(self.selector.matchExpressions) == 0";
const LABEL_MODE_MESSAGE: &str = "spec.service.mode Label needs a spec.selector of matchLabels only: a Service cannot select by matchExpressions (use mode EndpointSlice)";

/// The leader's Service (`spec.service`): a ClusterIP Service named `name` with `ports`.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(self.ports) <= 1 || self.ports.all(p, has(p.name))").message("spec.service.ports: every port needs a name when there are several"))]
#[x_kube(validation = Rule::new("self.ports.all(p, !has(p.name) || self.ports.exists_one(q, has(q.name) && q.name == p.name))").message("spec.service.ports: port names must be unique"))]
#[x_kube(validation = Rule::new("self.ports.all(p, self.ports.exists_one(q, q.port == p.port && q.protocol == p.protocol))").message("spec.service.ports: a port number may appear once per protocol"))]
pub struct LeaderService {
    /// How the Service reaches the leader. `Label`: its selector is the group's `matchLabels`
    /// and `leadergroup.io/role=leader`, and Kubernetes' EndpointSlice controller follows the
    /// label. `EndpointSlice`: the Service has no selector, and the operator writes its one
    /// EndpointSlice itself with exactly the leader's address, in the order of the handover:
    /// the old leader's endpoint goes before the new leader is promoted, the new one once it is.
    pub mode: RoutingMode,

    /// Name of the Service, and of its EndpointSlice in `EndpointSlice` mode. Default:
    /// `<group>-leader`. A Service of that name that the group does not own is left alone (the
    /// `Routing` condition says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_1035_LABEL))]
    pub name: Option<String>,

    /// The Service's ports, as in a Service: `targetPort` a number or the name of a container
    /// port of the leader pod (resolved from the pod; one that resolves to nothing leaves the
    /// Service without endpoint and the `Routing` condition names it).
    #[schemars(length(min = 1, max = 16))]
    pub ports: Vec<LeaderServicePort>,
}

/// A DNS-1035 label: what a Service's name, and its ports' names, must be.
const DNS_1035_LABEL: &str = r"^[a-z]([-a-z0-9]*[a-z0-9])?$";

/// How the leader's Service reaches the leader (`spec.service.mode`).
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutingMode {
    /// A selector on the leader label; Kubernetes maintains the endpoints.
    Label,
    /// No selector; the operator writes the one EndpointSlice, with the leader alone.
    EndpointSlice,
}

/// One port of the leader's Service, as a Service's port.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.targetPort) || type(self.targetPort) != int || (self.targetPort >= 1 && self.targetPort <= 65535)").message("spec.service.ports[].targetPort as a number must be from 1 to 65535"))]
#[x_kube(validation = Rule::new(TARGET_PORT_NAME_RULE).message("spec.service.ports[].targetPort as a name must be a container port's name, at most 15 characters"))]
pub struct LeaderServicePort {
    /// The port's name; required when there are several ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_1035_LABEL))]
    pub name: Option<String>,
    /// The port the Service listens on.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// The leader's port: a number, or the name of one of its containers' ports. Default: `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<TargetPort>,
    /// `TCP` (the default), `UDP` or `SCTP`.
    #[serde(default)]
    pub protocol: PortProtocol,
}

/// Only the length: a regular expression on a string of unbounded length exceeds the API
/// server's cost budget for CEL rules, and a malformed name matches no container port anyway
/// (the `Routing` condition names it).
const TARGET_PORT_NAME_RULE: &str =
    "!has(self.targetPort) || type(self.targetPort) != string || size(self.targetPort) <= 15";

/// A Service port's protocol.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(clippy::upper_case_acronyms)]
pub enum PortProtocol {
    /// TCP.
    #[default]
    TCP,
    /// UDP.
    UDP,
    /// SCTP.
    SCTP,
}

impl PortProtocol {
    /// The name on the wire, as Services and EndpointSlices spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            PortProtocol::TCP => "TCP",
            PortProtocol::UDP => "UDP",
            PortProtocol::SCTP => "SCTP",
        }
    }
}

/// A port by number or by a container port's name (`x-kubernetes-int-or-string`, as a Service's
/// `targetPort`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum TargetPort {
    /// A port number.
    Number(i32),
    /// The name of a container port.
    Name(String),
}

impl JsonSchema for TargetPort {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TargetPort".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"x-kubernetes-int-or-string": true})
    }

    fn inline_schema() -> bool {
        true
    }
}

/// How a dead leader is noticed (`spec.liveness`).
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Liveness {
    /// By the pod's deletion, termination, NotReady or leaving the selector.
    #[default]
    Readiness,
    /// In addition, by the leader's own renewals of the Lease stopping.
    Heartbeat,
}

fn default_lease_duration_seconds() -> i32 {
    DEFAULT_LEASE_DURATION_SECONDS
}

fn default_history_limit() -> i32 {
    DEFAULT_HISTORY_LIMIT
}

/// The operator's own keys may not select: one group's marks would feed another group's
/// selection (a leader labeled by one group falls to a group that selects `role=leader`, which
/// takes it, and the first elects again, without end).
const OWN_KEYS_RULE_LABELS: &str = "self.all(k, !k.startsWith('leadergroup.io/'))";
const OWN_KEYS_RULE_EXPRESSIONS: &str = "self.all(e, !e.key.startsWith('leadergroup.io/'))";
const OWN_KEYS_MESSAGE: &str = "the operator's own leadergroup.io/ label keys may not be selected on: they are the marks the operator writes";

/// A label selector, as in a Deployment, validated by the API server.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)").message("selector must not be empty: set matchLabels or matchExpressions"))]
pub struct PodSelector {
    /// Pods whose labels hold every one of these key/value pairs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}))]
    #[x_kube(validation = Rule::new(LABEL_KEY_RULE).message("matchLabels keys must be valid label keys ([prefix/]name, name at most 63 characters)"))]
    #[x_kube(validation = Rule::new(OWN_KEYS_RULE_LABELS).message(OWN_KEYS_MESSAGE))]
    pub match_labels: BTreeMap<String, String>,

    /// Pods whose labels satisfy every one of these requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(OWN_KEYS_RULE_EXPRESSIONS).message(OWN_KEYS_MESSAGE))]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One requirement of a label selector.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0").message("values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"))]
pub struct SelectorRequirement {
    /// The label key the requirement applies to.
    #[schemars(
        length(min = 1, max = 317),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
        )
    )]
    pub key: String,
    /// How the key relates to the values.
    pub operator: SelectorOperator,
    /// The values for `In` and `NotIn`; empty for `Exists` and `DoesNotExist`.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(max = 63), regex(pattern = LABEL_VALUE_PATTERN)))]
    pub values: Vec<String>,
}

/// Operator of a selector requirement.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorOperator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl PodSelector {
    /// The selector as the core API type, for `kube::core::Selector` and list calls.
    pub fn to_label_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: (!self.match_labels.is_empty()).then(|| self.match_labels.clone()),
            match_expressions: (!self.match_expressions.is_empty()).then(|| {
                self.match_expressions
                    .iter()
                    .map(|r| LabelSelectorRequirement {
                        key: r.key.clone(),
                        operator: format!("{:?}", r.operator),
                        values: (!r.values.is_empty()).then(|| r.values.clone()),
                    })
                    .collect()
            }),
        }
    }

    /// True when `labels` satisfy every requirement. An empty selector matches nothing: the API
    /// server refuses one, and a group must never take every pod of a namespace. Evaluated on
    /// every pod event for every group, so it allocates nothing.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.is_empty()
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    SelectorOperator::In => value.is_some_and(|v| r.values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }

    /// True when the selector has no requirement at all (the API server refuses such a group).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }
}

/// What the operator observed and decided, written only by the operator.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderGroupStatus {
    /// Name of the leader pod; absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// UID of the leader pod: leadership belongs to this incarnation of it. A pod created again
    /// under the same name is another candidate, and never inherits its predecessor's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_uid: Option<String>,
    /// The leader's fencing token: grows by one at every change of leader and is never handed out
    /// twice. 0 until the first leader.
    #[serde(default)]
    pub epoch: i64,
    /// Name of the Lease recording the leader, in the group's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_name: Option<String>,
    /// The longest `leaseDurationSeconds` a member may still time its confirmation by: the
    /// leader's, over its tenure, or a predecessor's not yet stepped down. The Lease says so too;
    /// this copy outlives a Lease deleted by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_lease_seconds: Option<i32>,
    /// Number of pods the selector matches.
    #[serde(default)]
    pub candidates: i32,
    /// Number of those pods that are eligible to lead (Running, Ready, not terminating, in no
    /// older group).
    #[serde(default)]
    pub ready_candidates: i32,
    /// `readyCandidates/candidates`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Eligible pods that would lead next, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub succession: Vec<String>,
    /// When leadership last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Why leadership last changed: Initial, LeaderDeleted, LeaderTerminating, LeaderNotReady,
    /// LeaderLeftGroup, LeaderHeartbeatLost, LeaderReplaced (the leader pod was created again
    /// under its name), Preferred or NoCandidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_reason: Option<String>,
    /// The `metadata.generation` of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True while a pod leads and the API server accepts the operator's requests for
    /// the group (what `kubectl wait --for=condition=Ready`, Argo CD and Flux read).
    /// `LeaderElected`: whether a pod leads, and if not, why. `Heartbeat` (in Heartbeat mode,
    /// while a pod leads): whether the leader renews the Lease itself. `Overlapping`: selected
    /// pods an older group holds. `Reconciled` (only while False): the API server refuses the
    /// operator's requests for the group. Each carries the `observedGeneration` it was set for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last changes of leader, newest first, at most `spec.historyLimit` of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub history: Vec<HistoryEntry>,
    /// Whether each selected pod may lead, and if not why: eligible pods first in succession
    /// order (the leader first), then the others; at most 20 pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub eligibility: Vec<PodEligibility>,
}

/// One change of leader in `status.history`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The epoch after the change.
    pub epoch: i64,
    /// The leader before; absent when nobody led.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The leader after; absent when nobody is eligible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Why, as in `lastTransitionReason`.
    pub reason: String,
    /// When the operator recorded the change.
    pub time: Time,
    /// On a change that ends a time without a leader (`from` absent): how long the group had no
    /// leader, in whole seconds, since the change that left it without one (or since its
    /// creation, for its first leader). Absent on a change from one leader to the next: the
    /// status never recorded the group without a leader (the operator's
    /// `leadergroup_handover_seconds` histogram measures that gap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaderless_seconds: Option<i64>,
}

/// Whether one selected pod may lead, in `status.eligibility`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodEligibility {
    /// The pod's name.
    pub pod: String,
    /// Whether it may lead: Running, Ready, not terminating, held by no older group and, in
    /// Heartbeat mode, not a leader whose renewals stopped.
    pub eligible: bool,
    /// Leader or Eligible when it may lead; otherwise Terminating, NotRunning, NotReady,
    /// HeldByOlderGroup or HeartbeatLost.
    pub reason: String,
    /// Details for people: the pod's phase, the older group's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl LeaderGroupStatus {
    /// The condition of type `type_`, if the status has one.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

impl LeaderGroup {
    /// Half of `spec.leaseDurationSeconds`: how long one decision may take to act, and how long a
    /// reconcile's requests may take to answer.
    pub fn half_lease(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            u64::from(self.spec.lease_duration_seconds.unsigned_abs()) * 500,
        )
    }

    /// Name of the Lease that records this group's leader.
    pub fn lease_name(&self) -> String {
        lease_name_for(&kube::ResourceExt::name_any(self))
    }

    /// Whether `lease` belongs to this group (an owner reference to it). A Lease of the group's
    /// name that it does not own was made by someone else, and is never written or deleted.
    pub fn owns_lease(&self, lease: &Lease) -> bool {
        let uid = self.metadata.uid.as_deref();
        kube::ResourceExt::owner_references(lease)
            .iter()
            .any(|o| o.kind == "LeaderGroup" && Some(o.uid.as_str()) == uid)
    }

    /// Whether `lease` was left by an earlier group of this name, deleted since: it carries the
    /// group label of this name, and its only owners, if any, are LeaderGroups of this name (the
    /// UID differs: that group is gone, as only one object has a name at a time). The finalizer
    /// leaves the Lease so, without owner or holder, for its epoch; a group deleted without it
    /// (its finalizer removed by hand) leaves the Lease owned by the old UID until the garbage
    /// collector deletes it. The group takes such a Lease over: its next token is above its epoch.
    pub fn inherits_lease(&self, lease: &Lease) -> bool {
        let name = kube::ResourceExt::name_any(self);
        let labeled = kube::ResourceExt::labels(lease).get(LEASE_GROUP_LABEL) == Some(&name);
        labeled
            && !self.owns_lease(lease)
            && kube::ResourceExt::owner_references(lease)
                .iter()
                .all(|o| o.kind == "LeaderGroup" && o.name == name)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    /// The `#[kube(...)]` attribute needs literals: they must be the names on the wire.
    #[test]
    fn the_resource_is_named_as_on_the_wire() {
        use kube::Resource;
        use leadergroup_client::wire;
        assert_eq!(LeaderGroup::group(&()), wire::API_GROUP);
        assert_eq!(LeaderGroup::version(&()), wire::API_VERSION);
        assert_eq!(LeaderGroup::kind(&()), wire::KIND);
        assert_eq!(LeaderGroup::plural(&()), wire::PLURAL);
    }

    fn lease_owned_by(kind: &str, uid: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    kind: kind.into(),
                    uid: uid.into(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: None,
        }
    }

    /// Group `pay`, with UID `uid-pay`.
    fn pay_group() -> LeaderGroup {
        let spec = LeaderGroupSpec {
            selector: PodSelector::default(),
            lease_duration_seconds: DEFAULT_LEASE_DURATION_SECONDS,
            preferred_leader: None,
            paused: false,
            liveness: Liveness::Readiness,
            service: None,
            history_limit: DEFAULT_HISTORY_LIMIT,
        };
        let mut group = LeaderGroup::new("pay", spec);
        group.metadata.uid = Some("uid-pay".into());
        group
    }

    #[test]
    fn a_group_owns_only_the_leases_that_name_it_as_owner() {
        let mut group = pay_group();
        assert!(group.owns_lease(&lease_owned_by("LeaderGroup", "uid-pay")));
        assert!(!group.owns_lease(&lease_owned_by("LeaderGroup", "uid-other")));
        assert!(!group.owns_lease(&lease_owned_by("Deployment", "uid-pay")));
        assert!(!group.owns_lease(&Lease::default()));
        group.metadata.uid = None;
        assert!(!group.owns_lease(&lease_owned_by("LeaderGroup", "")));
    }

    #[test]
    fn a_lease_left_by_an_earlier_group_of_the_name_is_inherited() {
        let group = pay_group();
        let lease = |label: &str, owner: Option<(&str, &str, &str)>| Lease {
            metadata: ObjectMeta {
                labels: Some([(LEASE_GROUP_LABEL.to_string(), label.to_string())].into()),
                owner_references: owner.map(|(kind, name, uid)| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        name: name.into(),
                        uid: uid.into(),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        // Released by the finalizer: no owner.
        assert!(group.inherits_lease(&lease("pay", None)));
        // Still owned by the group of this name deleted without its finalizer.
        assert!(group.inherits_lease(&lease("pay", Some(("LeaderGroup", "pay", "uid-old")))));
        // Its own, another group's, someone else's.
        assert!(!group.inherits_lease(&lease("pay", Some(("LeaderGroup", "pay", "uid-pay")))));
        assert!(!group.inherits_lease(&lease("pay", Some(("LeaderGroup", "other", "uid-o")))));
        assert!(!group.inherits_lease(&lease("other", None)));
        assert!(!group.inherits_lease(&Lease::default()));
        assert!(!group.inherits_lease(&lease("pay", Some(("Deployment", "pay", "uid-d")))));
    }
}
