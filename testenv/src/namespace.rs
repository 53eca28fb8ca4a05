use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::{
    authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, Pod, ServiceAccount},
    rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use crate::{Error, Result, control_plane};

/// Label on every namespace this crate creates, to tell test namespaces apart in `kubectl get ns`.
pub const TESTENV_LABEL: &str = "leadergroup.io/testenv";

/// A namespace of its own for one test, with an admin client.
///
/// It is never deleted: without kube-controller-manager a deleted namespace stays `Terminating`
/// forever, and the whole cluster is thrown away after the run anyway.
#[derive(Clone)]
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
    /// An admin client, bound to the runtime of the test that called [`namespace`].
    pub client: Client,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Creates a fresh namespace named `<prefix>-<unique suffix>` (lowercased, non-alphanumerics
/// turned into `-`, at most 63 characters) and its `default` ServiceAccount, which the
/// ServiceAccount admission plugin requires before it admits pods and which no controller creates
/// here.
///
/// The suffix combines the process id, a per-process counter and the clock, so test binaries that
/// share one cluster ([`crate::KUBECONFIG_ENV`]) and reruns against a reused cluster never collide.
pub async fn namespace(prefix: &str) -> Result<TestNamespace> {
    let cp = control_plane().await?;
    namespace_in(cp.client().await?, prefix).await
}

/// [`namespace`] in the cluster `client` talks to (for example the real cluster of the end-to-end
/// tests). Where kube-controller-manager runs, it may create the `default` ServiceAccount first.
pub async fn namespace_in(client: Client, prefix: &str) -> Result<TestNamespace> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // A name can still be taken when a pid repeats within the clock's resolution: retry.
    for _ in 0..5 {
        let name = unique_name(prefix);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TESTENV_LABEL.to_owned(), "true".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => continue,
            Err(e) => return Err(Error::kube(format!("creating namespace {name}"))(e)),
        }
        let test_ns = TestNamespace { name, client };
        match test_ns.create_service_account("default").await {
            Ok(_) => {}
            Err(Error::Kube {
                source: kube::Error::Api(s),
                ..
            }) if s.is_already_exists() => {}
            Err(e) => return Err(e),
        }
        return Ok(test_ns);
    }
    Err(Error::Unexpected(format!(
        "no free namespace name for prefix {prefix:?} after 5 tries"
    )))
}

fn unique_name(prefix: &str) -> String {
    let mut clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    clean.truncate(40);
    let clean = clean.trim_matches('-');
    let clean = if clean.is_empty() { "test" } else { clean };
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() % 36u128.pow(5));
    // <= 40 + 1 + 7 (pid) + 1 + 7 (counter) + 1 + 5 (clock) = 62 characters.
    let pid = u128::from(std::process::id());
    format!(
        "{clean}-{}-{}-{}",
        base36(pid),
        base36(u128::from(n)),
        base36(clock)
    )
}

fn base36(mut n: u128) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

impl TestNamespace {
    /// An [`Api`] for a namespaced resource in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates a ServiceAccount in this namespace.
    pub async fn create_service_account(&self, name: &str) -> Result<ServiceAccount> {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        self.api::<ServiceAccount>()
            .create(&PostParams::default(), &sa)
            .await
            .map_err(Error::kube(format!(
                "creating ServiceAccount {}/{name}",
                self.name
            )))
    }

    /// A token for ServiceAccount `name` from the TokenRequest API, valid for an hour. It
    /// authenticates as `system:serviceaccount:<namespace>:<name>`.
    pub async fn service_account_token(&self, name: &str) -> Result<String> {
        self.token_request(name, None).await
    }

    /// A token for ServiceAccount `name` bound to pod `pod` (which runs as it), as the kubelet
    /// mounts into a pod: it authenticates as the ServiceAccount, with the pod's name and UID in
    /// the user info (extra `authentication.kubernetes.io/pod-name` and `pod-uid`).
    pub async fn pod_token(&self, name: &str, pod: &str) -> Result<String> {
        let uid = self
            .api::<Pod>()
            .get(pod)
            .await
            .map_err(Error::kube(format!("reading pod {}/{pod}", self.name)))?
            .metadata
            .uid;
        let bound = BoundObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(pod.to_owned()),
            uid,
        };
        self.token_request(name, Some(bound)).await
    }

    async fn token_request(
        &self,
        name: &str,
        bound: Option<BoundObjectReference>,
    ) -> Result<String> {
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                // No audiences: the server's default (its issuer), so the token authenticates to it.
                audiences: None,
                expiration_seconds: Some(3600),
                bound_object_ref: bound,
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let what = format!("requesting a token for ServiceAccount {}/{name}", self.name);
        let answer = self
            .api::<ServiceAccount>()
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(Error::kube(what.clone()))?;
        answer
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error::Unexpected(format!("{what}: the answer has no token")))
    }

    /// Creates ServiceAccount `name`, a Role `name` with `rules` and a RoleBinding `name`
    /// between them in this namespace; returns a token for the ServiceAccount.
    pub async fn create_account_with_role(
        &self,
        name: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<String> {
        self.create_service_account(name).await?;
        let metadata = ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        };
        let role = Role {
            metadata: metadata.clone(),
            rules: Some(rules),
        };
        self.api::<Role>()
            .create(&PostParams::default(), &role)
            .await
            .map_err(Error::kube(format!("creating Role {}/{name}", self.name)))?;
        let binding = RoleBinding {
            metadata,
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "Role".to_owned(),
                name: name.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: name.to_owned(),
                namespace: Some(self.name.clone()),
                ..Subject::default()
            }]),
        };
        self.api::<RoleBinding>()
            .create(&PostParams::default(), &binding)
            .await
            .map_err(Error::kube(format!(
                "creating RoleBinding {}/{name}",
                self.name
            )))?;
        self.service_account_token(name).await
    }

    /// A client authenticated as ServiceAccount `name` of this namespace (through a fresh
    /// TokenRequest token): RBAC decides what it may do.
    pub async fn service_account_client(&self, name: &str) -> Result<Client> {
        let token = self.service_account_token(name).await?;
        control_plane().await?.client_with_token(&token).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_dns_labels_and_unique() {
        let long = "A_Very/Long Prefix That Goes On And On For Far Too Many Characters";
        let a = unique_name(long);
        let b = unique_name(long);
        assert_ne!(a, b);
        for name in [&a, &b, &unique_name("---"), &unique_name("lease-cas")] {
            assert!(name.len() <= 63, "{name} is {} long", name.len());
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(!name.starts_with('-') && !name.ends_with('-'), "{name}");
        }
        assert!(unique_name("lease-cas").starts_with("lease-cas-"));
        assert!(unique_name("---").starts_with("test-"));
    }

    #[test]
    fn base36_digits() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
    }
}
