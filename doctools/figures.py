#!/usr/bin/env python3
"""Every published figure is a rendering of the committed result it came from.

A figure is a number with a unit ("12.2 ms", "99.3 MiB", "6 writes", "0.1 core"; the first number
of a range, "85-99 MiB" or "220 and 265 ms", is one too). A marker right after it names its source
and how the figure is computed from it:

    a crash handover in 12.2 ms<!-- fig: bench/results/crash.json system=leadergroup-operator
    case=crash metric=ms median ms -->

and this tool recomputes it from the JSON and fails, naming the file, the line, the figure and
what the JSON gives, when they differ. In the checked places (below) every figure must carry a
marker: a figure without a source fails too. A figure that is no result (a setting, a default, a
target, a figure cited from elsewhere) says so with `<!-- fig: not measured: WHY -->`.

The checked places, which must exist:
- README.md, docs/benchmarks.md, docs/scaling.md: between `<!-- figures:begin -->` and
  `<!-- figures:end -->`;
- CHANGELOG.md: the newest version's section (Unreleased, until a release names it);
- charts/leadergroup-operator/values.yaml: each comment that a block of `# fig TEXT: SOURCE` lines
  precedes (the sizing comment): the block's lines name, in order, every figure of the comment.
  A YAML comment cannot hold the Markdown marker: values.yaml's comments become
  docs/reference/chart-values.md.
A marker anywhere else in the Markdown (docs/, the READMEs) is checked as well. The tables the
benchmark writes between `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->` are generated
from bench/results (its unit test `the_committed_page_holds_the_committed_results_tables` fails on
a difference, and reference.py on the README's copy of the headline); this tool skips them.

A marker's source, after `fig:`, is a small stack program (words split as a shell does, so quote
a word with spaces):
- `FILE` (a path from the repository's root, ending in .json) followed by `system=`, `case=`,
  `metric=` (shell-style wildcards allowed) selects the samples of that results file (testenv's
  Record: `{"run": {...}, "samples": [{system, case, metric, value}]}`) and pushes the value of
  the one that matches; of several, their numbers as one list, or their lists of samples each
  apart (a statistic of them is one per list: `median min` is the least of their medians; `flat`
  pools them); `run=a.b` pushes a field of the run record instead; `FILE#/json/pointer` pushes
  what the pointer names.
- `median`, `p50`, `p90`, `p99`, `min`, `max`, `mean`, `n`, `sum` of a list: the bench's rule
  (testenv/src/stats.rs: nearest rank, the median of an even count the mean of the middle two);
  `sum` of an object sums its values, `writes` those whose verb is not GET, LIST or WATCH (an
  object of "VERB resource" counts); `key=NAME` takes one entry of an object; `commit` the
  commit of a version ("0.2.0 (3054da0)"), for a marker after inline code (`3054da0`).
- A number pushes itself; `+ - * /` combine the two on top; `min2` and `max2` keep one of them.
- The last word formats: `ms` as the bench's tables do (bench/src/markdown.rs: "12.2 ms",
  "964 ms", "11.2 s"), a word with `%` as printf ("%.1f MiB"), a word with `{` as Python's
  str.format ("{:,.0f} groups", "{:.16} UTC").

  doctools/figures.py    # exit 0 when every figure agrees; prints only the pages not checked yet
"""

import fnmatch
import json
import math
import os
import re
import shlex
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# The checked places: the pages whose figures between figures:begin/end must all carry a marker.
REGION_PAGES = ["README.md", "docs/benchmarks.md", "docs/scaling.md"]
CHANGELOG = "CHANGELOG.md"
VALUES = "charts/leadergroup-operator/values.yaml"
# Pages among the published ones whose figures have no committed source yet, and why: printed on
# every run, so that the gap stays in sight.
PENDING = {}
# docs/chaos.md is rendered whole from chaos/results/latest.json (chaos/src/results.rs, whose unit
# test fails when the committed page is not the committed result rendered): pending until that
# result is committed.
if not os.path.exists(os.path.join(ROOT, "chaos/results/latest.json")):
    PENDING["docs/chaos.md"] = ("written whole by the chaos run from the run itself; no result of "
                                "the run is committed yet (chaos/results/latest.json, issue 49)")
