//! The ledger writer: a singleton that appends entries to a PostgreSQL table, and only while its
//! pod leads its LeaderGroup. The example application of `leadergroup-client` (docs/fencing.md,
//! "The example: a ledger writer").
//!
//! - The role comes from [`Membership`] (env `POD_NAME`, `POD_NAMESPACE`, `LEADERGROUP_GROUP`),
//!   or, with `--role-from DIR`, from a downward API volume (no RBAC, slower: see
//!   `examples/ledger/manifests/downward-api/`).
//! - While `Leader { epoch }`, every `--interval-ms` it appends one row, in a transaction that
//!   first raises the group's fence row ([`sql::fence`]): a stale epoch is refused by PostgreSQL,
//!   logged with both epochs and counted, and the writer stops until it leads again.
//! - It stops writing as soon as [`Membership::leader_context`] resolves.
//! - HTTP (`--http-addr`): `/` answers the pod's name (for a Service that selects the leader),
//!   `/stats` the counts as JSON.
//!
//! Stdout carries one line per event, `ledger: <event> key=value...`, for people and for the
//! GC-pause test, which parses them (`wrote`, `refused`, `role`, `stopped`, `resumed`); the
//! diagnostics go to stderr (`RUST_LOG`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod downward;

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use clap::Parser;
use leadergroup_client::{
    Epoch, Membership, Role,
    fence::{
        self,
        sql::{self, SqlFenceError},
    },
    role::DEFAULT_LEASE_DURATION,
};
use tokio::{sync::watch, time::Instant};
use tokio_postgres::NoTls;

#[derive(Parser, Debug)]
#[command(about = "A singleton ledger writer, fenced by its LeaderGroup's epoch")]
struct Args {
    /// PostgreSQL, as a URL or key=value pairs.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The pod's name (downward API `metadata.name`).
    #[arg(long, env = "POD_NAME")]
    pod_name: String,
    /// The pod's namespace (downward API `metadata.namespace`).
    #[arg(long, env = "POD_NAMESPACE")]
    pod_namespace: String,
    /// The pod's UID (downward API `metadata.uid`): a pod created again under the name is
    /// another member's.
    #[arg(long, env = "POD_UID")]
    pod_uid: Option<String>,
    /// The LeaderGroup; also the name of its fence row.
    #[arg(long, env = "LEADERGROUP_GROUP")]
    group: String,
    /// Time between two entries while leading.
    #[arg(long, env = "LEDGER_INTERVAL_MS", default_value_t = 200)]
    interval_ms: u64,
    /// Serves `/` (the pod's name) and `/stats`.
    #[arg(long, env = "HTTP_ADDR", default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Read the role from a downward API volume (files `labels` and `annotations`) instead of
    /// the API server: no RBAC, but no confirmation either (never `Unknown`), and as late as the
    /// kubelet refreshes the files.
    #[arg(long, env = "LEDGER_ROLE_FROM")]
    role_from: Option<PathBuf>,
    /// For the GC-pause scenario: when the process finds it was frozen (a tick late by more than
    /// a second), it first completes the write it had checked before the freeze, with the epoch it
    /// held then, without looking at its role again. This is what a write caught by a GC pause
    /// between its role check and its commit does; only the fence can refuse it.
    #[arg(long, env = "LEDGER_WRITE_THROUGH_PAUSE")]
    write_through_pause: bool,
}

