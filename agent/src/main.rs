#![doc = include_str!("../README.md")]

mod error;
mod files;
mod http;
mod on_change;
mod proxy;
mod state;

use std::{
    path::PathBuf,
    process::ExitCode,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use clap::{Parser, ValueEnum};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use leadergroup_client::{
    GROUP_ENV, Membership, POD_NAME_ENV, POD_NAMESPACE_ENV, POD_UID_ENV, Publication, Role,
};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::{mpsc, oneshot, watch},
};
use tracing::{error, info, warn};

use crate::{
    error::StartupError,
    files::RoleFiles,
    on_change::OnChange,
    proxy::{Proxy, Route},
    state::Published,
};

/// How long the shutdown waits for the last `--on-change` runs and the open requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Parser, Debug)]
#[command(
    name = "leadergroup-agent",
    version,
    about = "Publishes this pod's LeaderGroup role as files and on a localhost HTTP endpoint"
)]
struct Cli {
    /// This pod's name (downward API: metadata.name).
    #[arg(long, env = POD_NAME_ENV)]
    pod_name: Option<String>,
    /// This pod's namespace (downward API: metadata.namespace).
    #[arg(long, env = POD_NAMESPACE_ENV)]
    pod_namespace: Option<String>,
    /// This pod's UID (downward API: metadata.uid); without it, the first incarnation of the
    /// pod seen. A pod created again under the name is never led for by this process.
    #[arg(long, env = POD_UID_ENV)]
    pod_uid: Option<String>,
    /// The LeaderGroup's name; without it, the pod's leadergroup.io/group annotation names it.
    #[arg(long, env = GROUP_ENV)]
    group: Option<String>,
    /// Folder of the files `role` and `epoch` (an emptyDir shared with the application).
    #[arg(long, env = "LEADERGROUP_DIR", default_value = "/var/run/leadergroup")]
    dir: PathBuf,
    /// Address of GET /role and /healthz; keep it on localhost (port 0: any free port, logged).
    #[arg(long, env = "LEADERGROUP_HTTP_ADDR", default_value = "127.0.0.1:8686")]
    http_addr: String,
    /// Shell command run (by /bin/sh -c) on each change of role, one at a time, in order, with
    /// LEADERGROUP_ROLE, LEADERGROUP_EPOCH and LEADERGROUP_VALID_UNTIL in its environment; a
    /// failure is only logged.
    #[arg(long, env = "LEADERGROUP_ON_CHANGE")]
    on_change: Option<String>,
    /// A TCP proxy to the application that serves only while this pod leads, LISTEN=TARGET
    /// (e.g. 0.0.0.0:8080=127.0.0.1:8081); repeatable (or comma-separated in the variable). Every
    /// connection it carries is reset the moment the role leaves the term it was accepted in.
    #[arg(long = "proxy", env = "LEADERGROUP_PROXY", value_delimiter = ',')]
    proxies: Vec<Route>,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Kubeconfig file; without it, the in-cluster configuration (the pod's ServiceAccount).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum LogFormat {
    Text,
    Json,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Held to the end: dropping it writes out the lines still queued.
    let _log = leadergroup_client::log::init(
        matches!(cli.log_format, LogFormat::Json),
        leadergroup_client::log::DEFAULT_FILTER,
    );
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "leadergroup-agent failed");
            eprintln!("leadergroup-agent: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The value of a setting that must be given, by flag or environment.
fn required(
    value: Option<String>,
    env: &'static str,
    flag: &'static str,
    field: &'static str,
) -> Result<String, StartupError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or(StartupError::Missing { env, flag, field })
}

async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, StartupError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| StartupError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| StartupError::Config(format!("{}: {e}", path.display())))?
        }
        None => Config::incluster().map_err(|e| StartupError::Config(e.to_string()))?,
    };
    Client::try_from(config).map_err(StartupError::Client)
}

