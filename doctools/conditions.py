#!/usr/bin/env python3
"""Checks that docs/status.md names, in backticks, every condition type and every reason the
operator can write into a LeaderGroup's status, as the source spells them:

- the types: the `pub const NAME: &str = "Type";` of src/election.rs and src/routing.rs;
- the reasons: every PascalCase string literal of the code (tests left out) that writes the
  conditions: src/election/status.rs, src/election/refusal.rs, src/routing.rs (the `reason:`
  fields), and src/retry.rs's `PermanentKind::as_str` (the `Reconciled` reasons).

A new type or reason that the page does not list fails `make docs-check`, naming it and its file.
The `LeaderElected` condition's reasons are checked with their status too: each `(true|false,
"Reason"` that src/election/status.rs writes must stand under that status in a `LeaderElected` row
of the page's table (`Paused` is written both True, with a leader, and False, without one).
No output and exit 0 when all are listed.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAGE = "docs/status.md"
STATUSES = {"True", "False", "Unknown"}


def code(path):
    """The file's text up to its inline test module, if any."""
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    inline = re.search(r"#\[cfg\(test\)\]\s*mod \w+ \{", text)
    return text[: inline.start()] if inline else text


def types():
    found = []
    for path in ("src/election.rs", "src/routing.rs"):
        for name in re.findall(r'pub const [A-Z_]+: &str = "([A-Z][A-Za-z]+)";', code(path)):
            found.append((name, path))
    return found


def reasons():
    found = []
    for path in ("src/election/status.rs", "src/election/refusal.rs"):
        for name in re.findall(r'"([A-Z][a-z]+(?:[A-Z][a-z]+)*)"', code(path)):
            if name not in STATUSES:
                found.append((name, path))
    for name in re.findall(r'reason: "([A-Za-z]+)"', code("src/routing.rs")):
        found.append((name, "src/routing.rs"))
    retry = code("src/retry.rs")
    as_str = retry[retry.index("pub const fn as_str", retry.index("impl PermanentKind")):]
    as_str = as_str[: as_str.index("\n    }\n")]
    for name in re.findall(r'PermanentKind::\w+ => "([A-Za-z]+)"', as_str):
        found.append((name, "src/retry.rs"))
    return found


def leader_elected_written():
    """(status, reason) of every LeaderElected condition src/election/status.rs writes: its
    `(true|false, "Reason", message)` tuples."""
    text = code("src/election/status.rs")
    return {("True" if s == "true" else "False", r)
            for s, r in re.findall(r'\(\s*(true|false),\s*"([A-Z][A-Za-z]+)"', text)}


def leader_elected_listed(page):
    """(status, reason) of the page's LeaderElected rows: a reason stands under the status word
    (True, False, Unknown) last before it in the row's second cell."""
    listed = set()
    for line in page.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 3 or cells[1] != "`LeaderElected`":
            continue
        status = None
        for word, reason in re.findall(r"\b(True|False|Unknown)\b|`([A-Za-z]+)`", cells[2]):
            if word:
                status = word
            elif status:
                listed.add((status, reason))
    return listed


def main():
    with open(os.path.join(ROOT, PAGE)) as f:
        page = f.read()
    listed = set(re.findall(r"`([A-Za-z]+)`", page))
    ts, rs = types(), reasons()
    if len(ts) < 7 or len(rs) < 20:
        sys.exit(f"conditions.py: found only {len(ts)} types and {len(rs)} reasons: has the source moved?")
    missing = sorted({(kind, name, path) for kind, found in (("type", ts), ("reason", rs))
                      for name, path in found if name not in listed})
    for kind, name, path in missing:
        print(f"{PAGE}: the condition {kind} `{name}` ({path}) is not listed", file=sys.stderr)
    written = leader_elected_written()
    if len(written) < 4:
        sys.exit(f"conditions.py: found only {sorted(written)} LeaderElected reasons in src/election/status.rs: has the source moved?")
    unlisted = sorted(written - leader_elected_listed(page))
    for status, reason in unlisted:
        print(f"{PAGE}: `LeaderElected` {status} `{reason}` (src/election/status.rs) is not in a LeaderElected row",
              file=sys.stderr)
    sys.exit(1 if missing or unlisted else 0)


if __name__ == "__main__":
    main()
