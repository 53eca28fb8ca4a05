//! `report GROUP`: what a bug report needs, gathered in one Markdown document to attach: the
//! versions, the group, its Lease, its pods' marks and state, the Events of the group and of its
//! pods, the operator's Lease(s) and the operator's recent log lines. A section that cannot be
//! read (no right to, gone) says why instead of ending the report.

use std::fmt::Write as _;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, LogParams};
use kube::{Api, ResourceExt};
use leadergroup_client::wire::{EPOCH_ANNOTATION, GROUP_ANNOTATION, ROLE_LABEL};
use leadergroup_operator::crd::LeaderGroup;
use serde::Serialize;

use crate::error::PluginError;
use crate::groups::Groups;

/// Where and how much of the operator to gather.
pub struct OperatorScope {
    /// The operator's (the release's) namespace.
    pub namespace: String,
    /// The last log lines of each operator pod.
    pub tail_lines: i64,
}

/// The report of group `name`, as Markdown.
pub async fn report(
    groups: &Groups,
    name: &str,
    operator: &OperatorScope,
) -> Result<String, PluginError> {
    let group = groups.get(name).await?;
    let namespace = groups.namespace.as_str();
    let client = groups.client.clone();
    let mut out = format!("# LeaderGroup {name} in namespace {namespace}\n\n");
    let server = client
        .apiserver_version()
        .await
        .map_or_else(|e| format!("unknown ({e})"), |v| v.git_version);
    let _ = writeln!(
        out,
        "kubectl-leadergroup {}, API server {server}, gathered {}.\n",
        env!("CARGO_PKG_VERSION"),
        jiff::Timestamp::now()
    );

    section(
        &mut out,
        "The group",
        Ok(yaml(&without_managed_fields(group.clone()))),
    );
    let lease = groups.lease_of(&group).await.map(|lease| {
        lease.map_or_else(
            || format!("(no Lease {} yet)\n", group.lease_name()),
            |l| yaml(&without_managed_fields(l)),
        )
    });
    section(&mut out, "Its Lease", lease.map_err(|e| e.to_string()));
    let pods = selected_pods(groups, &group).await;
    section(
        &mut out,
        "Its pods: phase, readiness and the operator's marks",
        pods.as_ref()
            .map(|p| pod_table(p))
            .map_err(ToString::to_string),
    );
    let mut involved = vec![("LeaderGroup", name.to_owned())];
    if let Ok(pods) = &pods {
        involved.extend(pods.iter().map(|p| ("Pod", p.name_any())));
    }
    section(
        &mut out,
        "Events of the group and its pods",
        events(groups, &involved).await,
    );
    section(
        &mut out,
        &format!("The operator's Lease (namespace {})", operator.namespace),
        operator_leases(groups, &operator.namespace).await,
    );
    operator_logs(&mut out, groups, operator).await;
    Ok(out)
}

/// A `## title` section: `body` in a code block, or why it could not be read.
fn section(out: &mut String, title: &str, body: Result<String, String>) {
    let _ = writeln!(out, "## {title}\n");
    match body {
        Ok(body) => {
            let _ = writeln!(out, "```\n{}\n```\n", body.trim_end());
        }
        Err(e) => {
            let _ = writeln!(out, "(could not read: {e})\n");
        }
    }
}

fn yaml<T: Serialize>(value: &T) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_else(|e| format!("(cannot print: {e})"))
}

/// The object without its managed fields, which say nothing a report needs and fill pages.
fn without_managed_fields<K: ResourceExt>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    object
}

/// The pods the group's selector selects, in the group's namespace.
async fn selected_pods(groups: &Groups, group: &LeaderGroup) -> Result<Vec<Pod>, String> {
    let selector = kube::core::Selector::try_from(group.spec.selector.to_label_selector())
        .map_err(|e| format!("the group's selector: {e}"))?;
    let pods: Api<Pod> = Api::namespaced(groups.client.clone(), &groups.namespace);
    let mut list = pods
        .list(&ListParams::default().labels_from(&selector))
        .await
        .map_err(|e| e.to_string())?
        .items;
    list.sort_by_key(ResourceExt::name_any);
    Ok(list)
}