# Other Markdown whose markers are checked wherever they stand.
OTHER_MARKDOWN = ["charts/leadergroup-operator/README.md", "agent/README.md", "client/README.md"]

UNIT = (r"(?:ns|µs|us|ms|s|min|h|seconds?|minutes?|hours?|KiB|MiB|GiB|TiB|kB|KB|MB|GB|%|×"
        r"|CPU[ -]s(?:econds?)?|CPU[ -]seconds?|cores?|requests?(?:/s)?|writes?(?:/s)?"
        r"|reads?(?:/s)?|PUTs(?:/s)?|GETs(?:/s)?)")
NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
# A number with its unit, or the first of two numbers that share the second's unit.
FIGURE = re.compile(
    rf"(?<![\w.,/#:\-–])(?P<first>{NUMBER})"
    rf"(?:(?P<range>\s*(?:-|–|\bto\b|\band\b|\bor\b)\s*)(?P<second>{NUMBER}))?"
    rf"(?P<space>\s?)(?P<unit>{UNIT})(?![\w/])")
MARKER = re.compile(r"<!--\s*fig:(?P<body>.*?)-->", re.S)
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
REGION_BEGIN, REGION_END = "<!-- figures:begin -->", "<!-- figures:end -->"
BENCH_BLOCK = re.compile(r"<!-- bench:([\w-]+):begin -->.*?<!-- bench:\1:end -->", re.S)
NOT_MEASURED = re.compile(r"^not measured:\s*\S")


class SourceError(Exception):
    """A marker whose source cannot be read or computed."""


# ---- the bench's arithmetic ----

def quantile(values, q):
    """testenv/src/stats.rs: nearest rank; the median of an even count is the mean of the middle
    two."""
    ordered = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    n = len(ordered)
    if n == 0:
        raise SourceError("no samples")
    if q == 0.5 and n % 2 == 0:
        return (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    rank = math.ceil(q * n)
    return ordered[min(max(rank, 1), n) - 1]


def ms(value):
    """bench/src/markdown.rs `ms`: milliseconds, with a precision that suits their size (Rust's
    `{:.N}` and Python's `%.Nf` round alike: the exact binary value, ties to even)."""
    if not math.isfinite(value):
        return "did not converge"
    if value >= 10_000:
        return "%.1f s" % (value / 1000)
    if value >= 100:
        return "%.0f ms" % value
    return "%.1f ms" % value


def numbers(value):
    if not isinstance(value, list):
        raise SourceError(f"wants a list of samples, has {type(value).__name__}")
    return [v for v in value if isinstance(v, (int, float))]


def counts(value):
    if not isinstance(value, dict):
        raise SourceError(f"wants an object, has {type(value).__name__}")
    return value


def commit(version):
    """The commit of a version string, "0.2.0 (3054da0)" -> "3054da0"."""
    m = re.search(r"\(([0-9a-f]{7,40})\)", str(version))
    if not m:
        raise SourceError(f"no commit in {version!r}")
    return m.group(1)


UNARY = {
    "median": lambda v: quantile(numbers(v), 0.5),
    "p50": lambda v: quantile(numbers(v), 0.5),
    "p90": lambda v: quantile(numbers(v), 0.9),
    "p99": lambda v: quantile(numbers(v), 0.99),
    "min": lambda v: min(numbers(v)),
    "max": lambda v: max(numbers(v)),
    "mean": lambda v: sum(numbers(v)) / len(numbers(v)),
    "n": lambda v: len(numbers(v)),
    "sum": lambda v: sum(counts(v).values()) if isinstance(v, dict) else sum(numbers(v)),
    "writes": lambda v: sum(x for k, x in counts(v).items()
                            if k.split(" ", 1)[0] not in ("GET", "LIST", "WATCH")),
    "commit": commit,
}
BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "min2": min,
    "max2": max,
}
SELECTORS = ("system", "case", "metric", "run")


# ---- a marker's source ----

_loaded = {}


def load(path):
    if path not in _loaded:
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full):
            raise SourceError(f"{path}: no such file")
        with open(full) as f:
            try:
                _loaded[path] = json.load(f)
            except json.JSONDecodeError as e:
                raise SourceError(f"{path}: not JSON: {e}") from e
    return _loaded[path]


