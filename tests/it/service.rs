//! `spec.service`: the leader's Service, owned by the group, in `Label` mode (a selector on the
//! leader label) and in `EndpointSlice` mode (a selector-less Service whose one EndpointSlice the
//! operator writes with the leader's address alone). Observed through the API server: the
//! objects, their owner, the slice through handovers, named ports, and their removal.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerPort, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use leadergroup_client::Membership;
use leadergroup_operator::crd::{LeaderGroup, ROLE_LABEL, ROLE_LEADER, lease_name_for};
use leadergroup_operator::routing::{MANAGED_BY, MANAGED_BY_LABEL, ROUTING, SERVICE_NAME_LABEL};
use leadergroup_testenv::{MemberRules, control_plane, member_account, wait_for_object};
use serde_json::json;

use crate::common::{CONVERGE, Operator, World, with_service};

/// Pods with a container port `http` (8080) and `metrics` (9090).
fn ports() -> Vec<ContainerPort> {
    [("http", 8080), ("metrics", 9090)]
        .into_iter()
        .map(|(name, port)| ContainerPort {
            name: Some(name.into()),
            container_port: port,
            ..ContainerPort::default()
        })
        .collect()
}

/// A slice's endpoints as (pod name, address), in order.
type Endpoints = Vec<(String, String)>;

fn endpoints(slice: &EndpointSlice) -> Endpoints {
    slice
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let pod = e.target_ref.as_ref().and_then(|r| r.name.clone());
            (pod.unwrap_or_default(), e.addresses.join(","))
        })
        .collect()
}

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

/// Waits until the slice `name` lists exactly `pod` (None: no endpoint).
pub async fn wait_slice_lists(w: &World, name: &str, pod: Option<&str>) -> EndpointSlice {
    let slices: Api<EndpointSlice> = w.ns.api();
    let want = match pod {
        Some(p) => vec![(p.to_string(), pod_ip(&w.pods.get(p).await.unwrap()))],
        None => Vec::new(),
    };
    wait_for_object(
        &slices,
        name,
        &format!("the slice listing {want:?}"),
        CONVERGE,
        |s: Option<&EndpointSlice>| s.is_some_and(|s| endpoints(s) == want),
    )
    .await
    .unwrap()
    .unwrap()
}

/// Waits until `name` exists (`present`) or is gone; returns it when it exists.
async fn wait_present<K>(api: &Api<K>, name: &str, what: &str, present: bool) -> Option<K>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    wait_for_object(api, name, what, CONVERGE, |o: Option<&K>| {
        o.is_some() == present
    })
    .await
    .unwrap()
}

/// Creates the group `name` selecting `app=<app>` with `spec.service` set to `service`.
async fn create_with_service(
    w: &World,
    name: &str,
    app: &str,
    service: serde_json::Value,
) -> LeaderGroup {
    w.groups
        .create(&PostParams::default(), &with_service(name, app, service))
        .await
        .unwrap()
}

fn owned_by_group(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    g: &LeaderGroup,
) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "LeaderGroup" && Some(&o.uid) == g.metadata.uid.as_ref())
}

