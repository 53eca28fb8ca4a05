//! `kubectl leadergroup`: a kubectl plugin for LeaderGroups. kubectl runs it for
//! `kubectl leadergroup ...` when it is on the PATH; it reads the same kubeconfig.
//!
//! - `status [GROUP | -A] [-w] [-o text|json|yaml]`: leader, epoch, the succession, the Lease's
//!   holder and the age of its last renewal, the conditions; `-A` of every namespace's groups;
//! - `switchover GROUP [POD]`: moves leadership (through `spec.preferredLeader`), waits for the
//!   handover and prints how long it took; refuses a pod that cannot lead and says why;
//! - `history GROUP`: the last changes of leader, newest first;
//! - `pause GROUP`, `resume GROUP`: `spec.paused`;
//! - `member-rbac GROUP --service-account SA`: the ServiceAccount, Role and RoleBinding a member of
//!   GROUP needs, printed for `kubectl apply -f -`;
//! - `report GROUP`: what a bug report needs, as Markdown (the group, its Lease, its pods' marks,
//!   the Events, the operator's Lease and recent log lines);
//! - `completion SHELL`: the shell's completion script; run as `kubectl_complete-leadergroup`, it
//!   answers kubectl's completion of `kubectl leadergroup ...` (`completion.rs`).

mod bug_report;
mod completion;
mod error;
mod groups;
mod member;
mod report;
mod switchover;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, ResourceExt};
use serde_json::json;

