//! The control plane behaves like a real cluster: authentication, RBAC, CRDs with validation,
//! optimistic concurrency, watches, and the simulated kubelet's pods.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::{
        authentication::v1::SelfSubjectReview,
        core::v1::{ConfigMap, Pod, Secret},
        rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
        PostParams, WatchEvent, WatchParams,
    },
    runtime::{WatchStreamExt, watcher},
};
use leadergroup_testenv::{
    Kubelet, NODE_NAME, control_plane, namespace, wait_for_object, wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(20);

fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[tokio::test]
async fn server_reports_the_pinned_version_to_kubectl() {
    let cp = control_plane().await.unwrap();
    let out = tokio::process::Command::from(cp.kubectl())
        .args(["version", "-o", "json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The server is the kube-apiserver of the bin dir (make it: the newest pinned minor; make
    // it-oldest: the oldest), kubectl the newest in both.
    let pinned = std::process::Command::new(cp.bin_dir().join("kube-apiserver"))
        .arg("--version")
        .output()
        .unwrap();
    let pinned = String::from_utf8_lossy(&pinned.stdout);
    let pinned = pinned.trim().trim_start_matches("Kubernetes ");
    assert!(
        pinned.starts_with("v1."),
        "kube-apiserver --version: {pinned}"
    );
    assert_eq!(v["serverVersion"]["gitVersion"], pinned, "{v}");
    assert_eq!(v["clientVersion"]["gitVersion"], "v1.37.2", "{v}");
}

#[tokio::test]
async fn anonymous_request_is_refused() {
    let cp = control_plane().await.unwrap();
    let anonymous = cp.anonymous_client().await.unwrap();
    for result in [
        Api::<Secret>::namespaced(anonymous.clone(), "default")
            .list(&ListParams::default())
            .await
            .map(|_| ()),
        Api::<ConfigMap>::namespaced(anonymous.clone(), "kube-system")
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    ] {
        let err = result.expect_err("anonymous list must be refused");
        let code = api_code(&err);
        assert!(matches!(code, Some(401 | 403)), "{err:?}");
    }
    // The admin, by contrast, may.
    Api::<ConfigMap>::namespaced(cp.client().await.unwrap(), "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn service_account_token_authenticates_and_rbac_decides() {
    let ns = namespace("sa-rbac").await.unwrap();
    ns.create_service_account("robot").await.unwrap();
    let robot = ns.service_account_client("robot").await.unwrap();

    let review = Api::<SelfSubjectReview>::all(robot.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.unwrap().user_info.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{}:robot", ns.name).as_str())
    );
    assert!(
        user.groups
            .unwrap_or_default()
            .contains(&"system:serviceaccounts".to_owned())
    );

    let secrets: Api<Secret> = Api::namespaced(robot.clone(), &ns.name);
    let configmaps: Api<ConfigMap> = Api::namespaced(robot.clone(), &ns.name);
    let err = secrets.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), Some(403), "{err:?}");
    let err = configmaps.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), Some(403), "{err:?}");

    // A Role granting configmaps, bound to the robot.
    let role = Role {
        metadata: ObjectMeta {
            name: Some("read-configmaps".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
    };
    ns.api::<Role>()
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("robot-reads-configmaps".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "read-configmaps".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "robot".into(),
            namespace: Some(ns.name.clone()),
            ..Default::default()
        }]),
    };
    ns.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // The authorizer reads RBAC from its informer cache: the grant lands within moments.
    wait_until(
        "the RoleBinding to allow listing configmaps",
        TIMEOUT,
        || async { configmaps.list(&ListParams::default()).await.map(Some) },
    )
    .await
    .unwrap();
    // What the Role does not grant stays refused.
    let err = secrets.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), Some(403), "{err:?}");
    let err = configmaps
        .create(&PostParams::default(), &ConfigMap::default())
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(403), "{err:?}");
}

const CRD_NAME: &str = "widgets.testenv.leadergroup.io";