#[tokio::test]
async fn both_modes_create_owned_services_and_the_slice_lists_the_leader_by_its_named_port() {
    let mut w = World::new("svc-modes").await;
    w.kubelet = w.kubelet.clone().with_container_ports(ports());
    w.ordered_ready_pods("lbl", 2, "lbl").await;
    w.ordered_ready_pods("eps", 2, "eps").await;
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    let label = create_with_service(
        &w,
        "lbl",
        "lbl",
        json!({"mode": "Label", "ports": [{"port": 80, "targetPort": "http"}]}),
    )
    .await;
    let slices = create_with_service(
        &w,
        "eps",
        "eps",
        json!({"mode": "EndpointSlice", "name": "eps-front", "ports": [
                    {"name": "web", "port": 80, "targetPort": "http"},
                    {"name": "admin", "port": 9000, "targetPort": 9001}]}),
    )
    .await;
    let lbl = w.wait_settled("lbl", "lbl elected", |_| true).await;
    let eps = w.wait_settled("eps", "eps elected", |_| true).await;

    let services: Api<Service> = w.ns.api();
    // Label mode: the group's labels and the leader label select; no slice of the operator's.
    let svc = wait_present(&services, "lbl-leader", "the Label-mode Service", true)
        .await
        .unwrap();
    assert!(owned_by_group(&svc.metadata, &label));
    let spec = svc.spec.unwrap();
    let selector = spec.selector.unwrap();
    assert_eq!(selector.get("app").map(String::as_str), Some("lbl"));
    assert_eq!(
        selector.get(ROLE_LABEL).map(String::as_str),
        Some(ROLE_LEADER)
    );
    assert!(
        spec.cluster_ip
            .is_some_and(|ip| !ip.is_empty() && ip != "None")
    );
    // The leader label is written in both modes.
    let leader: Pod = w.pods.get(&lbl.leader).await.unwrap();
    assert_eq!(
        leader.labels().get(ROLE_LABEL).map(String::as_str),
        Some(ROLE_LEADER)
    );

    // EndpointSlice mode: no selector; the slice lists the leader alone, the named port resolved.
    let svc = wait_present(
        &services,
        "eps-front",
        "the EndpointSlice-mode Service",
        true,
    )
    .await
    .unwrap();
    assert!(owned_by_group(&svc.metadata, &slices));
    assert!(svc.spec.unwrap().selector.unwrap_or_default().is_empty());
    let slice = wait_slice_lists(&w, "eps-front", Some(&eps.leader)).await;
    assert!(owned_by_group(&slice.metadata, &slices));
    let labels = slice.labels();
    assert_eq!(
        labels.get(SERVICE_NAME_LABEL).map(String::as_str),
        Some("eps-front")
    );
    assert_eq!(
        labels.get(MANAGED_BY_LABEL).map(String::as_str),
        Some(MANAGED_BY)
    );
    let ports: BTreeSet<(String, i32)> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        BTreeSet::from([("web".into(), 8080), ("admin".into(), 9001)])
    );
    let status = w
        .wait_status("eps", "Routing True", |s| {
            s.condition(ROUTING).is_some_and(|c| c.status == "True")
        })
        .await;
    let message = &status.condition(ROUTING).unwrap().message;
    assert!(message.contains(&eps.leader), "{message}");

    // Settled, the renewals (every second at a 3 s Lease) rewrite neither object: what the
    // operator compares matches what the API server keeps.
    for g in ["lbl", "eps"] {
        w.patch_spec(g, json!({"leaseDurationSeconds": 3})).await;
    }
    let versions = || async {
        let slices: Api<EndpointSlice> = w.ns.api();
        [
            services.get("lbl-leader").await.unwrap().resource_version(),
            services.get("eps-front").await.unwrap().resource_version(),
            slices.get("eps-front").await.unwrap().resource_version(),
        ]
    };
    // What proves the window passed is two renewals of each group's Lease at 3 s (each one a
    // reconcile that also converged the route), not a time slept.
    let leases: Api<Lease> = w.ns.api();
    let renewed = |g: &'static str| {
        let leases = leases.clone();
        async move {
            let lease = leases.get(&lease_name_for(g)).await.unwrap();
            let spec = lease.spec.unwrap_or_default();
            (spec.lease_duration_seconds, spec.renew_time.map(|t| t.0))
        }
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut last = Vec::new();
    for g in ["lbl", "eps"] {
        loop {
            let (seconds, at) = renewed(g).await;
            if seconds == Some(3) {
                last.push(at);
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{g}'s Lease never took 3 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    let before = versions().await;
    for (g, mut at) in ["lbl", "eps"].into_iter().zip(last) {
        for _ in 0..2 {
            loop {
                let (_, now) = renewed(g).await;
                if now != at {
                    at = now;
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{g}'s Lease was not renewed"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(
        versions().await,
        before,
        "a settled group's Service or slice was written again"
    );
}

#[tokio::test]
async fn the_slice_follows_handovers_and_never_lists_two_pods() {
    let mut w = World::new("svc-handover").await;
    w.kubelet = w.kubelet.clone().with_container_ports(ports());
    let names = w.ordered_ready_pods("app", 3, "app").await;
    let slices: Api<EndpointSlice> = w.ns.api();
    // Every state of the slice the API server sends, from before its creation.
    // With when the watch delivered each, to report how long the slice stays empty in between.
    let seen: Arc<Mutex<Vec<Endpoints>>> = Arc::default();
    let seen_at: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
    // The pods the slice listed before their leader label was there, read as each state arrives:
    // the promotion comes first, so a leader waiting for its predecessor's step-down is never
    // listed.
    let unlabeled: Arc<Mutex<Vec<String>>> = Arc::default();
    let watching = {
        let seen = seen.clone();
        let seen_at = seen_at.clone();
        let unlabeled = unlabeled.clone();
        let pods: Api<Pod> = w.ns.api();
        let stream = watcher(slices.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(slice)) = stream.next().await {
                let listed = endpoints(&slice);
                seen.lock().unwrap().push(listed.clone());
                seen_at.lock().unwrap().push(std::time::Instant::now());
                for (pod, _) in listed {
                    let Ok(Some(marks)) = pods.get_opt(&pod).await else {
                        continue;
                    };
                    if marks.labels().get(ROLE_LABEL).map(String::as_str) != Some(ROLE_LEADER) {
                        unlabeled.lock().unwrap().push(pod);
                    }
                }
            }
        })
    };
    // Each pod runs `Membership`, which acknowledges its leadership: a handover away from it
    // then waits for its step-down, and the slice must not list nobody meanwhile.
    let cp = control_plane().await.unwrap();
    let token = member_account(&w.ns, "member", "g", MemberRules::DOCUMENTED)
        .await
        .unwrap();
    let mut members = Vec::new();
    for pod in &names {
        let client = cp.client_with_token(&token).await.unwrap();
        members.push(Membership::start(client, &w.ns.name, pod, Some("g".into())));
    }
    let _op = Operator::start(cp, &w.ns.name, "op-1", &[]).await;
    let mut group = with_service(
        "g",
        "app",
        json!({"mode": "EndpointSlice", "ports": [{"port": 80, "targetPort": "http"}]}),
    );
    // A deleted pod's member cannot step down (its pod is gone): its successor waits out its
    // confirmation, two thirds of this.
    group.spec.lease_duration_seconds = 3;
    w.groups
        .create(&PostParams::default(), &group)
        .await
        .unwrap();
    let first = w
        .wait_settled("g", "a leader at epoch 1", |s| s.epoch == 1)
        .await;
    assert_eq!(first.leader, names[0]);
    wait_slice_lists(&w, "g-leader", Some(&names[0])).await;
    // A deletion, then a leader turning NotReady.
    let deleted = std::time::Instant::now();
    w.kubelet.delete_now(&names[0]).await.unwrap();
    let second = w
        .wait_settled("g", "handover at epoch 2", |s| s.epoch == 2)
        .await;
    assert_eq!(second.leader, names[1]);
    wait_slice_lists(&w, "g-leader", Some(&names[1])).await;
    // The slice lists a leader only once its label landed (the promotion comes first), never
    // while it waits for its predecessor's step-down.
    let labeled_when_listed =
        |pod: &Pod| pod.labels().get(ROLE_LABEL).map(String::as_str) == Some(ROLE_LEADER);
    let pods: Api<Pod> = w.ns.api();
    let listed = pods.get(&names[1]).await.unwrap();
    assert!(
        labeled_when_listed(&listed),
        "{} listed before its label",
        names[1]
    );
    w.kubelet.set_ready(&names[1], false).await.unwrap();
    let third = w
        .wait_settled("g", "handover at epoch 3", |s| s.epoch == 3)
        .await;
    assert_eq!(third.leader, names[2]);
    wait_slice_lists(&w, "g-leader", Some(&names[2])).await;
    let listed = pods.get(&names[2]).await.unwrap();
    assert!(
        labeled_when_listed(&listed),
        "{} listed before its label",
        names[2]
    );
    // The last one: no candidate, no endpoint.
    w.kubelet.delete_now(&names[2]).await.unwrap();
    w.wait_leaderless("g", "no candidate left").await;
    wait_slice_lists(&w, "g-leader", None).await;
    watching.abort();
    drop(members);

    let unlabeled = unlabeled.lock().unwrap().clone();
    assert_eq!(
        unlabeled,
        Vec::<String>::new(),
        "the slice listed pods before their leader label"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|s| s.len() <= 1),
        "a state of the slice listed two pods: {seen:?}"
    );
    // Each leader appears in turn, the new one replacing the old one in one write: no state in
    // between lists nobody (kube-proxy syncs at most once per minSyncPeriod, and the second of
    // two writes would wait for it).
    let mut order: Vec<&str> = Vec::new();
    for state in &seen {
        if let Some((pod, _)) = state.first()
            && order.last() != Some(&pod.as_str())
        {
            order.push(pod);
        }
    }
    assert_eq!(order, [names[0].as_str(), &names[1], &names[2]], "{seen:?}");
    let first = seen.iter().position(|s| !s.is_empty()).unwrap();
    let last = seen.iter().rposition(|s| !s.is_empty()).unwrap();
    assert!(
        seen[first..=last].iter().all(|s| !s.is_empty()),
        "the slice listed nobody between two leaders: {seen:?}"
    );
    let seen_at = seen_at.lock().unwrap().clone();
    if let Some(i) = seen
        .iter()
        .position(|s| s.first().is_some_and(|(p, _)| p == &names[1]))
    {
        eprintln!("deletion -> new endpoint in {:?}", seen_at[i] - deleted);
    }
}

#[tokio::test]
async fn an_unresolvable_named_port_leaves_no_endpoint_and_a_condition_naming_it() {
    let mut w = World::new("svc-badport").await;
    w.kubelet = w.kubelet.clone().with_container_ports(ports());
    w.ordered_ready_pods("app", 2, "app").await;
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    create_with_service(
        &w,
        "g",
        "app",
        json!({"mode": "EndpointSlice", "ports": [
                {"name": "web", "port": 80, "targetPort": "http"},
                {"name": "rpc", "port": 81, "targetPort": "grpc"}]}),
    )
    .await;
    let settled = w.wait_settled("g", "elected", |_| true).await;
    let status = w
        .wait_status("g", "Routing False: PortUnresolved", |s| {
            s.condition(ROUTING)
                .is_some_and(|c| c.reason == "PortUnresolved")
        })
        .await;
    let c = status.condition(ROUTING).unwrap();
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains("spec.service.ports[1] (rpc)") && c.message.contains("\"grpc\""),
        "{}",
        c.message
    );
    wait_slice_lists(&w, "g-leader", None).await;

    // Fixed: the endpoint comes, the condition turns True.
    w.patch_spec(
        "g",
        json!({"service": {"mode": "EndpointSlice", "ports": [
        {"name": "web", "port": 80, "targetPort": "http"},
        {"name": "rpc", "port": 81, "targetPort": "metrics"}]}}),
    )
    .await;
    wait_slice_lists(&w, "g-leader", Some(&settled.leader)).await;
    w.wait_status("g", "Routing True", |s| {
        s.condition(ROUTING).is_some_and(|c| c.status == "True")
    })
    .await;
}

#[tokio::test]
async fn removing_spec_service_or_the_group_removes_the_service_and_the_slice() {
    let w = World::new("svc-remove").await;
    w.ordered_ready_pods("app", 1, "app").await;
    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    let services: Api<Service> = w.ns.api();
    let slices: Api<EndpointSlice> = w.ns.api();
    create_with_service(
        &w,
        "g",
        "app",
        json!({"mode": "EndpointSlice", "ports": [{"port": 80}]}),
    )
    .await;
    let settled = w.wait_settled("g", "elected", |_| true).await;
    wait_slice_lists(&w, "g-leader", Some(&settled.leader)).await;
    wait_present(&services, "g-leader", "the Service", true).await;

    // spec.service removed: both go, and the condition with them; the leader keeps its label.
    w.patch_spec("g", json!({"service": null})).await;
    wait_present(&services, "g-leader", "the Service gone", false).await;
    wait_present(&slices, "g-leader", "the slice gone", false).await;
    w.wait_status("g", "no Routing condition", |s| {
        s.condition(ROUTING).is_none()
    })
    .await;
    w.wait_settled("g", "the same leader", |s| {
        s.leader == settled.leader && s.epoch == settled.epoch
    })
    .await;

    // Back in Label mode, then the group deleted: its finalizer takes the Service with it.
    w.patch_spec(
        "g",
        json!({"service": {"mode": "Label", "ports": [{"port": 80}]}}),
    )
    .await;
    wait_present(&services, "g-leader", "the Service again", true).await;
    w.groups
        .delete("g", &DeleteParams::default())
        .await
        .unwrap();
    wait_present(&w.groups, "g", "the group gone", false).await;
    wait_present(
        &services,
        "g-leader",
        "the Service gone with the group",
        false,
    )
    .await;
}

/// A group refused for a Lease it does not own demotes its leader: its slice lists nobody either,
/// and the `Routing` condition says so.
#[tokio::test]
async fn a_group_refused_for_a_foreign_lease_routes_to_nobody() {
    let w = World::new("svc-refused").await;
    w.ordered_ready_pods("app", 1, "app").await;
    let mut op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-1", &[]).await;
    create_with_service(
        &w,
        "pay",
        "app",
        json!({"mode": "EndpointSlice", "ports": [{"port": 80}]}),
    )
    .await;
    let settled = w.wait_settled("pay", "elected", |_| true).await;
    wait_slice_lists(&w, "pay-leader", Some(&settled.leader)).await;
    assert!(op.terminate().await, "{}", op.logs());
    crate::lease::replace_with_foreign_lease(&w).await;

    let _op = Operator::start(control_plane().await.unwrap(), &w.ns.name, "op-2", &[]).await;
    wait_slice_lists(&w, "pay-leader", None).await;
    w.wait_status("pay", "Routing NoLeader", |s| {
        s.condition(ROUTING).is_some_and(|c| c.reason == "NoLeader")
    })
    .await;
}
