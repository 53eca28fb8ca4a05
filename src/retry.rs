//! Whether retrying a failed reconcile can help: [`classify`], the one place that sorts the
//! operator's errors, answers either transient (a conflict, a deadline, a 5xx, a lost
//! connection: retried after [`Retry::after`]) or permanent (a 4xx that the same request meets
//! again: reported on the group and retried with a growing backoff). Its kind is the label of the
//! reconcile error metric and the reason on the group.

use std::time::Duration;

use kube::core::Status;

use crate::error::ReconcileError;

/// The two answers [`classify`] gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retry {
    /// The next attempt may well succeed.
    Transient(TransientKind),
    /// The next attempt meets the same refusal until someone changes the object, the RBAC or
    /// the namespace.
    Permanent(Permanent),
}

impl Retry {
    /// `transient` or `permanent`: the `error_class` field of the logs.
    pub const fn class(&self) -> &'static str {
        match self {
            Retry::Transient(_) => "transient",
            Retry::Permanent(_) => "permanent",
        }
    }

    /// The kind within the class: the `kind` label of the reconcile error metric, the
    /// `error_kind` field of the logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Retry::Transient(kind) => kind.as_str(),
            Retry::Permanent(p) => p.kind.as_str(),
        }
    }

    /// How soon to try again, before any backoff of the group's run of failures: a conflict or
    /// a finalizer the cache has not shown yet at once, a deadline soon (the group's own clock
    /// runs), anything else after 2 s.
    pub fn after(&self) -> Duration {
        match self {
            Retry::Transient(TransientKind::Conflict) => Duration::from_millis(50),
            Retry::Transient(TransientKind::StaleFinalizer) => Duration::from_millis(100),
            Retry::Transient(TransientKind::Stale) => Duration::from_millis(200),
            _ => Duration::from_secs(2),
        }
    }
}

/// Every class and kind [`classify`] answers, so that the metric's series exist before the first
/// error.
pub fn every_kind() -> impl Iterator<Item = (&'static str, &'static str)> {
    let transient = TransientKind::ALL.map(|k| ("transient", k.as_str()));
    let permanent = PermanentKind::ALL.map(|k| ("permanent", k.as_str()));
    transient.into_iter().chain(permanent)
}

/// Why a transient error is transient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransientKind {
    /// A 409: someone else wrote first.
    Conflict,
    /// A 404 for an object, not its namespace: the race with a deletion the next event tells.
    NotFound,
    /// The reconcile's deadline, or its decision grew stale.
    Stale,
    /// The finalizer was added by an earlier pass that the cache has not seen yet.
    StaleFinalizer,
    /// 429 Too Many Requests.
    Throttled,
    /// 408, 504, or a 5xx: the API server or its storage is busy or restarting.
    Server,
    /// No answer at all: the connection, TLS, a body that did not parse.
    Connection,
}

impl TransientKind {
    const ALL: [TransientKind; 7] = [
        TransientKind::Conflict,
        TransientKind::NotFound,
        TransientKind::Stale,
        TransientKind::StaleFinalizer,
        TransientKind::Throttled,
        TransientKind::Server,
        TransientKind::Connection,
    ];

    /// The label in logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            TransientKind::Conflict => "Conflict",
            TransientKind::NotFound => "NotFound",
            TransientKind::Stale => "Stale",
            TransientKind::StaleFinalizer => "StaleFinalizer",
            TransientKind::Throttled => "Throttled",
            TransientKind::Server => "ServerError",
            TransientKind::Connection => "Connection",
        }
    }
}

/// Why a permanent error is permanent: the reason of the group's `Reconciled` condition and of
/// its Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermanentKind {
    /// 403: the operator's identity lacks a permission.
    Forbidden,
    /// 422: the API server refused the object the operator wrote.
    Invalid,
    /// 400: a request the API server cannot read.
    BadRequest,
    /// 404 for the namespace itself (it is gone or being deleted).
    NamespaceNotFound,
    /// Any other 4xx that is not a conflict, a throttle or a timeout.
    Refused,
    /// A group without a namespace.
    MissingNamespace,
    /// Not a refusal: reconcile after reconcile missed its deadline, half the group's Lease (the
    /// API server answers slower than the Lease allows).
    TooSlow,
}

impl PermanentKind {
    const ALL: [PermanentKind; 7] = [
        PermanentKind::Forbidden,
        PermanentKind::Invalid,
        PermanentKind::BadRequest,
        PermanentKind::NamespaceNotFound,
        PermanentKind::Refused,
        PermanentKind::MissingNamespace,
        PermanentKind::TooSlow,
    ];

