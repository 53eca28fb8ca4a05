//! A TCP proxy in front of the API server that can cut the connection the way a network
//! partition does.
//!
//! The client's and the agent's tests check what a member does when it loses the API server (it
//! must stop calling itself leader in time) and when it gets it back. Closing sockets would be
//! too kind (the client sees an error at once); a partition leaves them open and silent.

use std::net::SocketAddr;

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

use crate::{Error, Result, control_plane};

/// The proxy: while cut, open connections stop carrying bytes but stay open, and new ones are
/// accepted and then left hanging. [`Proxy::heal`] closes the hung ones and forwards again.
/// Reach the API server through it by replacing [`crate::ControlPlane::server_url`] with
/// `https://<addr>` (the certificate covers 127.0.0.1, so TLS passes through untouched).
pub struct Proxy {
    /// Where it listens (127.0.0.1, a free port).
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// A proxy forwarding to `upstream`, not cut.
    pub async fn start(upstream: SocketAddr) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(Error::io("binding the proxy's port"))?;
        let addr = listener
            .local_addr()
            .map_err(Error::io("reading the proxy's address"))?;
        let (cut, cut_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, cut_rx.clone()));
            }
        });
        Ok(Proxy { addr, cut, task })
    }

    /// Cuts every connection, open or new.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Closes the hung connections and forwards new ones again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        // Releases the hung connections.
        self.cut.send_replace(false);
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    if *cut.borrow_and_update() {
        // Accepted while cut: hang (a SYN answered, nothing else), close once healed.
        let _ = cut.wait_for(|c| !*c).await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let mut until_cut = cut.clone();
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
        _ = until_cut.wait_for(|c| *c) => {}
    }
    // Both sockets stay open and silent until healed.
    let _ = cut.wait_for(|c| !*c).await;
}

/// The address of the test control plane's API server, for [`Proxy::start`].
pub async fn api_server_addr() -> Result<SocketAddr> {
    let url = control_plane().await?.server_url();
    url.trim_start_matches("https://")
        .parse()
        .map_err(|e| Error::Unexpected(format!("the API server's URL {url}: {e}")))
}
