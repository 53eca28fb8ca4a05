//! The bench's one error type.

/// Whatever stops a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control plane, a namespace or the simulated kubelet failed.
    #[error(transparent)]
    Testenv(#[from] leadergroup_testenv::Error),
    /// An API request failed.
    #[error("API request: {0}")]
    Kube(#[from] kube::Error),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The app-latency measurement failed.
    #[error("app-latency: {0}")]
    AppLatency(#[from] leadergroup_testenv::app_latency::MeasureError),
    /// The page lacks a block's markers (or has them in the wrong order).
    #[error("docs/benchmarks.md has no `{0}` ... `{1}`")]
    Markers(String, String),
    /// A manifest could not be read.
    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// Something did not happen within its bound.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// Anything else (a missing binary, an unparsable answer).
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// A closure that wraps an I/O error with what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// Result with the bench's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
