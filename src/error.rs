//! The operator's one error type.

/// Everything that can go wrong in the operator.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    /// A call to the API server failed.
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),

    /// A write with a resourceVersion precondition found the object changed: re-read and decide again.
    #[error("{0} changed since it was read (409 Conflict): deciding again")]
    Conflict(&'static str),

    /// The finalizer's bookkeeping failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),

    /// A namespaced object came without a namespace.
    #[error("{0} has no namespace")]
    MissingNamespace(String),

    /// The arbitration of a group ran out before its leader could be promoted.
    #[error(
        "group {0}: the Lease was committed longer ago than half its duration; not promoting on a stale decision"
    )]
    StaleDecision(String),

    /// A JSON patch could not be built.
    #[error("building a patch failed: {0}")]
    Serialize(#[from] serde_json::Error),

    /// The CRD could not be printed.
    #[error("printing the CRD as YAML failed: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),

    /// The kubeconfig or in-cluster configuration could not be loaded.
    #[error("loading the Kubernetes client configuration failed: {0}")]
    Config(String),

    /// The HTTP server for health and metrics failed.
    #[error("health and metrics server on {addr}: {source}")]
    Http {
        /// The address it tried to serve on.
        addr: String,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Every value [`Error::category`] returns (the metric's label values).
    pub const CATEGORIES: [&'static str; 8] = [
        "api",
        "conflict",
        "finalizer",
        "invalid",
        "stale",
        "serialize",
        "config",
        "http",
    ];

    /// A short, static category for metrics labels and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube(_) => "api",
            Error::Conflict(_) => "conflict",
            Error::Finalizer(_) => "finalizer",
            Error::MissingNamespace(_) => "invalid",
            Error::StaleDecision(_) => "stale",
            Error::Serialize(_) | Error::Yaml(_) => "serialize",
            Error::Config(_) => "config",
            Error::Http { .. } => "http",
        }
    }

    /// True for a 409 from the API server.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }
}

impl From<kube::runtime::finalizer::Error<Error>> for Error {
    fn from(e: kube::runtime::finalizer::Error<Error>) -> Self {
        match e {
            kube::runtime::finalizer::Error::ApplyFailed(inner)
            | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner,
            other => Error::Finalizer(Box::new(other)),
        }
    }
}

/// The operator's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// True when a failed API call answered 404 Not Found.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

/// True when a failed API call answered 409 (a stale resourceVersion, or a create of an existing name).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_conflict() || s.is_already_exists())
}