    /// The condition's and the Event's reason, the metric's label.
    pub const fn as_str(self) -> &'static str {
        match self {
            PermanentKind::Forbidden => "Forbidden",
            PermanentKind::Invalid => "Invalid",
            PermanentKind::BadRequest => "BadRequest",
            PermanentKind::NamespaceNotFound => "NamespaceNotFound",
            PermanentKind::Refused => "Refused",
            PermanentKind::MissingNamespace => "MissingNamespace",
            PermanentKind::TooSlow => "DeadlineExceeded",
        }
    }
}

/// A permanent refusal, as the API server described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permanent {
    /// What kind of refusal.
    pub kind: PermanentKind,
    /// The HTTP code (0 when no request was made).
    pub code: u16,
    /// The object refused, e.g. `leases/leadergroup-web` (from the Status details).
    pub object: Option<String>,
    /// The fields the API server named (from the Status causes), e.g. `metadata.labels`.
    pub fields: Vec<String>,
    /// The API server's own message.
    pub message: String,
    /// For a 403: the verb, the resource and the namespace the message names.
    pub denied: Option<Denied>,
}

/// What a 403 denied, parsed from the API server's message (`User "..." cannot create resource
/// "leases" in API group "coordination.k8s.io" in the namespace "web"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    /// The verb, e.g. `create`.
    pub verb: String,
    /// The resource with its API group, e.g. `leases.coordination.k8s.io` (`pods` for the core
    /// group).
    pub resource: String,
    /// The namespace, when the request was namespaced.
    pub namespace: Option<String>,
}

impl Permanent {
    /// The message of the group's condition and Event: what was refused, where, the API
    /// server's words, and what to do.
    pub fn describe(&self) -> String {
        let mut text = match (&self.denied, &self.object) {
            (Some(d), _) => format!(
                "the operator's ServiceAccount may not {} {}{}: grant it with the chart's \
                 watchNamespace value (empty: every namespace, through a ClusterRole; a name: \
                 that namespace, through a Role), or add the rule to the operator's role",
                d.verb,
                d.resource,
                d.namespace
                    .as_deref()
                    .map(|ns| format!(" in namespace {ns}"))
                    .unwrap_or_default()
            ),
            (None, Some(object)) => format!("the API server refused a write to {object}"),
            (None, None) if self.kind == PermanentKind::TooSlow => {
                "no leader can be elected in time".to_string()
            }
            (None, None) => "the API server refused a request".to_string(),
        };
        if !self.fields.is_empty() {
            text.push_str(&format!(" (field {})", self.fields.join(", ")));
        }
        if self.code != 0 {
            text.push_str(&format!(
                "; it answered {} {}: {}",
                self.code,
                self.kind.as_str(),
                self.message
            ));
        } else {
            text.push_str(&format!(": {}", self.message));
        }
        text.push_str("; retried with a growing backoff until it succeeds");
        text
    }
}

/// What a run of `misses` reconciles in a row that missed their deadline (half a Lease of
/// `lease_seconds`) says on the group: the Lease is too short for how fast the API server
/// answers now.
pub fn too_slow(misses: u32, deadline: std::time::Duration, lease_seconds: i32) -> Permanent {
    Permanent {
        kind: PermanentKind::TooSlow,
        code: 0,
        object: None,
        fields: vec!["spec.leaseDurationSeconds".into()],
        message: format!(
            "{misses} reconciles in a row did not finish within {} ms, half the Lease of \
             {lease_seconds} s: the API server answers slower than this Lease allows; a longer \
             leaseDurationSeconds gives the writes time to land",
            deadline.as_millis()
        ),
        denied: None,
    }
}

/// Sorts a failed reconcile into transient or permanent, with its kind: the one place that
/// decides.
pub fn classify(error: &ReconcileError) -> Retry {
    use kube::runtime::finalizer::Error as Fin;
    match error {
        ReconcileError::Conflict(_) => Retry::Transient(TransientKind::Conflict),
        ReconcileError::Deadline { .. } | ReconcileError::StaleDecision(_) => {
            Retry::Transient(TransientKind::Stale)
        }
        ReconcileError::MissingNamespace(name) => Retry::Permanent(Permanent {
            kind: PermanentKind::MissingNamespace,
            code: 0,
            object: Some(format!("leadergroups/{name}")),
            fields: vec!["metadata.namespace".into()],
            message: "the group has no namespace".into(),
            denied: None,
        }),
        ReconcileError::Kube(e) => classify_kube(e),
        ReconcileError::Finalizer(_) if error.is_stale_finalizer() => {
            Retry::Transient(TransientKind::StaleFinalizer)
        }
        ReconcileError::Finalizer(e) => match e.as_ref() {
            Fin::AddFinalizer(e) | Fin::RemoveFinalizer(e) => classify_kube(e),
            Fin::ApplyFailed(e) | Fin::CleanupFailed(e) => classify(e),
            Fin::UnnamedObject | Fin::InvalidFinalizer => Retry::Permanent(Permanent {
                kind: PermanentKind::Refused,
                code: 0,
                object: None,
                fields: Vec::new(),
                message: e.to_string(),
                denied: None,
            }),
        },
    }
}

