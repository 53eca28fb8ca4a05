use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::*;

fn group(service: serde_json::Value) -> LeaderGroup {
    serde_json::from_value(json!({
        "apiVersion": "leadergroup.io/v1alpha1",
        "kind": "LeaderGroup",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "service": service},
    }))
    .unwrap()
}

fn spec(g: &LeaderGroup) -> &LeaderService {
    g.spec.service.as_ref().unwrap()
}

/// A pod with an IP and a container port `http` (TCP 8080) and `dns` (UDP 5353).
fn pod(name: &str, uid: &str, ip: &str) -> Pod {
    let port = |name: &str, number: i32, protocol: Option<&str>| ContainerPort {
        name: Some(name.into()),
        container_port: number,
        protocol: protocol.map(Into::into),
        ..ContainerPort::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-1".into()),
            containers: vec![Container {
                name: "app".into(),
                ports: Some(vec![
                    port("http", 8080, None),
                    port("dns", 5353, Some("UDP")),
                ]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            pod_ip: Some(ip.into()),
            ..PodStatus::default()
        }),
    }
}

fn slice_mode(ports: serde_json::Value) -> LeaderGroup {
    group(json!({"mode": "EndpointSlice", "ports": ports}))
}

fn endpoints(s: &EndpointSlice) -> Vec<(Vec<String>, Option<String>)> {
    s.endpoints
        .iter()
        .flatten()
        .map(|e| {
            (
                e.addresses.clone(),
                e.target_ref.as_ref().and_then(|r| r.uid.clone()),
            )
        })
        .collect()
}

fn ports(s: &EndpointSlice) -> Vec<(String, i32, String)> {
    s.ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port.unwrap_or_default(),
                p.protocol.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn the_service_is_named_after_the_group_unless_named() {
    let g = slice_mode(json!([{"port": 80}]));
    assert_eq!(service_name(&g, spec(&g)), "web-leader");
    let g = group(json!({"mode": "Label", "name": "db", "ports": [{"port": 80}]}));
    assert_eq!(service_name(&g, spec(&g)), "db");
}

#[test]
fn label_mode_selects_the_groups_labels_and_the_leader_label_and_writes_no_slice() {
    let g = group(json!({"mode": "Label", "ports": [{"port": 80, "targetPort": "http"}]}));
    let leader = pod("web-0", "uid-0", "10.0.0.5");
    let r = routes(&g, spec(&g), Some(&leader), None);
    assert!(r.slice.is_none());
    let s = r.service.spec.unwrap();
    assert_eq!(
        s.selector.unwrap(),
        BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            (ROLE_LABEL.to_string(), ROLE_LEADER.to_string()),
        ])
    );
    let port = &s.ports.unwrap()[0];
    assert_eq!(port.target_port, Some(IntOrString::String("http".into())));
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(r.service.metadata.name.as_deref(), Some("web-leader"));
    assert_eq!(r.condition.reason, "Routed");
    assert!(r.condition.routed);
}

#[test]
fn the_service_and_the_slice_are_labeled_with_and_owned_by_the_group() {
    let g = slice_mode(json!([{"port": 80}]));
    let r = routes(&g, spec(&g), None, None);
    let slice = r.slice.unwrap();
    for meta in [&r.service.metadata, &slice.metadata] {
        assert!(owned_by(meta, &g));
        assert_eq!(
            meta.labels.as_ref().unwrap().get(LEASE_GROUP_LABEL),
            Some(&"web".to_string())
        );
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
    }
    let labels = slice.metadata.labels.unwrap();
    assert_eq!(
        labels.get(SERVICE_NAME_LABEL),
        Some(&"web-leader".to_string())
    );
    assert_eq!(labels.get(MANAGED_BY_LABEL), Some(&MANAGED_BY.to_string()));
    assert!(r.service.spec.unwrap().selector.is_none(), "selector-less");
}

#[test]
fn the_slice_lists_the_leader_alone_with_its_ports_resolved_by_name_and_protocol() {
    let g = slice_mode(json!([
        {"name": "web", "port": 80, "targetPort": "http"},
        {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "UDP"},
        {"name": "admin", "port": 9000, "targetPort": 9001},
        {"name": "plain", "port": 7000},
    ]));
    let leader = pod("web-0", "uid-0", "10.0.0.5");
    let r = routes(&g, spec(&g), Some(&leader), None);
    let slice = r.slice.unwrap();
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(
        endpoints(&slice),
        [(vec!["10.0.0.5".to_string()], Some("uid-0".to_string()))]
    );
    let e = &slice.endpoints.as_ref().unwrap()[0];
    assert_eq!(e.node_name.as_deref(), Some("node-1"));
    assert_eq!(e.conditions.as_ref().unwrap().ready, Some(true));
    assert_eq!(
        ports(&slice),
        [
            ("web".to_string(), 8080, "TCP".to_string()),
            ("dns".to_string(), 5353, "UDP".to_string()),
            ("admin".to_string(), 9001, "TCP".to_string()),
            ("plain".to_string(), 7000, "TCP".to_string()),
        ]
    );
    assert!(r.condition.routed);
    assert!(
        r.condition.message.contains("web-0"),
        "{}",
        r.condition.message
    );
}

