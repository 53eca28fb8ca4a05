//! What the docs show of the API is what the API server accepts and kubectl prints: every
//! LeaderGroup in a `yaml` block of the book's pages, the README or the chart's README (and a
//! `spec:` with a selector shown alone, made a LeaderGroup) is created
//! with `kubectl create --dry-run=server` (strict field validation: a field the CRD does not have,
//! a value out of range or a rule broken is refused, naming the page and the line); every
//! `kubectl get lg` or `kubectl get leadergroups` a `console` block shows has the header kubectl
//! prints for a real group with the same output flags. (The LeaderGroups of the quickstart's and
//! the install page's shell blocks are applied by the end-to-end tests that run those pages, and
//! the examples' manifests by `ledger_manifests.rs`.)

use std::path::{Path, PathBuf};

use crate::common::{World, group, run_ok, run_tool};
use kube::api::PostParams;

/// The pages a user reads, from the repository's root.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    pages.push(root.join("README.md"));
    pages.push(root.join("charts/leadergroup-operator/README.md"));
    pages
}

/// (first line, text) of every fenced block in `language`, indented ones included.
fn blocks(markdown: &str, language: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(bool, usize, usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(lang)) => {
                open = Some((
                    lang.trim() == language,
                    line.len() - trimmed.len(),
                    i + 2,
                    String::new(),
                ))
            }
            (Some((wanted, _, start, text)), Some(_)) => {
                if *wanted {
                    out.push((*start, std::mem::take(text)));
                }
                open = None;
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

/// The LeaderGroups of a `yaml` block, each moved into namespace `ns`: whole ones, and a
/// fragment that shows a spec with a selector (a page about one of its fields) made whole.
fn leader_groups(block: &str, ns: &str) -> Vec<serde_yaml_ng::Value> {
    block
        .split("\n---")
        .filter_map(|doc| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(doc).ok())
        .filter_map(|mut doc| {
            if doc.get("kind").is_none() && doc["spec"].get("selector").is_some() {
                doc["apiVersion"] = "leadergroup.io/v1alpha1".into();
                doc["kind"] = "LeaderGroup".into();
                doc["metadata"]["name"] = "fragment".into();
            }
            (doc["kind"].as_str() == Some("LeaderGroup")).then_some(doc)
        })
        .map(|mut doc| {
            doc["metadata"]["namespace"] = ns.into();
            doc
        })
        .collect()
}

/// `kubectl create --dry-run=server` of one object: (accepted, what kubectl said).
async fn dry_run(ns: &str, object: &serde_yaml_ng::Value, file: &Path) -> (bool, String) {
    std::fs::write(file, serde_yaml_ng::to_string(object).unwrap()).unwrap();
    let cp = leadergroup_testenv::control_plane().await.unwrap();
    let mut cmd = cp.kubectl();
    cmd.args([
        "create",
        "--dry-run=server",
        "--validate=strict",
        "-n",
        ns,
        "-f",
    ])
    .arg(file);
    let (ok, stdout, stderr) = run_tool(cmd).await;
    (ok, format!("{stdout}{stderr}"))
}

#[tokio::test]
async fn every_leadergroup_the_docs_show_is_accepted_by_the_api_server() {
    let w = World::new("docs-examples").await;
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}.yaml", w.ns.name));
    let mut checked = 0;
    let mut refused = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, block) in blocks(&text, "yaml") {
            for object in leader_groups(&block, &w.ns.name) {
                let (ok, said) = dry_run(&w.ns.name, &object, &file).await;
                checked += 1;
                if !ok {
                    refused.push(format!("{}:{line}: {said}", page.display()));
                }
            }
        }
    }
    assert!(
        checked >= 3,
        "only {checked} LeaderGroups found in the docs"
    );
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));

    // The check can fail: a field the CRD does not have is refused.
    let mut broken = leader_groups(
        "kind: LeaderGroup\napiVersion: leadergroup.io/v1alpha1\nmetadata: {name: x}\n\
         spec: {selector: {matchLabels: {app: x}}, leaseDuration: 15}\n",
        &w.ns.name,
    );
    let (ok, said) = dry_run(&w.ns.name, &broken.remove(0), &file).await;
    assert!(!ok && said.contains("leaseDuration"), "{said}");
    let _ = std::fs::remove_file(&file);
}

/// The header kubectl prints for `kubectl get lg` with `flags` in `ns`.
async fn header(ns: &str, flags: &[&str]) -> Vec<String> {
    let cp = leadergroup_testenv::control_plane().await.unwrap();
    let mut cmd = cp.kubectl();
    cmd.args(["get", "lg", "-n", ns]).args(flags);
    let out = run_ok(cmd).await;
    out.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn every_kubectl_get_lg_the_docs_show_has_the_columns_kubectl_prints() {
    let w = World::new("docs-columns").await;
    w.groups
        .create(&PostParams::default(), &group("web", "web"))
        .await
        .unwrap();
    let plain = header(&w.ns.name, &[]).await;
    let wide = header(&w.ns.name, &["-o", "wide"]).await;
    let mut shown = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, block) in blocks(&text, "console") {
            let mut lines = block.lines().enumerate();
            while let Some((i, l)) = lines.next() {
                let Some(command) = l.strip_prefix("$ ") else {
                    continue;
                };
                let words: Vec<&str> = command.split_whitespace().collect();
                if !(words.starts_with(&["kubectl", "get", "lg"])
                    || words.starts_with(&["kubectl", "get", "leadergroups"]))
                {
                    continue;
                }
                let mut want = if command.contains("-o wide") {
                    wide.clone()
                } else {
                    plain.clone()
                };
                if words.contains(&"-A") || words.contains(&"--all-namespaces") {
                    want.insert(0, "NAMESPACE".into());
                }
                let got: Vec<String> = lines
                    .next()
                    .map(|(_, h)| h.split_whitespace().map(str::to_string).collect())
                    .unwrap_or_default();
                assert_eq!(
                    got,
                    want,
                    "{}:{}: `{command}` shows another header than kubectl prints",
                    page.display(),
                    line + i
                );
                shown += 1;
            }
        }
    }
    assert!(shown >= 2, "only {shown} kubectl get lg outputs found");
}

#[test]
fn blocks_are_found_indented_or_not() {
    let page = "a\n```yaml\nk: 1\n```\n1. x\n\n   ```yaml\n   k: 2\n   ```\n```sh\nk: 3\n```\n";
    assert_eq!(
        blocks(page, "yaml"),
        [(3, "k: 1\n".to_string()), (8, "k: 2\n".to_string())]
    );
}
