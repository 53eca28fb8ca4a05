//! The chart's guard of the groups' Leases (`templates/lease-guard.yaml`): only the chart's
//! ServiceAccount creates, deletes or rewrites a group's Lease, and a member changes its
//! `spec.renewTime` alone, only with a token bound to the pod the Lease names as holder; each
//! refusal names the field. The members are pods running as a ServiceAccount with the documented
//! Role, and their tokens are bound to them as the kubelet's are (TokenRequest, boundObjectRef
//! kind Pod), so that the API server puts the pod's name in the request's user info.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use leadergroup_client::{Epoch, Membership, Role as MemberRole};
use leadergroup_operator::crd::{
    EPOCH_ANNOTATION, LeaderGroupStatus, Liveness, PREDECESSOR_ANNOTATION,
    STEPPED_DOWN_BY_EPOCH_ANNOTATION, lease_name_for,
};
use leadergroup_operator::election::HEARTBEAT;
use leadergroup_testenv::{MemberRules, NODE_NAME, control_plane, member_account, namespace};
use serde_json::json;

use super::guard::{FORBIDDEN, Release, dry_post, enforced, refused};
use super::release_operator;
use crate::common::{World, group};

/// The ServiceAccount the members run as.
const MEMBER: &str = "member";
/// The impersonated user: may write any Lease of the namespace, and is no pod.
const SOMEONE: &str = "someone";

/// Creates pod `name` labeled `app=<app>`, running as [`MEMBER`] on the simulated node, Ready.
async fn member_pod(w: &World, name: &str, app: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "nodeName": NODE_NAME,
            "serviceAccountName": MEMBER,
            "containers": [{"name": "app", "image": "registry.invalid/leadergroup-tests/member:1"}],
        },
    }))
    .unwrap();
    w.pods.create(&PostParams::default(), &pod).await.unwrap();
    w.kubelet.set_ready(name, true).await.unwrap();
}

/// `lease` with `spec.renewTime` moved to now: a renewal, as the client sends it.
fn renewed(mut lease: Lease) -> Lease {
    lease.spec.get_or_insert_default().renew_time = Some(MicroTime(Timestamp::now()));
    lease
}

/// Reads the group's Lease and writes it back through `api` after `change`.
async fn write(
    api: &Api<Lease>,
    change: impl FnOnce(Lease) -> Lease,
    params: &PostParams,
) -> Result<Lease, kube::Error> {
    let name = lease_name_for("g");
    let lease = api.get(&name).await?;
    api.replace(&name, params, &change(lease)).await
}

/// Waits until `member`'s client reports `Leader` at `epoch`.
async fn wait_leader(member: &Membership, epoch: u32, pod: &str) {
    let mut role = member.subscribe();
    let want = MemberRole::Leader {
        epoch: Epoch::from(epoch),
    };
    let led = tokio::time::timeout(Duration::from_secs(20), role.wait_for(|r| *r == want)).await;
    assert!(
        led.is_ok_and(|r| r.is_ok()),
        "{pod}'s client: {}",
        *role.borrow()
    );
}

fn renewing(status: &LeaderGroupStatus, leader: &str) -> bool {
    status.leader.as_deref() == Some(leader)
        && status
            .condition(HEARTBEAT)
            .is_some_and(|c| c.reason == "Renewing")
}