#[test]
fn a_named_port_of_a_native_sidecar_resolves_and_one_of_a_plain_init_container_does_not() {
    let g = slice_mode(json!([{"name": "proxy", "port": 80, "targetPort": "proxy"}]));
    let sidecar = |restart: Option<&str>| Container {
        name: "agent".into(),
        restart_policy: restart.map(Into::into),
        ports: Some(vec![ContainerPort {
            name: Some("proxy".into()),
            container_port: 8687,
            ..ContainerPort::default()
        }]),
        ..Container::default()
    };
    let mut leader = pod("web-0", "uid-0", "10.0.0.5");
    leader.spec.as_mut().unwrap().init_containers = Some(vec![sidecar(Some("Always"))]);
    let r = routes(&g, spec(&g), Some(&leader), None);
    assert_eq!(
        ports(r.slice.as_ref().unwrap()),
        [("proxy".to_string(), 8687, "TCP".to_string())]
    );
    assert!(r.condition.routed, "{}", r.condition.message);
    // An init container that runs to completion serves nothing: Kubernetes skips it too.
    leader.spec.as_mut().unwrap().init_containers = Some(vec![sidecar(None)]);
    let r = routes(&g, spec(&g), Some(&leader), None);
    assert_eq!(r.condition.reason, "PortUnresolved");
}

#[test]
fn an_unresolvable_port_leaves_no_endpoint_and_a_condition_naming_the_port() {
    // "http" exists, but as TCP: a UDP port of that name does not.
    let g = slice_mode(json!([
        {"name": "web", "port": 80, "targetPort": "http"},
        {"name": "metrics", "port": 81, "targetPort": "http", "protocol": "UDP"},
    ]));
    let leader = pod("web-0", "uid-0", "10.0.0.5");
    let r = routes(&g, spec(&g), Some(&leader), None);
    assert!(endpoints(r.slice.as_ref().unwrap()).is_empty());
    assert!(!r.condition.routed);
    assert_eq!(r.condition.reason, "PortUnresolved");
    let m = &r.condition.message;
    assert!(
        m.contains("spec.service.ports[1] (metrics)")
            && m.contains("\"http\"")
            && m.contains("UDP")
            && m.contains("web-0"),
        "{m}"
    );
    // Label mode says so too: Kubernetes leaves the endpoint out as well.
    let g = group(json!({"mode": "Label", "ports": [{"port": 80, "targetPort": "grpc"}]}));
    let r = routes(&g, spec(&g), Some(&leader), None);
    assert_eq!(r.condition.reason, "PortUnresolved");
    assert!(
        r.condition.message.contains("spec.service.ports[0]:"),
        "{}",
        r.condition.message
    );
}

#[test]
fn no_leader_no_endpoint() {
    let g = slice_mode(json!([{"port": 80}]));
    let r = routes(&g, spec(&g), None, None);
    assert!(endpoints(r.slice.as_ref().unwrap()).is_empty());
    assert_eq!(
        (r.condition.routed, r.condition.reason),
        (false, "NoLeader")
    );
    let mut no_ip = pod("web-0", "uid-0", "");
    no_ip.status = None;
    let r = routes(&g, spec(&g), Some(&no_ip), None);
    assert!(endpoints(r.slice.as_ref().unwrap()).is_empty());
    assert_eq!(r.condition.reason, "NoAddress");
}

#[test]
fn a_service_of_that_name_the_group_does_not_own_is_left_alone() {
    let g = slice_mode(json!([{"port": 80}]));
    let foreign = Service {
        metadata: ObjectMeta {
            name: Some("web-leader".into()),
            ..ObjectMeta::default()
        },
        ..Service::default()
    };
    let leader = pod("web-0", "uid-0", "10.0.0.5");
    let r = routes(&g, spec(&g), Some(&leader), Some(&foreign));
    assert!(r.name_taken);
    assert_eq!(r.condition.reason, "NameTaken");
    assert!(endpoints(r.slice.as_ref().unwrap()).is_empty());
    let own = Service {
        metadata: r.service.metadata.clone(),
        ..Service::default()
    };
    assert!(!routes(&g, spec(&g), Some(&leader), Some(&own)).name_taken);
}

#[test]
fn an_ipv6_leader_makes_an_ipv6_slice() {
    let g = slice_mode(json!([{"port": 80}]));
    let leader = pod("web-0", "uid-0", "fd00::5");
    let slice = routes(&g, spec(&g), Some(&leader), None).slice.unwrap();
    assert_eq!(slice.address_type, "IPv6");
}

fn listed(g: &LeaderGroup, leader: &Pod, version: &str) -> EndpointSlice {
    let mut s = routes(g, spec(g), Some(leader), None).slice.unwrap();
    s.metadata.resource_version = Some(version.into());
    s
}

