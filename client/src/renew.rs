//! Renewing the group's Lease in Heartbeat mode: a compare-and-swap on the resourceVersion the
//! Lease was read at, which moves `renewTime` and nothing else. A renewal can therefore never
//! overwrite a newer write (a new leader, a newer epoch): the API server answers 409 instead.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::{Api, api::PostParams};
use tokio::time::timeout;

use crate::error::{MembershipError, Request};

/// Renews `read` (the Lease as last seen, naming this pod at its epoch), bounded by `limit`:
/// the Lease as written, or why not.
pub(crate) async fn renew(
    api: Api<Lease>,
    mut read: Lease,
    limit: Duration,
    request: Request,
) -> Result<Lease, MembershipError> {
    let name = request.name.clone();
    // Only informative: the operator times renewals by when it sees them, on its own clock.
    read.spec.get_or_insert_default().renew_time = Some(MicroTime(Timestamp::now()));
    match timeout(limit, api.replace(&name, &PostParams::default(), &read)).await {
        Ok(Ok(written)) => Ok(written),
        Ok(Err(e)) => Err(MembershipError::from_kube(request, e)),
        Err(_) => Err(MembershipError::Timeout {
            request,
            after: limit,
        }),
    }
}
