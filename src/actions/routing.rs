//! Writes of the leader's Service and EndpointSlice ([`crate::routing`] says what they should be).

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ConflictOn, ReconcileError, Result, is_conflict, is_not_found};
use crate::routing::{self, SliceWrite};

/// Creates the Service `desired` when `current` is None, else updates `current` to it if it
/// differs (a replace on its resourceVersion).
pub async fn apply_service(
    api: &Api<Service>,
    current: Option<&Service>,
    desired: &Service,
) -> Result<()> {
    let written = match current {
        None => api.create(&PostParams::default(), desired).await,
        Some(current) => match routing::service_update(current, desired) {
            Some(next) => {
                api.replace(&next.name_any(), &PostParams::default(), &next)
                    .await
            }
            None => return Ok(()),
        },
    };
    written
        .map(|_| ())
        .map_err(|e| conflict_on(e, ConflictOn::Service))
}

/// Brings the slice `name` to what `plan` wants of it, starting from `known` (the slice as last
/// seen: the cache, or the previous write's answer). Every write is conditional on the version it
/// was planned from; when that is stale (a 409, or a 404: gone meanwhile), the slice is read
/// afresh and planned once more. Returns the slice as it is after the write.
pub async fn write_slice(
    api: &Api<EndpointSlice>,
    name: &str,
    known: Option<EndpointSlice>,
    plan: impl Fn(Option<&EndpointSlice>) -> Option<SliceWrite>,
) -> Result<Option<EndpointSlice>> {
    let mut current = known;
    for fresh in [false, true] {
        let Some(write) = plan(current.as_ref()) else {
            return Ok(current);
        };
        match send(api, write).await {
            Ok(written) => return Ok(Some(written)),
            Err(e) if !fresh && (is_conflict(&e) || is_not_found(&e)) => {
                current = api.get_opt(name).await?;
            }
            Err(e) => return Err(conflict_on(e, ConflictOn::EndpointSlice)),
        }
    }
    Err(ReconcileError::Conflict(ConflictOn::EndpointSlice))
}

async fn send(api: &Api<EndpointSlice>, write: SliceWrite) -> kube::Result<EndpointSlice> {
    let pp = PostParams::default();
    match write {
        SliceWrite::Create(slice) => api.create(&pp, &slice).await,
        SliceWrite::Replace(slice) => api.replace(&slice.name_any(), &pp, &slice).await,
        SliceWrite::Recreate(mut slice) => {
            let version = slice.metadata.resource_version.take();
            delete_at(api, &slice.name_any(), version).await?;
            api.create(&pp, &slice).await
        }
    }
}

/// Deletes `name` if it exists (conditional on `version` when given).
async fn delete_at<K>(api: &Api<K>, name: &str, version: Option<String>) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let dp = DeleteParams {
        preconditions: version.map(|v| Preconditions {
            uid: None,
            resource_version: Some(v),
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the objects `names` (the group's own, no longer wanted), tolerating their absence.
pub async fn delete_all<K>(api: &Api<K>, names: &[String]) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    for name in names {
        delete_at(api, name, None).await?;
    }
    Ok(())
}

fn conflict_on(e: kube::Error, on: ConflictOn) -> ReconcileError {
    if is_conflict(&e) {
        ReconcileError::Conflict(on)
    } else {
        e.into()
    }
}
