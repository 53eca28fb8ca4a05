//! The `leadergroup-operator` binary: `crd` prints the CRD; without a subcommand it runs the controller.

use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::coordination::v1::Lease;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector;
use kube::{Api, Client, Config, CustomResourceExt};
use tokio::sync::watch;
use tracing::{error, info};

use leadergroup_operator::StartupError;
use leadergroup_operator::controller::{self, Settings};
use leadergroup_operator::crd::LeaderGroup;
use leadergroup_operator::ha::{self, OperatorLease, Retired};
use leadergroup_operator::http::{self, Health};
use leadergroup_operator::metrics::Metrics;

/// jemalloc rather than glibc's malloc: the watch lists arrive in bursts from several threads,
/// and glibc's per-thread arenas keep the freed pages (at 1000 groups the resident set was 66 MiB
/// for a 38 MiB peak heap).
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The heap profiler instead (`--features dhat-heap`, for `make profile-heap`): every allocation
/// counted, and at the exit the heap at its peak written to `dhat-heap-<pid>.json`.
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

#[derive(Parser, Debug)]
#[command(
    name = "leadergroup-operator",
    version,
    about = "Elects exactly one Ready pod per LeaderGroup"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Kubeconfig file; without it, the in-cluster configuration, then ~/.kube/config.
    #[arg(long, env = "KUBECONFIG", global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// How many groups may be reconciled at the same time (at least 1).
    #[arg(long, env = "CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Address serving /healthz, /readyz and /metrics (/metrics not, with --metrics-secure-addr).
    #[arg(long, env = "HTTP_ADDR", default_value = "0.0.0.0:8080")]
    http_addr: String,
    /// Address serving /metrics over TLS, to the bearer of a token allowed to get the
    /// non-resource URL /metrics (checked with a TokenReview and a SubjectAccessReview); off when
    /// empty, and /metrics stays on --http-addr.
    #[arg(long, env = "METRICS_SECURE_ADDR")]
    metrics_secure_addr: Option<String>,
    /// Directory holding tls.crt and tls.key (a mounted kubernetes.io/tls Secret) for
    /// --metrics-secure-addr, read again when they change; without it, a self-signed
    /// certificate generated at start.
    #[arg(long, env = "METRICS_CERT_DIR", requires = "metrics_secure_addr")]
    metrics_cert_dir: Option<std::path::PathBuf>,
    /// Run as one of several replicas, of which one is active (through a Lease of its own).
    #[arg(long, env = "LEADER_ELECT")]
    leader_elect: bool,
    /// Namespace of the operator's own Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    leader_elect_namespace: String,
    /// Name of the operator's own Lease; never leadergroup-<x>, the Lease of the LeaderGroup <x>.
    #[arg(
        long,
        env = "LEADER_ELECT_LEASE_NAME",
        default_value = ha::DEFAULT_LEASE_NAME,
        value_parser = ha::parse_lease_name
    )]
    leader_elect_lease_name: String,
    /// The longest the operator's own Lease lasts, in seconds: it lasts as long as the shortest
    /// group Lease, never under 3 s nor over this, and is renewed every third of it.
    #[arg(long, env = "LEADER_ELECT_LEASE_DURATION", default_value_t = 15, value_parser = clap::value_parser!(i32).range(1..=3600))]
    leader_elect_lease_duration: i32,
    /// Export the per-group series (labeled with each group's namespace and name); false for
    /// clusters with very many groups, where they cost the most (docs/metrics.md).
    #[arg(long, env = "PER_GROUP_METRICS", default_value_t = true, action = clap::ArgAction::Set)]
    per_group_metrics: bool,
    /// The node controller's grace period in seconds (kube-controller-manager's
    /// --node-monitor-grace-period): a Readiness-mode group whose leader could outlive it says so
    /// in its status.
    #[arg(long, env = "NODE_MONITOR_GRACE_PERIOD", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    node_monitor_grace_period: u64,
    /// This replica's identity (default: the host name and process id).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the LeaderGroup CustomResourceDefinition as YAML.
    Crd,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum LogFormat {
    Text,
    Json,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat::Profiler::builder()
        .file_name(format!("dhat-heap-{}.json", std::process::id()))
        .build();
    let cli = Cli::parse();
    // Held to the end: dropping it writes out the lines still queued.
    let mut _log = None;
    let outcome = match cli.command {
        Some(Command::Crd) => print_crd(),
        None => {
            _log = Some(leadergroup_client::log::init(
                matches!(cli.log_format, LogFormat::Json),
                leadergroup_client::log::DEFAULT_FILTER,
            ));
            run(cli).await
        }
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "leadergroup-operator failed");
            eprintln!("leadergroup-operator: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn print_crd() -> Result<(), StartupError> {
    print!("{}", serde_yaml_ng::to_string(&LeaderGroup::crd())?);
    Ok(())
}

async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, StartupError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| StartupError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| StartupError::Config(format!("{}: {e}", path.display())))?
        }
        None => Config::infer()
            .await
            .map_err(|e| StartupError::Config(e.to_string()))?,
    };
    controller::configure_client(&mut config);
    Client::try_from(config).map_err(StartupError::Client)
}

