//! The book's three agent clients (`examples/agent-clients/`: shell, Python, Go) against the real
//! agent: each prints the role it reads through the long poll, so each must print leader with
//! its epoch, follower after a handover, and unknown once the agent is gone.

use leadergroup_testenv::wait_until;
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

#[tokio::test]
async fn the_shell_python_and_go_examples_follow_the_agent() {
    let (w, kubeconfig) = world_of_two_members("agent-examples").await;
    let agent = Agent::start(&kubeconfig, &w.ns.name, "app-0", &[]).await;
    let ns = w.ns.name.clone();
    let go = build_go(&ns);
    let dir = examples();
    let clients = [
        Example::start(
            "shell",
            Path::new("sh"),
            &[&dir.join("role.sh")],
            &agent,
            &ns,
        ),
        Example::start(
            "python",
            Path::new("python3"),
            &[&dir.join("role.py")],
            &agent,
            &ns,
        ),
        Example::start("go", &go, &[], &agent, &ns),
    ];

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
