//! The operator's errors: [`ReconcileError`] fails one reconcile of a group (the error policy
//! retries it), [`StartupError`] stops the process.

use std::fmt;

/// What fails one reconcile. The actions return it too, so the operator's own HA loop, which runs
/// the same Lease actions, meets it as well.
#[derive(thiserror::Error, Debug)]
pub enum ReconcileError {
    /// A call to the API server failed.
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),

    /// A write with a resourceVersion precondition found the object changed: re-read and decide again.
    #[error("{0} changed since it was read (409 Conflict): deciding again")]
    Conflict(ConflictOn),

    /// The finalizer's bookkeeping failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ReconcileError>>),

    /// A namespaced object came without a namespace.
    #[error("{0} has no namespace")]
    MissingNamespace(String),

    /// A reconcile's requests did not all answer within its deadline (half the group's Lease):
    /// they were abandoned, and any of them may still land later (see the barrier, `election::writes`).
    #[error("group {group}: no answer within {after:?}; requests abandoned")]
    Deadline {
        /// The group.
        group: String,
        /// The deadline.
        after: std::time::Duration,
    },

    /// The arbitration of a group ran out before its leader could be promoted.
    #[error(
        "group {0}: the decision's steps began longer ago than half the Lease duration; not promoting on a stale decision"
    )]
    StaleDecision(String),
}

impl ReconcileError {
    /// The finalizer could not be added because the group came from a cache behind the server:
    /// kube's patch tests the finalizers it saw, and an earlier pass had already added ours (422).
    /// The cache catches up within milliseconds.
    pub fn is_stale_finalizer(&self) -> bool {
        matches!(
            self,
            ReconcileError::Finalizer(e) if matches!(
                e.as_ref(),
                kube::runtime::finalizer::Error::AddFinalizer(kube::Error::Api(s)) if s.code == 422
            )
        )
    }
}

impl From<kube::runtime::finalizer::Error<ReconcileError>> for ReconcileError {
    fn from(e: kube::runtime::finalizer::Error<ReconcileError>) -> Self {
        match e {
            kube::runtime::finalizer::Error::ApplyFailed(inner)
            | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner,
            other => ReconcileError::Finalizer(Box::new(other)),
        }
    }
}

/// The object a write with a precondition found changed (a 409).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictOn {
    /// A group's Lease, or the operator's own.
    Lease,
    /// A LeaderGroup's status.
    Status,
    /// A pod whose marks were being removed.
    Pod,
    /// The group's Service (created meanwhile, or changed since it was read).
    Service,
    /// The group's EndpointSlice, changed since it was read, twice in a row.
    EndpointSlice,
}

impl ConflictOn {
    /// Every object, so that the conflict metric's series exist before the first conflict.
    pub const ALL: [ConflictOn; 5] = [
        ConflictOn::Lease,
        ConflictOn::Status,
        ConflictOn::Pod,
        ConflictOn::Service,
        ConflictOn::EndpointSlice,
    ];

    /// The name in messages and the `object` label of the conflict metric.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConflictOn::Lease => "Lease",
            ConflictOn::Status => "LeaderGroup status",
            ConflictOn::Pod => "Pod",
            ConflictOn::Service => "Service",
            ConflictOn::EndpointSlice => "EndpointSlice",
        }
    }
}

impl fmt::Display for ConflictOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What stops the operator process: its start-up (the client configuration, printing the CRD) or the loss of what it serves beside the controller (the health and metrics server,
/// the signal handlers).
#[derive(thiserror::Error, Debug)]
pub enum StartupError {
    /// The kubeconfig or in-cluster configuration could not be loaded.
    #[error("loading the Kubernetes client configuration failed: {0}")]
    Config(String),

    /// The client could not be built from its configuration.
    #[error("building the Kubernetes client failed: {0}")]
    Client(#[source] kube::Error),

    /// The CRD could not be printed.
    #[error("printing the CRD as YAML failed: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),

    /// The HTTP server for health and metrics failed.
    #[error("health and metrics server on {addr}: {source}")]
    Http {
        /// The address it tried to serve on.
        addr: String,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },

    /// The task serving health and metrics ended abnormally (it panicked).
    #[error("health and metrics server task: {0}")]
    HttpTask(#[source] tokio::task::JoinError),

    /// The secure metrics server's certificate could not be read, generated or used.
    #[error("metrics TLS: {0}")]
    MetricsTls(String),

    /// The SIGTERM and SIGINT handlers could not be installed.
    #[error("installing the signal handlers failed: {0}")]
    Signal(#[source] std::io::Error),
}

/// Why a request to the secure `/metrics` got no verdict (it is answered 500, and asked again
/// next time): the API server could not review it.
#[derive(thiserror::Error, Debug)]
pub enum AccessReviewError {
    /// The TokenReview failed.
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] kube::Error),

    /// The SubjectAccessReview failed.
    #[error("SubjectAccessReview failed: {0}")]
    SubjectAccessReview(#[source] kube::Error),

    /// The reviews took too long.
    #[error("the reviews took longer than {0:?}")]
    Timeout(std::time::Duration),
}

/// The result of a reconcile or an action.
pub type Result<T, E = ReconcileError> = std::result::Result<T, E>;

/// True when a failed API call answered 404 Not Found.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

/// True when a failed API call answered 409 (a stale resourceVersion, or a create of an existing name).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_conflict() || s.is_already_exists())
}
