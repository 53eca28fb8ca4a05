//! Invalid LeaderGroups are refused by the API server itself (OpenAPI schema and CEL rules), with
//! a message that names the field, as `kubectl apply` would show it. Sent as raw JSON, since the
//! typed API cannot even express most of these objects.

use crate::common::install_crd;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_testenv::namespace;
use serde_json::{Value, json};

fn object(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "leadergroup.io/v1alpha1",
        "kind": "LeaderGroup",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn invalid_groups_are_refused_with_a_message_naming_the_field() {
    let ns = namespace("validation").await.unwrap();
    install_crd(&ns.client).await;
    let resource = ApiResource::erase::<LeaderGroup>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let selector = json!({"matchLabels": {"app": "pay"}});
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "missing-selector",
            json!({"leaseDurationSeconds": 15}),
            "spec.selector",
        ),
        ("empty-selector", json!({"selector": {}}), "spec.selector"),
        (
            "empty-match-labels",
            json!({"selector": {"matchLabels": {}}}),
            "spec.selector",
        ),
        (
            "lease-zero",
            json!({"selector": selector, "leaseDurationSeconds": 0}),
            "spec.leaseDurationSeconds",
        ),
        (
            "lease-3601",
            json!({"selector": selector, "leaseDurationSeconds": 3601}),
            "spec.leaseDurationSeconds",
        ),
        (
            "bad-preferred",
            json!({"selector": selector, "preferredLeader": "Not_A_Pod"}),
            "spec.preferredLeader",
        ),
        (
            "operator-foo",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Foo", "values": ["x"]}]}}),
            "spec.selector.matchExpressions[0].operator",
        ),
        (
            "in-no-values",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}}),
            "spec.selector.matchExpressions[0]",
        ),
        (
            "in-values-absent",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}),
            "spec.selector.matchExpressions[0]",
        ),
        (
            "bad-label-key",
            json!({"selector": {"matchLabels": {"bad key!": "x"}}}),
            "spec.selector.matchLabels",
        ),
        (
            "bad-expression-key",
            json!({"selector": {"matchExpressions": [{"key": "-bad", "operator": "Exists"}]}}),
            "spec.selector.matchExpressions[0].key",
        ),
        (
            "own-mark-label",
            json!({"selector": {"matchLabels": {"app": "r", "leadergroup.io/role": "leader"}}}),
            "spec.selector.matchLabels",
        ),
        (
            "own-mark-expression",
            json!({"selector": {"matchExpressions": [{"key": "leadergroup.io/role", "operator": "Exists"}]}}),
            "spec.selector.matchExpressions",
        ),
        (
            "bad-label-value",
            json!({"selector": {"matchLabels": {"app": "not a value"}}}),
            "spec.selector.matchLabels",
        ),
        (
            "service-no-ports",
            json!({"selector": selector, "service": {"mode": "Label", "ports": []}}),
            "spec.service.ports",
        ),
        (
            "service-bad-mode",
            json!({"selector": selector, "service": {"mode": "Selector", "ports": [{"port": 80}]}}),
            "spec.service.mode",
        ),
        (
            "service-label-expressions",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                   "service": {"mode": "Label", "ports": [{"port": 80}]}}),
            "spec.service.mode Label needs a spec.selector of matchLabels only",
        ),
        (
            "service-unnamed-ports",
            json!({"selector": selector, "service": {"mode": "EndpointSlice", "ports": [{"port": 80}, {"port": 81}]}}),
            "spec.service.ports: every port needs a name",
        ),
        (
            "service-same-names",
            json!({"selector": selector, "service": {"mode": "EndpointSlice",
                   "ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}}),
            "spec.service.ports: port names must be unique",
        ),
        (
            "service-same-port",
            json!({"selector": selector, "service": {"mode": "EndpointSlice",
                   "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]}}),
            "spec.service.ports: a port number may appear once per protocol",
        ),
        (
            "service-port-zero",
            json!({"selector": selector, "service": {"mode": "EndpointSlice", "ports": [{"port": 0}]}}),
            "spec.service.ports[0].port",
        ),
        (
            "service-target-number",
            json!({"selector": selector, "service": {"mode": "EndpointSlice", "ports": [{"port": 80, "targetPort": 70000}]}}),
            "spec.service.ports[].targetPort as a number",
        ),
        (
            "service-target-name",
            json!({"selector": selector, "service": {"mode": "EndpointSlice", "ports": [{"port": 80, "targetPort": "a-port-name-too-long"}]}}),
            "spec.service.ports[].targetPort as a name",
        ),
        (
            "service-bad-name",
            json!({"selector": selector, "service": {"mode": "EndpointSlice", "name": "9lives", "ports": [{"port": 80}]}}),
            "spec.service.name",
        ),
    ];
    let mut failures = Vec::new();
    for (name, spec, field) in &cases {
        match api
            .create(&PostParams::default(), &object(name, spec.clone()))
            .await
        {
            Err(kube::Error::Api(status))
                if status.code == 422 && status.message.contains(field) => {}
            Err(kube::Error::Api(status)) => failures.push(format!(
                "{name}: {} {:?} does not name {field}",
                status.code, status.message
            )),
            Err(e) => failures.push(format!("{name}: unexpected error {e}")),
            Ok(_) => failures.push(format!("{name}: accepted")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The control: a valid group of each selector form is accepted, with the default duration.
    let valid = [
        ("match-labels", json!({"selector": selector})),
        (
            "match-expressions",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}),
        ),
        (
            "with-service",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                   "service": {"mode": "EndpointSlice", "ports": [
                       {"name": "web", "port": 80, "targetPort": "http"},
                       {"name": "dns", "port": 80, "protocol": "UDP", "targetPort": 5353}]}}),
        ),
    ];
    for (name, spec) in valid {
        let created = api
            .create(&PostParams::default(), &object(name, spec))
            .await
            .unwrap();
        assert_eq!(
            created.data["spec"]["leaseDurationSeconds"],
            json!(15),
            "{name}"
        );
    }
}

/// The default Service name, `<group>-leader`, must fit a Service's 63 characters: a longer
/// group name needs `spec.service.name`.
#[tokio::test]
async fn a_group_whose_service_name_would_not_fit_must_name_its_service() {
    let ns = namespace("service-name").await.unwrap();
    install_crd(&ns.client).await;
    let resource = ApiResource::erase::<LeaderGroup>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let spec = |name: Option<&str>| {
        let mut service = json!({"mode": "EndpointSlice", "ports": [{"port": 80}]});
        if let Some(name) = name {
            service["name"] = json!(name);
        }
        json!({"selector": {"matchLabels": {"app": "pay"}}, "service": service})
    };
    let name = |len: usize| format!("g{}", "a".repeat(len - 1));
    api.create(&PostParams::default(), &object(&name(56), spec(None)))
        .await
        .expect("56 characters and -leader fit");
    match api
        .create(&PostParams::default(), &object(&name(57), spec(None)))
        .await
    {
        Err(kube::Error::Api(status)) => assert!(
            status.code == 422 && status.message.contains("spec.service.name is not set"),
            "{}",
            status.message
        ),
        other => panic!("57 characters without spec.service.name: {other:?}"),
    }
    api.create(
        &PostParams::default(),
        &object(&name(57), spec(Some("short"))),
    )
    .await
    .expect("a named Service");
}

/// A group's name is the value of a label on its Lease, so it fits a label value: 63 characters
/// are accepted, 64 refused, and so is every longer name the API server would otherwise take.
#[tokio::test]
async fn a_name_that_does_not_fit_a_label_value_is_refused_naming_the_field() {
    let ns = namespace("name-length").await.unwrap();
    install_crd(&ns.client).await;
    let resource = ApiResource::erase::<LeaderGroup>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let spec = json!({"selector": {"matchLabels": {"app": "pay"}}});
    let name = |len: usize| format!("g{}", "a".repeat(len - 1));
    api.create(&PostParams::default(), &object(&name(63), spec.clone()))
        .await
        .expect("63 characters fit a label value");
    for len in [64, 241, 242] {
        match api
            .create(&PostParams::default(), &object(&name(len), spec.clone()))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{len}: {}", status.message);
                assert!(
                    status
                        .message
                        .contains("metadata.name must be at most 63 characters"),
                    "{len}: {}",
                    status.message
                );
            }
            other => panic!("{len} characters: {other:?}"),
        }
    }
}
