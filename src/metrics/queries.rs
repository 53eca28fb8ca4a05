//! The chart's dashboard and alerts name only series the operator exports: every metric name in
//! every query of `dashboards/leadergroup.json` and of the PrometheusRule template is checked
//! against a scrape of [`Metrics`] with every family present.

use std::collections::BTreeSet;
use std::path::Path;

use regex::Regex;

use super::Metrics;
use super::tests::store_of;
use crate::election::Reason;

fn chart_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("charts/leadergroup-operator")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The names of the series a scrape holds, with every family present (per-group series on, a
/// Heartbeat group, a counted transition, an observed handover).
fn exported() -> BTreeSet<String> {
    let m = Metrics::new(true);
    m.watch_groups(store_of(2));
    m.transition("payments", "group-00000", Reason::Initial);
    m.handover(std::time::Duration::from_millis(5));
    m.render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// The metric names a PromQL query reads: what is left once strings, label matchers, ranges,
/// groupings and Helm or Grafana templating are taken out, less functions and keywords.
fn metric_names(query: &str) -> BTreeSet<String> {
    let mut q = query.to_string();
    for pattern in [
        r"\{\{.*?\}\}",
        r#""(\\.|[^"\\])*""#,
        r"\{[^}]*\}",
        r"\[[^\]]*\]",
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
    ] {
        q = Regex::new(pattern)
            .unwrap()
            .replace_all(&q, " ")
            .into_owned();
    }
    let identifier = Regex::new(r"[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?").unwrap();
    identifier
        .find_iter(&q)
        .map(|m| m.as_str())
        .filter(|t| !t.ends_with('('))
        .filter(|t| {
            !["and", "or", "unless", "bool", "offset", "inf", "nan"]
                .contains(&t.to_lowercase().as_str())
        })
        .map(str::to_string)
        .collect()
}

/// Every query of the dashboard: the panels' targets and the template variables'.
fn dashboard_queries() -> Vec<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&chart_file("dashboards/leadergroup.json")).unwrap();
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    let label_values = Regex::new(r"label_values\(\s*([^,)]+)").unwrap();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(definition) = variable["definition"].as_str() {
            let metric = label_values
                .captures(definition)
                .unwrap_or_else(|| panic!("a variable other than label_values: {definition}"));
            queries.push(metric[1].to_string());
        }
    }
    queries
}

fn alert_queries() -> Vec<String> {
    chart_file("templates/prometheusrule.yaml")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_query_parser_finds_the_metrics_and_nothing_else() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le) (rate(a_bucket{x=~"$ns"}[$__rate_interval]))) / on (job) b_total > bool 2 or absent(c{ {{- $job -}} })"#,
    );
    assert_eq!(names, ["a_bucket", "b_total", "c"].map(String::from).into());
}

#[test]
fn the_dashboard_and_the_alerts_name_only_exported_series() {
    let exported = exported();
    for (source, queries) in [
        ("dashboard", dashboard_queries()),
        ("alerts", alert_queries()),
    ] {
        assert!(
            queries.len() >= 5,
            "{source}: only {} queries found",
            queries.len()
        );
        for query in queries {
            let names = metric_names(&query);
            assert!(!names.is_empty(), "{source}: no metric in {query}");
            for name in names {
                assert!(
                    exported.contains(&name),
                    "{source}: {name} in `{query}` is not exported; the operator exports {exported:?}"
                );
            }
        }
    }
}
