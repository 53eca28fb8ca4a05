//! `--proxy LISTEN=TARGET`: a TCP proxy in front of the application that serves only while this
//! pod leads. A connection is accepted in a term (the leader's epoch); the moment the role is no
//! longer that term (follower, unknown, another epoch, or the agent stopping) the proxy resets
//! it, so that nothing the application answers afterwards reaches a client. An application that
//! cannot check its role gets "no request served by a deposed leader" at the connection level.

use std::{io, str::FromStr, time::Duration};

use leadergroup_client::{Epoch, Role};
use tokio::{
    io::copy_bidirectional,
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
};
use tracing::{debug, info, warn};

/// How long the accept loop pauses after a failed accept (out of file descriptors, typically),
/// so that it does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// One `--proxy LISTEN=TARGET`: where clients connect, and the application's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The address the proxy listens on (what the Service's targetPort names).
    pub listen: String,
    /// The application's address, usually on localhost.
    pub target: String,
}

/// A `--proxy` value that is not `LISTEN=TARGET`.
#[derive(Debug, thiserror::Error)]
#[error("expected LISTEN=TARGET (e.g. 0.0.0.0:8080=127.0.0.1:8081), got {0:?}")]
pub struct RouteError(String);

impl FromStr for Route {
    type Err = RouteError;

    fn from_str(s: &str) -> Result<Route, RouteError> {
        match s.split_once('=') {
            Some((listen, target)) if !listen.is_empty() && !target.is_empty() => Ok(Route {
                listen: listen.to_owned(),
                target: target.to_owned(),
            }),
            _ => Err(RouteError(s.to_owned())),
        }
    }
}

/// A bound proxy, not yet serving.
pub struct Proxy {
    listener: TcpListener,
    target: String,
}

