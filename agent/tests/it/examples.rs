//! The book's three agent clients (`examples/agent-clients/`: shell, Python, Go) against the real
//! agent: each prints the role it reads through the long poll, so each must print leader with
//! its epoch, follower after a handover, and unknown once the agent is gone.

use leadergroup_testenv::wait_until;
use std::time::Duration;
use std::{
    path::{Path, PathBuf},
    process::Stdio,
};
use tokio::process::{Child, Command};

use crate::common::{Agent, WAIT, scratch, world_of_two_members};

/// The folder of the examples, beside the agent's crate.
fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agent-clients")
}

/// One example client, its stdout in a file; killed when dropped.
struct Example {
    name: &'static str,
    out: PathBuf,
    _child: Child,
}

impl Example {
    fn start(name: &'static str, program: &Path, args: &[&Path], agent: &Agent, ns: &str) -> Self {
        let out = scratch(&format!("{ns}-{name}.out"));
        let child = Command::new(program)
            .args(args)
            .env("LEADERGROUP_AGENT", format!("http://{}", agent.addr))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start the {name} example ({}): {e}", program.display()));
        Example {
            name,
            out,
            _child: child,
        }
    }

    /// The lines it printed, repeats of the line before dropped.
    fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.dedup();
        lines
    }

    /// Waits until its last line is `line`.
    async fn wait_for(&self, line: &str) {
        let found = wait_until(
            &format!("the {} example prints {line}", self.name),
            WAIT,
            || async {
                Ok::<_, String>(
                    (self.lines().last().map(String::as_str) == Some(line)).then_some(()),
                )
            },
        )
        .await;
        found.unwrap_or_else(|e| panic!("{e}; it printed {:?}", self.lines()));
    }
}

