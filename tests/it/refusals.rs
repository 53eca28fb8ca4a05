//! A request the API server refuses for good (here a 403: the operator runs as a ServiceAccount
//! that may not create Leases) is said on the group, as the `Reconciled` condition and one
//! Event, and retried with a growing backoff instead of every 2 s; the JSON log carries the
//! group, the namespace, the error's class and kind and the API server's message as fields.
//! Granting the permission and touching the spec brings the leader, and the condition goes.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::Api;
use kube::api::PostParams;
use leadergroup_operator::crd::LeaderGroupStatus;
use leadergroup_testenv::control_plane;
use serde_json::{Value, json};

use crate::common::{Operator, World, group, metric};

/// How long the operator's requests are counted while the group is refused.
const WINDOW: Duration = Duration::from_secs(30);
/// The most failed reconciles the window may see: the backoff (2, 4, 8, 16 s) allows about 4,
/// the old fixed 2 s retry made 15. Slowness only lowers the count.
const MOST_IN_WINDOW: f64 = 7.0;

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// The operator's rules in one namespace, with or without the right to create Leases.
fn rules(create_leases: bool) -> Vec<PolicyRule> {
    let mut lease_verbs = vec!["get", "list", "watch", "update", "patch", "delete"];
    if create_leases {
        lease_verbs.push("create");
    }
    vec![
        rule(
            "leadergroup.io",
            &["leadergroups"],
            &["get", "list", "watch", "update", "patch"],
        ),
        rule(
            "leadergroup.io",
            &["leadergroups/status"],
            &["get", "update", "patch"],
        ),
        rule("leadergroup.io", &["leadergroups/finalizers"], &["update"]),
        rule("", &["pods"], &["get", "list", "watch", "patch"]),
        rule("coordination.k8s.io", &["leases"], &lease_verbs),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
        rule(
            "",
            &["services"],
            &["get", "list", "watch", "create", "update", "delete"],
        ),
        rule(
            "discovery.k8s.io",
            &["endpointslices"],
            &["get", "list", "watch", "create", "update", "delete"],
        ),
    ]
}

fn refusal(
    s: &LeaderGroupStatus,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.condition("Reconciled").filter(|c| c.status == "False")
}

#[tokio::test]
async fn a_forbidden_write_is_a_condition_and_one_event_and_backs_off() {
    let cp = control_plane().await.unwrap();
    let w = World::new("refused").await;
    let ns = w.ns.name.clone();
    let token =
        w.ns.create_account_with_role("op", rules(false))
            .await
            .unwrap();
    let roles: Api<Role> = w.ns.api();
    let kubeconfig =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}-op.kubeconfig"));
    std::fs::write(&kubeconfig, cp.token_kubeconfig(&token)).unwrap();

    for name in ["web-0", "web-1"] {
        w.kubelet
            .create_ready_pod(name, &[("app", "web")])
            .await
            .unwrap();
    }
    w.groups
        .create(&PostParams::default(), &group("web", "web"))
        .await
        .unwrap();
    let operator =
        Operator::start_with_kubeconfig(&kubeconfig, &ns, "refused-op", &["--log-format", "json"])
            .await;

    // The condition names the verb, the resource, the namespace and the chart value.
    let status = w
        .wait_status("web", "the Reconciled condition False (Forbidden)", |s| {
            refusal(s).is_some_and(|c| c.reason == "Forbidden")
        })
        .await;
    let condition = refusal(&status).unwrap();
    let expected = format!(
        "the operator's ServiceAccount may not create leases.coordination.k8s.io in namespace {ns}: \
         grant it with the chart's watchNamespace value"
    );
    assert!(
        condition.message.starts_with(&expected),
        "{}",
        condition.message
    );
    assert!(
        condition.message.contains("403 Forbidden"),
        "{}",
        condition.message
    );
    assert!(status.leader.is_none(), "{status:?}");

    // The request rate backs off: few failed reconciles over the window.
    let errors = |text: &str| {
        metric(
            text,
            r#"leadergroup_reconcile_errors_total{class="permanent",kind="Forbidden"}"#,
        )
        .unwrap()
    };
    let before = errors(&operator.metrics().await);
    tokio::time::sleep(WINDOW).await;
    let after = errors(&operator.metrics().await);
    assert!(
        after - before <= MOST_IN_WINDOW,
        "{} failed reconciles in {WINDOW:?} (at most {MOST_IN_WINDOW} with the backoff)\n{}",
        after - before,
        operator.logs()
    );
    assert!(after > before, "still retried: {before} then {after}");

    // One Event, not one per retry (a series would count the repeats).
    let events: Vec<Event> =
        w.ns.api::<Event>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Forbidden"))
            .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].series.is_none(), "{:?}", events[0]);
    assert!(
        events[0]
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with(&expected))
    );

    // The JSON log's fields.
    let logs = operator.logs();
    let line: Value = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["error_class"] == "permanent")
        .unwrap_or_else(|| panic!("no permanent error in the JSON log:\n{logs}"));
    assert_eq!(line["group"], "web", "{line}");
    assert_eq!(line["namespace"], ns.as_str(), "{line}");
    assert_eq!(line["error_kind"], "Forbidden", "{line}");
    assert!(
        line["api_message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot create resource \"leases\"")),
        "{line}"
    );
    assert!(!logs.contains('\u{1b}'), "no colour codes in a log file");

    // Granted, and the spec touched (a new generation is tried at once): a leader, and the
    // condition is gone.
    let mut role = roles.get("op").await.unwrap();
    role.rules = Some(rules(true));
    roles
        .replace("op", &PostParams::default(), &role)
        .await
        .unwrap();
    w.patch_spec("web", json!({"leaseDurationSeconds": 16}))
        .await;
    w.wait_settled("web", "a leader once granted", |_| true)
        .await;
    let status = w
        .wait_status("web", "the Reconciled condition gone", |s| {
            s.condition("Reconciled").is_none()
        })
        .await;
    assert!(status.leader.is_some());
}
