//! A member's two writes of its group's Lease, each a compare-and-swap on the resourceVersion the
//! Lease was read at, so neither can overwrite a newer write (a new leader, a newer epoch): the
//! API server answers 409 instead.
//! - In Heartbeat mode the leader renews it: `renewTime` moves, nothing else.
//! - A holder acknowledges its leadership (annotation `leadergroup.io/acknowledged`) before it
//!   first reports `Leader`, and a deposed one says it stepped down (annotation
//!   `leadergroup.io/stepped-down`), each at its epoch: the operator waits for the step-down of
//!   a holder that acknowledged before it labels the next leader.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::{Api, api::PostParams};
use tokio::time::timeout;

use crate::error::{MembershipError, Request};
use crate::publication::Note;
use crate::wire::{
    ACKNOWLEDGED_BY_ANNOTATION, ACKNOWLEDGED_BY_EPOCH_ANNOTATION, STEPPED_DOWN_BY_ANNOTATION,
    STEPPED_DOWN_BY_EPOCH_ANNOTATION, with_member,
};

/// Renews `read` (the Lease as last seen, naming this pod at its epoch), bounded by `limit`:
/// the Lease as written, or why not.
pub(crate) async fn renew(
    api: Api<Lease>,
    mut read: Lease,
    member: &str,
    limit: Duration,
    request: Request,
) -> Result<Lease, MembershipError> {
    // Only informative: the operator times renewals by when it sees them, on its own clock.
    read.spec.get_or_insert_default().renew_time = Some(MicroTime(Timestamp::now()));
    // A renewal is the holder's acknowledgement too.
    if let Some(epoch) = read
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::EPOCH_ANNOTATION))
        .cloned()
    {
        let annotations = read.metadata.annotations.get_or_insert_default();
        note_in(
            annotations,
            ACKNOWLEDGED_BY_EPOCH_ANNOTATION,
            ACKNOWLEDGED_BY_ANNOTATION,
            epoch,
            member,
        );
    }
    replace(api, read, limit, request).await
}

/// Writes `note` of `member` in `read` (the Lease as last seen, which asks for it), bounded by
/// `limit`: the epoch, and the member's name added to those that said so.
pub(crate) async fn write_note(
    api: Api<Lease>,
    mut read: Lease,
    note: Note,
    member: &str,
    limit: Duration,
    request: Request,
) -> Result<Lease, MembershipError> {
    let (key, by, epoch) = match note {
        Note::Acknowledged(epoch) => (
            ACKNOWLEDGED_BY_EPOCH_ANNOTATION,
            ACKNOWLEDGED_BY_ANNOTATION,
            epoch,
        ),
        Note::SteppedDown(epoch) => (
            STEPPED_DOWN_BY_EPOCH_ANNOTATION,
            STEPPED_DOWN_BY_ANNOTATION,
            epoch,
        ),
    };
    let annotations = read.metadata.annotations.get_or_insert_default();
    note_in(annotations, key, by, epoch.to_string(), member);
    replace(api, read, limit, request).await
}

/// Adds `member` to the names annotation `by` at `epoch` (annotation `key`). Only the keys of the
/// handshake by name: `leadergroup.io/acknowledged` and `stepped-down` are left to members of
/// 0.2.0, which would take either, whoever wrote it, for their own word.
fn note_in(
    annotations: &mut std::collections::BTreeMap<String, String>,
    key: &str,
    by: &str,
    epoch: String,
    member: &str,
) {
    // Names listed at another epoch said so of another tenure.
    let listed = match annotations.get(key) {
        Some(at) if *at == epoch => annotations.get(by).cloned(),
        _ => None,
    };
    annotations.insert(key.to_string(), epoch);
    annotations.insert(by.to_string(), with_member(listed.as_ref(), member));
}

async fn replace(
    api: Api<Lease>,
    lease: Lease,
    limit: Duration,
    request: Request,
) -> Result<Lease, MembershipError> {
    let name = request.name.clone();
    match timeout(limit, api.replace(&name, &PostParams::default(), &lease)).await {
        Ok(Ok(written)) => Ok(written),
        Ok(Err(e)) => Err(MembershipError::from_kube(request, e)),
        Err(_) => Err(MembershipError::Timeout {
            request,
            after: limit,
        }),
    }
}