#[test]
fn a_handover_takes_the_old_endpoint_out_before_the_new_one_comes() {
    let g = slice_mode(json!([{"port": 80}]));
    let old = pod("web-0", "uid-0", "10.0.0.5");
    let current = listed(&g, &old, "7");
    let cleared = clear_for_handover(Some(&current), Some("uid-1")).unwrap();
    assert!(endpoints(&cleared).is_empty());
    assert_eq!(
        cleared.metadata.resource_version.as_deref(),
        Some("7"),
        "conditional"
    );
    // Nobody next: out as well.
    assert!(clear_for_handover(Some(&current), None).is_some());
    // The next leader alone, or nothing at all: nothing to take out.
    assert!(clear_for_handover(Some(&current), Some("uid-0")).is_none());
    assert!(clear_for_handover(Some(&cleared), Some("uid-1")).is_none());
    assert!(clear_for_handover(None, Some("uid-1")).is_none());
    // Then one write puts the new leader in, on the version the clearing left.
    let mut after = cleared.clone();
    after.metadata.resource_version = Some("8".into());
    let new = pod("web-1", "uid-1", "10.0.0.6");
    let desired = routes(&g, spec(&g), Some(&new), None).slice.unwrap();
    match slice_write(Some(&after), &desired) {
        Some(SliceWrite::Replace(s)) => {
            assert_eq!(s.metadata.resource_version.as_deref(), Some("8"));
            assert_eq!(
                endpoints(&s),
                [(vec!["10.0.0.6".to_string()], Some("uid-1".to_string()))]
            );
        }
        other => panic!("expected a replace, got {other:?}"),
    }
}

#[test]
fn a_slice_is_written_only_when_it_differs() {
    let g = slice_mode(json!([{"port": 80}]));
    let leader = pod("web-0", "uid-0", "10.0.0.5");
    let desired = routes(&g, spec(&g), Some(&leader), None).slice.unwrap();
    assert!(matches!(
        slice_write(None, &desired),
        Some(SliceWrite::Create(_))
    ));
    let mut current = listed(&g, &leader, "3");
    // As the API server answers: the defaults it fills in change nothing.
    current.metadata.uid = Some("slice-uid".into());
    assert_eq!(slice_write(Some(&current), &desired), None);
    let ipv6 = routes(&g, spec(&g), Some(&pod("web-1", "uid-1", "fd00::6")), None)
        .slice
        .unwrap();
    match slice_write(Some(&current), &ipv6) {
        Some(SliceWrite::Recreate(s)) => {
            assert_eq!(s.metadata.resource_version.as_deref(), Some("3"));
        }
        other => panic!("expected a re-creation, got {other:?}"),
    }
}

#[test]
fn a_service_update_keeps_what_the_api_server_assigned() {
    let label = group(json!({"mode": "Label", "ports": [{"port": 80}]}));
    let mut current = routes(&label, spec(&label), None, None).service;
    current.metadata.resource_version = Some("5".into());
    if let Some(s) = current.spec.as_mut() {
        s.cluster_ip = Some("10.96.0.10".into());
    }
    assert_eq!(
        service_update(&current, &routes(&label, spec(&label), None, None).service),
        None
    );
    // To EndpointSlice mode: the selector goes, the ClusterIP and the version stay.
    let slices = slice_mode(json!([{"port": 80}]));
    let next = service_update(
        &current,
        &routes(&slices, spec(&slices), None, None).service,
    )
    .expect("an update");
    let s = next.spec.unwrap();
    assert!(s.selector.is_none());
    assert_eq!(s.cluster_ip.as_deref(), Some("10.96.0.10"));
    assert_eq!(next.metadata.resource_version.as_deref(), Some("5"));
}

#[test]
fn leftovers_are_the_groups_own_objects_not_wanted() {
    let g = slice_mode(json!([{"port": 80}]));
    let own = |name: &str| {
        let named = group(json!({"mode": "EndpointSlice", "name": name, "ports": [{"port": 80}]}));
        routes(&named, spec(&named), None, None).service
    };
    let mut foreign = own("theirs");
    foreign.metadata.owner_references = Some(vec![OwnerReference {
        kind: "LeaderGroup".into(),
        uid: "uid-other".into(),
        ..OwnerReference::default()
    }]);
    let objects = [own("web-leader"), own("old-name"), foreign];
    assert_eq!(leftovers(&g, &objects, Some("web-leader")), ["old-name"]);
    assert_eq!(leftovers(&g, &objects, None), ["web-leader", "old-name"]);
}

#[test]
fn the_routing_condition_is_set_changed_and_removed() {
    let condition = RoutingCondition {
        routed: false,
        reason: "NoLeader",
        message: "no pod leads".into(),
    };
    let now = Timestamp::now();
    let with = with_condition(
        &LeaderGroupStatus::default(),
        Some(&condition),
        Some(1),
        now,
    )
    .unwrap();
    let c = with.condition(ROUTING).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NoLeader")
    );
    assert_eq!(with_condition(&with, Some(&condition), Some(1), now), None);
    let without = with_condition(&with, None, Some(1), now).unwrap();
    assert!(without.condition(ROUTING).is_none());
    assert_eq!(with_condition(&without, None, Some(1), now), None);
}
