#!/usr/bin/env python3
"""Checks every link of the repository's Markdown (the book in docs/, the READMEs), without the
network: a relative link must name a file of the repository, an anchor a heading of its page (as
GitHub and mdBook make them), and nothing may point outside the repository but the public URLs
listed in PUBLIC. Mentions count too, in prose and in code: a `../` path that climbs out of the
repository, or a Markdown file's name that no file of the repository has, is refused, because a
user who clones the project has neither.

The Markdown sources are checked, not mdBook's HTML, because the READMEs are not in the book, and
because a link in the source is what both GitHub and the book render: one check covers both.

  doctools/links.py            # every tracked *.md
  doctools/links.py FILE...    # these files only
"""

import os
import re
import subprocess
import sys
from urllib.parse import unquote

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))

# URLs outside the repository a page may link to: well-known public documentation only.
PUBLIC = (
    "https://kubernetes.io/docs/",
    "https://helm.sh/docs/",
    "https://argo-cd.readthedocs.io/",
    "https://fluxcd.io/",
    "https://github.com/kubernetes/kube-state-metrics",
)
# Mentions of paths, links or not: a climb out of a page's folder, a Markdown file's name.
CLIMB = re.compile(r"(?:\.\./)+[\w.-]*")
MARKDOWN_NAME = re.compile(r"[\w./-]*\b[\w-]+\.md\b")

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"``.*?``|`[^`]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s:]+)[^}]*\}\}")
EXPLICIT_ID = re.compile(r"\s*\{#([^}\s]+)[^}]*\}\s*$")


def repository_files(*patterns):
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [os.path.join(ROOT, p) for p in out.split()]


def inside(path):
    return path == ROOT or path.startswith(ROOT + os.sep)


def lines_of(path, seen=()):
    """The page's lines with mdBook's {{#include}} expanded (its anchors count on the page)."""
    with open(path) as f:
        lines = f.read().split("\n")
    out = []
    for line in lines:
        match = INCLUDE.search(line)
        if match and path not in seen:
            included = os.path.normpath(os.path.join(os.path.dirname(path), match.group(1)))
            if os.path.isfile(included) and included.endswith(".md"):
                out += lines_of(included, seen + (path,))
                continue
        out.append(line)
    return out


def prose(lines):
    """(number, line, line without inline code) of the lines outside fenced code."""
    fenced = False
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line, INLINE_CODE.sub("", line)


def slug(heading):
    """The anchor GitHub and mdBook give a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        found, counts = set(), {}
        for _, line, _ in prose(lines_of(path)):
            match = HEADING.match(line)
            if not match:
                continue
            text = match.group(2)
            explicit = EXPLICIT_ID.search(text)
            if explicit:
                found.add(explicit.group(1))
                text = text[:explicit.start()]
            base = slug(text)
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        for match in re.finditer(r'\bid="([^"]+)"', "\n".join(lines_of(path))):
            found.add(match.group(1))
        _anchors[path] = found
    return _anchors[path]


def check_target(page, target):
    """None if the link is good, else what is wrong with it."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        if target.startswith("mailto:"):
            return None
        if target.startswith(PUBLIC):
            return None
        return "links outside the repository (allowed: doctools/links.py PUBLIC)"
    path_part, _, anchor = target.partition("#")
    path_part = unquote(path_part)
    if path_part.startswith("/"):
        return "an absolute path: link relative to the page"
    dest = os.path.normpath(os.path.join(os.path.dirname(page), path_part)) if path_part else page
    if not inside(dest):
        return "points outside the repository"
    if not os.path.exists(dest):
        return "names no file of the repository"
    if anchor:
        if not dest.endswith(".md"):
            return "an anchor into a file that is not Markdown"
        if anchor not in anchors(dest):
            return f"names no heading of {os.path.relpath(dest, ROOT)}"
    return None


def mentions_outside(page, lines, markdown_names):
    """What the page names, link or not, that the repository does not have."""
    rel = os.path.relpath(page, ROOT)
    for number, line in enumerate(lines, 1):
        for climb in CLIMB.findall(line):
            if not inside(os.path.normpath(os.path.join(os.path.dirname(page), climb))):
                yield f"{rel}:{number}: {climb}: names a path outside the repository"
        for name in MARKDOWN_NAME.findall(line):
            if os.path.basename(name) not in markdown_names:
                yield f"{rel}:{number}: {name}: names a Markdown file the repository does not have"


def check_page(page, markdown_names):
    rel = os.path.relpath(page, ROOT)
    with open(page) as f:
        lines = f.read().split("\n")
    problems = list(mentions_outside(page, lines, markdown_names))
    for number, _, line in prose(lines):
        targets = [m.group(1) for m in LINK.finditer(line)]
        ref = REF_DEF.match(line)
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            wrong = check_target(page, target)
            if wrong:
                problems.append(f"{rel}:{number}: {target}: {wrong}")
    return problems


def main():
    markdown = repository_files("*.md")
    markdown_names = {os.path.basename(p) for p in markdown}
    pages = [os.path.abspath(p) for p in sys.argv[1:]] or markdown
    problems = [p for page in pages for p in check_page(page, markdown_names)]
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        sys.exit(f"links.py: {len(problems)} broken or outside links in {len(pages)} pages")
    print(f"links.py: {len(pages)} pages, every link resolves")


if __name__ == "__main__":
    main()
