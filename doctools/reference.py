#!/usr/bin/env python3
"""The book's generated pages, from the sources they describe, so that they cannot drift:

- docs/reference/chart-values.md: every value of the chart, from values.schema.json (paths, types,
  constraints, descriptions) and values.yaml (defaults);
- docs/reference/leadergroup.md: every field of the LeaderGroup, from crds/leadergroup.yaml (the
  operator's `crd` output, itself drift-checked against the Rust types);
- docs/reference/operator-flags.md and agent-flags.md: the binaries' `--help`, clap's own rendering
  of their flags, run with an empty environment (clap shows a set variable's value);
- README.md's headline table: the block `bench:e2e-headline` of docs/benchmarks.md, which the
  benchmark writes.

  doctools/reference.py write --operator BIN --agent BIN   # rewrites the pages
  doctools/reference.py check --operator BIN --agent BIN   # fails naming each stale page

Needs PyYAML (make check-deps).
"""

import argparse
import json
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
CHART = os.path.join(ROOT, "charts", "leadergroup-operator")
HEADLINE = "bench:e2e-headline"
REGENERATE = "make docs-gen"


def cell(text):
    """Text fit for one Markdown table cell: one line, pipes escaped, and outside code spans the
    angle brackets of placeholders (`<release>`), which a renderer would take for HTML tags."""
    parts = re.sub(r"\s+", " ", str(text)).strip().replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def code(value):
    """A value as inline code, in the YAML flow form a user would write."""
    if isinstance(value, str):
        return "`\"\"`" if value == "" else f"`{value}`"
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("\n...").strip()
    return "`" + text.replace("|", "\\|") + "`"


def constraints(schema):
    """The checks of a schema node a user can break, in words."""
    out = []
    if "enum" in schema:
        out.append("one of " + ", ".join(code(v) for v in schema["enum"]))
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        out.append(f"{low:g} to {high:g}")
    elif low is not None:
        out.append(f"at least {low:g}")
    elif high is not None:
        out.append(f"at most {high:g}")
    if "minLength" in schema:
        out.append(f"at least {schema['minLength']} characters")
    if "maxLength" in schema:
        out.append(f"at most {schema['maxLength']} characters")
    if "pattern" in schema:
        out.append(f"matches `{schema['pattern']}`")
    if schema.get("deprecated"):
        out.append("deprecated")
    return out


def schema_type(schema):
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and "items" in schema:
        kind = f"array of {schema_type(schema['items'])}"
    if schema.get("x-kubernetes-int-or-string"):
        kind = "integer or string"
    return kind or "any"


# ---- the chart's values ----

def values_comments(text):
    """The `# -- ` comment above each key of values.yaml (helm-docs' convention), by dotted path."""
    comments, path, pending = {}, [], None
    for line in text.split("\n"):
        stripped = line.strip()
        # helm-docs' marker is "# -- " with its space: "# --flag" continues a comment.
        if stripped == "# --" or stripped.startswith("# -- "):
            pending = [stripped[4:].strip()]
        elif stripped.startswith("#") and pending is not None:
            pending.append(stripped[1:].strip())
        elif re.match(r"^\s*[A-Za-z][\w.-]*:", line):
            depth = (len(line) - len(line.lstrip())) // 2
            path = path[:depth] + [stripped.split(":", 1)[0]]
            if pending:
                comments[".".join(path)] = " ".join(pending)
            pending = None
        elif stripped and not stripped.startswith("-"):
            pending = None
    return comments


def sentence(*parts):
    """Parts joined as one sentence each: "A. B; C." reads better than "A.; B"."""
    parts = [p.strip().rstrip(".") for p in parts if p and p.strip()]
    return ". ".join(parts) + ("." if parts else "")


def chart_values_page():
    with open(os.path.join(CHART, "values.schema.json")) as f:
        schema = json.load(f)
    with open(os.path.join(CHART, "values.yaml")) as f:
        values_text = f.read()
    defaults = yaml.safe_load(values_text)
    comments = values_comments(values_text)
    # A comment read from the middle of a sentence (the marker mistaken) starts in lower case.
    broken = [k for k, c in comments.items() if c and not re.match(r"[A-Z`(0-9]", c)]
    if broken:
        sys.exit(f"reference.py: values.yaml comments that do not start a sentence: {broken}")
    rows = []

    def walk(node, path, default):
        props = node.get("properties")
        # An object that is a section of the chart (values.yaml comments its keys, not itself)
        # gets a row per key; one commented as a whole (a securityContext) is one value.
        documented = ".".join(path) in comments or "description" in node
        if node.get("type") == "object" and props and not documented:
            for key, sub in props.items():
                walk(sub, path + [key], default.get(key) if isinstance(default, dict) else None)
            return
        shown = "unset" if default is None else code(default)
        dotted = ".".join(path)
        meaning = comments.get(dotted) or node.get("description", "")
        checks = "; ".join(constraints(node))
        rows.append(f"| `{dotted}` | {schema_type(node)} | {shown} | "
                    + cell(sentence(meaning, checks[:1].upper() + checks[1:])) + " |")

    for key, sub in schema["properties"].items():
        walk(sub, [key], defaults.get(key))
    return "\n".join([
        "# Chart values",
        "",
        "<!-- Generated by doctools/reference.py from charts/leadergroup-operator/values.schema.json",
        f"     and values.yaml: edit those, then run `{REGENERATE}`. -->",
        "",
        "Every value of the chart `charts/leadergroup-operator`, as its schema checks it. The schema",
        "has `additionalProperties: false` at every level: a mistyped key or a wrong type fails",
        "`helm install` with the path of the offending value. The comments in",
        "`charts/leadergroup-operator/values.yaml` say more about each value.",
        "",
        "| value | type | default | meaning |",
        "|---|---|---|---|",
        *rows,
        "",
    ])