impl Proxy {
    /// Binds `route.listen` (at start, so that a taken port stops the agent with a message).
    pub async fn bind(route: &Route) -> io::Result<Proxy> {
        Ok(Proxy {
            listener: TcpListener::bind(&route.listen).await?,
            target: route.target.clone(),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until dropped: a connection that arrives while `roles` is not [`Role::Leader`] is
    /// reset at once; one that arrives in a term is carried to the target until either side
    /// closes or the term ends. Dropping the future drops (and so closes) every connection.
    pub async fn serve(self, roles: watch::Receiver<Role>) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((client, peer)) => {
                        let term = roles.borrow().leader_epoch();
                        match term {
                            Some(term) => {
                                debug!(%peer, %term, "proxy: connection accepted");
                                connections.spawn(carry(client, self.target.clone(), roles.clone(), term));
                            }
                            None => {
                                debug!(%peer, "proxy: connection reset, not leading");
                                reset(&client);
                            }
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "proxy: accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                // Reaps finished connections so that the set does not grow with them.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    }
}

/// Carries `client` to `target` while the role is the leader of `term`; resets `client` when
/// the term ends first.
async fn carry(
    mut client: TcpStream,
    target: String,
    mut roles: watch::Receiver<Role>,
    term: Epoch,
) {
    let forward = async {
        let mut upstream = TcpStream::connect(&target).await?;
        let _ = upstream.set_nodelay(true);
        let _ = client.set_nodelay(true);
        copy_bidirectional(&mut client, &mut upstream).await
    };
    let outcome = tokio::select! {
        // Checked first: when the term has ended, bytes ready to forward are not forwarded.
        biased;
        _ = roles.wait_for(|role| role.leader_epoch() != Some(term)) => None,
        copied = forward => Some(copied),
    };
    match outcome {
        // The upstream side was dropped with `forward`; the client's side is reset, which also
        // discards what the kernel still held to send it.
        None => {
            debug!(%term, "proxy: connection reset, the term ended");
            reset(&client);
        }
        Some(Ok((sent, received))) => debug!(%term, sent, received, "proxy: connection closed"),
        Some(Err(e)) => {
            debug!(%term, %target, error = %e, "proxy: connection failed");
            reset(&client);
        }
    }
}

/// Makes the coming close of `stream` a reset (RST): the peer sees the connection fail at once,
/// and data not yet sent is discarded rather than delivered.
fn reset(stream: &TcpStream) {
    if let Err(e) = stream.set_zero_linger() {
        debug!(error = %e, "proxy: cannot set SO_LINGER 0; the connection closes with a FIN");
    }
}

/// Logs where a bound proxy listens and forwards.
pub fn announce(proxy: &Proxy) {
    match proxy.local_addr() {
        Ok(addr) => info!(listen = %addr, target = %proxy.target, "proxy: serving while leader"),
        Err(e) => warn!(error = %e, target = %proxy.target, "proxy: bound, address unknown"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::{net::SocketAddr, time::Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn a_route_is_listen_equals_target() {
        assert_eq!(
            "0.0.0.0:8080=127.0.0.1:8081".parse::<Route>().unwrap(),
            Route {
                listen: "0.0.0.0:8080".into(),
                target: "127.0.0.1:8081".into()
            }
        );
        for bad in ["", "0.0.0.0:8080", "=127.0.0.1:1", "0.0.0.0:1="] {
            assert!(bad.parse::<Route>().is_err(), "{bad:?} accepted");
        }
    }

    /// An echo server on a free localhost port.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let _ = stream.set_nodelay(true);
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// A proxy to `target` on a free localhost port, following `roles`.
    async fn proxy(target: SocketAddr, roles: watch::Receiver<Role>) -> SocketAddr {
        let proxy = Proxy::bind(&Route {
            listen: "127.0.0.1:0".into(),
            target: target.to_string(),
        })
        .await
        .unwrap();
        let addr = proxy.local_addr().unwrap();
        tokio::spawn(proxy.serve(roles));
        addr
    }

    fn leader(epoch: u32) -> Role {
        Role::Leader {
            epoch: Epoch::from(epoch),
        }
    }

    /// Sends `buf` and reads as many bytes back.
    async fn round_trip(stream: &mut TcpStream, buf: &mut [u8]) {
        stream.write_all(buf).await.unwrap();
        stream.read_exact(buf).await.unwrap();
    }

    /// The proxy's cost against a direct connection to the same echo server: the round-trip
    /// latency of a small message (p50, p99) and the throughput of a bulk transfer. A benchmark,
    /// not a test (it asserts nothing about speed): run it in a release build,
    /// `cargo test --release -p leadergroup-agent --bin leadergroup-agent proxy_cost -- --ignored --nocapture`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a benchmark: run on demand in a release build"]
    async fn proxy_cost() {
        const ROUND_TRIPS: usize = 20_000;
        const MESSAGE: usize = 64;
        const BULK: usize = 512 << 20;
        let target = echo().await;
        let (_roles, rx) = watch::channel(leader(1));
        let proxied = proxy(target, rx).await;
        for (name, addr) in [("direct", target), ("proxy", proxied)] {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut buf = [7u8; MESSAGE];
            for _ in 0..1_000 {
                round_trip(&mut stream, &mut buf).await;
            }
            let mut samples = Vec::with_capacity(ROUND_TRIPS);
            for _ in 0..ROUND_TRIPS {
                let started = Instant::now();
                round_trip(&mut stream, &mut buf).await;
                samples.push(started.elapsed());
            }
            samples.sort();
            let p50 = samples[ROUND_TRIPS / 2];
            let p99 = samples[ROUND_TRIPS * 99 / 100];

            // Bulk: one task writes BULK bytes, this one reads the echo back.
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut r, mut w) = stream.into_split();
            let started = Instant::now();
            let writer = tokio::spawn(async move {
                let chunk = vec![1u8; 64 << 10];
                for _ in 0..BULK / chunk.len() {
                    w.write_all(&chunk).await.unwrap();
                }
                w
            });
            let mut chunk = vec![0u8; 64 << 10];
            let mut read = 0;
            while read < BULK {
                read += r.read(&mut chunk).await.unwrap();
            }
            let elapsed = started.elapsed();
            drop(writer.await.unwrap());
            let mib_s = (BULK >> 20) as f64 / elapsed.as_secs_f64();
            println!(
                "{name:>6}: round trip of {MESSAGE} B p50 {:.1} µs p99 {:.1} µs ({ROUND_TRIPS} \
                 samples); echo of {} MiB at {mib_s:.0} MiB/s",
                p50.as_secs_f64() * 1e6,
                p99.as_secs_f64() * 1e6,
                BULK >> 20,
            );
        }
    }

    #[tokio::test]
    async fn serves_in_a_term_and_resets_when_it_ends() {
        let target = echo().await;
        let (roles, rx) = watch::channel(Role::Follower);
        let addr = proxy(target, rx).await;

        // Not leading: reset before a byte is read.
        let mut refused = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 4];
        let read = refused.read(&mut buf).await;
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

        roles.send_replace(leader(3));
        let mut served = TcpStream::connect(addr).await.unwrap();
        let mut buf = *b"ping";
        round_trip(&mut served, &mut buf).await;
        assert_eq!(&buf, b"ping");

        // A new term (another epoch) ends the connections of the old one.
        roles.send_replace(leader(4));
        let read = tokio::time::timeout(Duration::from_secs(5), served.read(&mut buf))
            .await
            .expect("the connection is closed when the term ends");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
