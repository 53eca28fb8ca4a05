//! The LeaderGroup resource for code that cannot use the operator's crate (this one, the chaos
//! run): its definition as shipped (`crds/leadergroup.yaml`), installed and served, and groups
//! as untyped objects.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use leadergroup_client::wire::{API_GROUP, API_VERSION, KIND, PLURAL};

use crate::{Error, Result, wait_until};

/// The CRD as the operator's `crd` command prints it (`make crds` writes the file, and its drift
/// check keeps it current).
const SHIPPED_CRD: &str = include_str!("../../crds/leadergroup.yaml");
/// How long a new CRD may take to be Established and served.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// The LeaderGroup resource, for [`DynamicObject`] APIs.
pub fn leader_group_resource() -> ApiResource {
    let mut resource = ApiResource::from_gvk(&GroupVersionKind::gvk(API_GROUP, API_VERSION, KIND));
    resource.plural = PLURAL.to_owned();
    resource
}

/// The LeaderGroups of `namespace`, untyped.
pub fn leader_groups(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &leader_group_resource())
}

/// The CRD as shipped in `crds/leadergroup.yaml`.
pub fn shipped_crd() -> Result<CustomResourceDefinition> {
    serde_yaml_ng::from_str(SHIPPED_CRD)
        .map_err(|e| Error::Unexpected(format!("crds/leadergroup.yaml: {e}")))
}

/// A LeaderGroup `name` selecting the pods labeled `label=value`, with a Lease of
/// `lease_seconds`; the other fields take the CRD's defaults.
pub fn leader_group(
    name: &str,
    label: &str,
    value: &str,
    lease_seconds: u32,
) -> Result<DynamicObject> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{API_GROUP}/{API_VERSION}"),
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {label: value}},
            "leaseDurationSeconds": lease_seconds,
        },
    }))
    .map_err(|e| Error::Unexpected(format!("the LeaderGroup {name}: {e}")))
}

/// Installs `crd` with a forced server-side apply (parallel test binaries may all do it), then
/// waits until it is Established and its resource answers a list: the first requests for a new
/// resource can still fail for a moment after Established.
pub async fn install_crd(client: &Client, crd: &CustomResourceDefinition) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply("leadergroup-testenv").force(),
        &Patch::Apply(crd),
    )
    .await
    .map_err(Error::kube(format!("applying the CRD {name}")))?;
    wait_until(
        &format!("the CRD {name} Established"),
        SERVED_WITHIN,
        || async {
            let established = crds
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok::<_, kube::Error>(established.then_some(()))
        },
    )
    .await?;
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.served)
        .map(|v| v.name.clone())
        .unwrap_or_default();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&crd.spec.group, &version, &crd.spec.names.kind),
        &crd.spec.names.plural,
    );
    let objects: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    wait_until(
        &format!("{} served", crd.spec.names.plural),
        SERVED_WITHIN,
        || async { objects.list(&Default::default()).await.map(|_| Some(())) },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_crd_is_the_resource_on_the_wire() {
        let crd = shipped_crd().unwrap();
        let resource = leader_group_resource();
        assert_eq!(crd.spec.group, resource.group);
        assert_eq!(crd.spec.names.kind, resource.kind);
        assert_eq!(crd.spec.names.plural, resource.plural);
        assert!(crd.spec.versions.iter().any(|v| v.name == resource.version));
    }
}
