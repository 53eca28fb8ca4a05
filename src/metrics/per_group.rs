//! The per-group gauges, read from the group cache at each scrape rather than kept up to date:
//! a deleted group's series disappear with it, and a replica on standby (whose cache is as
//! current as the active one's) reports the same values.

use std::fmt;
use std::sync::{Arc, OnceLock};

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;

use crate::crd::{LeaderGroup, Liveness};
use crate::election::{HEARTBEAT, LEADER_ELECTED};

/// The labels of a group's series: its namespace and name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct GroupLabels {
    pub namespace: String,
    pub group: String,
}

impl GroupLabels {
    fn of(group: &LeaderGroup) -> Self {
        GroupLabels {
            namespace: group.namespace().unwrap_or_default(),
            group: group.name_any(),
        }
    }
}

/// The gauges of every cached group, once the controller hands over its cache.
#[derive(Clone, Default)]
pub(super) struct GroupGauges {
    groups: Arc<OnceLock<Store<LeaderGroup>>>,
}

impl fmt::Debug for GroupGauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupGauges")
            .field("watching", &self.groups.get().is_some())
            .finish()
    }
}

impl GroupGauges {
    /// Reads the groups from `store` from now on (the first store handed over stays).
    pub fn watch(&self, store: Store<LeaderGroup>) {
        let _ = self.groups.set(store);
    }
}

/// One gauge family: name, help, and the value for a group (None: no series for it).
type Gauge = (
    &'static str,
    &'static str,
    fn(&LeaderGroup, Timestamp) -> Option<i64>,
);

/// The families, in the order they are rendered.
const GAUGES: [Gauge; 5] = [
    (
        "group_leader",
        "1 while a pod leads the group (the status names it, LeaderElected not False), else 0",
        |g, _| Some(i64::from(leader(g).is_some())),
    ),
    (
        "group_epoch",
        "The group's fencing token (status.epoch)",
        |g, _| Some(g.status.as_ref().map_or(0, |s| s.epoch)),
    ),
    (
        "group_ready_candidates",
        "Selected pods that may lead (status.readyCandidates)",
        |g, _| {
            Some(
                g.status
                    .as_ref()
                    .map_or(0, |s| i64::from(s.ready_candidates)),
            )
        },
    ),
    (
        "group_leaderless_seconds",
        "Seconds since the group last had a leader; 0 while a pod leads",
        leaderless_seconds,
    ),
    (
        "group_heartbeat_missing",
        "Heartbeat liveness only: 1 while the leader has not renewed the Lease itself for a Lease duration (Heartbeat condition False, NoRenewal)",
        heartbeat_missing,
    ),
];

/// The pod that leads: the status names it and `LeaderElected` is not False (a Heartbeat leader
/// whose renewals lapsed keeps the Lease while nobody else may lead, and leads nobody).
fn leader(g: &LeaderGroup) -> Option<&str> {
    let status = g.status.as_ref()?;
    let elected = status
        .condition(LEADER_ELECTED)
        .is_none_or(|c| c.status != "False");
    status.leader.as_deref().filter(|_| elected)
}

/// Since the change that left the group without a leader, or since its creation when it never
/// had one.
fn leaderless_seconds(g: &LeaderGroup, now: Timestamp) -> Option<i64> {
    if leader(g).is_some() {
        return Some(0);
    }
    let since = g
        .status
        .as_ref()
        .and_then(|s| s.last_transition_time.as_ref())
        .or(g.metadata.creation_timestamp.as_ref())?;
    Some(now.duration_since(since.0).as_secs().max(0))
}

fn heartbeat_missing(g: &LeaderGroup, _: Timestamp) -> Option<i64> {
    (g.spec.liveness == Liveness::Heartbeat).then(|| {
        let missing = g
            .status
            .as_ref()
            .and_then(|s| s.condition(HEARTBEAT))
            .is_some_and(|c| c.status == "False" && c.reason == "NoRenewal");
        i64::from(missing)
    })
}

impl Collector for GroupGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(store) = self.groups.get() else {
            return Ok(());
        };
        let groups = store.state();
        let now = Timestamp::now();
        for (name, help, value) in GAUGES {
            let values: Vec<(GroupLabels, i64)> = groups
                .iter()
                .filter_map(|g| value(g, now).map(|v| (GroupLabels::of(g), v)))
                .collect();
            if values.is_empty() {
                continue;
            }
            let metric_type = ConstGauge::new(0i64).metric_type();
            let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
            for (labels, v) in values {
                ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
