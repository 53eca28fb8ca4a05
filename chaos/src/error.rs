//! What can stop a chaos run before it reports (a violation is not an error: it is reported).

/// A run that could not be set up or driven.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control plane, the namespace, the webhook or a proxy.
    #[error(transparent)]
    Testenv(#[from] leadergroup_testenv::Error),
    /// A request of the run itself (not of the operator) failed for good.
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Anything else needed before the first fault: files, the CRD, the operator binary.
    #[error("setting up the run: {0}")]
    Setup(String),
    /// The report could not be written.
    #[error("writing {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A result could not be read.
    #[error("reading {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A result is not what [`crate::Results`] writes.
    #[error("{path}: {source}")]
    Json {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Wraps a kube error with what the run was doing.
    pub fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Kube { what, source }
    }
}
