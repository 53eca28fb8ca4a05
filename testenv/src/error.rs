use std::{path::PathBuf, time::Duration};

/// Everything that can go wrong while setting up or driving the test environment. Each variant
/// says what was being done, so a failing test reads as a sentence rather than a bare status code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pinned etcd / kube-apiserver / kubectl binaries are not in the cache.
    #[error(
        "the local control plane is not built: run `make controlplane` once (about 14 minutes on 2 cores), \
         or point {env} at a running cluster's kubeconfig\n{detail}",
        env = crate::KUBECONFIG_ENV
    )]
    BinariesMissing {
        /// What build.sh said.
        detail: String,
    },

    /// The end-to-end tests were started without a real cluster.
    #[error(
        "the end-to-end tests run on a real cluster (kubelets, containerd): {detail}. Run them with \
         `make e2e` (as root: it starts the cluster, builds and imports the images, runs the tests \
         and stops it), or set {env} to the kubeconfig of a running `make cluster-up`",
        env = crate::E2E_KUBECONFIG_ENV
    )]
    E2eClusterMissing {
        /// What is missing.
        detail: String,
    },

    /// PostgreSQL's server binaries are not installed.
    #[error(
        "PostgreSQL is not installed (looked for {looked_in}): run `controlplane/postgres-deps.sh` \
         once (apt-get install postgresql), or set LEADERGROUP_POSTGRES_BIN to a folder holding \
         initdb and postgres"
    )]
    PostgresMissing {
        /// Where the binaries were looked for.
        looked_in: String,
    },

    /// A helper script (build.sh, cluster.sh) or kubectl failed.
    #[error("`{command}` failed ({status}):\n{output}")]
    Command {
        /// The command line, for the reader.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stderr and stdout.
        output: String,
    },

    /// Spawning a process or touching a file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The kubeconfig could not be read or turned into a client configuration.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: kube::config::KubeconfigError,
    },

    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// The cause; `kube::Error::Api` carries the server's status (code, reason, message).
        #[source]
        source: kube::Error,
    },

    /// A watch used for waiting failed.
    #[error("{what}: {source}")]
    Watch {
        /// What was being waited for.
        what: String,
        /// The cause.
        #[source]
        source: kube::runtime::wait::Error,
    },

    /// A condition did not hold in time.
    #[error("timed out after {timeout:?} waiting for {what}{last}")]
    Timeout {
        /// The condition, in words.
        what: String,
        /// How long was waited.
        timeout: Duration,
        /// The last error or observation seen while polling (starts with "; " when present).
        last: String,
    },

    /// The API server answered something the helpers cannot make sense of.
    #[error("{0}")]
    Unexpected(String),
}

impl Error {
    /// Wraps a kube error with what was being done.
    pub(crate) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Kube { what, source }
    }

    /// Wraps an I/O error with what was being done.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    /// The HTTP status code the API server answered with, when this is an API error.
    pub fn api_code(&self) -> Option<u16> {
        match self {
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }
}
