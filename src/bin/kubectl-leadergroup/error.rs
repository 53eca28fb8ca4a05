//! What can go wrong in the plugin; every message names the group and its namespace.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot reach the cluster: {0}")]
    Connect(#[source] kube::Error),
    #[error("cannot use the kubeconfig (--kubeconfig, --context): {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error("LeaderGroup {group} in namespace {namespace}: {source}")]
    Api {
        group: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("no LeaderGroup {group} in namespace {namespace}")]
    NotFound { group: String, namespace: String },
    #[error("pod {pod} cannot lead LeaderGroup {group} in namespace {namespace}: {reason}")]
    Ineligible {
        pod: String,
        group: String,
        namespace: String,
        reason: String,
    },
    #[error(
        "LeaderGroup {group} in namespace {namespace} has no eligible pod besides its leader {leader}"
    )]
    NoOtherCandidate {
        group: String,
        namespace: String,
        leader: String,
    },
    #[error(
        "LeaderGroup {group} in namespace {namespace} is paused (spec.paused): nothing moves until `kubectl leadergroup resume {group}`"
    )]
    Paused { group: String, namespace: String },
    #[error(
        "LeaderGroup {group} in namespace {namespace}: {pod} did not take over within {after:?} (leader now: {leader})"
    )]
    Timeout {
        group: String,
        namespace: String,
        pod: String,
        leader: String,
        after: Duration,
    },
    #[error("cannot print the report: {0}")]
    Print(String),
    #[error("{0}")]
    Usage(String),
}