/// A small namespaced CRD; created once per cluster (test binaries sharing a cluster, or reruns,
/// find it there).
async fn widget_api(ns: &str) -> Api<DynamicObject> {
    let cp = control_plane().await.unwrap();
    let client = cp.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": "testenv.leadergroup.io",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {"size": {"type": "integer", "minimum": 1}},
                        "x-kubernetes-validations": [{"rule": "self.size <= 10", "message": "size must be at most 10"}]
                    }}
                }}
            }]
        }
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(e) => panic!("creating the CRD: {e:?}"),
    }
    wait_for_object(
        &crds,
        CRD_NAME,
        "the Widget CRD to be Established",
        TIMEOUT,
        |crd| {
            crd.and_then(|c| c.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        },
    )
    .await
    .unwrap();
    let gvk = GroupVersionKind::gvk("testenv.leadergroup.io", "v1", "Widget");
    Api::namespaced_with(client, ns, &ApiResource::from_gvk(&gvk))
}

fn widget(name: &str, size: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "testenv.leadergroup.io/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    }))
    .unwrap()
}

#[tokio::test]
async fn crd_validation_conflict_and_watch() {
    let ns = namespace("crd").await.unwrap();
    let widgets = widget_api(&ns.name).await;

    // The schema and the CEL rule are enforced by the server: 422.
    for bad in [
        serde_json::json!("three"),
        serde_json::json!(0),
        serde_json::json!(11),
    ] {
        let err = widgets
            .create(&PostParams::default(), &widget("bad", bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(api_code(&err), Some(422), "size {bad}: {err:?}");
    }

    let created = widgets
        .create(&PostParams::default(), &widget("w", serde_json::json!(1)))
        .await
        .unwrap();
    let stale = created.clone();

    let mut first = created.clone();
    first.data["spec"]["size"] = serde_json::json!(2);
    let updated = widgets
        .replace("w", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        stale.metadata.resource_version
    );

    // Writing from the stale copy: the resourceVersion no longer matches, 409 Conflict.
    let mut late = stale.clone();
    late.data["spec"]["size"] = serde_json::json!(5);
    let err = widgets
        .replace("w", &PostParams::default(), &late)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), Some(409), "{err:?}");
    let kube::Error::Api(status) = &err else {
        unreachable!()
    };
    assert!(status.is_conflict(), "{status:?}");
    assert_eq!(
        widgets.get("w").await.unwrap().data["spec"]["size"],
        serde_json::json!(2),
        "the conflicting write must not have landed"
    );

    // A watch from the current resourceVersion receives the next change.
    let rv = updated.metadata.resource_version.clone().unwrap();
    let mut events = widgets
        .watch(
            &WatchParams::default().fields("metadata.name=w").timeout(30),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": 3}})),
        )
        .await
        .unwrap();
    let seen = tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                WatchEvent::Modified(obj) => return obj,
                WatchEvent::Bookmark(_) => continue,
                other => panic!("unexpected watch event {other:?}"),
            }
        }
        panic!("the watch ended without an event")
    })
    .await
    .expect("no watch event for the patch");
    assert_eq!(seen.data["spec"]["size"], serde_json::json!(3));
    assert_eq!(seen.metadata.name.as_deref(), Some("w"));
}

fn is_ready(pod: &Pod) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