/// Builds the Go example with the Go toolchain on the PATH (standard library only: nothing is
/// downloaded).
fn build_go(ns: &str) -> PathBuf {
    let binary = scratch(&format!("{ns}-agent-role"));
    let built = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(examples().join("go"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("CGO_ENABLED", "0")
        .status()
        .expect("go build (Go must be installed, as for the control plane)");
    assert!(
        built.success(),
        "go build of examples/agent-clients/go failed"
    );
    binary
}

/// The shell, Python and Go clients, each following `agent`.
fn start_all(agent: &Agent, ns: &str) -> [Example; 3] {
    let go = build_go(ns);
    let dir = examples();
    [
        Example::start("shell", Path::new("sh"), &[&dir.join("role.sh")], agent, ns),
        Example::start(
            "python",
            Path::new("python3"),
            &[&dir.join("role.py")],
            agent,
            ns,
        ),
        Example::start("go", &go, &[], agent, ns),
    ]
}

#[tokio::test]
async fn the_shell_python_and_go_examples_follow_the_agent() {
    let (w, kubeconfig) = world_of_two_members("agent-examples").await;
    let agent = Agent::start(&kubeconfig, &w.ns.name, "app-0", &[]).await;
    let clients = start_all(&agent, &w.ns.name);

    // In no group yet: confirmed, not leading.
    agent.wait_role("follower", None).await;
    for client in &clients {
        client.wait_for("role=follower epoch=").await;
    }

    // The operator's marks, written by hand: app-0 leads at epoch 1.
    w.put_lease("g", Some("app-0"), 1).await.unwrap();
    w.mark_follower("app-1", "g").await.unwrap();
    w.mark_leader("app-0", "g", 1).await.unwrap();
    for client in &clients {
        client.wait_for("role=leader epoch=1").await;
    }

    // Leadership moves to app-1 at epoch 2: app-0 is a follower from the Lease's change on.
    w.put_lease("g", Some("app-1"), 2).await.unwrap();
    w.mark_follower("app-0", "g").await.unwrap();
    w.mark_leader("app-1", "g", 2).await.unwrap();
    for client in &clients {
        client.wait_for("role=follower epoch=").await;
    }

    // The agent killed outright: nothing confirms the role any more.
    drop(agent);
    for client in &clients {
        client.wait_for("role=unknown epoch=").await;
        let lines = client.lines();
        let leading: Vec<_> = lines
            .iter()
            .filter(|l| l.starts_with("role=leader"))
            .collect();
        assert_eq!(
            leading,
            ["role=leader epoch=1"],
            "the {} example printed {lines:?}",
            client.name
        );
        println!("{}: {lines:?}", client.name);
    }
}

/// The current time on this machine's clock, in Unix milliseconds: the clock the agent's
/// `validUntil` is on.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap())
        .unwrap()
}

/// Safety round five, finding 1: the leader's agent is paused (a starved sidecar) while the
/// application runs on, and the group switches over. Nothing the agent published may still say
/// `leader` once the successor is labelled: its files and its last answer carry `validUntil`, no
/// later than two thirds of the Lease after the switchover, and the shipped clients stop by it
/// although their long poll hangs.
#[tokio::test]
async fn a_paused_agents_leadership_ends_at_its_validity_in_every_client() {
    let (w, kubeconfig) = world_of_two_members("agent-paused").await;
    let agent = Agent::start(&kubeconfig, &w.ns.name, "app-0", &[]).await;
    let clients = start_all(&agent, &w.ns.name);
    w.put_lease("g", Some("app-0"), 1).await.unwrap();
    w.mark_follower("app-1", "g").await.unwrap();
    w.mark_leader("app-0", "g", 1).await.unwrap();
    let answer = agent.wait_role("leader", Some(1)).await;
    assert!(
        answer["validUntil"].as_u64().unwrap() > now_ms(),
        "a leader's answer holds for a while: {answer}"
    );
    for client in &clients {
        client.wait_for("role=leader epoch=1").await;
    }

    // Frozen: it answers nothing and writes nothing from here on.
    let pid = agent.pid().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let frozen = now_ms();
    // The operator's switchover to a successor when the predecessor never steps down: the Lease
    // moves at once, and the successor is labelled two thirds of the Lease later.
    w.put_lease("g", Some("app-1"), 2).await.unwrap();
    let deposed = now_ms();
    let validity = u64::try_from(crate::common::DURATION_SECS).unwrap() * 2000 / 3;
    tokio::time::sleep(Duration::from_millis(validity)).await;
    w.mark_follower("app-0", "g").await.unwrap();
    w.mark_leader("app-1", "g", 2).await.unwrap();
    let labelled = now_ms();

    // The files still say leader (nothing rewrote them), but not past the switchover's wait.
    assert_eq!(agent.file("role"), "leader");
    let until: u64 = agent.file("valid-until").parse().unwrap_or_else(|e| {
        panic!(
            "valid-until {:?}: {e}\n{}",
            agent.file("valid-until"),
            agent.logs()
        )
    });
    assert!(
        until <= labelled,
        "the files hold {} ms after the successor was labelled",
        until - labelled
    );
    eprintln!(
        "paused agent: frozen at 0, deposed at {} ms, valid until {} ms, successor labelled at {} ms",
        deposed - frozen,
        until.saturating_sub(frozen),
        labelled - frozen
    );
    // Every client stopped by then, within its polling step.
    for client in &clients {
        client.wait_for("role=unknown epoch=").await;
    }
    let stopped = now_ms();
    assert!(
        stopped <= labelled + 1000,
        "the clients stopped {} ms after the successor was labelled",
        stopped - labelled
    );

    // Thawed, it reads the handover and says follower; nobody led again at epoch 1.
    signal("-CONT");
    agent.wait_role("follower", None).await;
    for client in &clients {
        client.wait_for("role=follower epoch=").await;
        let lines = client.lines();
        let from_leader: Vec<&str> = lines
            .iter()
            .skip_while(|l| !l.starts_with("role=leader"))
            .map(String::as_str)
            .collect();
        assert_eq!(
            from_leader,
            [
                "role=leader epoch=1",
                "role=unknown epoch=",
                "role=follower epoch="
            ],
            "the {} example printed {lines:?}",
            client.name
        );
    }
}
