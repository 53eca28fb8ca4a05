//! The fence on a Kubernetes object (a ConfigMap): stale epochs refused with both numbers, equal
//! and higher accepted, concurrent writers resolved by the resourceVersion CAS, and a write that
//! gets no answer given up at its deadline.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use leadergroup_client::{
    Epoch,
    fence::{FENCED_OBJECT_EPOCH_ANNOTATION, ObjectFenceError, replace_fenced},
};
use leadergroup_testenv::{Proxy, api_server_addr, control_plane, namespace};
use tokio::time::Instant;

/// Long enough for any answer of a working API server.
const DEADLINE: Duration = Duration::from_secs(10);

fn epoch(n: u32) -> Epoch {
    Epoch::from(n)
}

async fn config_map(api: &Api<ConfigMap>, name: &str) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
}

fn set(key: &'static str, value: String) -> impl FnMut(&mut ConfigMap) {
    move |cm| {
        cm.data
            .get_or_insert_default()
            .insert(key.to_owned(), value.clone());
    }
}

#[tokio::test]
async fn stale_epochs_are_refused_naming_both() {
    let ns = namespace("client-object-fence").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    config_map(&api, "state").await;

    let written = replace_fenced(&api, "state", epoch(5), DEADLINE, set("by", "5".into()))
        .await
        .unwrap();
    assert_eq!(
        written.metadata.annotations.unwrap()[FENCED_OBJECT_EPOCH_ANNOTATION],
        "5"
    );

    let err = replace_fenced(&api, "state", epoch(3), DEADLINE, set("by", "3".into()))
        .await
        .unwrap_err();
    let stale = err.stale().expect("not a stale-token error");
    assert_eq!((stale.presented, stale.highest), (epoch(3), epoch(5)));
    let text = err.to_string();
    assert!(
        text.contains("state")
            && text.contains("epoch 3 was presented")
            && text.contains("epoch 5 has already been accepted"),
        "{text}"
    );

    // Equal (the same leader writing again) and higher (a successor) are accepted.
    replace_fenced(&api, "state", epoch(5), DEADLINE, set("again", "5".into()))
        .await
        .unwrap();
    let cm = replace_fenced(&api, "state", epoch(6), DEADLINE, set("by", "6".into()))
        .await
        .unwrap();
    assert_eq!(
        cm.metadata.annotations.unwrap()[FENCED_OBJECT_EPOCH_ANNOTATION],
        "6"
    );
    let data = api.get("state").await.unwrap().data.unwrap();
    assert_eq!((data["by"].as_str(), data["again"].as_str()), ("6", "5"));

    // A fence annotation that is not an epoch stops every write rather than being guessed.
    api.patch(
        "state",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {FENCED_OBJECT_EPOCH_ANNOTATION: "six"}}})),
    )
    .await
    .unwrap();
    let err = replace_fenced(&api, "state", epoch(9), DEADLINE, set("by", "9".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ObjectFenceError::BadAnnotation { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("\"six\""), "{err}");

    // A missing object is an error, never created.
    let err = replace_fenced(&api, "absent", epoch(9), DEADLINE, set("by", "9".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ObjectFenceError::Kube { verb: "get", .. }),
        "{err}"
    );
}

#[tokio::test]
async fn concurrent_writers_are_ordered_by_the_compare_and_swap() {
    let ns = namespace("client-object-fence-race").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    config_map(&api, "log").await;

    // Writers of several epochs at once, each appending its epoch to one list.
    let epochs = [4u32, 2, 7, 3, 6, 5, 1, 7, 4];
    let writers = epochs.iter().map(|&e| {
        let api = api.clone();
        tokio::spawn(async move {
            let result = replace_fenced(&api, "log", epoch(e), DEADLINE, |cm: &mut ConfigMap| {
                let data = cm.data.get_or_insert_default();
                let log = data.entry("writes".to_owned()).or_default();
                if !log.is_empty() {
                    log.push(',');
                }
                log.push_str(&e.to_string());
            })
            .await;
            (e, result)
        })
    });
    let mut accepted = Vec::new();
    for writer in writers {
        let (e, result) = writer.await.unwrap();
        match result {
            Ok(_) => accepted.push(e),
            Err(err) => {
                let stale = err.stale().unwrap_or_else(|| panic!("epoch {e}: {err}"));
                assert_eq!(stale.presented, epoch(e));
                assert!(stale.highest > stale.presented, "{err}");
            }
        }
    }
    let cm = api.get("log").await.unwrap();
    let writes: Vec<u32> = cm.data.unwrap()["writes"]
        .split(',')
        .map(|w| w.parse().unwrap())
        .collect();
    // No write lost (CAS) and none accepted twice: the list holds exactly the accepted ones.
    let (mut a, mut b) = (accepted.clone(), writes.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b, "accepted {accepted:?}, list {writes:?}");
    // In the order they landed, the epochs never decrease.
    assert!(writes.windows(2).all(|p| p[0] <= p[1]), "{writes:?}");
    // The highest epoch is never refused; both writers of 7 land.
    assert_eq!(
        accepted.iter().filter(|&&e| e == 7).count(),
        2,
        "{accepted:?}"
    );
    assert_eq!(
        cm.metadata.annotations.unwrap()[FENCED_OBJECT_EPOCH_ANNOTATION],
        "7"
    );
}

#[tokio::test]
async fn a_write_without_an_answer_ends_at_its_deadline() {
    let ns = namespace("client-object-fence-deadline").await.unwrap();
    let api: Api<ConfigMap> = ns.api();
    config_map(&api, "state").await;
    let proxy = Proxy::start(api_server_addr().await.unwrap())
        .await
        .unwrap();
    let path = control_plane()
        .await
        .unwrap()
        .kubeconfig_via(proxy.addr)
        .unwrap();
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let via_proxy: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).unwrap(), &ns.name);
    replace_fenced(
        &via_proxy,
        "state",
        epoch(1),
        DEADLINE,
        set("by", "1".into()),
    )
    .await
    .unwrap();

    // The connection goes silent: the API server never answers.
    proxy.cut();
    let deadline = Duration::from_secs(1);
    let started = Instant::now();
    let result = tokio::time::timeout(
        DEADLINE,
        replace_fenced(
            &via_proxy,
            "state",
            epoch(2),
            deadline,
            set("by", "2".into()),
        ),
    )
    .await
    .expect("the write still waited for an answer long after its deadline");
    let took = started.elapsed();
    let err = result.expect_err("a write through a cut connection succeeded");
    assert!(
        matches!(err, ObjectFenceError::Deadline { verb: "get", after, .. } if after == deadline),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("state") && text.contains("no answer to get within 1s"),
        "{text}"
    );
    assert!(
        took >= deadline && took < deadline + Duration::from_millis(500),
        "ended {took:?} after it started, for a deadline of {deadline:?}"
    );
}
