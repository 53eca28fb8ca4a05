//! A TCP proxy in front of the API server that can cut the connection the way a network
//! partition does.
//!
//! The client's and the agent's tests check what a member does when it loses the API server (it
//! must stop calling itself leader in time) and when it gets it back. Closing sockets would be
//! too kind (the client sees an error at once); a partition leaves them open and silent.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::watch,
    task::JoinHandle,
    time::Instant,
};

use crate::{Error, Result, control_plane};

/// The proxy: while cut, open connections stop carrying bytes but stay open, and new ones are
/// accepted and then left hanging. [`Proxy::heal`] closes the hung ones and forwards again;
/// [`Proxy::release`] delivers what they held instead, late, the way a stuck connection (or a
/// process paused after sending) delivers a request after everyone has moved on.
/// Reach the API server through it by replacing [`crate::ControlPlane::server_url`] with
/// `https://<addr>` (the certificate covers 127.0.0.1, so TLS passes through untouched).
pub struct Proxy {
    /// Where it listens (127.0.0.1, a free port).
    pub addr: SocketAddr,
    link: watch::Sender<Link>,
    task: JoinHandle<()>,
}

/// The state of every connection through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Link {
    /// Bytes are held, not forwarded.
    cut: bool,
    /// How many times it was healed: a connection open at a heal is closed.
    heals: u64,
    /// How many times it was stalled: a connection open at a stall carries no byte again.
    stalls: u64,
    /// How many times the clients' side was reset: a connection open at a reset is closed
    /// towards its client, while the API server's side stays open and is served to the end.
    resets: u64,
    /// How late the API server's bytes reach the client (each chunk this long after it came).
    lag: Duration,
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
        let (link, link_rx) = watch::channel(Link {
            cut: false,
            heals: 0,
            stalls: 0,
            resets: 0,
            lag: Duration::ZERO,
        });
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, link_rx.clone()));
            }
        });
        Ok(Proxy { addr, link, task })
    }

    /// Cuts every connection, open or new: what they carry is held.
    pub fn cut(&self) {
        self.link.send_modify(|l| l.cut = true);
    }

    /// Closes the hung connections (what they held is lost) and forwards new ones again.
    pub fn heal(&self) {
        self.link.send_modify(|l| {
            l.cut = false;
            l.heals += 1;
        });
    }

    /// Stalls every open connection for good (it stays open and carries no byte, until
    /// [`Proxy::heal`] closes it), while new ones are forwarded: a half-open connection, such as
    /// a watch whose peer vanished without a FIN, beside requests that get through.
    pub fn stall(&self) {
        self.link.send_modify(|l| l.stalls += 1);
    }

    /// Closes every open connection towards its client, which sees its requests in flight fail,
    /// while the API server's side stays open: what it was serving goes on to its end (its answer
    /// is dropped), as a request whose outcome the client cannot know. New connections are
    /// forwarded.
    pub fn reset_clients(&self) {
        self.link.send_modify(|l| l.resets += 1);
    }

    /// Delivers every byte from the API server `lag` after it came, on open connections and new
    /// ones, in order (a lagging watch: each event arrives late, none is lost); zero ends it.
    pub fn lag(&self, lag: Duration) {
        self.link.send_modify(|l| l.lag = lag);
    }

    /// Delivers what the hung connections held, late, and forwards again.
    pub fn release(&self) {
        self.link.send_modify(|l| l.cut = false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The relays end when the sender goes (see `closed`).
        self.task.abort();
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, link: watch::Receiver<Link>) {
    let Link {
        heals,
        stalls,
        resets,
        ..
    } = *link.borrow();
    let forward = async {
        // Accepted while cut: hangs (a SYN answered, nothing else) until released.
        let mut up = link.clone();
        if up.wait_for(|l| !l.cut).await.is_err() {
            return;
        }
        let Ok(server) = TcpStream::connect(upstream).await else {
            return;
        };
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        // The request side ending (the client gave up and closed) neither ends the response side
        // nor closes the server's socket (the write halves live as long as the relay): a request
        // released late still reaches the server whole and is served, as through a stuck
        // middlebox, instead of being cancelled by the client's departure. The response side
        // ending (the server closed, or went away) closes both: the client must see it, or it
        // would send its next request into a dead connection.
        let requests = async {
            pump(&mut client_read, &mut server_write, link.clone(), stalls).await;
            std::future::pending::<()>().await;
        };
        let reset = tokio::select! {
            () = requests => false,
            () = pump_late(&mut server_read, &mut client_write, link.clone(), stalls) => false,
            () = client_reset(link.clone(), resets) => true,
        };
        if reset {
            // The client's socket closes here; the server's stays open until it has answered
            // what it was serving (the answer goes nowhere), so that it does not cancel it.
            drop((client_read, client_write));
            let _ = tokio::io::copy(&mut server_read, &mut tokio::io::sink()).await;
        }
    };
    tokio::select! {
        () = forward => {}
        () = closed(link.clone(), heals) => {}
    }
}

/// Resolves when the connections open since `resets` must close towards their clients.
async fn client_reset(mut link: watch::Receiver<Link>, resets: u64) {
    let _ = link.wait_for(|l| l.resets != resets).await;
}

/// Copies `from` to `to`, holding each chunk while the link is cut, and for good once it was
/// stalled after this connection opened (`stalls`: the count then).
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
    stalls: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let flowing = link
            .wait_for(|l| !l.cut && l.stalls == stalls)
            .await
            .is_ok();
        if !flowing || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// [`pump`] for the API server's bytes, each delivered the link's lag after it came: a reader
/// stamps the chunks, a writer holds each until its time.
async fn pump_late(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
    stalls: u64,
) {
    let (chunks, mut late) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if chunks.send((Instant::now(), buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let write = async move {
        while let Some((came, chunk)) = late.recv().await {
            let lag = link.borrow().lag;
            tokio::time::sleep_until(came + lag).await;
            let flowing = link
                .wait_for(|l| !l.cut && l.stalls == stalls)
                .await
                .is_ok();
            if !flowing || to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    // The writer ends once the reader has ended (its sender dropped) and every chunk is out, or
    // once the client is gone: the reader ends with it.
    let read = async move {
        read.await;
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = write => {}
        () = read => {}
    }
}

/// Resolves when the connection must close: the link was healed since `heals`, or the proxy
/// is gone.
async fn closed(mut link: watch::Receiver<Link>, heals: u64) {
    let _ = link.wait_for(|l| l.heals != heals).await;
}

/// The address of the test control plane's API server, for [`Proxy::start`].
pub async fn api_server_addr() -> Result<SocketAddr> {
    let url = control_plane().await?.server_url();
    url.trim_start_matches("https://")
        .parse()
        .map_err(|e| Error::Unexpected(format!("the API server's URL {url}: {e}")))
}