/// A tick this late means the process was not running (stopped, or a very long pause).
const PAUSE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Counts {
    written: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

/// One stdout line per event (flushed at once: the test reads them as they come).
macro_rules! event {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ledger: {}", format_args!($($arg)*));
        let _ = out.flush();
    }};
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let args = Args::parse();
    let counts = Arc::new(Counts::default());

    let http = serve_http(args.http_addr, args.pod_name.clone(), Arc::clone(&counts));
    let mut db = Db::new(args.database_url.clone());
    while let Err(e) = db.ensure_schema().await {
        tracing::warn!("PostgreSQL not ready: {e}; retrying");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Either source publishes a watch of Role; the writer does not care which.
    let (roles, membership) = match &args.role_from {
        Some(dir) => (downward::follow(dir.clone()), None),
        None => {
            let client = kube::Client::try_default().await.expect("kubeconfig");
            let m = Membership::start_for_uid(
                client,
                &args.pod_namespace,
                &args.pod_name,
                args.pod_uid.clone(),
                Some(args.group.clone()),
            );
            (m.subscribe(), Some(m))
        }
    };
    // SIGTERM is how the kubelet stops a container: as PID 1 the process would ignore it (no
    // default action there) and wait out the pod's whole grace period.
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
    event!("started pod={} group={}", args.pod_name, args.group);
    tokio::select! {
        () = write_while_leading(&args, roles, membership.as_ref(), &mut db, &counts) => {}
        r = http => tracing::error!("HTTP server stopped: {r:?}"),
        _ = tokio::signal::ctrl_c() => event!("exiting"),
        _ = terminate.recv() => event!("exiting (SIGTERM)"),
    }
}

/// Waits to lead, writes every interval until leadership is lost or a write is refused, and
/// again.
async fn write_while_leading(
    args: &Args,
    mut roles: watch::Receiver<Role>,
    membership: Option<&Membership>,
    db: &mut Db,
    counts: &Counts,
) {
    // The downward API shows no Lease: its duration is taken as the default.
    let deadline = || {
        membership.map_or(
            fence::write_deadline(DEFAULT_LEASE_DURATION),
            Membership::write_deadline,
        )
    };
    let interval = Duration::from_millis(args.interval_ms);
    // The highest epoch the fence refused: that token is dead even while this pod's role, not yet
    // caught up, still reports it. Without this the writer would retry it in a tight loop until
    // its watch shows the successor (seen on the real cluster: up to 23 refusals in 56 ms).
    let mut refused: Option<Epoch> = None;
    loop {
        let epoch = loop {
            let role = *roles.borrow_and_update();
            event!("role pod={} role={}", args.pod_name, compact(role));
            if let Some(epoch) = role.leader_epoch()
                && refused.is_none_or(|dead| epoch > dead)
            {
                break epoch;
            }
            if roles.changed().await.is_err() {
                return;
            }
        };
        // The leader's context: resolves when the role is no longer Leader at this epoch.
        let mut lost = std::pin::pin!(lost(roles.clone(), epoch));
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = Instant::now();
        loop {
            let lost_now = tokio::select! {
                biased;
                role = &mut lost => Some(role),
                _ = ticker.tick() => None,
            };
            let late = last.elapsed();
            last = Instant::now();
            if late > PAUSE + interval && args.write_through_pause {
                // A write checked before the freeze: it goes out with the epoch held then.
                event!(
                    "resumed pod={} paused_ms={} epoch={epoch} (writing without a new role check)",
                    args.pod_name,
                    late.as_millis()
                );
                if !append(args, db, epoch, deadline(), counts).await {
                    refused = Some(epoch);
                    break;
                }
            }
            if let Some(role) = lost_now {
                event!(
                    "stopped pod={} epoch={epoch} role={} (leadership lost: no more writes)",
                    args.pod_name,
                    compact(role)
                );
                break;
            }
            if !append(args, db, epoch, deadline(), counts).await {
                refused = Some(epoch);
                break;
            }
        }
    }
}

/// `Membership::leader_context` for any source of roles.
async fn lost(mut roles: watch::Receiver<Role>, epoch: Epoch) -> Role {
    loop {
        let now = *roles.borrow_and_update();
        if now != (Role::Leader { epoch }) {
            return now;
        }
        if roles.changed().await.is_err() {
            return Role::Unknown;
        }
    }
}

/// The role as one word for the event lines: `leader/4`, `follower`, `unknown`.
fn compact(role: Role) -> String {
    match role {
        Role::Leader { epoch } => format!("leader/{epoch}"),
        Role::Follower => "follower".to_owned(),
        Role::Unknown => "unknown".to_owned(),
    }
}

