//! Prometheus metrics. Labels are short and static: a reason, an error category, a state.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::election::Reason;
use crate::error::{Category, ConflictOn, ReconcileError};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CategoryLabel {
    category: &'static str,
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
    reconcile_errors: Family<CategoryLabel, Counter>,
    conflicts: Family<ObjectLabel, Counter>,
    groups_with_leader: Gauge,
    groups_without_leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
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
        let reconcile_errors = Family::<CategoryLabel, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by error category",
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
        // An empty family is not rendered at all: create every static label set at zero, so
        // the series exist from the start (dashboards and `rate()` alerts see the first
        // increment, and a scrape shows what is counted before anything happened).
        for reason in Reason::ALL {
            let _ = transitions.get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            });
        }
        for category in Category::ALL {
            let _ = reconcile_errors.get_or_create(&CategoryLabel {
                category: category.as_str(),
            });
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
        }
    }

    /// Counts a change of leader.
    pub fn transition(&self, reason: Reason) {
        self.transitions
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// Records the time from the triggering watch event to the new leader's label.
    pub fn handover(&self, elapsed: Duration) {
        self.handover_seconds.observe(elapsed.as_secs_f64());
    }

    /// Records one reconcile's duration.
    pub fn reconciled(&self, elapsed: Duration) {
        self.reconcile_seconds.observe(elapsed.as_secs_f64());
    }

    /// Counts a failed reconcile.
    pub fn error(&self, error: &ReconcileError) {
        self.reconcile_errors
            .get_or_create(&CategoryLabel {
                category: error.category().as_str(),
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

    #[test]
    fn renders_transitions_by_reason() {
        let m = Metrics::new();
        m.transition(Reason::LeaderDeleted);
        m.transition(Reason::LeaderDeleted);
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
        let text = Metrics::new().render();
        for sample in [
            r#"leadergroup_transitions_total{reason="Initial"} 0"#,
            r#"leadergroup_transitions_total{reason="NoCandidates"} 0"#,
            r#"leadergroup_reconcile_errors_total{category="api"} 0"#,
            r#"leadergroup_reconcile_errors_total{category="stale"} 0"#,
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
        let m = Metrics::new();
        m.error(&ReconcileError::StaleDecision("g".into()));
        m.error(&ReconcileError::Conflict(ConflictOn::Pod));
        m.conflict(ConflictOn::Status);
        let text = m.render();
        for sample in [
            r#"leadergroup_reconcile_errors_total{category="stale"} 1"#,
            r#"leadergroup_reconcile_errors_total{category="conflict"} 1"#,
            r#"leadergroup_conflicts_total{object="LeaderGroup status"} 1"#,
        ] {
            assert!(text.contains(sample), "{sample} missing:\n{text}");
        }
    }
}
