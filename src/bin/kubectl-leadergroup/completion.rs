//! Shell completion, two ways:
//!
//! - `kubectl leadergroup completion SHELL` prints clap's script for `kubectl-leadergroup` run on
//!   its own (bash, zsh, fish, PowerShell, elvish): subcommands and flags;
//! - as `kubectl_complete-leadergroup` (a link to this binary on the PATH), it answers kubectl's
//!   own completion of `kubectl leadergroup ...` (kubectl 1.26 and newer ask such a program of a
//!   plugin): one candidate a line, then `:4` (Cobra's "no file completion"), and for a GROUP the
//!   names of the namespace's LeaderGroups, read from the cluster.

use std::io::Write;

use clap::CommandFactory;

use crate::Cli;

/// The name under which kubectl runs this binary to complete `kubectl leadergroup ...`.
pub const KUBECTL_COMPLETE: &str = "kubectl_complete-leadergroup";

/// Cobra's ShellCompDirectiveNoFileComp: the shell offers no file names instead.
const NO_FILE_COMPLETION: &str = ":4";

/// The subcommands whose first positional argument is a group's name.
const TAKE_A_GROUP: [&str; 7] = [
    "status",
    "switchover",
    "history",
    "pause",
    "resume",
    "report",
    "member-rbac",
];

/// The global flags that take a value (the word after them is not a positional argument).
const VALUED: [&str; 5] = [
    "-n",
    "--namespace",
    "--kubeconfig",
    "--context",
    "--service-account",
];

/// clap's completion script for `shell`, for the binary `kubectl-leadergroup`.
pub fn script(shell: clap_complete::Shell, out: &mut impl Write) {
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-leadergroup", out);
}

/// What to complete, from the words typed after `kubectl leadergroup` (the last one the word
/// being completed, possibly empty).
#[derive(Debug, PartialEq)]
pub enum Want {
    /// Fixed candidates (subcommands, flags), already filtered by the typed prefix.
    Words(Vec<String>),
    /// The names of the groups of the namespace (given with -n, else the context's) that start
    /// with the prefix.
    Groups {
        namespace: Option<String>,
        prefix: String,
    },
}

pub fn want(args: &[String]) -> Want {
    let (current, before) = match args.split_last() {
        Some((last, before)) => (last.as_str(), before),
        None => ("", &[][..]),
    };
    let mut namespace = None;
    let mut positionals: Vec<&str> = Vec::new();
    let mut words = before.iter();
    while let Some(word) = words.next() {
        if VALUED.contains(&word.as_str()) {
            let value = words.next();
            if matches!(word.as_str(), "-n" | "--namespace") {
                namespace = value.cloned();
            }
        } else if let Some(value) = word.strip_prefix("--namespace=") {
            namespace = Some(value.to_owned());
        } else if !word.starts_with('-') {
            positionals.push(word);
        }
    }
    let cli = Cli::command();
    let starting = |names: Vec<String>| {
        Want::Words(
            names
                .into_iter()
                .filter(|n| n.starts_with(current))
                .collect(),
        )
    };
    let Some((sub, rest)) = positionals.split_first() else {
        if current.starts_with('-') {
            return starting(long_flags(&cli));
        }
        return starting(
            cli.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name().to_owned())
                .collect(),
        );
    };
    let Some(command) = cli.find_subcommand(sub) else {
        return Want::Words(Vec::new());
    };
    if current.starts_with('-') {
        let mut flags = long_flags(command);
        flags.extend(long_flags(&cli));
        return starting(flags);
    }
    if rest.is_empty() && TAKE_A_GROUP.contains(sub) {
        return Want::Groups {
            namespace,
            prefix: current.to_owned(),
        };
    }
    if *sub == "completion" && rest.is_empty() {
        return starting(
            ["bash", "zsh", "fish", "powershell", "elvish"]
                .map(str::to_owned)
                .to_vec(),
        );
    }
    Want::Words(Vec::new())
}

/// The long flags of `command` (`--name`), help and version included.
fn long_flags(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .chain(["--help".to_owned()])
        .collect()
}

/// The answer kubectl reads: the candidates a line, then the directive.
pub fn answer(candidates: &[String]) -> String {
    let mut out = String::new();
    for c in candidates {
        out.push_str(c);
        out.push('\n');
    }
    out.push_str(NO_FILE_COMPLETION);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want_of(words: &[&str]) -> Want {
        want(&words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn subcommands_flags_and_groups_by_position() {
        let Want::Words(subs) = want_of(&[""]) else {
            panic!("subcommands")
        };
        for sub in [
            "status",
            "switchover",
            "report",
            "member-rbac",
            "completion",
        ] {
            assert!(subs.iter().any(|s| s == sub), "{sub} in {subs:?}");
        }
        assert_eq!(want_of(&["sw"]), Want::Words(vec!["switchover".to_owned()]));
        assert_eq!(
            want_of(&["-n", "shop", "status", "p"]),
            Want::Groups {
                namespace: Some("shop".to_owned()),
                prefix: "p".to_owned()
            }
        );
        assert_eq!(
            want_of(&["switchover", ""]),
            Want::Groups {
                namespace: None,
                prefix: String::new()
            }
        );
        let Want::Words(flags) = want_of(&["status", "--all"]) else {
            panic!("flags")
        };
        assert_eq!(flags, ["--all-namespaces"]);
        let Want::Words(flags) = want_of(&["--names"]) else {
            panic!("global flags")
        };
        assert_eq!(flags, ["--namespace"]);
        assert_eq!(
            want_of(&["completion", "z"]),
            Want::Words(vec!["zsh".to_owned()])
        );
        // A group named already: nothing more to offer.
        assert_eq!(want_of(&["history", "pay", ""]), Want::Words(Vec::new()));
        assert_eq!(answer(&["a".to_owned()]), "a\n:4\n");
    }

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            script(shell, &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(
                text.contains("kubectl-leadergroup") && text.contains("switchover"),
                "{shell}: {text}"
            );
        }
    }
}
