#!/usr/bin/env python3
"""Checks that docs/status.md names, in backticks, every condition type and every reason the
operator can write into a LeaderGroup's status, as the source spells them:

- the types: the `pub const NAME: &str = "Type";` of src/election.rs and src/routing.rs;
- the reasons: every PascalCase string literal of the code (tests left out) that writes the
  conditions: src/election/status.rs, src/election/refusal.rs, src/routing.rs (the `reason:`
  fields), and src/retry.rs's `PermanentKind::as_str` (the `Reconciled` reasons).

A new type or reason that the page does not list fails `make docs-check`, naming it and its file.
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


def main():
    with open(os.path.join(ROOT, PAGE)) as f:
        listed = set(re.findall(r"`([A-Za-z]+)`", f.read()))
    ts, rs = types(), reasons()
    if len(ts) < 7 or len(rs) < 20:
        sys.exit(f"conditions.py: found only {len(ts)} types and {len(rs)} reasons: has the source moved?")
    missing = sorted({(kind, name, path) for kind, found in (("type", ts), ("reason", rs))
                      for name, path in found if name not in listed})
    for kind, name, path in missing:
        print(f"{PAGE}: the condition {kind} `{name}` ({path}) is not listed", file=sys.stderr)
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
