//! Without the RBAC the crate documents, the role stays Unknown and the error names what to grant.

use std::time::Duration;

use leadergroup_client::{Membership, MembershipError, Role};
use leadergroup_testenv::MemberRules;
use tokio::time::Instant;

use crate::common::{Recorder, VALIDITY, member_client, world};

async fn wait_forbidden(membership: &Membership) -> std::sync::Arc<MembershipError> {
    let mut errors = membership.errors();
    let found = tokio::time::timeout(
        Duration::from_secs(10),
        errors.wait_for(|e| e.as_ref().is_some_and(|e| e.is_forbidden())),
    )
    .await
    .expect("no permission error within 10 s")
    .unwrap();
    found.clone().unwrap()
}

#[tokio::test]
async fn without_the_lease_rule_the_role_stays_unknown_and_the_error_names_it() {
    let w = world("client-no-lease-rbac").await;
    // Everything says app-0 leads; only the permission to confirm it with the Lease is missing.
    w.ready_leader("app-0", &[("app", "a")], "g", 4)
        .await
        .unwrap();
    let client = member_client(&w, "app", "g", MemberRules::PODS_ONLY, None).await;

    let started = Instant::now();
    let membership = Membership::start(client, &w.ns.name, "app-0", None);
    let roles = Recorder::new(membership.subscribe());
    let error = wait_forbidden(&membership).await;
    let request = error.request();
    assert_eq!(
        (request.verb, request.resource, request.name.as_str()),
        ("get", "leases.coordination.k8s.io", "leadergroup-g")
    );
    assert_eq!(request.namespace, w.ns.name);
    let text = error.to_string();
    for part in [
        "permission denied",
        "get leases.coordination.k8s.io \"leadergroup-g\"",
        &format!("in namespace {:?}", w.ns.name),
        "grant the verbs get and watch",
        // The API server's message names the ServiceAccount.
        &format!("system:serviceaccount:{}:app", w.ns.name),
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    // Longer than the validity: never anything but Unknown.
    tokio::time::sleep(VALIDITY + Duration::from_secs(1)).await;
    assert_eq!(
        roles
            .since(started)
            .iter()
            .map(|(_, r)| *r)
            .collect::<Vec<_>>(),
        [Role::Unknown]
    );
    assert_eq!(membership.role(), Role::Unknown);
}

#[tokio::test]
async fn without_any_rule_the_error_names_the_pod() {
    let w = world("client-no-rbac").await;
    w.ready_leader("app-0", &[("app", "a")], "g", 4)
        .await
        .unwrap();
    let client = member_client(&w, "app", "g", MemberRules::NONE, None).await;
    let membership = Membership::start(client, &w.ns.name, "app-0", Some("g".to_owned()));
    let roles = Recorder::new(membership.subscribe());
    let error = wait_forbidden(&membership).await;
    // The pod or the Lease, whichever answered first; both are refused, the pod's is kept first.
    let mut errors = membership.errors();
    let pod_error = tokio::time::timeout(
        Duration::from_secs(10),
        errors.wait_for(|e| e.as_ref().is_some_and(|e| e.request().resource == "pods")),
    )
    .await
    .unwrap_or_else(|_| panic!("the pod's permission is never named; last: {error}"))
    .unwrap()
    .clone()
    .unwrap();
    let text = pod_error.to_string();
    assert!(
        text.contains(&format!("get pods \"app-0\" in namespace {:?}", w.ns.name)),
        "{text}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(roles.roles(), [Role::Unknown]);
}
