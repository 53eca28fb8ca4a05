//! An admission webhook that holds chosen requests inside the API server, so that they land late.
//!
//! A request the API server has received goes through validating admission before it is written:
//! holding it there, then letting it through, is exactly a request that lands after its sender
//! gave up on it (held in a stuck connection, sent before a process pause). What happens next is
//! the API server's own: the write runs against the object as it is *then*, with whatever
//! precondition the request carries. The operator's tests use it to hold a promotion past the
//! Lease and check that it can no longer make a second leader.
//!
//! The webhook serves HTTPS on 127.0.0.1 with the control plane's own serving certificate (it
//! covers 127.0.0.1, and the cluster CA is the `caBundle`), and its configuration selects one
//! namespace only: the API server is shared by tests running in parallel.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{ControlPlane, Error, Result};

/// Which requests to hold: UPDATEs (and PATCHes, which admission sees as UPDATEs) of pod `pod`
/// (of any pod of the namespace when `None`) that set label `label` to `value` where the old
/// object did not have it.
#[derive(Clone, Debug)]
pub struct HoldRule {
    /// The pod's name; `None`: any pod.
    pub pod: Option<String>,
    /// The label key.
    pub label: String,
    /// Its value in the held request.
    pub value: String,
}

/// How often the waits on the held requests look.
const HOLD_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// The webhook, registered; unregistered and stopped on drop.
pub struct HeldRequests {
    name: String,
    client: Client,
    release: watch::Sender<bool>,
    held: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    found: Arc<Mutex<Vec<Pod>>>,
    task: JoinHandle<()>,
}

impl HeldRequests {
    /// Starts the webhook and registers it for pods of `namespace`, holding what `rule` selects
    /// until [`HeldRequests::release`]. Waits until the API server calls it: the API server loads
    /// webhook configurations asynchronously, and dry-run requests (which admission sees, and
    /// which are never held) of pod `probe` show when it does; it must exist.
    pub async fn start(
        cp: &ControlPlane,
        client: Client,
        namespace: &str,
        rule: HoldRule,
        probe: &str,
    ) -> Result<HeldRequests> {
        let pki = cp.dir().join("pki");
        let certs = CertificateDer::pem_file_iter(pki.join("server.crt"))
            .and_then(|c| c.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| Error::Unexpected(format!("the API server's certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_file(pki.join("server.key"))
            .map_err(|e| Error::Unexpected(format!("the API server's key: {e}")))?;
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| Error::Unexpected(format!("the webhook's TLS: {e}")))?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(Error::io("binding the webhook's port"))?;
        let addr = listener
            .local_addr()
            .map_err(Error::io("reading the webhook's address"))?;
        let (release, released) = watch::channel(false);
        let held = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let found = Arc::new(Mutex::new(Vec::new()));
        let probes = Arc::new(AtomicUsize::new(0));
        let probe = (probe.to_owned(), rule.label.clone(), rule.value.clone());
        let counters = Counters {
            held: Arc::clone(&held),
            answered: Arc::clone(&answered),
            found: Arc::clone(&found),
            probes: Arc::clone(&probes),
        };
        let (rule, counter) = (Arc::new(rule), Arc::new(counters));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, rule, released, counter) = (
                    acceptor.clone(),
                    Arc::clone(&rule),
                    released.clone(),
                    Arc::clone(&counter),
                );
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |request| {
                        review(
                            request,
                            Arc::clone(&rule),
                            released.clone(),
                            Arc::clone(&counter),
                        )
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        let name = format!("leadergroup-testenv-hold.{namespace}");
        let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        webhooks
            .create(
                &PostParams::default(),
                &configuration(&name, namespace, addr, cp)?,
            )
            .await
            .map_err(Error::kube(format!("registering webhook {name}")))?;
        let hold = HeldRequests {
            name,
            client: client.clone(),
            release,
            held,
            answered,
            found,
            task,
        };
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let (pod, label, value) = probe;
        let patch = json!({"metadata": {"labels": {label: value}}});
        let params = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        crate::wait_until(
            "the API server calls the webhook",
            std::time::Duration::from_secs(30),
            || async {
                pods.patch(&pod, &params, &Patch::Merge(&patch))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((probes.load(Ordering::SeqCst) > 0).then_some(()))
            },
        )
        .await?;
        Ok(hold)
    }

    /// How many requests it has held so far.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// The pod as each request held so far found it (its AdmissionReview's `oldObject`), in the
    /// order held. Validating admission runs after the API server checked a request's
    /// resourceVersion precondition, so this is the version a conditional request names: a
    /// write to the pod since then makes the API server refuse it once let through.
    pub fn found(&self) -> Vec<Pod> {
        self.found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until it holds a request (polling every 5 ms: the caller may have to act within
    /// milliseconds of the hold, before the sender gives up on its request).
    pub async fn first_hold(&self, timeout: std::time::Duration) -> Result<()> {
        let held = || async { Ok::<_, String>((self.held() > 0).then_some(())) };
        crate::wait_until_every("a held request", timeout, HOLD_POLL, held).await
    }

    /// Waits until every request held so far has been let through (its answer sent to the API
    /// server, which then writes it or refuses it). Polls every 5 ms.
    pub async fn all_answered(&self, timeout: std::time::Duration) -> Result<()> {
        let answered = || async {
            let (answered, held) = (self.answered.load(Ordering::SeqCst), self.held());
            if answered >= held {
                Ok(Some(()))
            } else {
                Err(format!("{answered} of {held} answered"))
            }
        };
        crate::wait_until_every("the held requests' answers", timeout, HOLD_POLL, answered).await
    }

    /// Lets every held request (and every later one, until [`HeldRequests::hold`]) through.
    pub fn release(&self) {
        self.release.send_replace(true);
    }

    /// Holds what the rule selects again, after a [`HeldRequests::release`].
    pub fn hold(&self) {
        self.release.send_replace(false);
    }
}

impl Drop for HeldRequests {
    fn drop(&mut self) {
        self.release.send_replace(true);
        self.task.abort();
        let (client, name) = (self.client.clone(), self.name.clone());
        // Best effort, from a drop: the namespace selector keeps a leftover harmless to others.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
                let _ = api.delete(&name, &DeleteParams::default()).await;
            });
        }
    }
}

fn configuration(
    name: &str,
    namespace: &str,
    addr: SocketAddr,
    cp: &ControlPlane,
) -> Result<ValidatingWebhookConfiguration> {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cp.ca_data())
        .map_err(|e| {
            Error::Unexpected(format!("the kubeconfig's certificate-authority-data: {e}"))
        })?;
    Ok(ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "hold.testenv.leadergroup.io".into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            // Fail: a webhook that cannot be reached blocks the namespace's pod updates rather
            // than letting a held request through unseen.
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(30),
            client_config: WebhookClientConfig {
                url: Some(format!("https://{addr}/hold")),
                ca_bundle: Some(ByteString(ca)),
                service: None,
            },
            namespace_selector: Some(LabelSelector {
                match_labels: Some(
                    [(
                        "kubernetes.io/metadata.name".to_owned(),
                        namespace.to_owned(),
                    )]
                    .into(),
                ),
                ..LabelSelector::default()
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["UPDATE".into()]),
                resources: Some(vec!["pods".into()]),
                scope: Some("Namespaced".into()),
            }]),
            ..ValidatingWebhook::default()
        }]),
    })
}