/// One line per pod: name, phase, Ready, node, deletion, and the marks (role label, group and
/// epoch annotations).
fn pod_table(pods: &[Pod]) -> String {
    if pods.is_empty() {
        return "(no pod matches the selector)".to_owned();
    }
    let mut out = format!(
        "{:<40} {:<10} {:<6} {:<20} {:<9} {:<10} {:<16} {}\n",
        "POD", "PHASE", "READY", "NODE", "DELETING", "ROLE", "GROUP", "EPOCH"
    );
    for pod in pods {
        let status = pod.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .map_or("-", |c| c.status.as_str())
            .to_owned();
        let mark = |m: Option<&String>| m.cloned().unwrap_or_else(|| "-".to_owned());
        let _ = writeln!(
            out,
            "{:<40} {:<10} {:<6} {:<20} {:<9} {:<10} {:<16} {}",
            pod.name_any(),
            status.phase.unwrap_or_default(),
            ready,
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_else(|| "-".to_owned()),
            if pod.metadata.deletion_timestamp.is_some() {
                "yes"
            } else {
                "no"
            },
            mark(pod.labels().get(ROLE_LABEL)),
            mark(pod.annotations().get(GROUP_ANNOTATION)),
            mark(pod.annotations().get(EPOCH_ANNOTATION)),
        );
    }
    out
}

/// The namespace's Events about `involved` (kind, name), oldest first.
async fn events(groups: &Groups, involved: &[(&str, String)]) -> Result<String, String> {
    let api: Api<Event> = Api::namespaced(groups.client.clone(), &groups.namespace);
    let mut found: Vec<Event> = Vec::new();
    for (kind, name) in involved {
        let fields = format!("involvedObject.kind={kind},involvedObject.name={name}");
        found.extend(
            api.list(&ListParams::default().fields(&fields))
                .await
                .map_err(|e| e.to_string())?
                .items,
        );
    }
    if found.is_empty() {
        return Ok("(no Events: they expire, after an hour by default)".to_owned());
    }
    let when = |e: &Event| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    found.sort_by_key(when);
    let mut out = String::new();
    for e in &found {
        let _ = writeln!(
            out,
            "{} {} {}/{} {} (x{}): {}",
            when(e).map_or_else(|| "-".to_owned(), |t| t.to_string()),
            e.type_.clone().unwrap_or_default(),
            e.involved_object.kind.clone().unwrap_or_default(),
            e.involved_object.name.clone().unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
            e.count.unwrap_or(1),
            e.message.clone().unwrap_or_default().trim_end()
        );
    }
    Ok(out)
}

/// The operator's own Leases in its namespace (`operator-<fullname>`, one per release).
async fn operator_leases(groups: &Groups, namespace: &str) -> Result<String, String> {
    let api: Api<Lease> = Api::namespaced(groups.client.clone(), namespace);
    let leases: Vec<Lease> = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter(|l| l.name_any().starts_with("operator-"))
        .map(without_managed_fields)
        .collect();
    if leases.is_empty() {
        return Ok(format!(
            "(no operator-* Lease in namespace {namespace}: the operator runs elsewhere, or without --leader-elect; --operator-namespace names its namespace)"
        ));
    }
    Ok(leases.iter().map(yaml).collect::<Vec<_>>().join("---\n"))
}

/// The last log lines of each operator pod (label app.kubernetes.io/name=leadergroup-operator),
/// a section per pod.
async fn operator_logs(out: &mut String, groups: &Groups, operator: &OperatorScope) {
    let api: Api<Pod> = Api::namespaced(groups.client.clone(), &operator.namespace);
    let listed = api
        .list(&ListParams::default().labels("app.kubernetes.io/name=leadergroup-operator"))
        .await;
    let pods = match listed {
        Ok(list) if list.items.is_empty() => {
            section(
                out,
                "The operator's log",
                Ok(format!(
                    "(no operator pod in namespace {}: --operator-namespace names its namespace)",
                    operator.namespace
                )),
            );
            return;
        }
        Ok(list) => list.items,
        Err(e) => {
            section(out, "The operator's log", Err(e.to_string()));
            return;
        }
    };
    for pod in pods {
        let params = LogParams {
            container: Some("operator".to_owned()),
            tail_lines: Some(operator.tail_lines),
            ..LogParams::default()
        };
        let logs = api
            .logs(&pod.name_any(), &params)
            .await
            .map_err(|e| e.to_string());
        section(
            out,
            &format!(
                "The operator's log: pod {}, last {} lines",
                pod.name_any(),
                operator.tail_lines
            ),
            logs,
        );
    }
}
