//! The secure `/metrics` (`--metrics-secure-addr`, the chart's default) against the real API
//! server, as a scraper meets it: over TLS, the token of a ServiceAccount bound to a ClusterRole
//! that may `get` the non-resource URL `/metrics` reads it (200), the token of one without that
//! binding is refused (403), no token or a forged one is not authenticated (401); the plain port
//! keeps the probes and no longer serves `/metrics`. With `--metrics-cert-dir` the certificate of
//! the directory is served (verified against its CA), and the self-signed one is not it.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use leadergroup_testenv::{Trust, control_plane, https_get, wait_until};

use crate::common::{CONVERGE, Operator, World};

#[tokio::test]
async fn secure_metrics_serve_the_bound_token_refuse_the_others_over_tls() {
    let cp = control_plane().await.unwrap();
    let w = World::new("secure-metrics").await;
    let admin = cp.client().await.unwrap();
    let reader = format!("{}-metrics-reader", w.ns.name);
    let rbac = ReaderRbac::create(&admin, &reader, &w.ns.name, "scraper").await;
    w.ns.create_service_account("scraper").await.unwrap();
    w.ns.create_service_account("stranger").await.unwrap();
    let scraper = w.ns.service_account_token("scraper").await.unwrap();
    let stranger = w.ns.service_account_token("stranger").await.unwrap();

    let operator = Operator::start_secure(cp.kubeconfig_path(), &w.ns.name, "op-secure", &[]).await;
    operator.wait_ready().await;

    // The binding reaches the API server's authorizer shortly after it is written, and a refusal
    // is remembered 10 s: the scraper reads within that.
    let body = wait_until(
        "the bound ServiceAccount reads /metrics",
        CONVERGE,
        || async {
            let (code, body) = operator.scrape(Some(&scraper), Trust::Any).await;
            Ok::<_, String>((code == 200).then_some(body))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", operator.logs()));
    assert!(
        body.contains("# TYPE leadergroup_transitions counter"),
        "{body}"
    );

    let (code, body) = operator.scrape(Some(&stranger), Trust::Any).await;
    assert_eq!(code, 403, "a ServiceAccount without the binding: {body}");
    assert!(!body.contains("leadergroup_"), "{body}");
    let (code, body) = operator.scrape(None, Trust::Any).await;
    assert_eq!(code, 401, "no token: {body}");
    let (code, body) = operator.scrape(Some("not-a-token"), Trust::Any).await;
    assert_eq!(code, 401, "a forged token: {body}");
    let (code, _) = operator.scrape(Some(&scraper), Trust::Any).await;
    assert_eq!(code, 200, "the bound token again (from the cache)");

    // The plain port keeps the probes, and /metrics is not there any more.
    assert_eq!(operator.get("/healthz").await.map(|(c, _)| c), Some(200));
    assert_eq!(operator.get("/metrics").await.map(|(c, _)| c), Some(404));

    // The self-signed certificate: the cluster's CA did not sign it, so a verifying client
    // refuses it (the chart's ServiceMonitor skips verification unless given a CA).
    let ca = cp.dir().join("pki").join("ca.crt");
    let refused = https_get(
        operator.metrics_secure.unwrap(),
        "/metrics",
        Some(&scraper),
        Trust::Ca(&ca),
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");

    // --metrics-cert-dir: a Secret's tls.crt and tls.key (here the API server's own pair, which
    // names 127.0.0.1), served and verified against the CA that signed them.
    let certs = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("metrics-certs")
        .join(&w.ns.name);
    std::fs::create_dir_all(&certs).unwrap();
    let pki = cp.dir().join("pki");
    std::fs::copy(pki.join("server.crt"), certs.join("tls.crt")).unwrap();
    std::fs::copy(pki.join("server.key"), certs.join("tls.key")).unwrap();
    let with_certs = Operator::start_secure(
        cp.kubeconfig_path(),
        &w.ns.name,
        "op-cert-dir",
        &["--metrics-cert-dir", &certs.display().to_string()],
    )
    .await;
    with_certs.wait_ready().await;
    let (code, body) = with_certs.scrape(Some(&scraper), Trust::Ca(&ca)).await;
    assert_eq!(code, 200, "{body}");
    let (code, _) = with_certs.scrape(Some(&stranger), Trust::Ca(&ca)).await;
    assert_eq!(code, 403);
    let _ = std::fs::remove_dir_all(&certs);
    rbac.delete().await;
}

/// A ClusterRole `name` that may `get` `/metrics` (the chart's `<fullname>-metrics-reader`) and a
/// ClusterRoleBinding `name` of it to ServiceAccount `account` of `namespace` (cluster-wide, on the
/// API server the tests share: named after the test's namespace, and deleted at its end).
struct ReaderRbac {
    client: kube::Client,
    name: String,
}

impl ReaderRbac {
    async fn create(client: &kube::Client, name: &str, namespace: &str, account: &str) -> Self {
        let metadata = ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        };
        let role = ClusterRole {
            metadata: metadata.clone(),
            rules: Some(vec![PolicyRule {
                non_resource_urls: Some(vec!["/metrics".to_owned()]),
                verbs: vec!["get".to_owned()],
                ..PolicyRule::default()
            }]),
            ..ClusterRole::default()
        };
        Api::<ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding = ClusterRoleBinding {
            metadata,
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "ClusterRole".to_owned(),
                name: name.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: account.to_owned(),
                namespace: Some(namespace.to_owned()),
                ..Subject::default()
            }]),
        };
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        ReaderRbac {
            client: client.clone(),
            name: name.to_owned(),
        }
    }
}

impl ReaderRbac {
    async fn delete(self) {
        let dp = DeleteParams::default();
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .delete(&self.name, &dp)
            .await
            .unwrap();
        Api::<ClusterRole>::all(self.client)
            .delete(&self.name, &dp)
            .await
            .unwrap();
    }
}