/// Appends one entry with `epoch`; false when the writer must stop leading (refused as stale).
async fn append(
    args: &Args,
    db: &mut Db,
    epoch: Epoch,
    deadline: Duration,
    counts: &Counts,
) -> bool {
    match db
        .append(&args.group, &args.pod_name, epoch, deadline)
        .await
    {
        Ok(id) => {
            counts.written.fetch_add(1, Ordering::Relaxed);
            event!("wrote pod={} id={id} epoch={epoch}", args.pod_name);
            true
        }
        Err(AppendError::Fence(e)) if e.stale().is_some() => {
            let stale = e.stale().expect("checked");
            counts.refused.fetch_add(1, Ordering::Relaxed);
            event!(
                "refused pod={} epoch={} fence={} (stale token: epoch {} < fence {})",
                args.pod_name,
                stale.presented,
                stale.highest,
                stale.presented,
                stale.highest
            );
            false
        }
        Err(e) => {
            // The database failed (connection lost, killed session): not a refusal, try again.
            counts.failed.fetch_add(1, Ordering::Relaxed);
            event!("failed pod={} epoch={epoch} error={e:?}", args.pod_name);
            true
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum AppendError {
    #[error(transparent)]
    Fence(#[from] SqlFenceError),
    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),
}

/// A connection, opened again when it was lost.
struct Db {
    url: String,
    client: Option<tokio_postgres::Client>,
}

impl Db {
    fn new(url: String) -> Db {
        Db { url, client: None }
    }

    async fn client(&mut self) -> Result<&mut tokio_postgres::Client, tokio_postgres::Error> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await?;
            tokio::spawn(connection);
            // A writer frozen inside a transaction would hold the fence row and block its
            // successor: PostgreSQL ends such a session after a second.
            client
                .batch_execute("SET idle_in_transaction_session_timeout = '1s'")
                .await?;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("just connected"))
    }

    /// The fence table and the ledger, created once whichever writer starts first.
    async fn ensure_schema(&mut self) -> Result<(), tokio_postgres::Error> {
        let client = self.client().await?;
        let tx = client.transaction().await?;
        // Concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog: one at a time.
        tx.batch_execute("SELECT pg_advisory_xact_lock(7355608)")
            .await?;
        sql::ensure_schema(&tx).await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS ledger (
                id     bigserial   PRIMARY KEY,
                epoch  bigint      NOT NULL,
                writer text        NOT NULL,
                at     timestamptz NOT NULL DEFAULT clock_timestamp(),
                entry  text        NOT NULL
            )",
        )
        .await?;
        tx.commit().await
    }

    /// One fenced entry: the fence first, then the row, in one transaction. The fence row stays
    /// locked until the commit, so ids are in commit order among fenced writes.
    async fn append(
        &mut self,
        group: &str,
        writer: &str,
        epoch: Epoch,
        deadline: Duration,
    ) -> Result<i64, AppendError> {
        let client = self.client().await?;
        let tx = client.transaction().await?;
        if let Err(e) = sql::fence(&tx, group, epoch, deadline).await {
            drop(tx);
            if matches!(e, SqlFenceError::Deadline { .. }) {
                // The statement may still wait on the server, and the connection behind it.
                self.client = None;
            }
            return Err(e.into());
        }
        let id: i64 = tx
            .query_one(
                "INSERT INTO ledger (epoch, writer, entry) VALUES ($1, $2, $3) RETURNING id",
                &[
                    &epoch.get(),
                    &writer,
                    &format!("entry of {writer} at epoch {epoch}"),
                ],
            )
            .await?
            .get(0);
        tx.commit().await?;
        Ok(id)
    }
}

async fn serve_http(
    addr: SocketAddr,
    pod: String,
    counts: Arc<Counts>,
) -> Result<(), std::io::Error> {
    use axum::{Router, routing::get};
    let stats = move || {
        let c = Arc::clone(&counts);
        async move {
            format!(
                "{{\"written\":{},\"refused\":{},\"failed\":{}}}\n",
                c.written.load(Ordering::Relaxed),
                c.refused.load(Ordering::Relaxed),
                c.failed.load(Ordering::Relaxed)
            )
        }
    };
    let app = Router::new()
        .route("/", get(move || async move { format!("{pod}\n") }))
        .route("/stats", get(stats));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}