# ---- the LeaderGroup fields ----

def crd_page():
    with open(os.path.join(ROOT, "crds", "leadergroup.yaml")) as f:
        crd = yaml.safe_load(f)
    version = crd["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    sections = []

    def walk(node, path, rows, rules):
        for rule in node.get("x-kubernetes-validations", []):
            rules.append(f"- `{path or '.'}`: {cell(rule.get('message', rule['rule']))}")
        props = node.get("properties", {})
        required = set(node.get("required", []))
        for key in sorted(props):
            sub = props[key]
            here = f"{path}.{key}" if path else key
            words = constraints(sub)
            if key in required:
                words.insert(0, "required")
            if "default" in sub:
                words.append("default " + code(sub["default"]))
            description = cell(sub.get("description", ""))
            rows.append(f"| `{here}` | {schema_type(sub)} | {description} | {'; '.join(words)} |")
            walk(sub, here, rows, rules)
            items = sub.get("items", {})
            if items.get("properties"):
                walk(items, here + "[]", rows, rules)

    for part in ("spec", "status"):
        rows, rules = [], []
        walk(root["properties"][part], part, rows, rules)
        sections += [
            f"## `{part}`",
            "",
            cell(root["properties"][part].get("description", "")),
            "",
            "| field | type | description | constraints |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
        if rules:
            sections += ["Rules the API server checks (CEL), with the message it refuses with:", "",
                         *rules, ""]
    top_rules = [f"- {cell(r.get('message', r['rule']))}"
                 for r in root.get("x-kubernetes-validations", [])]
    columns = [f"| `{c['name']}` | `{c['jsonPath']}` | {'`-o wide`' if c.get('priority') else 'always'} "
               f"| {cell(c.get('description', ''))} |"
               for c in version.get("additionalPrinterColumns", [])]
    return "\n".join([
        "# LeaderGroup fields",
        "",
        "<!-- Generated by doctools/reference.py from crds/leadergroup.yaml (`leadergroup-operator crd`,",
        f"     from the Rust types in src/crd.rs): edit those, then run `{REGENERATE}`. -->",
        "",
        f"`apiVersion: {group}/{version['name']}`, `kind: {kind}`, namespaced, plural",
        f"`{crd['spec']['names']['plural']}`, short name "
        + ", ".join(f"`{n}`" for n in crd["spec"]["names"].get("shortNames", [])) + ":",
        cell(root.get("description", "")),
        "",
        *(["Rules on the whole object:", "", *top_rules, ""] if top_rules else []),
        "`kubectl get lg` columns:",
        "",
        "| column | from | shown | what |",
        "|---|---|---|---|",
        *columns,
        "",
        *sections,
    ])


# ---- the binaries' flags ----

def flags_page(binary, title, intro):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    help_text = subprocess.run([binary, "--help"], env=env, check=True, capture_output=True,
                               text=True).stdout
    # The binary prints its own name as argv[0] would name it: the file name alone.
    return "\n".join([
        f"# {title}",
        "",
        "<!-- Generated by doctools/reference.py from the binary's `--help` (clap, with an empty",
        f"     environment): edit the flags' doc comments, then run `{REGENERATE}`. -->",
        "",
        intro,
        "",
        "```text",
        help_text.rstrip(),
        "```",
        "",
    ])


# ---- the README's headline ----

def block(text, name):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    match = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), text, re.S)
    return match, begin, end


def readme_with_headline():
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
        page = f.read()
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    source, _, _ = block(page, HEADLINE)
    target, begin, end = block(readme, HEADLINE)
    if not source or not target:
        sys.exit(f"reference.py: docs/benchmarks.md and README.md must both hold {begin} ... {end}")
    return readme[:target.start(1)] + source.group(1) + readme[target.end(1):]


OPERATOR_INTRO = """`leadergroup-operator` runs the controller; `leadergroup-operator crd` prints the CRD. Every
flag can also come from the environment variable named beside it (the chart passes them as
arguments, and sets `POD_NAME`, `POD_NAMESPACE` and `RUST_LOG` from the environment). `SIGTERM` and `SIGINT` stop it gracefully: the last reconciles finish, then the
operator's own Lease is released, naming this replica, so that the next one takes its groups over
at once ([HA and upgrades](../operations.md))."""

AGENT_INTRO = """`leadergroup-agent` is the native sidecar of [the agent](../agent.md); its files and HTTP API are
described there. Every flag can also come from the environment variable named beside it; in a pod,
`POD_NAME` and `POD_NAMESPACE` come from the downward API."""


def pages(operator, agent):
    return {
        "docs/reference/chart-values.md": chart_values_page(),
        "docs/reference/leadergroup.md": crd_page(),
        "docs/reference/operator-flags.md": flags_page(operator, "Operator flags", OPERATOR_INTRO),
        "docs/reference/agent-flags.md": flags_page(agent, "Agent flags", AGENT_INTRO),
        "README.md": readme_with_headline(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["write", "check"])
    parser.add_argument("--operator", required=True, help="the leadergroup-operator binary")
    parser.add_argument("--agent", required=True, help="the leadergroup-agent binary")
    args = parser.parse_args()
    stale = []
    for path, text in pages(args.operator, args.agent).items():
        full = os.path.join(ROOT, path)
        try:
            with open(full) as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current == text:
            continue
        if args.mode == "write":
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
            print(f"reference.py: wrote {path}")
        else:
            stale.append(path)
    if stale:
        sys.exit("reference.py: stale, run `" + REGENERATE + "`: " + ", ".join(stale))


if __name__ == "__main__":
    main()
