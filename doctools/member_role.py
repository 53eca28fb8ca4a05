#!/usr/bin/env python3
"""Checks every Role for members the repository shows against docs/reference/member-role.yaml,
the one source of a member's rights (the tests grant exactly its rules): the YAML blocks of the
Markdown pages and READMEs, of the Rust crate docs (`//!` lines), and the example and benchmark
manifests. A member's Role is one whose rules name Leases by resourceNames. The group's name in
resourceNames and the comments may differ; the rules (API groups, resources, verbs, and that the
Lease is named) may not. Exits non-zero, naming the file, on any difference or on a source with
no such Role at all (a moved example must not silently leave the check)."""
import glob
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANONICAL = "docs/reference/member-role.yaml"
# Each must show the member's Role at least once.
REQUIRED = ["agent/README.md", "client/src/lib.rs", "examples/ledger/manifests/sidecar/rbac.yaml",
            "bench/manifests/e2e-rbac.yaml"]


def normalized(rules):
    out = []
    for r in rules:
        out.append((tuple(r.get("apiGroups", [])), tuple(r.get("resources", [])),
                    tuple(sorted(r.get("verbs", []))), bool(r.get("resourceNames"))))
    return sorted(out)


def member_roles(text):
    """The rules of every Role in `text` (YAML documents) that names a Lease by resourceNames."""
    found = []
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return found
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != "Role":
            continue
        rules = doc.get("rules") or []
        if any("leases" in (r.get("resources") or []) and r.get("resourceNames") for r in rules):
            found.append(rules)
    return found


def yaml_blocks(path, text):
    if path.endswith((".yaml", ".yml")):
        return [text]
    if path.endswith(".rs"):
        text = "\n".join(line[4:] if line.startswith("//! ") else line[3:] if line.startswith("//!")
                         else "" for line in text.splitlines())
    return re.findall(r"```ya?ml\n(.*?)```", text, re.S)


def main():
    with open(os.path.join(ROOT, CANONICAL)) as f:
        want = normalized(yaml.safe_load(f)["rules"])
    sources = set(REQUIRED)
    for pattern in ("*.md", "docs/**/*.md", "*/README.md", "charts/*/README.md", "examples/**/*.yaml",
                    "bench/manifests/*.yaml", "client/src/*.rs", "agent/src/*.rs"):
        sources.update(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))
    failures = []
    for path in sorted(sources):
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
        roles = [r for block in yaml_blocks(path, text) for r in member_roles(block)]
        if path in REQUIRED and not roles:
            failures.append(f"{path}: shows no member Role (one with a Lease named by resourceNames)")
        for rules in roles:
            got = normalized(rules)
            if got != want:
                failures.append(f"{path}: a member Role's rules {got} differ from {CANONICAL}'s {want}")
    for failure in failures:
        print(f"member_role.py: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"member_role.py: every member Role matches {CANONICAL}")


if __name__ == "__main__":
    main()
