//! The chart's guard of the groups' Leases on a real cluster: two pods running the
//! leadergroup-agent (their kubelet-mounted ServiceAccount token, bound to the pod) in a Heartbeat
//! group. The leader's agent renews under the guard; a token bound to the follower pod cannot
//! renew, one bound to the leader pod cannot move the holder or the epoch, and an impersonated
//! user is refused; after the leader is deleted, the operator hands over and the new leader's
//! agent renews.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use leadergroup_operator::crd::{EPOCH_ANNOTATION, LeaderGroup, LeaderGroupStatus, lease_name_for};
use leadergroup_operator::election::HEARTBEAT;
use leadergroup_testenv::{wait_for_object, wait_settled};
use serde_json::json;

use crate::agents::{AGENT_IMAGE, MEMBER, heartbeat_group};
use crate::cluster::{CONVERGE, Cluster};

const GROUP: &str = "lg";

/// Reads the group's Lease and writes it back through `api` after `change`. The leader's agent
/// renews the Lease every third of its duration, so a renewal can land between the read and the
/// write: the server then answers 409 before the guard is asked, and the write is tried again on
/// a fresh read.
async fn write(api: &Api<Lease>, change: impl Fn(&mut Lease)) -> Result<Lease, kube::Error> {
    let name = lease_name_for(GROUP);
    let mut tries = 0;
    loop {
        let mut lease = api.get(&name).await?;
        change(&mut lease);
        tries += 1;
        match api.replace(&name, &PostParams::default(), &lease).await {
            Err(kube::Error::Api(s)) if s.code == 409 && tries < 5 => continue,
            answer => return answer,
        }
    }
}

fn renew(lease: &mut Lease) {
    lease.spec.get_or_insert_default().renew_time = Some(MicroTime(Timestamp::now()));
}

#[track_caller]
fn refused(answer: Result<Lease, kube::Error>, naming: &str, what: &str) {
    match answer {
        Err(kube::Error::Api(s))
            if s.code == 403
                && s.message.contains("ValidatingAdmissionPolicy")
                && s.message.contains(naming) => {}
        other => panic!("{what}: expected the guard's 403 naming {naming:?}, got {other:?}"),
    }
}

async fn wait_renewing(groups: &Api<LeaderGroup>, leader: &str) {
    let renewing = |s: &LeaderGroupStatus| {
        s.leader.as_deref() == Some(leader)
            && s.condition(HEARTBEAT)
                .is_some_and(|c| c.reason == "Renewing")
    };
    wait_for_object(
        groups,
        GROUP,
        &format!("{leader}'s agent renewing"),
        CONVERGE,
        |g: Option<&LeaderGroup>| g.and_then(|g| g.status.as_ref()).is_some_and(renewing),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn only_the_leaders_own_pod_renews_its_lease_and_agents_still_renew() {
    let c = Cluster::get().await;
    c.ensure_operator().await;
    let ns = leadergroup_testenv::namespace_in(c.client.clone(), "e2e-lease-guard")
        .await
        .unwrap();
    let _ns_guard = c.namespace_guard(&ns.name);
    let someone =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "someone"});
    heartbeat_group(
        &ns,
        GROUP,
        &["agent-0", "agent-1"],
        AGENT_IMAGE,
        6,
        &[someone],
    )
    .await;
    let pods: Api<Pod> = ns.api();
    let groups: Api<LeaderGroup> = ns.api();
    let first = wait_settled(&c.client, &ns.name, GROUP, "agent-0 leads", CONVERGE, |s| {
        s.leader == "agent-0"
    })
    .await
    .unwrap();
    // The leader's agent renews with its kubelet-mounted token, under the guard.
    wait_renewing(&groups, "agent-0").await;

    let leases_as = |token: String| {
        let (c, ns) = (&c, &ns);
        async move {
            let client = c.cp.client_with_token(&token).await.unwrap();
            Api::<Lease>::namespaced(client, &ns.name)
        }
    };
    let follower = leases_as(ns.pod_token(MEMBER, "agent-1").await.unwrap()).await;
    let leader = leases_as(ns.pod_token(MEMBER, "agent-0").await.unwrap()).await;
    let someone = Api::<Lease>::namespaced(c.cp.client_as("someone").await.unwrap(), &ns.name);
    refused(
        write(&follower, renew).await,
        "from pod agent-1",
        "the follower's pod renews",
    );
    refused(
        write(&someone, renew).await,
        "carries no pod name",
        "someone renews",
    );
    write(&leader, renew)
        .await
        .expect("the leader's pod renews");
    refused(
        write(&leader, |l| {
            l.spec.get_or_insert_default().holder_identity = Some("agent-1".into());
        })
        .await,
        "spec.holderIdentity",
        "the leader's pod hands over",
    );
    refused(
        write(&leader, |l| {
            l.annotations_mut()
                .insert(EPOCH_ANNOTATION.into(), i64::MAX.to_string());
        })
        .await,
        &format!("annotation {EPOCH_ANNOTATION}"),
        "the leader's pod forges the epoch",
    );

    // The operator hands over under the guard, and the new leader's agent renews.
    pods.delete("agent-0", &DeleteParams::default())
        .await
        .unwrap();
    let second = wait_settled(&c.client, &ns.name, GROUP, "agent-1 leads", CONVERGE, |s| {
        s.leader == "agent-1"
    })
    .await
    .unwrap();
    assert!(second.epoch > first.epoch, "{first:?} then {second:?}");
    wait_renewing(&groups, "agent-1").await;
}
