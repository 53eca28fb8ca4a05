//! Prometheus metrics. Labels are short and static (a reason, an error's kind, a state), but
//! for the per-group series' `namespace` and `group`, which a switch turns off for clusters with
//! very many groups ([`Metrics::new`]).

mod per_group;
#[cfg(test)]
mod queries;

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use kube::runtime::reflector::Store;

use self::per_group::{GroupGauges, GroupLabels};
use crate::crd::LeaderGroup;
use crate::election::Reason;
use crate::error::ConflictOn;
use crate::retry::{self, Retry};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupReasonLabels {
    #[prometheus(flatten)]
    group: GroupLabels,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    class: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabel {
    object: &'static str,
}

/// The operator's metrics, registered once at start.
pub struct Metrics {
    registry: Registry,
    transitions: Family<ReasonLabel, Counter>,
    handover_seconds: Histogram,
    reconcile_seconds: Histogram,
    reconcile_errors: Family<ErrorLabels, Counter>,
    conflicts: Family<ObjectLabel, Counter>,
    groups_with_leader: Gauge,
    groups_without_leader: Gauge,
    active: Gauge,
    /// Per group, when they are on.
    group_transitions: Option<Family<GroupReasonLabels, Counter>>,
    group_gauges: Option<GroupGauges>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Metrics {
    /// Creates and registers every metric; `per_group`: also the series labeled with each
    /// group's namespace and name (what they cost per group: docs/metrics.md).
    pub fn new(per_group: bool) -> Self {
        let mut registry = Registry::with_prefix("leadergroup");
        let transitions = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "transitions",
            "Changes of leader, by reason",
            transitions.clone(),
        );
        // 1 ms to ~33 s: handovers are milliseconds, but a kubelet-driven one may take seconds.
        let handover_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "handover_seconds",
            "From the watch event that made the leader ineligible to the new leader's label",
            handover_seconds.clone(),
        );
        let reconcile_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "reconcile_seconds",
            "Duration of one reconcile of a group",
            reconcile_seconds.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by class (transient, permanent) and kind",
            reconcile_errors.clone(),
        );
        let conflicts = Family::<ObjectLabel, Counter>::default();
        registry.register(
            "conflicts",
            "Writes refused with 409 because the object changed since it was read",
            conflicts.clone(),
        );
        let groups_with_leader = Gauge::default();
        registry.register(
            "groups_with_leader",
            "Groups whose last reconcile left a leader",
            groups_with_leader.clone(),
        );
        let groups_without_leader = Gauge::default();
        registry.register(
            "groups_without_leader",
            "Groups whose last reconcile left no leader",
            groups_without_leader.clone(),
        );
        let active = Gauge::default();
        registry.register(
            "active",
            "1 while this operator replica acts on the groups (holds the operator Lease, or runs without --leader-elect), else 0",
            active.clone(),
        );
        let group_transitions = per_group.then(|| {
            let family = Family::<GroupReasonLabels, Counter>::default();
            registry.register(
                "group_transitions",
                "Changes of leader of one group, by reason (counted by the replica that made them)",
                family.clone(),
            );
            family
        });
        let group_gauges = per_group.then(|| {
            let gauges = GroupGauges::default();
            registry.register_collector(Box::new(gauges.clone()));
            gauges
        });
        // An empty family is not rendered at all: create every static label set at zero, so
        // the series exist from the start (dashboards and `rate()` alerts see the first
        // increment, and a scrape shows what is counted before anything happened).
        for reason in Reason::ALL {
            let _ = transitions.get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            });
        }
        for (class, kind) in retry::every_kind() {
            let _ = reconcile_errors.get_or_create(&ErrorLabels { class, kind });
        }
        for object in ConflictOn::ALL {
            let _ = conflicts.get_or_create(&ObjectLabel {
                object: object.as_str(),
            });
        }
        Metrics {
            registry,
            transitions,
            handover_seconds,
            reconcile_seconds,
            reconcile_errors,
            conflicts,
            groups_with_leader,
            groups_without_leader,
            active,
            group_transitions,
            group_gauges,
        }
    }

    /// Counts a change of leader of the group `group` of `namespace`.
    pub fn transition(&self, namespace: &str, group: &str, reason: Reason) {
        self.transitions
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
        if let Some(family) = &self.group_transitions {
            family
                .get_or_create(&GroupReasonLabels {
                    group: GroupLabels {
                        namespace: namespace.to_string(),
                        group: group.to_string(),
                    },
                    reason: reason.as_str(),
                })
                .inc();
        }
    }

    /// Drops the per-group counters of a deleted group.
    pub fn forget_group(&self, namespace: &str, group: &str) {
        let Some(family) = &self.group_transitions else {
            return;
        };
        for reason in Reason::ALL {
            family.remove(&GroupReasonLabels {
                group: GroupLabels {
                    namespace: namespace.to_string(),
                    group: group.to_string(),
                },
                reason: reason.as_str(),
            });
        }
    }

    /// Reads the per-group gauges from `groups` (the controller's cache) at each scrape.
    pub fn watch_groups(&self, groups: Store<LeaderGroup>) {
        if let Some(gauges) = &self.group_gauges {
            gauges.watch(groups);
        }
    }

    /// Says whether this replica acts.
    pub fn set_active(&self, active: bool) {
        self.active.set(i64::from(active));
    }

    /// Records the time from the triggering watch event to the new leader's label.
    pub fn handover(&self, elapsed: Duration) {
        self.handover_seconds.observe(elapsed.as_secs_f64());
    }

    /// Records one reconcile's duration.
    pub fn reconciled(&self, elapsed: Duration) {
        self.reconcile_seconds.observe(elapsed.as_secs_f64());
    }

    /// Counts a failed reconcile, as [`retry::classify`] sorted it.
    pub fn error(&self, retry: &Retry) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                class: retry.class(),
                kind: retry.kind(),
            })
            .inc();
    }

    /// Counts a 409 on `object`.
    pub fn conflict(&self, object: ConflictOn) {
        self.conflicts
            .get_or_create(&ObjectLabel {
                object: object.as_str(),
            })
            .inc();
    }

    /// Sets how many groups lead and how many do not.
    pub fn set_groups(&self, with_leader: usize, without_leader: usize) {
        self.groups_with_leader
            .set(i64::try_from(with_leader).unwrap_or(i64::MAX));
        self.groups_without_leader
            .set(i64::try_from(without_leader).unwrap_or(i64::MAX));
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ReconcileError;

    #[test]
    fn renders_transitions_by_reason() {
        let m = Metrics::new(true);
        m.transition("ns", "pay", Reason::LeaderDeleted);
        m.transition("ns", "pay", Reason::LeaderDeleted);
        m.handover(Duration::from_millis(12));
        let text = m.render();
        assert!(
            text.contains(r#"leadergroup_transitions_total{reason="LeaderDeleted"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("leadergroup_handover_seconds_count 1"),
            "{text}"
        );
    }

    #[test]
    fn every_series_exists_at_zero_before_anything_happened() {
        let text = Metrics::new(true).render();
        for sample in [
            r#"leadergroup_transitions_total{reason="Initial"} 0"#,
            r#"leadergroup_transitions_total{reason="NoCandidates"} 0"#,
            r#"leadergroup_reconcile_errors_total{class="transient",kind="ServerError"} 0"#,
            r#"leadergroup_reconcile_errors_total{class="transient",kind="Stale"} 0"#,
            r#"leadergroup_reconcile_errors_total{class="permanent",kind="Forbidden"} 0"#,
            r#"leadergroup_conflicts_total{object="Lease"} 0"#,
            r#"leadergroup_conflicts_total{object="LeaderGroup status"} 0"#,
        ] {
            assert!(text.contains(sample), "{sample} missing:\n{text}");
        }
        for reason in Reason::ALL {
            let sample = format!(
                r#"leadergroup_transitions_total{{reason="{}"}} 0"#,
                reason.as_str()
            );
            assert!(text.contains(&sample), "{sample} missing:\n{text}");
        }
    }

    #[test]
    fn counts_errors_and_conflicts_under_their_labels() {
        let m = Metrics::new(true);
        m.error(&retry::classify(&ReconcileError::StaleDecision("g".into())));
        m.error(&retry::classify(&ReconcileError::Conflict(ConflictOn::Pod)));
        m.conflict(ConflictOn::Status);
        let text = m.render();
        for sample in [
            r#"leadergroup_reconcile_errors_total{class="transient",kind="Stale"} 1"#,
            r#"leadergroup_reconcile_errors_total{class="transient",kind="Conflict"} 1"#,
            r#"leadergroup_conflicts_total{object="LeaderGroup status"} 1"#,
        ] {
            assert!(text.contains(sample), "{sample} missing:\n{text}");
        }
    }

    /// `n` groups of `payments`, each led at epoch 3 but every tenth, which lost its leader 30 s
    /// ago; the one after each of those in Heartbeat liveness.
    pub(super) fn store_of(n: usize) -> Store<LeaderGroup> {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use kube::runtime::watcher;

        use crate::crd::{LeaderGroupSpec, LeaderGroupStatus};
        let (store, mut writer) = kube::runtime::reflector::store();
        for i in 0..n {
            let liveness = if i % 10 == 1 {
                "Heartbeat"
            } else {
                "Readiness"
            };
            let spec: LeaderGroupSpec = serde_json::from_value(serde_json::json!({
                "selector": { "matchLabels": { "app": format!("app-{i:05}") } },
                "liveness": liveness,
            }))
            .expect("a valid spec");
            let mut g = LeaderGroup::new(&format!("group-{i:05}"), spec);
            g.metadata.namespace = Some("payments".into());
            let leaderless = i % 10 == 0;
            g.status = Some(LeaderGroupStatus {
                leader: (!leaderless).then(|| format!("app-{i:05}-0")),
                epoch: 3,
                ready_candidates: if leaderless { 0 } else { 3 },
                last_transition_time: Some(Time(
                    jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30),
                )),
                ..LeaderGroupStatus::default()
            });
            writer.apply_watcher_event(&watcher::Event::Apply(g));
        }
        store
    }

    #[test]
    fn each_group_has_its_gauges_and_its_transitions_by_reason() {
        let m = Metrics::new(true);
        m.watch_groups(store_of(10));
        m.transition("payments", "group-00001", Reason::Initial);
        m.set_active(true);
        let text = m.render();
        for sample in [
            r#"leadergroup_group_leader{namespace="payments",group="group-00001"} 1"#,
            r#"leadergroup_group_leader{namespace="payments",group="group-00000"} 0"#,
            r#"leadergroup_group_epoch{namespace="payments",group="group-00001"} 3"#,
            r#"leadergroup_group_ready_candidates{namespace="payments",group="group-00001"} 3"#,
            r#"leadergroup_group_leaderless_seconds{namespace="payments",group="group-00001"} 0"#,
            r#"leadergroup_group_transitions_total{namespace="payments",group="group-00001",reason="Initial"} 1"#,
            "leadergroup_active 1",
        ] {
            assert!(text.contains(sample), "{sample} missing:\n{text}");
        }
        let leaderless = crate::metrics::tests::sample(
            &text,
            r#"leadergroup_group_leaderless_seconds{namespace="payments",group="group-00000"}"#,
        );
        assert!((30.0..40.0).contains(&leaderless), "{text}");
        assert!(
            text.contains(
                r#"leadergroup_group_heartbeat_missing{namespace="payments",group="group-00001"} 0"#
            ) && !text.contains(
                r#"leadergroup_group_heartbeat_missing{namespace="payments",group="group-00002"}"#
            ),
            "only Heartbeat groups have it:\n{text}"
        );
        m.forget_group("payments", "group-00001");
        assert!(!m.render().contains("leadergroup_group_transitions_total{"));
    }

    #[test]
    fn a_lapsed_heartbeat_leader_counts_as_no_leader_not_as_a_missing_agent() {
        use kube::runtime::watcher;

        use crate::crd::{LeaderGroupSpec, LeaderGroupStatus};
        use crate::election::{HEARTBEAT, LEADER_ELECTED, set_condition};
        let (store, mut writer) = kube::runtime::reflector::store();
        let spec: LeaderGroupSpec = serde_json::from_value(serde_json::json!({
            "selector": { "matchLabels": { "app": "lapsed" } },
            "liveness": "Heartbeat",
        }))
        .expect("a valid spec");
        let mut g = LeaderGroup::new("lapsed", spec);
        g.metadata.namespace = Some("payments".into());
        let mut status = LeaderGroupStatus {
            leader: Some("lapsed-0".into()),
            epoch: 3,
            ..LeaderGroupStatus::default()
        };
        let now = jiff::Timestamp::now();
        set_condition(
            &mut status,
            (
                LEADER_ELECTED,
                "False",
                "HeartbeatLost",
                "lapsed-0 keeps the Lease",
            ),
            None,
            now,
        );
        set_condition(
            &mut status,
            (HEARTBEAT, "False", "Lapsed", "lapsed-0 has not renewed"),
            None,
            now,
        );
        g.status = Some(status);
        writer.apply_watcher_event(&watcher::Event::Apply(g));
        let m = Metrics::new(true);
        m.watch_groups(store);
        let text = m.render();
        for sample in [
            r#"leadergroup_group_leader{namespace="payments",group="lapsed"} 0"#,
            r#"leadergroup_group_heartbeat_missing{namespace="payments",group="lapsed"} 0"#,
        ] {
            assert!(text.contains(sample), "{sample} missing:\n{text}");
        }
    }

    fn sample(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} missing:\n{text}"))
    }

    #[test]
    fn the_switch_leaves_out_every_per_group_series() {
        let m = Metrics::new(false);
        m.watch_groups(store_of(10));
        m.transition("payments", "group-00001", Reason::Initial);
        let text = m.render();
        assert!(!text.contains("group=\""), "{text}");
        assert!(text.contains(r#"leadergroup_transitions_total{reason="Initial"} 1"#));
    }

    /// What the per-group series add to a scrape, per group (docs/metrics.md quotes it):
    /// `cargo test --lib per_group_series_cost -- --nocapture`.
    #[test]
    fn per_group_series_cost() {
        let groups = 1000;
        let size = |per_group: bool| {
            let m = Metrics::new(per_group);
            m.watch_groups(store_of(groups));
            for i in 0..groups {
                m.transition("payments", &format!("group-{i:05}"), Reason::Initial);
            }
            m.render().len()
        };
        let (on, off) = (size(true), size(false));
        let per_group = (on - off) / groups;
        println!(
            "/metrics: {off} bytes without per-group series, {on} bytes with {groups} groups: {per_group} bytes per group"
        );
        assert!(per_group < 1024, "{per_group} bytes per group");
    }
}
