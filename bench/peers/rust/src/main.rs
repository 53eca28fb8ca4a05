//! Benchmark peer: one candidate process for `--groups` Leases, using either
//! `kube-leader-election` (`--lib kle`) or `kube-lease-manager` (`--lib klm`), the way each crate's
//! documentation shows. It prints one line per leadership change to stdout:
//!
//! `<unix nanoseconds> started|stopped <lease name> <identity>`
//!
//! SIGTERM releases what it holds (kle: `step_down`; klm: dropping the watch channel, which makes
//! the manager release) and exits.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

struct Args {
    lib: String,
    namespace: String,
    prefix: String,
    groups: usize,
    identity: String,
    lease_seconds: u64,
    /// kle: how often the loop calls `try_acquire_or_renew` (the crate leaves that to the user;
    /// its documentation suggests a third of the TTL). klm: the grace period.
    renew_seconds: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        lib: "kle".into(),
        namespace: "default".into(),
        prefix: "bench".into(),
        groups: 1,
        identity: String::new(),
        lease_seconds: 15,
        renew_seconds: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--lib" => a.lib = value,
            "--namespace" => a.namespace = value,
            "--lease-prefix" => a.prefix = value,
            "--groups" => a.groups = usize::try_from(num(&value)?).map_err(|e| e.to_string())?,
            "--identity" => a.identity = value,
            "--lease-seconds" => a.lease_seconds = num(&value)?,
            "--renew-seconds" => a.renew_seconds = num(&value)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

fn say(event: &str, lease: &str, identity: &str) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{now} {event} {lease} {identity}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("leadergroup-bench-rust-peer: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let outcome = match a.lib.as_str() {
        "kle" => run_kle(&a).await,
        "klm" => run_klm(&a).await,
        other => Err(format!("unknown --lib {other} (kle or klm)")),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leadergroup-bench-rust-peer: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Waits for SIGTERM, then tells every Lease's task to stop (releasing what it holds) and waits
/// for them.
async fn until_terminated(
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> Result<(), String> {
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        term.recv().await;
    } else {
        std::future::pending::<()>().await;
    }
    let _ = stop.send(true);
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

async fn run_kle(a: &Args) -> Result<(), String> {
    use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
    let client = kube4::Client::try_default().await.map_err(|e| e.to_string())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for i in 0..a.groups {
        let name = format!("{}-{i}", a.prefix);
        let lock = LeaseLock::new(
            client.clone(),
            &a.namespace,
            LeaseLockParams {
                holder_id: a.identity.clone(),
                lease_name: name.clone(),
                lease_ttl: Duration::from_secs(a.lease_seconds),
            },
        );
        let identity = a.identity.clone();
        let every = Duration::from_secs(a.renew_seconds);
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut leading = false;
            loop {
                match lock.try_acquire_or_renew().await {
                    Ok(LeaseLockResult::Acquired(_)) if !leading => {
                        leading = true;
                        say("started", &name, &identity);
                    }
                    Ok(LeaseLockResult::NotAcquired(_)) if leading => {
                        leading = false;
                        say("stopped", &name, &identity);
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("{name}: {e}"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
            if leading {
                if let Err(e) = lock.step_down().await {
                    eprintln!("{name}: step_down: {e}");
                }
                say("stopped", &name, &identity);
            }
        }));
    }
    until_terminated(stop_tx, tasks).await
}

async fn run_klm(a: &Args) -> Result<(), String> {
    use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
    let client = kube5::Client::try_default().await.map_err(|e| e.to_string())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for i in 0..a.groups {
        let name = format!("{}-{i}", a.prefix);
        let manager = LeaseManagerBuilder::new(client.clone(), &name)
            .with_namespace(&a.namespace)
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .with_identity(&a.identity)
            .with_duration(a.lease_seconds)
            .with_grace(a.renew_seconds)
            .build()
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let identity = a.identity.clone();
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let (mut channel, handle) = manager.watch().await;
            let mut leading = false;
            loop {
                tokio::select! {
                    changed = channel.changed() => {
                        if changed.is_err() { break; }
                        let now = *channel.borrow_and_update();
                        if now != leading {
                            leading = now;
                            say(if now { "started" } else { "stopped" }, &name, &identity);
                        }
                    }
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
            // Dropping the receiver makes the manager release the Lease and return.
            drop(channel);
            let _ = handle.await;
            if leading {
                say("stopped", &name, &identity);
            }
        }));
    }
    until_terminated(stop_tx, tasks).await
}
