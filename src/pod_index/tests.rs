//! The index against the rule it must keep: every pod a selector matches, or that carries the
//! group's mark, is among the candidates, through changes, deletions and relists.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::crd::SelectorRequirement;

fn pod(ns: &str, name: &str, labels: &[(&str, &str)], mark: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: mark.map(|g| BTreeMap::from([(GROUP_ANNOTATION.to_string(), g.into())])),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> PodSelector {
    PodSelector {
        match_labels: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        match_expressions: Vec::new(),
    }
}

fn expression(key: &str, operator: SelectorOperator, values: &[&str]) -> PodSelector {
    PodSelector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![SelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
    }
}

fn index_of(pods: &[Pod]) -> PodIndex {
    let index = PodIndex::default();
    for p in pods {
        index.apply(&watcher::Event::Apply(p.clone()));
    }
    index
}

const NONE: [&str; 0] = [];

/// The candidates for group `group` selecting `app=<app>`.
fn by_app(index: &PodIndex, ns: &str, group: &str, app: &str) -> Vec<String> {
    names(index.candidates(ns, group, &labels(&[("app", app)])))
}

fn names(found: Option<Vec<String>>) -> Vec<String> {
    found.expect("the selector can be narrowed")
}

#[test]
fn match_labels_give_the_rarest_pairs_pods_and_the_marked_ones() {
    let index = index_of(&[
        pod("ns", "a1", &[("app", "a"), ("tier", "web")], None),
        pod("ns", "a2", &[("app", "a"), ("tier", "db")], None),
        pod("ns", "b1", &[("app", "b"), ("tier", "web")], Some("a")),
        pod("ns", "c1", &[("app", "c"), ("tier", "web")], None),
        pod("other", "a9", &[("app", "a"), ("tier", "web")], None),
    ]);
    assert_eq!(by_app(&index, "ns", "a", "a"), ["a1", "a2", "b1"]);
    // app=a has 2 pods, tier=web 3: the two of app=a cover every match.
    assert_eq!(
        names(index.candidates("ns", "g", &labels(&[("app", "a"), ("tier", "web")]))),
        ["a1", "a2"]
    );
    assert_eq!(by_app(&index, "ns", "g", "none"), NONE);
    assert_eq!(by_app(&index, "absent", "g", "a"), NONE);
}

#[test]
fn an_in_requirement_narrows_and_other_operators_scan() {
    let index = index_of(&[
        pod("ns", "a1", &[("app", "a")], None),
        pod("ns", "b1", &[("app", "b")], None),
        pod("ns", "c1", &[("app", "c")], None),
    ]);
    assert_eq!(
        names(index.candidates(
            "ns",
            "g",
            &expression("app", SelectorOperator::In, &["a", "c"])
        )),
        ["a1", "c1"]
    );
    for op in [
        SelectorOperator::NotIn,
        SelectorOperator::Exists,
        SelectorOperator::DoesNotExist,
    ] {
        assert_eq!(
            index.candidates("ns", "g", &expression("app", op, &["a"])),
            None,
            "{op:?}"
        );
    }
}

#[test]
fn a_changed_pod_is_filed_anew_and_a_deleted_one_is_gone() {
    let index = index_of(&[pod("ns", "p", &[("app", "a")], Some("a"))]);
    index.apply(&watcher::Event::Apply(pod(
        "ns",
        "p",
        &[("app", "b")],
        None,
    )));
    assert_eq!(by_app(&index, "ns", "a", "a"), NONE);
    assert_eq!(by_app(&index, "ns", "b", "b"), ["p"]);
    index.apply(&watcher::Event::Delete(pod(
        "ns",
        "p",
        &[("app", "b")],
        None,
    )));
    assert_eq!(by_app(&index, "ns", "b", "b"), NONE);
}

#[test]
fn a_relist_drops_the_pods_it_did_not_list_only_when_it_ends() {
    let index = index_of(&[
        pod("ns", "kept", &[("app", "a")], None),
        pod("ns", "gone", &[("app", "a")], None),
    ]);
    let selector = labels(&[("app", "a")]);
    index.apply(&watcher::Event::Init);
    index.apply(&watcher::Event::InitApply(pod(
        "ns",
        "kept",
        &[("app", "a")],
        None,
    )));
    index.apply(&watcher::Event::InitApply(pod(
        "ns",
        "new",
        &[("app", "a")],
        None,
    )));
    assert_eq!(
        names(index.candidates("ns", "a", &selector)),
        ["gone", "kept", "new"],
        "until the list ends, the old pods stay candidates"
    );
    index.apply(&watcher::Event::InitDone);
    assert_eq!(
        names(index.candidates("ns", "a", &selector)),
        ["kept", "new"]
    );
}

#[test]
fn candidates_always_hold_every_match_and_every_marked_pod() {
    let values = ["x", "y", "z"];
    let mut pods = Vec::new();
    for (i, app) in values.iter().enumerate() {
        for (j, tier) in values.iter().enumerate() {
            let mark = values.get((i + j) % 4).copied();
            pods.push(pod(
                "ns",
                &format!("p-{i}-{j}"),
                &[("app", app), ("tier", tier)],
                mark,
            ));
        }
    }
    let index = index_of(&pods);
    let mut selectors = vec![expression("tier", SelectorOperator::In, &["x", "z"])];
    for app in values {
        selectors.push(labels(&[("app", app)]));
        for tier in values {
            selectors.push(labels(&[("app", app), ("tier", tier)]));
        }
    }
    for selector in &selectors {
        for group in values {
            let found = names(index.candidates("ns", group, selector));
            for p in &pods {
                let marked = p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(GROUP_ANNOTATION))
                    == Some(&group.to_string());
                if selector.matches(p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                    || marked
                {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    assert!(
                        found.contains(&name),
                        "{name} missing for {group} {selector:?}"
                    );
                }
            }
        }
    }
}

/// The step-down rule reads whether each container runs; the cache keeps that state of each
/// container and nothing more of it: no messages, images, IDs or last states, which can be long.
#[test]
fn a_trimmed_pod_keeps_each_containers_state_and_nothing_else_of_it() {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    let long = "x".repeat(4096);
    let at = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let status = |name: &str, state: ContainerState| ContainerStatus {
        name: name.into(),
        image: format!("registry.example/{long}"),
        image_id: long.clone(),
        container_id: Some(long.clone()),
        ready: true,
        restart_count: 3,
        last_state: Some(state.clone()),
        state: Some(state),
        ..ContainerStatus::default()
    };
    let running = ContainerState {
        running: Some(ContainerStateRunning {
            started_at: at.clone(),
        }),
        ..ContainerState::default()
    };
    let waiting = ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("CrashLoopBackOff".into()),
            message: Some(long.clone()),
        }),
        ..ContainerState::default()
    };
    let terminated = ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            message: Some(long.clone()),
            reason: Some("OOMKilled".into()),
            container_id: Some(long.clone()),
            started_at: at.clone(),
            finished_at: at.clone(),
            signal: Some(9),
        }),
        ..ContainerState::default()
    };
    let mut p = pod("ns", "a", &[], None);
    p.status = Some(PodStatus {
        container_statuses: Some(vec![
            status("app", running.clone()),
            status("agent", waiting),
        ]),
        init_container_statuses: Some(vec![status("init", terminated)]),
        ephemeral_container_statuses: Some(vec![status("debug", running)]),
        message: Some(long.clone()),
        ..PodStatus::default()
    });
    trim_pod(&mut p);
    let kept = p.status.expect("the status is kept");
    let bare = |name: &str, state: ContainerState| ContainerStatus {
        name: name.into(),
        state: Some(state),
        ..ContainerStatus::default()
    };
    let only = |running: bool, waiting: bool| ContainerState {
        running: running.then(ContainerStateRunning::default),
        waiting: waiting.then(ContainerStateWaiting::default),
        terminated: None,
    };
    assert_eq!(
        kept.container_statuses,
        Some(vec![
            bare("app", only(true, false)),
            bare("agent", only(false, true)),
        ])
    );
    assert_eq!(
        kept.init_container_statuses,
        Some(vec![bare(
            "init",
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }
        )])
    );
    assert_eq!(kept.ephemeral_container_statuses, None);
    assert_eq!(kept.message, None);
}