#[tokio::test]
async fn simulated_pod_readiness_and_termination_are_watched() {
    let ns = namespace("kubelet").await.unwrap();
    let kubelet = Kubelet::new(ns.client.clone(), &ns.name).with_termination_grace_period(30);
    let pods: Api<Pod> = ns.api();

    // Everything the watch sees, in order, as (ready, terminating) or None for a deletion.
    let mut stream = watcher(
        pods.clone(),
        watcher::Config::default().fields("metadata.name=app-0"),
    )
    .touched_objects()
    .boxed();
    let pod = kubelet
        .create_ready_pod("app-0", &[("app", "demo")])
        .await
        .unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some(NODE_NAME)
    );
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(is_ready(&pod), Some(true));

    async fn next_until(
        stream: &mut (impl futures::Stream<Item = Result<Pod, watcher::Error>> + Unpin),
        what: &str,
        pred: impl Fn(&Pod) -> bool,
    ) -> Pod {
        tokio::time::timeout(TIMEOUT, async {
            loop {
                let pod = stream.try_next().await.unwrap().expect("watch ended");
                if pred(&pod) {
                    return pod;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the watch never showed {what}"))
    }

    next_until(&mut stream, "app-0 Ready", |p| is_ready(p) == Some(true)).await;
    kubelet.set_ready("app-0", false).await.unwrap();
    let not_ready = next_until(&mut stream, "app-0 not Ready", |p| {
        is_ready(p) == Some(false)
    })
    .await;
    // Only the condition's status changed: it is a readiness flip, not a new pod.
    assert_eq!(not_ready.metadata.uid, pod.metadata.uid);
    kubelet.set_ready("app-0", true).await.unwrap();
    next_until(&mut stream, "app-0 Ready again", |p| {
        is_ready(p) == Some(true)
    })
    .await;

    // Graceful deletion: the server marks the pod and waits for the kubelet.
    let terminating = kubelet
        .begin_termination("app-0")
        .await
        .unwrap()
        .expect("graceful");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    next_until(&mut stream, "app-0 terminating", |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        pods.get_opt("app-0").await.unwrap().is_some(),
        "a pod on a node must wait for its kubelet"
    );
    kubelet.finish_termination("app-0").await.unwrap();
    wait_for_object(&pods, "app-0", "app-0 to be gone", TIMEOUT, |p| p.is_none())
        .await
        .unwrap();
}

#[tokio::test]
async fn pods_without_grace_vanish_at_once_and_phases_end_readiness() {
    let ns = namespace("kubelet-phase").await.unwrap();
    let kubelet = Kubelet::new(ns.client.clone(), &ns.name);
    kubelet.create_ready_pod("job-0", &[]).await.unwrap();
    let done = kubelet.set_phase("job-0", "Succeeded").await.unwrap();
    assert_eq!(
        done.status.as_ref().unwrap().phase.as_deref(),
        Some("Succeeded")
    );
    assert_eq!(is_ready(&done), Some(false));

    let pending = kubelet
        .create_pod("web-0", &[("app", "web")])
        .await
        .unwrap();
    assert_eq!(is_ready(&pending), None, "a new pod has no status yet");
    let pods: Api<Pod> = ns.api();
    let mut events = pods
        .watch(
            &WatchParams::default()
                .fields("metadata.name=web-0")
                .timeout(30),
            pending.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    kubelet.delete_now("web-0").await.unwrap();
    assert!(pods.get_opt("web-0").await.unwrap().is_none());
    // What delete_now documents: the server records the grace-0 deletion (MODIFIED with a
    // deletionTimestamp) before it removes the pod (DELETED).
    let seen = tokio::time::timeout(TIMEOUT, async {
        let mut seen = Vec::new();
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                WatchEvent::Modified(p) => seen.push((
                    "MODIFIED",
                    p.metadata.deletion_timestamp.is_some(),
                    p.metadata.deletion_grace_period_seconds,
                )),
                WatchEvent::Deleted(_) => {
                    seen.push(("DELETED", true, Some(0)));
                    return seen;
                }
                _ => {}
            }
        }
        panic!("the watch ended before DELETED: {seen:?}")
    })
    .await
    .unwrap();
    assert_eq!(
        seen,
        vec![("MODIFIED", true, Some(0)), ("DELETED", true, Some(0))]
    );

    // Each test namespace gets its own default ServiceAccount, which pods need.
    assert!(
        ns.api::<k8s_openapi::api::core::v1::ServiceAccount>()
            .get_opt("default")
            .await
            .unwrap()
            .is_some()
    );
}