/// A failed API call: permanent for the 4xx that the same request meets again.
pub fn classify_kube(error: &kube::Error) -> Retry {
    let kube::Error::Api(status) = error else {
        return Retry::Transient(TransientKind::Connection);
    };
    let kind = match status.code {
        409 => return Retry::Transient(TransientKind::Conflict),
        429 => return Retry::Transient(TransientKind::Throttled),
        408 | 500..=599 => return Retry::Transient(TransientKind::Server),
        400 => PermanentKind::BadRequest,
        403 => PermanentKind::Forbidden,
        422 => PermanentKind::Invalid,
        // A 404 for the object itself is the ordinary race with a deletion (the next event
        // tells); only the namespace's absence lasts.
        404 if is_namespace(status) => PermanentKind::NamespaceNotFound,
        404 => return Retry::Transient(TransientKind::NotFound),
        401..=499 => PermanentKind::Refused,
        _ => return Retry::Transient(TransientKind::Server),
    };
    Retry::Permanent(Permanent {
        kind,
        code: status.code,
        object: status.details.as_ref().and_then(|d| {
            (!d.kind.is_empty() || !d.name.is_empty()).then(|| {
                let resource = if d.group.is_empty() {
                    d.kind.clone()
                } else {
                    format!("{}.{}", d.kind, d.group)
                };
                format!("{resource}/{}", d.name)
            })
        }),
        fields: status
            .details
            .iter()
            .flat_map(|d| &d.causes)
            .map(|c| c.field.clone())
            .filter(|f| !f.is_empty())
            .collect(),
        message: status.message.clone(),
        denied: (kind == PermanentKind::Forbidden)
            .then(|| denied(&status.message))
            .flatten(),
    })
}

/// The API server's answer behind a failed reconcile, if it got one.
pub fn api_status(error: &ReconcileError) -> Option<&Status> {
    use kube::runtime::finalizer::Error as Fin;
    let kube_error = match error {
        ReconcileError::Kube(e) => e,
        ReconcileError::Finalizer(e) => match e.as_ref() {
            Fin::AddFinalizer(e) | Fin::RemoveFinalizer(e) => e,
            Fin::ApplyFailed(e) | Fin::CleanupFailed(e) => return api_status(e),
            Fin::UnnamedObject | Fin::InvalidFinalizer => return None,
        },
        _ => return None,
    };
    match kube_error {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

/// A 404 whose details name a namespace: the namespace is gone.
fn is_namespace(status: &Status) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|d| d.kind == "namespaces")
}