use error::PluginError;
use groups::Groups;
use report::GroupReport;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-leadergroup",
    version,
    about = "Status, switchover, pause and resume of LeaderGroups"
)]
struct Cli {
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    /// The kubeconfig file, as kubectl's `--kubeconfig` (default: `$KUBECONFIG`, else
    /// `~/.kube/config`, else the pod's in-cluster configuration).
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use, as kubectl's `--context`.
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Leader, epoch, succession, Lease and conditions of one group, or of every group.
    Status {
        group: Option<String>,
        /// Every group of every namespace (kubectl's -A).
        #[arg(short = 'A', long, conflicts_with = "group")]
        all_namespaces: bool,
        /// Print again on every change.
        #[arg(short, long)]
        watch: bool,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Moves leadership to POD (default: the next eligible pod) and waits for the handover.
    Switchover {
        group: String,
        pod: Option<String>,
        /// The longest wait for the handover, in seconds.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// Leave spec.preferredLeader set to POD afterwards: leadership then returns to POD
        /// whenever it is eligible again.
        #[arg(long)]
        keep_preference: bool,
    },
    /// The group's last changes of leader, newest first (spec.historyLimit of them).
    History {
        group: String,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Stops every transition of GROUP (spec.paused: true).
    Pause { group: String },
    /// Lets GROUP's transitions happen again (spec.paused: false).
    Resume { group: String },
    /// Gathers what a bug report needs, as Markdown: versions, the group, its Lease, its pods'
    /// phase, readiness and marks, the Events of the group and its pods, the operator's Lease and
    /// the operator pods' last log lines.
    Report {
        group: String,
        /// The operator's namespace (its release's), where its Lease and pods are.
        #[arg(long, default_value = "leadergroup-system")]
        operator_namespace: String,
        /// How many of each operator pod's last log lines.
        #[arg(long, default_value_t = 200)]
        tail: i64,
    },
    /// Prints the completion script of SHELL for `kubectl-leadergroup` (link the binary as
    /// `kubectl_complete-leadergroup` on the PATH for kubectl's own `kubectl leadergroup <TAB>`).
    Completion { shell: clap_complete::Shell },
    /// Prints the rights a member of GROUP needs (the agent, the client crate's Membership): the
    /// ServiceAccount its pods run as, a Role on their pods and the group's Lease alone, and the
    /// RoleBinding; for `| kubectl apply -f -`. Reads nothing from the cluster.
    MemberRbac {
        group: String,
        /// The ServiceAccount the group's pods run as.
        #[arg(long)]
        service_account: String,
        /// Leave the ServiceAccount out (one that exists already, managed elsewhere).
        #[arg(long)]
        no_service_account: bool,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Output {
    Text,
    Json,
    Yaml,
}

#[tokio::main]
async fn main() -> ExitCode {
    let invoked = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&invoked)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    if name.as_deref() == Some(completion::KUBECTL_COMPLETE) {
        return complete_for_kubectl().await;
    }
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// kubectl's completion of `kubectl leadergroup ARGS...`: the candidates for the last word.
/// Group names are read from the cluster (the kubeconfig as kubectl's; at most a few seconds);
/// anything that fails there offers no candidate rather than an error.
async fn complete_for_kubectl() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let candidates = match completion::want(&args) {
        completion::Want::Words(words) => words,
        completion::Want::Groups { namespace, prefix } => {
            let names = async {
                let config = connect(None, None).await.ok()?;
                let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
                let client = Client::try_from(config).ok()?;
                let groups = Groups { client, namespace };
                groups.list().await.ok()
            };
            tokio::time::timeout(Duration::from_secs(5), names)
                .await
                .ok()
                .flatten()
                .unwrap_or_default()
                .iter()
                .map(ResourceExt::name_any)
                .filter(|n| n.starts_with(&prefix))
                .collect()
        }
    };
    print!("{}", completion::answer(&candidates));
    ExitCode::SUCCESS
}

/// The client configuration, as kubectl finds it: the file and context given, or inferred.
async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
) -> Result<Config, PluginError> {
    if kubeconfig.is_none() && context.is_none() {
        return Config::infer()
            .await
            .map_err(|e| PluginError::Connect(kube::Error::InferConfig(e)));
    }
    let file = match kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .map_err(PluginError::Kubeconfig)?;
    let options = KubeConfigOptions {
        context,
        ..KubeConfigOptions::default()
    };
    Config::from_custom_kubeconfig(file, &options)
        .await
        .map_err(PluginError::Kubeconfig)
}

async fn run(cli: Cli) -> Result<(), PluginError> {
    if let Command::Completion { shell } = &cli.command {
        completion::script(*shell, &mut std::io::stdout());
        return Ok(());
    }
    if let Command::MemberRbac {
        group,
        service_account,
        no_service_account,
    } = &cli.command
    {
        // No request: the namespace given, else the kubeconfig context's, else `default`.
        let namespace = match &cli.namespace {
            Some(namespace) => namespace.clone(),
            None => connect(cli.kubeconfig.as_deref(), cli.context.clone())
                .await
                .map_or_else(|_| "default".to_owned(), |c| c.default_namespace),
        };
        print!(
            "{}",
            member::member_rbac(group, &namespace, service_account, !no_service_account)?
        );
        return Ok(());
    }
    let config = connect(cli.kubeconfig.as_deref(), cli.context.clone()).await?;
    let namespace = cli
        .namespace
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(PluginError::Connect)?;
    let groups = Groups { client, namespace };
    match cli.command {
        Command::Status {
            group,
            all_namespaces,
            watch,
            output,
        } => status(&groups, group.as_deref(), all_namespaces, watch, output).await,
        Command::Switchover {
            group,
            pod,
            timeout,
            keep_preference,
        } => {
            let done = switchover::switchover(
                &groups,
                &group,
                pod.as_deref(),
                Duration::from_secs(timeout),
                keep_preference,
            )
            .await?;
            match done.from {
                Some(from) if from == done.to => {
                    println!("{} already leads {group} (epoch {})", done.to, done.epoch)
                }
                from => println!(
                    "{group}: {} -> {} at epoch {} in {} ms",
                    from.unwrap_or_else(|| "(none)".to_owned()),
                    done.to,
                    done.epoch,
                    done.took.as_millis()
                ),
            }
            Ok(())
        }
        Command::History { group, output } => {
            let history = groups.get(&group).await?.status.unwrap_or_default().history;
            print(&history, output, || report::history_table(&history))
        }
        Command::Pause { group } => set_paused(&groups, &group, true).await,
        Command::Resume { group } => set_paused(&groups, &group, false).await,
        Command::Report {
            group,
            operator_namespace,
            tail,
        } => {
            let scope = bug_report::OperatorScope {
                namespace: operator_namespace,
                tail_lines: tail,
            };
            print!("{}", bug_report::report(&groups, &group, &scope).await?);
            Ok(())
        }
        // Printed above, before connecting.
        Command::MemberRbac { .. } | Command::Completion { .. } => Ok(()),
    }
}

async fn set_paused(groups: &Groups, name: &str, paused: bool) -> Result<(), PluginError> {
    groups.get(name).await?;
    groups
        .api()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": paused}})),
        )
        .await
        .map_err(|e| groups.api_error(name, e))?;
    println!("{name}: {}", if paused { "paused" } else { "resumed" });
    Ok(())
}

async fn status(
    groups: &Groups,
    name: Option<&str>,
    all_namespaces: bool,
    watch: bool,
    output: Output,
) -> Result<(), PluginError> {
    let selected = match name {
        Some(name) => vec![groups.get(name).await?],
        None if all_namespaces => groups.list_all().await?,
        None => groups.list().await?,
    };
    if selected.is_empty() && !watch {
        if all_namespaces {
            println!("no LeaderGroups in any namespace");
        } else {
            println!("no LeaderGroups in namespace {}", groups.namespace);
        }
        return Ok(());
    }
    let mut reports = Vec::new();
    for group in &selected {
        reports.push(GroupReport::of(
            group,
            groups.lease_of(group).await?.as_ref(),
            jiff::Timestamp::now(),
        ));
    }
    print(&reports, output, || texts(&reports))?;
    if !watch {
        return Ok(());
    }
    let config = match name {
        Some(name) => watcher::Config::default().fields(&format!("metadata.name={name}")),
        None => watcher::Config::default(),
    };
    let api = if all_namespaces {
        groups.all_api()
    } else {
        groups.api()
    };
    let mut changes = std::pin::pin!(watcher(api, config).default_backoff().applied_objects());
    while let Some(changed) = changes.next().await {
        let Ok(group) = changed else { continue };
        let lease = groups.lease_of(&group).await?;
        let report = GroupReport::of(&group, lease.as_ref(), jiff::Timestamp::now());
        println!(
            "--- {} in {} at {}",
            group.name_any(),
            group.namespace().unwrap_or_default(),
            jiff::Timestamp::now()
        );
        print(&[&report], output, || report.text())?;
    }
    Ok(())
}

/// Prints `value` as `output` asks: `text()` for a person, else JSON or YAML.
fn print<T: serde::Serialize>(
    value: &T,
    output: Output,
    text: impl FnOnce() -> String,
) -> Result<(), PluginError> {
    let text = match output {
        Output::Text => text(),
        Output::Json => {
            serde_json::to_string_pretty(value).map_err(|e| PluginError::Print(e.to_string()))?
        }
        Output::Yaml => {
            serde_yaml_ng::to_string(value).map_err(|e| PluginError::Print(e.to_string()))?
        }
    };
    println!("{}", text.trim_end());
    Ok(())
}

/// The reports for a person, one block per group.
fn texts(reports: &[GroupReport]) -> String {
    reports
        .iter()
        .map(GroupReport::text)
        .collect::<Vec<_>>()
        .join("\n")
}
