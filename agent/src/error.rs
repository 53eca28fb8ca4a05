//! Why the agent could not start (or stopped serving).

use std::path::PathBuf;

/// A failure that ends the agent: printed, then exit status 1.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// A required setting is missing: typically the agent runs outside a pod, or its container
    /// lacks the downward API environment.
    #[error(
        "environment variable {env} is not set (nor the flag {flag}): in a pod, set it from the \
         downward API (env: - name: {env}, valueFrom: fieldRef: fieldPath: {field}); outside a \
         pod, set it or pass {flag}"
    )]
    Missing {
        /// The environment variable.
        env: &'static str,
        /// The flag that can stand for it.
        flag: &'static str,
        /// The pod field the downward API takes it from.
        field: &'static str,
    },

    /// The folder of the role files cannot be created or written.
    #[error("cannot write the role files in {}: {source}", dir.display())]
    Dir {
        /// The folder (`--dir`).
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The API server access could not be configured (kubeconfig or in-cluster).
    #[error("cannot configure access to the API server: {0}")]
    Config(String),

    /// The Kubernetes client could not be built.
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] kube::Error),

    /// The HTTP endpoint could not be bound or failed.
    #[error("HTTP endpoint on {addr}: {source}")]
    Http {
        /// `--http-addr`.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// A `--proxy` listening address could not be bound.
    #[error("--proxy: cannot listen on {listen}: {source}")]
    Proxy {
        /// The LISTEN part of `--proxy`.
        listen: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The signal handlers could not be installed.
    #[error("cannot install the signal handlers: {0}")]
    Signal(#[source] std::io::Error),
}
