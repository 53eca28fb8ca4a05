//! The secure `/metrics` (`--metrics-secure-addr`): served over TLS to the bearer of a token
//! allowed to `get` it ([`access`](super::access)), as controller-runtime's secure metrics are.
//! The certificate is a mounted Secret's (`--metrics-cert-dir`, read again when it changes) or,
//! without one, self-signed at start: a scraper then skips verification, and the token still
//! decides who reads.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::Client;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};

use super::access::{METRICS_PATH, MetricsAccess, Verdict};
use super::metrics_response;
use crate::error::StartupError;
use crate::metrics::Metrics;

/// The certificate and key in `--metrics-cert-dir`, as a `kubernetes.io/tls` Secret names them.
pub const CERT_FILE: &str = "tls.crt";
/// See [`CERT_FILE`].
pub const KEY_FILE: &str = "tls.key";
/// How long a client may take over its TLS handshake before its connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handshaken and not yet taken by the server.
const HANDSHAKEN_QUEUE: usize = 64;

/// The secure metrics server, bound and with its certificate, not serving yet.
pub struct SecureMetrics {
    addr: String,
    listener: TcpListener,
    tls: TlsAcceptor,
    access: Arc<MetricsAccess>,
}

impl SecureMetrics {
    /// Binds `addr` and loads the certificate of `cert_dir` (or generates one); the reviews go
    /// through `client`. Fails, before anything is served, when either cannot be done.
    pub async fn bind(
        addr: &str,
        cert_dir: Option<&Path>,
        client: Client,
    ) -> Result<SecureMetrics, StartupError> {
        let tls = TlsAcceptor::from(Arc::new(tls_config(cert_dir)?));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartupError::Http {
                addr: addr.to_owned(),
                source,
            })?;
        Ok(SecureMetrics {
            addr: addr.to_owned(),
            listener,
            tls,
            access: Arc::new(MetricsAccess::new(client)),
        })
    }

    /// Serves `/metrics` until `shutdown` resolves.
    pub async fn serve(
        self,
        metrics: Arc<Metrics>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartupError> {
        let local = self
            .listener
            .local_addr()
            .map_err(|source| StartupError::Http {
                addr: self.addr.clone(),
                source,
            })?;
        info!(addr = %local, "serving /metrics over TLS, to bearers of a token allowed to get it");
        let listener = TlsListener::start(self.listener, local, self.tls);
        axum::serve(listener, router(metrics, self.access))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| StartupError::Http {
                addr: self.addr,
                source,
            })
    }
}

#[derive(Clone)]
struct Secured {
    metrics: Arc<Metrics>,
    access: Arc<MetricsAccess>,
}

/// `/metrics` behind the access check; nothing else.
pub(crate) fn router(metrics: Arc<Metrics>, access: Arc<MetricsAccess>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(secured_metrics))
        .with_state(Secured { metrics, access })
}

async fn secured_metrics(State(s): State<Secured>, headers: axum::http::HeaderMap) -> Response {
    match s.access.verdict(headers.get(header::AUTHORIZATION)).await {
        Ok(Verdict::Allowed) => metrics_response(&s.metrics).into_response(),
        Ok(Verdict::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized: a bearer token the API server authenticates is required\n",
        )
            .into_response(),
        Ok(Verdict::Forbidden) => (
            StatusCode::FORBIDDEN,
            "Forbidden: the token's user may not get /metrics (bind it to the chart's metrics-reader ClusterRole)\n",
        )
            .into_response(),
        Err(e) => {
            warn!(error = %e, "could not review a request to /metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the API server could not review the token\n",
            )
                .into_response()
        }
    }
}

/// The TLS configuration: the certificate of `cert_dir`, or a self-signed one; HTTP/1.1 only
/// (the server speaks nothing else).
fn tls_config(cert_dir: Option<&Path>) -> Result<rustls::ServerConfig, StartupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver: Arc<dyn ResolvesServerCert> = match cert_dir {
        Some(dir) => {
            let files = CertFiles::new(dir, provider.clone())?;
            info!(dir = %dir.display(), "metrics TLS certificate from {CERT_FILE} and {KEY_FILE}, read again when they change");
            Arc::new(files)
        }
        None => {
            info!(
                "no --metrics-cert-dir: a self-signed metrics TLS certificate, new at every start"
            );
            Arc::new(Fixed(Arc::new(self_signed(&provider)?)))
        }
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StartupError::MetricsTls(format!("protocol versions: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A certificate for `localhost` and this host's name, signed by its own key.
fn self_signed(provider: &CryptoProvider) -> Result<CertifiedKey, StartupError> {
    let mut names = vec!["localhost".to_owned()];
    names.extend(std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()));
    let generated = rcgen::generate_simple_self_signed(names)
        .map_err(|e| StartupError::MetricsTls(format!("generating a certificate: {e}")))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        generated.signing_key.serialize_der(),
    ));
    CertifiedKey::from_der(vec![generated.cert.der().clone()], key, provider)
        .map_err(|e| StartupError::MetricsTls(format!("the generated certificate: {e}")))
}

/// One certificate, for every handshake.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The certificate and key of a directory, read again at the first handshake after either file
/// changed (a Secret's new certificate, from cert-manager say, is used without a restart). A
/// change that cannot be read keeps the last good pair.
#[derive(Debug)]
struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

/// The files' modification times.
type Stamp = Option<(SystemTime, SystemTime)>;

