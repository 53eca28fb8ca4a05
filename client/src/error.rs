//! What [`crate::Membership`] reports when it cannot confirm the role.

use std::time::Duration;

/// Which request failed, on which object: enough to write the missing RBAC rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `get`, `watch`, or `update` (a renewal of the Lease in Heartbeat mode).
    pub verb: &'static str,
    /// `pods` or `leases` (with its API group: `leases.coordination.k8s.io`).
    pub resource: &'static str,
    /// The object's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {:?} in namespace {:?}",
            self.verb, self.resource, self.name, self.namespace
        )
    }
}

/// Why the role could not be confirmed. While any of these lasts past two thirds of the Lease
/// duration, the role is [`crate::Role::Unknown`] (at once for [`MembershipError::Forbidden`]).
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// The API server refused the request (403): RBAC does not grant it. The crate docs give the
    /// Role to grant.
    #[error(
        "permission denied: the API server refused to {request} (403 Forbidden); grant {verbs} \
         on it to this pod's ServiceAccount (see the leadergroup-client docs for the Role): \
         {message}",
        verbs = if request.verb == "update" {
            "the verb update (Heartbeat mode: the leader renews the Lease)"
        } else {
            "the verbs get and watch"
        }
    )]
    Forbidden {
        /// The refused request.
        request: Request,
        /// The API server's message (names the ServiceAccount).
        message: String,
    },

    /// The request failed otherwise (API server unreachable, connection broken, bad answer).
    #[error("could not {request}: {source}")]
    Api {
        /// The failed request.
        request: Request,
        /// The cause.
        #[source]
        source: kube::Error,
    },

    /// A renewal of the Lease was refused because the Lease changed since it was read (409
    /// Conflict): a newer write, perhaps a new leader's. Nothing was overwritten.
    #[error(
        "could not {request}: the Lease changed since it was read (409 Conflict); nothing was overwritten"
    )]
    Conflict {
        /// The refused request.
        request: Request,
    },

    /// No answer in time (a third of the Lease duration): the connection may be stuck.
    #[error("could not {request}: no answer within {after:?}")]
    Timeout {
        /// The request.
        request: Request,
        /// How long was waited.
        after: Duration,
    },
}

impl MembershipError {
    /// The request that failed.
    pub fn request(&self) -> &Request {
        match self {
            MembershipError::Forbidden { request, .. }
            | MembershipError::Api { request, .. }
            | MembershipError::Conflict { request }
            | MembershipError::Timeout { request, .. } => request,
        }
    }

    /// True for a 409 of a renewal: the Lease moved on.
    pub fn is_conflict(&self) -> bool {
        matches!(self, MembershipError::Conflict { .. })
    }

    /// True for a 403: no retry will help until the RBAC changes.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, MembershipError::Forbidden { .. })
    }

    pub(crate) fn from_kube(request: Request, source: kube::Error) -> MembershipError {
        match source {
            kube::Error::Api(status) if status.is_forbidden() => MembershipError::Forbidden {
                request,
                message: status.message.clone(),
            },
            kube::Error::Api(status) if status.code == 409 => MembershipError::Conflict { request },
            source => MembershipError::Api { request, source },
        }
    }
}
