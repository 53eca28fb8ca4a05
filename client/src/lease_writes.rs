//! A member's two writes of its group's Lease, each a compare-and-swap on the resourceVersion the
//! Lease was read at, so neither can overwrite a newer write (a new leader, a newer epoch): the
//! API server answers 409 instead.
//! - In Heartbeat mode the leader renews it: `renewTime` moves, nothing else.
//! - A deposed leader says it stepped down: annotation `leadergroup.io/stepped-down` at the
//!   epoch it held, which the operator waits for before it labels the next leader.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::{Api, api::PostParams};
use tokio::time::timeout;

use crate::Epoch;
use crate::error::{MembershipError, Request};
use crate::wire::STEPPED_DOWN_ANNOTATION;

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
    replace(api, read, limit, request).await
}

/// Says in `read` (the Lease as last seen, naming this pod as the predecessor at `epoch`) that
/// this pod no longer reports `Leader` at `epoch`, bounded by `limit`.
pub(crate) async fn step_down(
    api: Api<Lease>,
    mut read: Lease,
    epoch: Epoch,
    limit: Duration,
    request: Request,
) -> Result<Lease, MembershipError> {
    read.metadata
        .annotations
        .get_or_insert_default()
        .insert(STEPPED_DOWN_ANNOTATION.to_string(), epoch.to_string());
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