async fn run(cli: Cli) -> Result<(), StartupError> {
    let pod = required(cli.pod_name, POD_NAME_ENV, "--pod-name", "metadata.name")?;
    let namespace = required(
        cli.pod_namespace,
        POD_NAMESPACE_ENV,
        "--pod-namespace",
        "metadata.namespace",
    )?;
    let group = cli.group.filter(|g| !g.is_empty());
    let dir_error = |source| StartupError::Dir {
        dir: cli.dir.clone(),
        source,
    };
    // Unknown is on disk before anything else: a file left by a previous run must not stand.
    let files = RoleFiles::create(cli.dir.clone()).map_err(dir_error)?;
    files.write(Role::Unknown, None).map_err(dir_error)?;

    let http_error = |source| StartupError::Http {
        addr: cli.http_addr.clone(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(&cli.http_addr)
        .await
        .map_err(http_error)?;
    let addr = listener.local_addr().map_err(http_error)?;
    let mut proxies = Vec::with_capacity(cli.proxies.len());
    for route in &cli.proxies {
        let proxy = Proxy::bind(route)
            .await
            .map_err(|source| StartupError::Proxy {
                listen: route.listen.clone(),
                source,
            })?;
        proxies.push(proxy);
    }
    let client = client(cli.kubeconfig.as_deref()).await?;
    let mut terminate = signal(SignalKind::terminate()).map_err(StartupError::Signal)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(StartupError::Signal)?;

    let incarnation = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default();
    let (states, states_rx) = watch::channel(Published::initial(incarnation));
    let (stop_http, mut http_stopped) = watch::channel(false);
    let mut server = tokio::spawn(http::serve(listener, http::router(states_rx), async move {
        let _ = http_stopped.wait_for(|stop| *stop).await;
    }));
    info!(%addr, "serving GET /role and /healthz");

    let on_change = cli.on_change.map(OnChange::start);
    let uid = cli.pod_uid.filter(|u| !u.is_empty());
    // Gated: deposed, it says it stepped down only once its files say so and its command ran.
    let membership = Membership::start_gated(client, &namespace, &pod, uid, group.clone());
    let acted = ActedInOrder::start(membership.acted_on());
    // Dropped at the end of this function, which closes every proxied connection (the role is
    // already unknown by then: dropping `membership` publishes it, and the proxies reset theirs).
    let mut serving = tokio::task::JoinSet::new();
    for proxy in proxies {
        proxy::announce(&proxy);
        serving.spawn(proxy.serve(membership.subscribe()));
    }
    info!(%pod, %namespace, group = group.as_deref().unwrap_or("(from the pod's annotation)"), dir = %files.dir().display(), "started");

    let mut publisher = Publisher {
        files,
        on_disk: Some((Role::Unknown, None)),
        states,
        on_change,
    };
    let mut publications = membership.publications();
    let outcome = loop {
        let publication = *publications.borrow_and_update();
        if let Some(done) = publisher.publish(publication).await {
            acted.after(publication.seq, done);
        }
        tokio::select! {
            changed = publications.changed() => {
                // The sender lives in `membership`, alive until the end of this function.
                if changed.is_err() {
                    break Ok(());
                }
            }
            _ = terminate.recv() => break Ok(()),
            _ = interrupt.recv() => break Ok(()),
            served = &mut server => {
                break Err(match served {
                    Ok(Err(source)) => http_error(source),
                    Ok(Ok(())) | Err(_) => http_error(std::io::Error::other("the HTTP server stopped")),
                });
            }
        }
    };

    // Stopping: nothing is confirmed any more, so Unknown everywhere; then the long polls end
    // (the state's sender is dropped) and the last command runs finish, within a grace period.
    info!("stopping: publishing unknown");
    drop(membership);
    publisher.publish(Publication::initial()).await;
    let on_change = publisher.on_change.take();
    drop(publisher);
    if let Some(on_change) = on_change
        && tokio::time::timeout(SHUTDOWN_GRACE, on_change.finish())
            .await
            .is_err()
    {
        warn!("the on-change command did not finish within {SHUTDOWN_GRACE:?}");
    }
    let _ = stop_http.send(true);
    if !server.is_finished()
        && tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
            .await
            .is_err()
    {
        warn!("open HTTP requests did not finish within {SHUTDOWN_GRACE:?}");
    }
    outcome
}

/// Where the agent publishes: its files, its endpoint's state, its command.
struct Publisher {
    files: RoleFiles,
    /// What the files hold, when known to be written.
    on_disk: Option<(Role, Option<tokio::time::Instant>)>,
    states: watch::Sender<Published>,
    on_change: Option<OnChange>,
}

impl Publisher {
    /// Publishes `publication`: the files first, then the endpoint's state (so a long poll that
    /// returns finds the files already written), then, on a change of role, the command. When
    /// the files hold it: a receiver that hears when the command has run (at once without one,
    /// or when the role did not change), for the step-down gate; `None` when they do not.
    async fn publish(&mut self, publication: Publication) -> Option<oneshot::Receiver<()>> {
        let Publication {
            role, valid_until, ..
        } = publication;
        let valid_until = valid_until.filter(|_| role.is_leader());
        let valid_until_ms = valid_until.map(state::unix_ms);
        let written = self.on_disk == Some((role, valid_until))
            || {
                let writer = self.files.clone();
                let extend = self.on_disk.is_some_and(|(held, _)| held == role);
                let written = tokio::task::spawn_blocking(move || match (extend, valid_until_ms) {
                    (true, Some(ms)) => writer.extend(ms),
                    _ => writer.write(role, valid_until_ms),
                })
                .await;
                match written {
                    Ok(Ok(())) => {
                        self.on_disk = Some((role, valid_until));
                        true
                    }
                    Ok(Err(e)) => {
                        error!(%role, error = %e, dir = %self.files.dir().display(), "cannot write the role files: a step-down waits until they are written");
                        self.on_disk = None;
                        false
                    }
                    Err(e) => {
                        error!(%role, error = %e, "the role file writer failed: a step-down waits until the files are written");
                        self.on_disk = None;
                        false
                    }
                }
            };
        let role_changed = self.states.borrow().role != role;
        let mut version = String::new();
        self.states.send_if_modified(|s| {
            let changed = s.update(role, valid_until);
            version = s.version();
            changed
        });
        if role_changed {
            info!(%role, %version, "role changed");
        }
        let ran = match &self.on_change {
            Some(on_change) if role_changed => on_change.changed(role, valid_until_ms),
            _ => {
                let (done, ran) = oneshot::channel();
                let _ = done.send(());
                ran
            }
        };
        written.then_some(ran)
    }
}

/// Tells the member, in order, each publication the agent has acted on: its files written and
/// its command run.
struct ActedInOrder(mpsc::UnboundedSender<(u64, oneshot::Receiver<()>)>);

impl ActedInOrder {
    fn start(acted_on: leadergroup_client::ActedOn) -> ActedInOrder {
        let (queue, mut publications) = mpsc::unbounded_channel::<(u64, oneshot::Receiver<()>)>();
        tokio::spawn(async move {
            while let Some((seq, ran)) = publications.recv().await {
                // A runner gone (shutdown) ran nothing more: the publication is not acted on.
                if ran.await.is_ok() {
                    acted_on.publication(seq).await;
                }
            }
        });
        ActedInOrder(queue)
    }

    fn after(&self, seq: u64, ran: oneshot::Receiver<()>) {
        // Fails only once the task is gone, at shutdown.
        let _ = self.0.send((seq, ran));
    }
}