#[tokio::test]
async fn only_the_holders_pod_renews_the_group_lease_and_only_the_operator_writes_the_rest() {
    let cp = control_plane().await.unwrap();
    let w = World::new("lease-guard").await;
    let rel = namespace("lease-guard-rel").await.unwrap();
    let fullname = "lgo-leadergroup-operator";
    let release = Release::install(cp, &rel, &w.ns.name).await;

    // The members' ServiceAccount with the documented Role (update on the group's Lease), and
    // someone who may write every Lease of the namespace.
    member_account(&w.ns, MEMBER, "g", MemberRules::DOCUMENTED)
        .await
        .unwrap();
    let lease_writer: Role = serde_json::from_value(json!({
        "metadata": {"name": "lease-writer"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "create", "update", "delete"]}],
    }))
    .unwrap();
    w.ns.api::<Role>()
        .create(&PostParams::default(), &lease_writer)
        .await
        .unwrap();
    let grant: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "lease-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SOMEONE}],
    }))
    .unwrap();
    w.ns.api::<RoleBinding>()
        .create(&PostParams::default(), &grant)
        .await
        .unwrap();

    // Two members, the first older; the operator as the chart's ServiceAccount; Heartbeat mode.
    w.kubelet.ensure_node().await.unwrap();
    member_pod(&w, "member-0", "lease-guard").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    member_pod(&w, "member-1", "lease-guard").await;
    let (mut operator, _) = release_operator(cp, &rel, fullname, &w.ns.name, "lease-op").await;
    operator.wait_role("active").await;
    let mut g = group("g", "lease-guard");
    g.spec.liveness = Liveness::Heartbeat;
    w.groups.create(&PostParams::default(), &g).await.unwrap();
    let first = w
        .wait_settled("g", "member-0 leads at epoch 1", |s| s.epoch == 1)
        .await;
    assert_eq!(first.leader, "member-0");

    let pod_client = |pod: &'static str| {
        let ns = &w.ns;
        async move {
            let token = ns.pod_token(MEMBER, pod).await.unwrap();
            cp.client_with_token(&token).await.unwrap()
        }
    };
    let leases = |client: &Client| Api::<Lease>::namespaced(client.clone(), &w.ns.name);
    let (leader_client, follower_client) =
        (pod_client("member-0").await, pod_client("member-1").await);
    let leader = leases(&leader_client);
    let follower = leases(&follower_client);
    let someone = leases(&cp.client_as(SOMEONE).await.unwrap());
    let unbound = leases(&w.ns.service_account_client(MEMBER).await.unwrap());

    // The follower's own token: refused once the API server enforces the policy, saying whose
    // renewal it is.
    let dry_run = dry_post();
    let first_refusal = enforced("the guard refusing the follower's renewal", || {
        write(&follower, renewed, &dry_run)
    })
    .await;
    let message = first_refusal.to_string();
    refused::<()>(
        Err(first_refusal),
        FORBIDDEN,
        "spec.renewTime",
        "the follower renews",
    );
    assert!(
        message.contains("holder (member-0)") && message.contains("from pod member-1"),
        "{message}"
    );

    // Renewals by identities that are no pod: an impersonated user, and the members'
    // ServiceAccount with a token bound to nothing.
    for (who, api) in [
        ("an impersonated user", &someone),
        ("an unbound token", &unbound),
    ] {
        let answer = write(api, renewed, &PostParams::default()).await;
        refused(
            answer,
            FORBIDDEN,
            "carries no pod name",
            &format!("{who} renews"),
        );
    }

    // The leader renews, and cannot move the holder, the epoch or the arbiter.
    write(&leader, renewed, &PostParams::default())
        .await
        .expect("the leader renews its Lease");
    let moved = write(
        &leader,
        |mut l| {
            l.spec.get_or_insert_default().holder_identity = Some("member-1".into());
            l
        },
        &PostParams::default(),
    )
    .await;
    refused(
        moved,
        FORBIDDEN,
        "spec.holderIdentity",
        "the leader hands over",
    );
    for (annotation, value) in [
        (EPOCH_ANNOTATION, i64::MAX.to_string()),
        ("leadergroup.io/arbiter", "member-0".to_string()),
        // A lapsed member may not clear, nor another one set, the record that keeps it out.
        ("leadergroup.io/lapsed", "some-uid@1".to_string()),
        // Nor shorten the wait for itself once its Lease was shortened.
        ("leadergroup.io/longest-lease-seconds", "1".to_string()),
    ] {
        let forged = write(
            &leader,
            |mut l| {
                l.annotations_mut().insert(annotation.into(), value.clone());
                l
            },
            &PostParams::default(),
        )
        .await;
        refused(
            forged,
            FORBIDDEN,
            &format!("annotation {annotation}"),
            &format!("the leader sets {annotation}"),
        );
    }

    // A finalizer of the leader's would wedge the Lease's deletion with its group's.
    let wedged = write(
        &leader,
        |mut l| {
            l.finalizers_mut().push("example.com/keep".into());
            l
        },
        &PostParams::default(),
    )
    .await;
    refused(
        wedged,
        FORBIDDEN,
        "metadata.finalizers",
        "the leader adds a finalizer",
    );

    // Someone with every right on Leases: cannot forge the epoch, delete or create a group Lease.
    let forged = write(
        &someone,
        |mut l| {
            l.annotations_mut()
                .insert(EPOCH_ANNOTATION.into(), i64::MAX.to_string());
            l
        },
        &PostParams::default(),
    )
    .await;
    refused(
        forged,
        FORBIDDEN,
        &format!("annotation {EPOCH_ANNOTATION}"),
        "someone forges the epoch",
    );
    let deleted = someone
        .delete(&lease_name_for("g"), &DeleteParams::default())
        .await;
    refused(
        deleted,
        FORBIDDEN,
        "may delete",
        "someone deletes the Lease",
    );
    let other: Lease =
        serde_json::from_value(json!({"metadata": {"name": lease_name_for("other")}})).unwrap();
    let created = someone.create(&PostParams::default(), &other).await;
    refused(
        created,
        FORBIDDEN,
        "may create",
        "someone creates a group Lease",
    );

    // The client renews with its pod's token, and the operator still hands over: member-1 leads
    // at epoch 2 and renews.
    let members = [
        Membership::start(leader_client, &w.ns.name, "member-0", Some("g".into())),
        Membership::start(follower_client, &w.ns.name, "member-1", Some("g".into())),
    ];
    w.wait_status("g", "member-0 renews through the client", |s| {
        renewing(s, "member-0")
    })
    .await;
    // Its client reports Leader once its renewal (its acknowledgement) shows in the Lease: from
    // then on, deposing it waits for its step-down. (The test's own renewal above already made
    // the status say Renewing.)
    wait_leader(&members[0], 1, "member-0").await;
    w.kubelet.set_ready("member-0", false).await.unwrap();
    w.wait_settled("g", "member-1 leads at epoch 2", |s| s.epoch == 2)
        .await;
    // member-1 was labeled once member-0's client had stepped down in the Lease, through the
    // guard, with member-0's token.
    let lease = leader.get(&lease_name_for("g")).await.unwrap();
    assert_eq!(
        [PREDECESSOR_ANNOTATION, STEPPED_DOWN_BY_EPOCH_ANNOTATION]
            .map(|k| lease.annotations().get(k).cloned()),
        [Some("member-0".to_string()), Some("1".to_string())],
        "the predecessor and its step-down"
    );
    // Nobody else may say so, nor member-0 for another epoch, nor move the predecessor.
    let unset = |mut l: Lease| {
        l.annotations_mut().remove(STEPPED_DOWN_BY_EPOCH_ANNOTATION);
        l
    };
    for (who, api, lease_change, naming) in [
        (
            "member-1",
            &follower,
            unset as fn(Lease) -> Lease,
            "from pod member-1",
        ),
        (
            "member-0",
            &leader,
            |mut l: Lease| {
                l.annotations_mut()
                    .insert(STEPPED_DOWN_BY_EPOCH_ANNOTATION.into(), "2".into());
                l
            },
            "would be set to 2",
        ),
        (
            "member-0",
            &leader,
            |mut l: Lease| {
                l.annotations_mut()
                    .insert(PREDECESSOR_ANNOTATION.into(), "member-1".into());
                l
            },
            "annotation leadergroup.io/predecessor ",
        ),
        ("someone", &someone, unset, "carries no pod name"),
    ] {
        refused(
            write(api, lease_change, &PostParams::default()).await,
            FORBIDDEN,
            naming,
            &format!("{who} rewrites the step-down"),
        );
    }
    w.wait_status("g", "member-1 renews through the client", |s| {
        renewing(s, "member-1")
    })
    .await;
    wait_leader(&members[1], 2, "member-1").await;
    for m in members {
        assert!(
            m.last_error()
                .is_none_or(|e| !e.to_string().contains("ValidatingAdmissionPolicy")),
            "{:?}",
            m.last_error()
        );
        m.shutdown();
    }
    let logs = operator.logs();
    assert!(
        !logs.contains("ValidatingAdmissionPolicy"),
        "the guard refused the operator:\n{logs}"
    );
    operator.kill().await;
    release.uninstall().await;
}
