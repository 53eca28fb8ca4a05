//! A page of the docs run as a user runs it: its commands are read out of the Markdown as written
//! (every `sh` block whole, and every `$ ` line of a `console` block with the output shown under
//! it) and run in order with bash on the real cluster, from the repository's root, with the pinned
//! kubectl and helm first on the PATH. When the page drifts from what works, the test fails and
//! names the command. Blocks indented under a list item count as the page shows them.

use std::time::Instant;

use leadergroup_testenv::run_tool;

use crate::cluster::{Cluster, repo_root};

/// The longest a command may take (GNU timeout's spelling): a `rollout status` that waits for an
/// image no node can find would wait for ever.
const COMMAND_TIMEOUT: &str = "600";

/// One command of a page: the shell text to run, where it stands (for failure messages), and,
/// for a `$ ` line, the output the page shows under it.
#[derive(Debug, PartialEq)]
pub struct Command {
    pub line: usize,
    pub script: String,
    pub shown: Option<String>,
}

/// The page's commands in order: each `sh` block whole, each `$ ` line of a `console` block.
pub fn commands(markdown: &str) -> Vec<Command> {
    let mut out: Vec<Command> = Vec::new();
    // (language, indentation, first line, text) of the block being read.
    let mut block: Option<(&str, usize, usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let number = i + 1;
        let trimmed = line.trim_start();
        let fence = trimmed.strip_prefix("```");
        match (&mut block, fence) {
            (None, Some(lang)) => {
                block = Some((
                    lang.trim(),
                    line.len() - trimmed.len(),
                    number,
                    String::new(),
                ));
            }
            (Some((lang, _, start, text)), Some(_)) => {
                if *lang == "sh" {
                    out.push(Command {
                        line: *start,
                        script: std::mem::take(text),
                        shown: None,
                    });
                }
                block = None;
            }
            (Some(("console", indent, _, _)), None) => {
                let line = line.get(*indent..).unwrap_or(trimmed);
                if let Some(command) = line.strip_prefix("$ ") {
                    out.push(Command {
                        line: number,
                        script: command.to_string(),
                        shown: Some(String::new()),
                    });
                } else if let Some(Command {
                    shown: Some(shown), ..
                }) = out.last_mut()
                {
                    shown.push_str(line);
                    shown.push('\n');
                }
            }
            (Some((_, indent, _, text)), None) => {
                text.push_str(line.get(*indent..).unwrap_or(trimmed));
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// Whether `text` is what `pattern` shows, where the page writes `...` for a part that varies.
pub fn shows(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.trim().split("...");
    let text = text.trim();
    let Some(first) = parts.next() else {
        return text.is_empty();
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// `command` without the variables cargo sets for a binary it runs (this test's own), which a
/// user's shell does not have. A page's `cargo build` (the install page's `images/build.sh`) would
/// see them, and ring's build script asks cargo to run it again when CARGO_MANIFEST_DIR or
/// CARGO_PKG_NAME change: with them, cargo rebuilt ring and everything linking it, the operator
/// and the agent that `make e2e` had built minutes before, and again in `make dist` after.
fn as_a_user(command: &mut std::process::Command) -> &mut std::process::Command {
    for (name, _) in std::env::vars_os() {
        let cargo_sets = name.to_str().is_some_and(|n| {
            n.starts_with("CARGO_PKG_")
                || matches!(
                    n,
                    "CARGO"
                        | "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_BIN_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                        | "CARGO_TARGET_TMPDIR"
                        | "OUT_DIR"
                )
        });
        if cargo_sets {
            command.env_remove(name);
        }
    }
    command
}

/// How a page's commands run here: the page's path (for messages), text replaced before running
/// (an image or registry the offline cluster has instead), and the environment added.
pub struct Runner {
    pub page: &'static str,
    pub replace: Vec<(String, String)>,
    pub env: Vec<(String, String)>,
}

impl Runner {
    /// Runs one command with bash; returns (success, stdout, stderr), after printing it all.
    pub async fn attempt(&self, c: &Cluster, command: &Command) -> (bool, String, String) {
        let path = format!(
            "{}:{}",
            c.cp.bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let script = self
            .replace
            .iter()
            .fold(command.script.clone(), |s, (from, to)| s.replace(from, to));
        // GNU timeout signals its whole process group: bash and whatever it started.
        let mut bash = std::process::Command::new("timeout");
        bash.args([
            "-k",
            "10",
            COMMAND_TIMEOUT,
            "bash",
            "-euo",
            "pipefail",
            "-c",
            &script,
        ])
        .current_dir(repo_root());
        as_a_user(&mut bash)
            .env("KUBECONFIG", c.cp.kubeconfig_path())
            .env("PATH", path)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let started = Instant::now();
        let (ok, stdout, stderr) = run_tool(bash).await;
        println!(
            "{}:{} ({:.1} s)\n{}{stdout}{stderr}",
            self.page,
            command.line,
            started.elapsed().as_secs_f64(),
            script
                .lines()
                .map(|l| format!("$ {l}\n"))
                .collect::<String>()
        );
        (ok, stdout, stderr)
    }

    /// Runs one command; returns its stdout, or fails the test naming it.
    pub async fn run(&self, c: &Cluster, command: &Command) -> String {
        let (ok, stdout, stderr) = self.attempt(c, command).await;
        assert!(
            ok,
            "{}:{}: the command failed (or took over {COMMAND_TIMEOUT} s):\n{}\nstderr:\n{stderr}\nstdout:\n{stdout}",
            self.page, command.line, command.script
        );
        stdout
    }
}

#[test]
fn a_page_yields_its_commands_in_order() {
    let page = "# t\n```sh\na \\\n  b\nc\n```\ntext\n```console\n$ d\nout\n$ e\n```\n\
                ```yaml\nf: 1\n```\n1. step\n\n   ```sh\n   g\n     h\n   ```\n";
    assert_eq!(
        commands(page),
        [
            Command {
                line: 2,
                script: "a \\\n  b\nc\n".into(),
                shown: None,
            },
            Command {
                line: 9,
                script: "d".into(),
                shown: Some("out\n".into()),
            },
            Command {
                line: 11,
                script: "e".into(),
                shown: Some(String::new()),
            },
            Command {
                line: 18,
                script: "g\n  h\n".into(),
                shown: None,
            },
        ]
    );
}

#[test]
fn a_page_runs_without_the_variables_cargo_sets_for_this_test() {
    // cargo test sets them for this binary; a user's shell has none of them.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let out = as_a_user(&mut std::process::Command::new("env"))
        .output()
        .unwrap();
    let env = String::from_utf8(out.stdout).unwrap();
    let left: Vec<&str> = env
        .lines()
        .filter(|l| l.starts_with("CARGO_PKG_") || l.starts_with("CARGO_MANIFEST_DIR="))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")));
}

#[test]
fn a_shown_output_matches_with_its_ellipses() {
    assert!(shows("a '...' b", "a 'x y' b\n"));
    assert!(shows("a", "a"));
    assert!(shows("a ... c ... e", "a b c d e"));
    assert!(!shows("a ... c", "a b d"));
    assert!(!shows("a b", "a b c"));
    assert!(!shows("x ...", "a b"));
}