async fn run(cli: Cli) -> Result<(), StartupError> {
    let client = client(cli.kubeconfig.as_deref()).await?;
    let identity = cli.identity.clone().unwrap_or_else(default_identity);
    let metrics = Arc::new(Metrics::new(cli.per_group_metrics));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (synced_tx, synced_rx) = watch::channel(false);
    let (active_tx, active_rx) = watch::channel(!cli.leader_elect);
    info!(%identity, namespace = cli.namespace.as_deref().unwrap_or("(all)"), leader_elect = cli.leader_elect, "starting");

    let health = Health {
        metrics: metrics.clone(),
        synced: synced_rx.clone(),
        active: cli.leader_elect.then(|| active_rx.clone()),
    };
    // Both addresses are bound, and the certificate read, before anything answers: a start
    // that cannot serve fails before its probes pass.
    let secure = match cli.metrics_secure_addr.as_deref().filter(|a| !a.is_empty()) {
        Some(addr) => Some(
            http::SecureMetrics::bind(addr, cli.metrics_cert_dir.as_deref(), client.clone())
                .await?,
        ),
        None => None,
    };
    let plain = http::bind(&cli.http_addr).await?;
    let http_addr = cli.http_addr.clone();
    let mut http_stop = stop_rx.clone();
    let http = tokio::spawn(async move {
        http::serve(plain, &http_addr, secure, health, async move {
            let _ = http_stop.wait_for(|s| *s).await;
        })
        .await
    });

    let retired = Retired::default();
    // The controller's cache of the groups, which the operator Lease takes its duration from.
    let (groups, groups_writer) = reflector::store();
    // The operator Lease is released only once the controller has finished its last reconcile:
    // a standby that took over earlier would act on groups this replica is still writing to.
    let (ha_stop_tx, ha_stop_rx) = watch::channel(false);
    let ha = cli.leader_elect.then(|| {
        let lease = OperatorLease {
            api: Api::<Lease>::namespaced(client.clone(), &cli.leader_elect_namespace),
            name: cli.leader_elect_lease_name.clone(),
            identity: identity.clone(),
            longest_seconds: cli.leader_elect_lease_duration,
            groups: groups.clone(),
            retired: retired.clone(),
        };
        tokio::spawn(lease.run(active_tx, synced_rx.clone(), ha_stop_rx))
    });

    let mut controller_stop = stop_rx.clone();
    let controller = tokio::spawn(controller::run(
        client,
        Settings {
            identity,
            namespace: cli.namespace.clone(),
            concurrency: cli.concurrency,
            retired,
            node_grace: std::time::Duration::from_secs(cli.node_monitor_grace_period),
        },
        metrics,
        groups_writer,
        active_rx,
        synced_tx,
        async move {
            let _ = controller_stop.wait_for(|s| *s).await;
        },
    ));

    tokio::select! {
        signal = shutdown_signal() => { signal?; info!("shutting down"); }
        served = http => {
            let _ = stop_tx.send(true);
            let _ = ha_stop_tx.send(true);
            return match served { Ok(r) => r, Err(e) => Err(StartupError::HttpTask(e)) };
        }
    }
    let _ = stop_tx.send(true);
    let _ = controller.await;
    let _ = ha_stop_tx.send(true);
    if let Some(ha) = ha {
        let _ = ha.await;
    }
    Ok(())
}

async fn shutdown_signal() -> Result<(), StartupError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(StartupError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(StartupError::Signal)?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "leadergroup-operator".into());
    format!("{host}-{}", std::process::id())
}
