//! HTTPS GETs with a bearer token, as a scraper sends them to the operator's secure `/metrics`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::tools::{HTTP_TIMEOUT, parse_response};
use crate::{Error, Result};

/// Which server certificates an [`https_get`] accepts.
#[derive(Clone, Copy, Debug)]
pub enum Trust<'a> {
    /// Any (a ServiceMonitor's `insecureSkipVerify`, for a self-signed certificate): the
    /// connection is encrypted, and the token still decides who reads.
    Any,
    /// Those a CA of this PEM file signed, for the address's IP.
    Ca(&'a Path),
}

/// GETs `path` from `addr` over HTTPS (HTTP/1.1), with `Authorization: Bearer <token>` when a
/// token is given: (status code, body). An error when the connection, the handshake (a
/// certificate refused) or the answer fails, or takes longer than 5 s.
pub async fn https_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    trust: Trust<'_>,
) -> Result<(u16, String)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Unexpected(format!("TLS client: {e}")))?;
    let config = match trust {
        Trust::Any => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
        Trust::Ca(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca)
                .map_err(|e| Error::Unexpected(format!("{}: {e}", ca.display())))?
            {
                let cert = cert.map_err(|e| Error::Unexpected(format!("{}: {e}", ca.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| Error::Unexpected(format!("{}: {e}", ca.display())))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let request = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(Error::io(format!("connecting to {addr}")))?;
        let mut tls = connector
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .map_err(Error::io(format!("TLS handshake with {addr}")))?;
        let authorization = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Connection: close\r\n\r\n"
        );
        tls.write_all(request.as_bytes())
            .await
            .map_err(Error::io(format!("sending GET {path} to {addr}")))?;
        let mut response = Vec::new();
        // A server may close without TLS's close_notify: what arrived before is the answer.
        let read = tls.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response);
        parse_response(&text).ok_or_else(|| {
            Error::Unexpected(format!(
                "GET {path} on {addr}: no whole answer ({read:?}): {text}"
            ))
        })
    };
    tokio::time::timeout(HTTP_TIMEOUT, request)
        .await
        .map_err(|_| {
            Error::Unexpected(format!(
                "GET {path} on {addr}: no answer within {HTTP_TIMEOUT:?}"
            ))
        })?
}

/// Accepts every certificate, checking only that the handshake is signed by its key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