impl CertFiles {
    fn new(dir: &Path, provider: Arc<CryptoProvider>) -> Result<CertFiles, StartupError> {
        let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        let stamp = stamp(&cert, &key);
        let pair = load(&cert, &key, &provider)?;
        Ok(CertFiles {
            cert,
            key,
            provider,
            loaded: Mutex::new((stamp, Arc::new(pair))),
        })
    }
}

impl ResolvesServerCert for CertFiles {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl CertFiles {
    /// The pair to present now: the files' again if they changed since they were read.
    fn current(&self) -> Arc<CertifiedKey> {
        let now = stamp(&self.cert, &self.key);
        // A plain value behind the lock: a panic elsewhere cannot leave it half-written.
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        if now.is_some() && now != loaded.0 {
            match load(&self.cert, &self.key, &self.provider) {
                Ok(pair) => {
                    info!(cert = %self.cert.display(), "metrics TLS certificate changed: using the new one");
                    *loaded = (now, Arc::new(pair));
                }
                Err(e) => {
                    warn!(error = %e, "metrics TLS certificate changed but cannot be used: keeping the last one")
                }
            }
        }
        loaded.1.clone()
    }
}

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((modified(cert)?, modified(key)?))
}

fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, StartupError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| StartupError::MetricsTls(format!("{}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(StartupError::MetricsTls(format!(
            "{}: no certificate",
            cert.display()
        )));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| StartupError::MetricsTls(format!("{}: {e}", key.display())))?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| {
        StartupError::MetricsTls(format!("{} with {}: {e}", cert.display(), key.display()))
    })
}

/// TCP connections after their TLS handshake, for `axum::serve`. Each handshake runs in a task of
/// its own, so that a slow or silent client holds up nobody else.
struct TlsListener {
    handshaken: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    fn start(listener: TcpListener, local: SocketAddr, tls: TlsAcceptor) -> TlsListener {
        let (tx, handshaken) = mpsc::channel(HANDSHAKEN_QUEUE);
        let accepting = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, most likely: wait rather than spin.
                        warn!(error = %e, "accepting a metrics connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "metrics TLS handshake failed"),
                        Err(_) => debug!(%peer, "metrics TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener {
            handshaken,
            local,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(connection) => connection,
            // The accepting task holds a sender until the listener drops: never reached.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::super::access::tests::fake_api_server;
    use super::*;

    async fn get(router: &Router, path: &str, token: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::get(path);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn metrics_answer_200_401_or_403_by_the_token() {
        let (client, _, _) = fake_api_server(
            &[("reader", "scraper"), ("other", "stranger")],
            &["scraper"],
        );
        let router = router(
            Arc::new(Metrics::new(true)),
            Arc::new(MetricsAccess::new(client)),
        );
        let (status, body) = get(&router, "/metrics", Some("reader")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(
            body.contains("# TYPE leadergroup_transitions counter"),
            "{body}"
        );
        assert_eq!(
            get(&router, "/metrics", None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            get(&router, "/metrics", Some("forged")).await.0,
            StatusCode::UNAUTHORIZED
        );
        let (status, body) = get(&router, "/metrics", Some("other")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(!body.contains("leadergroup_"), "{body}");
        // Nothing but /metrics on this port: the probes stay on the plain one.
        assert_eq!(
            get(&router, "/healthz", Some("reader")).await.0,
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn an_api_server_that_cannot_review_gets_500_not_a_verdict() {
        let broken = Client::new(
            tower::service_fn(|_: Request<kube::client::Body>| async {
                axum::http::Response::builder()
                    .status(503)
                    .body(kube::client::Body::from(b"{}".to_vec()))
            }),
            "default",
        );
        let router = router(
            Arc::new(Metrics::new(true)),
            Arc::new(MetricsAccess::new(broken)),
        );
        assert_eq!(
            get(&router, "/metrics", Some("reader")).await.0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    /// Writes a fresh self-signed pair for `name` into `dir`; returns the certificate's DER.
    fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
        let generated = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        std::fs::write(dir.join(CERT_FILE), generated.cert.pem()).unwrap();
        std::fs::write(dir.join(KEY_FILE), generated.signing_key.serialize_pem()).unwrap();
        generated.cert.der().to_vec()
    }

    fn served(files: &CertFiles) -> Vec<u8> {
        files.current().cert[0].to_vec()
    }

    #[test]
    fn a_certificate_directory_is_read_and_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("lgo-metrics-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let first = write_pair(&dir, "first.example");
        let files = CertFiles::new(&dir, provider.clone()).unwrap();
        assert_eq!(served(&files), first);

        // A new pair (as a Secret's update swaps the files): the next handshake uses it. The
        // modification time must differ; some filesystems count whole seconds.
        std::thread::sleep(Duration::from_millis(1100));
        let second = write_pair(&dir, "second.example");
        assert_eq!(served(&files), second);
        // A change that cannot be used (a key of another certificate) keeps the last good pair.
        std::thread::sleep(Duration::from_millis(1100));
        let other = rcgen::generate_simple_self_signed(vec!["x".to_owned()]).unwrap();
        std::fs::write(dir.join(KEY_FILE), other.signing_key.serialize_pem()).unwrap();
        assert_eq!(served(&files), second);

        // At start, the same mismatch is refused, naming the files.
        let err = CertFiles::new(&dir, provider.clone())
            .unwrap_err()
            .to_string();
        assert!(err.contains(KEY_FILE), "{err}");
        std::fs::remove_file(dir.join(CERT_FILE)).unwrap();
        let err = CertFiles::new(&dir, provider).unwrap_err().to_string();
        assert!(err.contains(CERT_FILE), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