/// The verb, resource and namespace of the RBAC authorizer's message.
fn denied(message: &str) -> Option<Denied> {
    let after = |marker: &str| {
        message
            .split_once(marker)
            .and_then(|(_, rest)| rest.split('"').nth(1))
            .map(str::to_string)
    };
    let verb = message
        .split_once("cannot ")?
        .1
        .split_whitespace()
        .next()?
        .to_string();
    let resource = after("resource ")?;
    let group = after("in API group ").filter(|g| !g.is_empty());
    Some(Denied {
        verb,
        resource: match group {
            Some(g) => format!("{resource}.{g}"),
            None => resource,
        },
        namespace: after("in the namespace "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ConflictOn;
    use kube::core::response::{StatusCause, StatusDetails};

    fn details(kind: &str, group: &str, name: &str, causes: Vec<StatusCause>) -> StatusDetails {
        StatusDetails {
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        }
    }

    fn api(code: u16, reason: &str, message: &str, details: Option<StatusDetails>) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.into(),
            message: message.into(),
            details,
            ..Status::default()
        }))
    }

    fn permanent(retry: Retry) -> Permanent {
        match retry {
            Retry::Permanent(p) => p,
            other => panic!("expected permanent, got {other:?}"),
        }
    }

    const FORBIDDEN: &str = "leases.coordination.k8s.io is forbidden: User \
        \"system:serviceaccount:op:op\" cannot create resource \"leases\" in API group \
        \"coordination.k8s.io\" in the namespace \"web\"";

    #[test]
    fn a_403_names_the_verb_the_resource_the_namespace_and_the_chart_value() {
        let e = ReconcileError::Kube(api(
            403,
            "Forbidden",
            FORBIDDEN,
            Some(details(
                "leases",
                "coordination.k8s.io",
                "leadergroup-web",
                Vec::new(),
            )),
        ));
        let p = permanent(classify(&e));
        assert_eq!(p.kind, PermanentKind::Forbidden);
        assert_eq!(
            p.denied,
            Some(Denied {
                verb: "create".into(),
                resource: "leases.coordination.k8s.io".into(),
                namespace: Some("web".into()),
            })
        );
        let text = p.describe();
        assert!(
            text.starts_with(
                "the operator's ServiceAccount may not create leases.coordination.k8s.io in \
                 namespace web: grant it with the chart's watchNamespace value"
            ),
            "{text}"
        );
        assert!(text.contains(FORBIDDEN), "{text}");
    }

    #[test]
    fn a_403_on_the_core_group_names_the_bare_resource() {
        let message = "pods \"web-0\" is forbidden: User \"u\" cannot patch resource \"pods\" \
                       in API group \"\" in the namespace \"web\"";
        let p = permanent(classify_kube(&api(403, "Forbidden", message, None)));
        assert_eq!(
            p.denied.map(|d| (d.verb, d.resource)),
            Some(("patch".into(), "pods".into()))
        );
    }

    #[test]
    fn a_422_names_the_object_and_the_fields() {
        let cause = StatusCause {
            reason: "FieldValueInvalid".into(),
            message: "must be no more than 63 bytes".into(),
            field: "metadata.labels".into(),
        };
        let lease = details("Lease", "coordination.k8s.io", "leadergroup-x", vec![cause]);
        let p = permanent(classify_kube(&api(
            422,
            "Invalid",
            "Lease is invalid",
            Some(lease),
        )));
        assert_eq!(p.kind, PermanentKind::Invalid);
        assert_eq!(
            p.object.as_deref(),
            Some("Lease.coordination.k8s.io/leadergroup-x")
        );
        assert_eq!(p.fields, ["metadata.labels"]);
        let text = p.describe();
        assert!(text.contains("(field metadata.labels)"), "{text}");
        assert!(text.contains("422 Invalid: Lease is invalid"), "{text}");
    }

    #[test]
    fn a_404_is_permanent_only_for_a_namespace() {
        let ns = details("namespaces", "", "gone", Vec::new());
        assert_eq!(
            permanent(classify_kube(&api(
                404,
                "NotFound",
                "namespaces \"gone\" not found",
                Some(ns)
            )))
            .kind,
            PermanentKind::NamespaceNotFound
        );
        assert!(matches!(
            classify_kube(&api(404, "NotFound", "pods \"p\" not found", None)),
            Retry::Transient(_)
        ));
    }

    #[test]
    fn conflicts_throttles_timeouts_and_server_errors_are_transient() {
        for (code, kind) in [
            (409, TransientKind::Conflict),
            (429, TransientKind::Throttled),
            (408, TransientKind::Server),
            (500, TransientKind::Server),
            (503, TransientKind::Server),
            (504, TransientKind::Server),
        ] {
            assert_eq!(
                classify_kube(&api(code, "", "", None)),
                Retry::Transient(kind),
                "{code}"
            );
        }
        assert_eq!(
            classify(&ReconcileError::Conflict(ConflictOn::Lease)),
            Retry::Transient(TransientKind::Conflict)
        );
        assert_eq!(
            classify(&ReconcileError::StaleDecision("g".into())),
            Retry::Transient(TransientKind::Stale)
        );
        assert_eq!(
            classify(&ReconcileError::Kube(
                kube::Error::LinesCodecMaxLineLengthExceeded
            )),
            Retry::Transient(TransientKind::Connection)
        );
    }

    #[test]
    fn a_stale_finalizer_is_transient_and_a_forbidden_one_permanent() {
        use kube::runtime::finalizer::Error as Fin;
        let stale =
            ReconcileError::Finalizer(Box::new(Fin::AddFinalizer(api(422, "Invalid", "", None))));
        assert_eq!(
            classify(&stale),
            Retry::Transient(TransientKind::StaleFinalizer)
        );
        let forbidden = ReconcileError::Finalizer(Box::new(Fin::AddFinalizer(api(
            403,
            "Forbidden",
            FORBIDDEN,
            None,
        ))));
        assert_eq!(
            permanent(classify(&forbidden)).kind,
            PermanentKind::Forbidden
        );
    }
}
