//! Lease writes, always as a compare-and-swap on the resourceVersion the Lease was read at.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use crate::error::{ConflictOn, ReconcileError, Result, is_conflict, is_not_found};
use crate::lease_record::LeaseRecord;

/// Writes `record` to the Lease `name`. `read` is the Lease as last read (None: it did not exist),
/// and the write succeeds only if the Lease is still exactly that: a create when it was absent,
/// a replace with its resourceVersion otherwise. Anything else is [`ReconcileError::Conflict`].
pub async fn compare_and_swap(
    api: &Api<Lease>,
    name: &str,
    read: Option<&Lease>,
    record: &LeaseRecord,
    group_label: Option<&str>,
    owner: Option<OwnerReference>,
) -> Result<Lease> {
    let namespace = api_namespace(read, api);
    let lease = record.apply_to(read, name, &namespace, group_label, owner);
    let written = match read {
        None => api.create(&PostParams::default(), &lease).await,
        Some(_) => api.replace(name, &PostParams::default(), &lease).await,
    };
    written.map_err(|e| {
        if is_conflict(&e) || is_not_found(&e) {
            ReconcileError::Conflict(ConflictOn::Lease)
        } else {
            e.into()
        }
    })
}

/// Reads the Lease from the API server (not a cache); None when it does not exist.
pub async fn read(api: &Api<Lease>, name: &str) -> Result<Option<Lease>> {
    Ok(api.get_opt(name).await?)
}

/// Leaves the Lease of a deleted group to whichever group of the name comes next: no holder, no
/// arbiter, no owner (so that the garbage collector leaves it too), and its epoch kept, so that
/// the next group's tokens start above every token this one handed out. Conditional on the
/// version read; a Lease already gone is left gone.
pub async fn leave(api: &Api<Lease>, lease: &Lease) -> Result<()> {
    let current = LeaseRecord::from_lease(lease);
    // Its holder may go on reporting Leader for a while: the next group's first leader waits
    // for it as for any predecessor.
    let record = LeaseRecord {
        holder: None,
        holder_uid: None,
        acquire_time: None,
        renew_time: None,
        arbiter: None,
        longest_seconds: None,
        predecessor: current.predecessor_after_holder(),
        ..current
    };
    let namespace = api_namespace(Some(lease), api);
    let mut left = record.apply_to(Some(lease), &lease.name_any(), &namespace, None, None);
    left.metadata.owner_references = None;
    match api
        .replace(&lease.name_any(), &PostParams::default(), &left)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) if is_conflict(&e) => Err(ReconcileError::Conflict(ConflictOn::Lease)),
        Err(e) => Err(e.into()),
    }
}

fn api_namespace(read: Option<&Lease>, api: &Api<Lease>) -> String {
    read.and_then(|l| l.namespace())
        .unwrap_or_else(|| api.namespace().unwrap_or_default().to_string())
}
