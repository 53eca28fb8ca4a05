//! The groups of one namespace, read and waited on, with errors that name them.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use leadergroup_operator::crd::LeaderGroup;

use crate::error::PluginError;

pub struct Groups {
    pub client: Client,
    pub namespace: String,
}

impl Groups {
    pub fn api(&self) -> Api<LeaderGroup> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn api_error(&self, group: &str, source: kube::Error) -> PluginError {
        PluginError::Api {
            group: group.to_owned(),
            namespace: self.namespace.clone(),
            source,
        }
    }

    pub async fn get(&self, name: &str) -> Result<LeaderGroup, PluginError> {
        self.api()
            .get_opt(name)
            .await
            .map_err(|e| self.api_error(name, e))?
            .ok_or_else(|| PluginError::NotFound {
                group: name.to_owned(),
                namespace: self.namespace.clone(),
            })
    }

    /// Every group of the namespace, by name.
    pub async fn list(&self) -> Result<Vec<LeaderGroup>, PluginError> {
        let mut groups = self
            .api()
            .list(&Default::default())
            .await
            .map_err(|e| self.api_error("*", e))?
            .items;
        groups.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(groups)
    }

    /// The groups of every namespace (`-A`): the same API, cluster-wide.
    pub fn all_api(&self) -> Api<LeaderGroup> {
        Api::all(self.client.clone())
    }

    /// Every group of every namespace, by namespace then name.
    pub async fn list_all(&self) -> Result<Vec<LeaderGroup>, PluginError> {
        let mut groups = self
            .all_api()
            .list(&Default::default())
            .await
            .map_err(|source| PluginError::Api {
                group: "*".to_owned(),
                namespace: "*".to_owned(),
                source,
            })?
            .items;
        groups.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(groups)
    }

    /// The group's Lease, if there is one (its name is in the status), in the group's namespace.
    pub async fn lease_of(&self, group: &LeaderGroup) -> Result<Option<Lease>, PluginError> {
        let name = group.lease_name();
        let namespace = group
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(&self.namespace);
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        leases
            .get_opt(&name)
            .await
            .map_err(|source| PluginError::Api {
                group: group.metadata.name.clone().unwrap_or_default(),
                namespace: namespace.to_owned(),
                source,
            })
    }

    /// Waits until group `name` satisfies `done`, up to `timeout`, through a watch; `None` when
    /// the time ran out.
    pub async fn wait(
        &self,
        name: &str,
        timeout: Duration,
        done: impl Fn(&LeaderGroup) -> bool,
    ) -> Result<Option<LeaderGroup>, PluginError> {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = std::pin::pin!(watcher(self.api(), config).default_backoff());
        let found = tokio::time::timeout(timeout, async {
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(g) | watcher::Event::InitApply(g)) if done(&g) => {
                        return Ok(g);
                    }
                    Ok(_) => {}
                    Err(watcher::Error::WatchError(e)) if e.code == 404 => {
                        return Err(PluginError::NotFound {
                            group: name.to_owned(),
                            namespace: self.namespace.clone(),
                        });
                    }
                    // Anything else: the watcher retries on its own.
                    Err(_) => {}
                }
            }
            Err(PluginError::NotFound {
                group: name.to_owned(),
                namespace: self.namespace.clone(),
            })
        })
        .await;
        found.map_or(Ok(None), |found| found.map(Some))
    }
}