/// What the webhook counts.
struct Counters {
    /// Requests held.
    held: Arc<AtomicUsize>,
    /// Held requests answered (let through) since.
    answered: Arc<AtomicUsize>,
    /// The pod as each held request found it.
    found: Arc<Mutex<Vec<Pod>>>,
    /// Dry-run requests seen (never held).
    probes: Arc<AtomicUsize>,
}

/// Answers one AdmissionReview: allowed, after the release when the rule holds it.
async fn review(
    request: Request<Incoming>,
    rule: Arc<HoldRule>,
    mut released: watch::Receiver<bool>,
    counters: Arc<Counters>,
) -> std::result::Result<Response<Full<Bytes>>, hyper::Error> {
    let body = request.into_body().collect().await?.to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let req = &review["request"];
    let label = |object: &str| req[object]["metadata"]["labels"][rule.label.as_str()].as_str();
    let matches = rule
        .pod
        .as_deref()
        .is_none_or(|pod| req["name"].as_str() == Some(pod))
        && label("object") == Some(rule.value.as_str())
        && label("oldObject") != Some(rule.value.as_str());
    if req["dryRun"].as_bool() == Some(true) {
        counters.probes.fetch_add(1, Ordering::SeqCst);
    } else if matches {
        // Recorded before it counts as held: a caller that sees the count finds the pod too.
        if let Ok(pod) = serde_json::from_value::<Pod>(req["oldObject"].clone()) {
            counters
                .found
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(pod);
        }
        counters.held.fetch_add(1, Ordering::SeqCst);
        let _ = released.wait_for(|r| *r).await;
        counters.answered.fetch_add(1, Ordering::SeqCst);
    }
    let answer = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": req["uid"].clone(), "allowed": true},
    });
    Ok(Response::new(Full::new(Bytes::from(answer.to_string()))))
}
