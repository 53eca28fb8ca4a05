#!/usr/bin/env python3
"""Checks what a newcomer runs first, from the README to a loaded image and a running operator
(issue 52), so that it stays what works:

- the README's install is the install page's: each `sh` block of the README's Quickstart is, word
  for word, an `sh` block of the chart README's install section, which tests/e2e/install.rs runs
  as written; and the images are built and loaded before the first `helm install`;
- the install page keeps its two ways apart: step 2a (onto the nodes, the chart's default image)
  names no registry and sets no image.repository, step 2b (a registry) imports into no node, and
  each loads both the operator's and the agent's archive;
- every image the pages and the examples name as `leadergroup-operator:TAG` or
  `leadergroup-agent:TAG` has the tag `images/build.sh` gives it (the chart's appVersion, the
  workspace's version), examples/quickstart/agent.yaml's image included;
- the pages' commands wait boundedly: no `until`/`while` loop, and every `kubectl rollout status`
  and `kubectl wait` has a `--timeout`;
- the chart README links nothing outside the chart (`../`: broken once the chart is packaged);
- the project's unconfirmed address is named only where a line says it is a placeholder.

Exits non-zero, naming the file and what differs.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = "README.md"
CHART_README = "charts/leadergroup-operator/README.md"
# The pages whose commands a newcomer copies, in the order they meet them.
RUN_PAGES = [README, CHART_README, "docs/quickstart.md"]
AGENT_PATCH = "examples/quickstart/agent.yaml"
# The project's address, which no record confirms: every file naming it says it is a placeholder.
ADDRESS = "github.com/leadergroup/leadergroup-operator"
# Where the address stands as data that follows a placeholder said elsewhere: the alerts' unit
# test (the rendered default of prometheusRule.runbookBaseUrl) and the generated values table
# (from values.yaml, which says it).
ADDRESS_DATA = {"charts/tests/alerts_test.yaml", "docs/reference/chart-values.md"}

failures = []


def fail(path, message):
    failures.append(f"{path}: {message}")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def sh_blocks(text):
    """(first line, text) of every ```sh block, its indentation removed."""
    out, block, indent, start = [], None, 0, 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if block is None:
            if stripped.startswith("```"):
                lang, indent, start = stripped[3:].strip(), len(line) - len(stripped), number
                block = [] if lang == "sh" else False
        elif stripped.startswith("```"):
            if block is not False:
                out.append((start, "\n".join(block) + "\n"))
            block = None
        elif block is not False:
            block.append(line[indent:] if line[:indent].strip() == "" else stripped)
    return out