def pointer(document, path, where):
    node = document
    for part in path.split("/")[1:] if path else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise SourceError(f"{where}: no {part!r} at {path}")
    return node


def select(path, wanted):
    """The value `wanted` picks in the results file `path`."""
    document = load(path)
    where = path + "".join(f" {k}={v}" for k, v in wanted.items())
    if "run" in wanted:
        node = document.get("run", {})
        for part in wanted["run"].split("."):
            if not isinstance(node, dict) or part not in node:
                raise SourceError(f"{where}: the run record has no {wanted['run']}")
            node = node[part]
        return node
    samples = document.get("samples") if isinstance(document, dict) else None
    if not isinstance(samples, list):
        raise SourceError(f"{path}: no samples (a results file holds run and samples)")
    found = [s for s in samples
             if all(fnmatch.fnmatchcase(str(s.get(k)), v) for k, v in wanted.items())]
    if not found:
        raise SourceError(f"{where}: no such sample")
    if len(found) == 1:
        return found[0].get("value")
    values = [s.get("value") for s in found]
    if all(isinstance(v, (int, float)) for v in values):
        return values
    if all(isinstance(v, list) for v in values):
        return Each(values)
    raise SourceError(f"{where}: {len(found)} samples, neither all numbers nor all lists")


class Each(list):
    """The lists of samples of several matches: a statistic of it is one per list."""


def is_format(word):
    return word == "ms" or "%" in word or "{" in word


def render(word, value):
    try:
        if word == "ms":
            return ms(float(value))
        if "{" in word:
            return word.format(value)
        return word % value
    except (TypeError, ValueError, KeyError, IndexError) as e:
        raise SourceError(f"cannot format {value!r} with {word!r}: {e}") from e


def evaluate(source):
    """The figure `source` (a marker's words after `fig:`) renders."""
    try:
        words = shlex.split(source)
    except ValueError as e:
        raise SourceError(f"cannot split the source: {e}") from e
    if not words:
        raise SourceError("names no source")
    stack, i = [], 0
    while i < len(words):
        word = words[i]
        if i == len(words) - 1 and is_format(word):
            if len(stack) != 1:
                raise SourceError(f"leaves {len(stack)} values to format, not one")
            return render(word, stack[0])
        file, _, fragment = word.partition("#")
        if file.endswith(".json"):
            i += 1
            if fragment:
                stack.append(pointer(load(file), fragment, file))
                continue
            wanted = {}
            while i < len(words) and words[i].split("=", 1)[0] in SELECTORS and "=" in words[i]:
                key, value = words[i].split("=", 1)
                wanted[key] = value
                i += 1
            stack.append(select(file, wanted))
            continue
        if word in UNARY:
            if not stack:
                raise SourceError(f"{word}: nothing to apply it to")
            top = stack.pop()
            try:
                if isinstance(top, Each):
                    stack.append([UNARY[word](v) for v in top])
                else:
                    stack.append(UNARY[word](top))
            except (ValueError, ZeroDivisionError) as e:
                raise SourceError(f"{word}: {e}") from e
        elif word == "flat":
            top = stack.pop() if stack else None
            if not isinstance(top, Each):
                raise SourceError("flat: wants the lists of several samples")
            stack.append([x for v in top for x in v])
        elif word.startswith("key="):
            top = counts(stack.pop()) if stack else {}
            if word[4:] not in top:
                raise SourceError(f"no entry {word[4:]!r} (has {', '.join(top) or 'none'})")
            stack.append(top[word[4:]])
        elif word in BINARY:
            if len(stack) < 2:
                raise SourceError(f"{word}: wants two values")
            b, a = stack.pop(), stack.pop()
            try:
                stack.append(BINARY[word](a, b))
            except (TypeError, ZeroDivisionError) as e:
                raise SourceError(f"{word}: {e}") from e
        elif re.fullmatch(r"-?\d+(?:\.\d+)?", word):
            stack.append(float(word))
        else:
            raise SourceError(f"unknown word {word!r}")
        i += 1
    raise SourceError("ends without a format (ms, a %-format or a {}-format)")


# ---- the pages ----

