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

use crate::Epoch;
use crate::error::{MembershipError, Request};
use crate::wire::{ACKNOWLEDGED_ANNOTATION, STEPPED_DOWN_ANNOTATION};

/// Renews `read` (the Lease as last seen, naming this pod at its epoch), bounded by `limit`:
/// the Lease as written, or why not.
pub(crate) async fn renew(
    api: Api<Lease>,
    mut read: Lease,
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
        read.metadata
            .annotations
            .get_or_insert_default()
            .insert(ACKNOWLEDGED_ANNOTATION.to_string(), epoch);
    }
    replace(api, read, limit, request).await
}

/// What a member tells the operator in the Lease, at an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// As the holder: it will report `Leader` at this epoch, and step down when deposed.
    Acknowledged(Epoch),
    /// As the predecessor: it no longer reports `Leader` at this epoch.
    SteppedDown(Epoch),
}

/// Writes `note` in `read` (the Lease as last seen, which asks for it), bounded by `limit`.
pub(crate) async fn write_note(
    api: Api<Lease>,
    mut read: Lease,
    note: Note,
    limit: Duration,
    request: Request,
) -> Result<Lease, MembershipError> {
    let (key, epoch) = match note {
        Note::Acknowledged(epoch) => (ACKNOWLEDGED_ANNOTATION, epoch),
        Note::SteppedDown(epoch) => (STEPPED_DOWN_ANNOTATION, epoch),
    };
    read.metadata
        .annotations
        .get_or_insert_default()
        .insert(key.to_string(), epoch.to_string());
    replace(api, read, limit, request).await
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