def section(text, heading):
    """The text of the section whose heading line starts with `heading`, up to the next heading of
    its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(heading)]
    if not starts:
        return None
    i, fenced = starts[0] + 1, False
    while i < len(lines) and (fenced or not re.match(r"#{1,%d} " % level, lines[i])):
        fenced ^= lines[i].lstrip().startswith("```")
        i += 1
    return "\n".join(lines[starts[0]:i]) + "\n"


def versions():
    chart = read("charts/leadergroup-operator/Chart.yaml")
    app = re.search(r'^appVersion: *"?([^"\n]+)"?$', chart, re.M).group(1)
    cargo = read("Cargo.toml")
    workspace = cargo[cargo.index("[workspace.package]"):]
    version = re.search(r'^version *= *"([^"]+)"', workspace, re.M).group(1)
    return {"leadergroup-operator": app, "leadergroup-agent": version}


def check_install_path():
    readme, chart = read(README), read(CHART_README)
    install = chart[chart.index("<!-- ANCHOR: install"):chart.index("<!-- ANCHOR_END: install")]
    nodes, registry = section(install, "### 2a."), section(install, "### 2b.")
    if nodes is None or registry is None:
        fail(CHART_README, "no steps '### 2a.' (onto the nodes) and '### 2b.' (a registry) in the install section")
        return
    page_blocks = {text for _, text in sh_blocks(install.replace(registry, ""))}
    quickstart = section(readme, "## Quickstart")
    blocks = sh_blocks(quickstart or "")
    if not blocks:
        fail(README, "the Quickstart has no sh block")
    for line, text in blocks:
        if text not in page_blocks:
            fail(README, f"the Quickstart's block at line {line} is not one of the install page's ({CHART_README}, "
                         f"steps 1 and 2a), which tests/e2e/install.rs runs:\n{text}")
    before_install = "".join(text for _, text in blocks).split("helm install")[0]
    for needed in ("images/build.sh operator agent", "ctr -n k8s.io images import target/images/operator.tar",
                   "ctr -n k8s.io images import target/images/agent.tar"):
        if needed not in before_install:
            fail(README, f"the Quickstart installs the chart before `{needed}`")
    nodes_text = "".join(text for _, text in sh_blocks(nodes))
    registry_text = "".join(text for _, text in sh_blocks(registry))
    if "registry.example.com" in nodes_text or "image.repository" in nodes_text:
        fail(CHART_README, "step 2a (onto the nodes) names a registry: the default image is the loaded one")
    if "ctr " in registry_text:
        fail(CHART_README, "step 2b (a registry) imports into a node")
    for name, text in (("2a", nodes_text), ("2b", registry_text)):
        for archive in ("operator.tar", "agent.tar"):
            if archive not in text:
                fail(CHART_README, f"step {name} does not load target/images/{archive}")
        if "helm install" not in text:
            fail(CHART_README, f"step {name} does not install the chart")


def check_image_tags():
    want = versions()
    paths = ["README.md", "agent/README.md", CHART_README, AGENT_PATCH]
    paths += sorted(os.path.join("docs", p) for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md"))
    paths += sorted(os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(os.path.join(ROOT, "examples"))
                    for f in fs if f.endswith((".yaml", ".yml")))
    for path in paths:
        for number, line in enumerate(read(path).splitlines(), 1):
            for name, tag in re.findall(r"\b(leadergroup-operator|leadergroup-agent):([A-Za-z0-9._-]+)", line):
                if tag in ("VERSION", "TAG") or tag == want[name]:
                    continue
                fail(f"{path}:{number}", f"{name}:{tag}, but images/build.sh builds {name}:{want[name]}")
    images = re.findall(r"^\s*image: *(\S+)", read(AGENT_PATCH), re.M)
    agent = f"leadergroup-agent:{want['leadergroup-agent']}"
    if images != [agent]:
        fail(AGENT_PATCH, f"images {images}, want [{agent}], the one `images/build.sh agent` builds and the install loads")


def check_bounded_waits():
    for path in RUN_PAGES:
        for line, text in sh_blocks(read(path)):
            for command in re.findall(r"^\s*(until|while)\b", text, re.M):
                fail(f"{path}:{line}", f"a `{command}` loop waits for ever when its condition never comes: "
                                       "bound it (for _ in $(seq N)) and say why it stopped")
            joined = text.replace("\\\n", " ")
            for command in re.findall(r"kubectl [^\n|;&]*?(?<![-\w])(?:rollout status|wait)(?![-=\w])[^\n|;&]*", joined):
                if "--timeout" not in command:
                    fail(f"{path}:{line}", f"`{command.strip()}` has no --timeout")


def check_chart_links():
    for number, line in enumerate(read(CHART_README).splitlines(), 1):
        for target in re.findall(r"\]\((\.\./[^)]*)\)", line):
            fail(f"{CHART_README}:{number}", f"link {target} leaves the chart: it breaks once the chart is packaged")


def check_placeholder_address():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for path in files:
        if path in ADDRESS_DATA or path.startswith(("target/", "bench/results/")) or path == "doctools/newcomer.py":
            continue
        try:
            text = read(path)
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            if ADDRESS in line and not any("placeholder" in near for near in lines[max(0, number - 5):number]):
                fail(f"{path}:{number}", f"names {ADDRESS}, which nothing confirms, without saying (on it or the "
                                         "four lines before) that it is a placeholder")


def main():
    check_install_path()
    check_image_tags()
    check_bounded_waits()
    check_chart_links()
    check_placeholder_address()
    for failure in failures:
        print(f"newcomer.py: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print("newcomer.py: the README's install is the install page's, images and waits as built and bounded")


if __name__ == "__main__":
    main()