def blank(text, start, end):
    """`text` with [start, end) replaced by spaces, its line breaks kept (offsets stay)."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def code_spans(text):
    """The [start, end) of fenced code blocks and of inline code (which may go on over a line
    break, not over a blank line)."""
    fences, offset, fence = [], 0, None
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            if fence is None:
                fence = offset
            else:
                fences.append((fence, offset + len(line)))
                fence = None
        offset += len(line) + 1
    if fence is not None:
        fences.append((fence, len(text)))
    spans, start = list(fences), 0
    inline = re.compile(r"(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n).)*?(?<!`)\1(?!`)", re.S)
    for a, b in fences + [(len(text), len(text))]:
        for m in inline.finditer(text[start:a]):
            spans.append((start + m.start(), start + m.end()))
        start = b
    return sorted(spans)


def inside(pos, spans):
    return any(a <= pos < b for a, b in spans)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def figures_in(masked):
    """(start, end) of every figure of `masked`: a range's first number alone, then the second
    with the unit."""
    out = []
    for m in FIGURE.finditer(masked):
        if m.group("second"):
            out.append((m.start("first"), m.end("first")))
            out.append((m.start("second"), m.end("unit")))
        else:
            out.append((m.start("first"), m.end("unit")))
    return out


def text_of(text, span):
    return " ".join(text[span[0]:span[1]].split())


class Report:
    def __init__(self):
        self.wrong, self.unsourced, self.broken, self.checked = [], [], [], 0

    def claim(self, where, figure, source):
        """Checks `figure` against `source`; returns False when the source cannot be computed."""
        body = " ".join(source.split())
        if "--" in body:
            # CommonMark ends no comment early on it, but older renderers do.
            self.broken.append(f"{where}: {figure!r}: its marker holds `--`")
            return False
        if NOT_MEASURED.match(body):
            return True
        self.checked += 1
        try:
            value = evaluate(body)
        except SourceError as e:
            self.broken.append(f"{where}: {figure!r}: its source `{body}`: {e}")
            return False
        if value != figure:
            self.wrong.append(f"{where}: the figure {figure!r}: the JSON gives {value!r} "
                              f"(`{body}`)")
        return True


def markdown(path, report, regions):
    """Checks every marker of the Markdown page `path`, and that each figure of its checked
    `regions` ("markers" or "newest-section") carries one."""
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    code = code_spans(text)
    masked = text
    for a, b in code:
        masked = blank(masked, a, b)
    markers = [m for m in MARKER.finditer(text) if not inside(m.start(), code)]
    for m in HTML_COMMENT.finditer(masked):
        masked = blank(masked, m.start(), m.end())
    for m in re.finditer(r"\]\([^)\s]*\)", masked):
        masked = blank(masked, m.start() + 1, m.end())
    spans = []
    if regions == "markers":
        begins = [m.start() for m in re.finditer(re.escape(REGION_BEGIN), text)
                  if not inside(m.start(), code)]
        ends = [m.start() for m in re.finditer(re.escape(REGION_END), text)
                if not inside(m.start(), code)]
        if not begins or len(begins) != len(ends) or any(
                not b < e for b, e in zip(begins, ends)) or any(
                e > b for e, b in zip(ends, begins[1:])):
            report.broken.append(f"{path}: wants its checked figures between {REGION_BEGIN} and "
                                 f"{REGION_END} (at least one pair, in order, not nested)")
        spans = list(zip(begins, ends))
    elif regions == "newest-section":
        heads = [m.start() for m in re.finditer(r"^## ", text, re.M)
                 if not inside(m.start(), code)]
        if not heads:
            report.broken.append(f"{path}: no version section (## ...)")
        else:
            spans = [(heads[0], heads[1] if len(heads) > 1 else len(text))]
    # The benchmark's generated tables: checked against bench/results by its own test.
    generated = [(m.start(), m.end()) for m in BENCH_BLOCK.finditer(text)]
    figures = [f for f in figures_in(masked) if not inside(f[0], generated)]
    covered = set()
    for m in markers:
        where = f"{path}:{line_of(text, m.start())}"

        def right_after(end, marker=m):
            return re.fullmatch(r"[\s*_]*", masked[end:marker.start()])

        before = [f for f in figures if f[1] <= m.start() and right_after(f[1])]
        # A marker may also follow inline code: a commit, a version (`3054da0`).
        quoted = [(a + 1, b - 1) for a, b in code if b <= m.start() and text[a] == "`"
                  and right_after(b)]
        if before:
            figure = before[-1]
            covered.add(figure)
        elif quoted:
            figure = quoted[-1]
        else:
            report.broken.append(f"{where}: a fig marker that follows no figure (it goes right "
                                 "after the number and its unit, or after inline code)")
            continue
        report.claim(f"{path}:{line_of(text, figure[0])}", text_of(text, figure), m.group("body"))
    for figure in figures:
        if inside(figure[0], spans) and figure not in covered:
            report.unsourced.append(
                f"{path}:{line_of(text, figure[0])}: {text_of(text, figure)!r} has no source")


def yaml_comments(path, report):
    """Checks the comments of `path` that a block of `# fig TEXT: SOURCE` lines precedes; wants
    at least one."""
    with open(os.path.join(ROOT, path)) as f:
        lines = f.read().split("\n")
    fig_line = re.compile(r"^\s*# fig (?P<figure>[^:]+): (?P<source>.+)$")
    comment = re.compile(r"^\s*#(?: |$)")
    blocks, i = 0, 0
    while i < len(lines):
        if not fig_line.match(lines[i]):
            i += 1
            continue
        claims = []
        while i < len(lines) and fig_line.match(lines[i]):
            m = fig_line.match(lines[i])
            claims.append((i + 1, m.group("figure").strip(), m.group("source")))
            i += 1
        first = i
        while i < len(lines) and comment.match(lines[i]) and not fig_line.match(lines[i]):
            i += 1
        blocks += 1
        body = "\n".join(comment.sub("", line, count=1) for line in lines[first:i])
        masked = body
        for a, b in code_spans(body):
            masked = blank(masked, a, b)
        figures = [(first + line_of(body, a), text_of(body, (a, b)))
                   for a, b in figures_in(masked)]
        for k in range(max(len(claims), len(figures))):
            if k >= len(figures):
                number, text, _ = claims[k]
                report.broken.append(f"{path}:{number}: `# fig {text}` names no figure of the "
                                     "comment below (one fig line per figure, in order)")
            elif k >= len(claims):
                number, text = figures[k]
                report.unsourced.append(
                    f"{path}:{number}: {text!r} has no source (a `# fig {text}: SOURCE` line at "
                    "its place in the block above the comment)")
            elif claims[k][1] != figures[k][1]:
                report.broken.append(
                    f"{path}:{claims[k][0]}: `# fig {claims[k][1]}` stands where the comment's "
                    f"figure {k + 1} is {figures[k][1]!r} (line {figures[k][0]})")
            else:
                report.claim(f"{path}:{figures[k][0]}", figures[k][1], claims[k][2])
    if not blocks:
        report.broken.append(f"{path}: no `# fig TEXT: SOURCE` block before the sizing comment")


def main():
    report = Report()
    for page in REGION_PAGES:
        markdown(page, report, "markers")
    markdown(CHANGELOG, report, "newest-section")
    yaml_comments(VALUES, report)
    others = sorted(os.path.relpath(os.path.join(d, f), ROOT)
                    for d, _, fs in os.walk(os.path.join(ROOT, "docs")) for f in fs
                    if f.endswith(".md"))
    for page in others + OTHER_MARKDOWN:
        if page not in REGION_PAGES and os.path.isfile(os.path.join(ROOT, page)):
            markdown(page, report, None)
    for page, why in PENDING.items():
        print(f"figures.py: {page}: not checked: {why}", file=sys.stderr)
    problems = report.wrong + report.broken + report.unsourced
    for problem in problems:
        print(problem, file=sys.stderr)
    if report.unsourced:
        print("figures.py: a figure's source goes right after it, <!-- fig: FILE SELECTORS... "
              "FORMAT --> (this file's doc), or <!-- fig: not measured: WHY --> for a setting, a "
              "target or a figure cited from elsewhere", file=sys.stderr)
    if problems:
        sys.exit(f"figures.py: {len(report.wrong)} figure(s) differ from their JSON, "
                 f"{len(report.unsourced)} without a source, {len(report.broken)} marker "
                 f"problem(s); {report.checked} checked")


if __name__ == "__main__":
    main()
