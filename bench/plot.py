"""Plots the handover-latency distributions per system and scenario from bench/results/*.json
into docs/benchmarks-handover.png (run by `make bench` after the harness), and the end-to-end
ones from bench/results/e2e.json into docs/benchmarks-e2e.png. `plot.py REPO e2e` draws only the
latter (make bench-e2e)."""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
only = sys.argv[2] if len(sys.argv) > 2 else None
res = repo / "bench" / "results"


def load(name):
    return json.loads((res / f"{name}.json").read_text())


def samples(data, metric, case=None):
    """(system, case, value) of every sample of `metric` (of `case`), in the file's order."""
    return [(s.get("system", ""), s.get("case", ""), s["value"]) for s in data["samples"]
            if s["metric"] == metric and (case is None or s.get("case", "") == case)]


def value(data, metric):
    return next(v for _, _, v in samples(data, metric))


def draw(panels, suptitle, out):
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.2 + 0.45 * sum(len(r) for _, r in panels)), squeeze=False)
    for ax, (title, series) in zip(axes[:, 0], panels):
        labels = [name for name, _ in series]
        values = [v for _, v in series]
        ax.boxplot(values, vert=False, whis=(1, 99), showfliers=False)
        for i, v in enumerate(values, start=1):
            jitter = [i + ((k * 0.618) % 1 - 0.5) * 0.3 for k in range(len(v))]
            ax.scatter(v, jitter, s=10, alpha=0.6)
        ax.set_yticks(range(1, len(labels) + 1), labels)
        ax.set_xscale("log")
        ax.set_xlabel("milliseconds (log scale); box: quartiles, whiskers: p1-p99, dots: every sample")
        ax.set_title(title)
        ax.grid(axis="x", which="both", alpha=0.3)
    fig.suptitle(suptitle)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def e2e():
    path = res / "e2e.json"
    if not path.exists():
        print(f"no {path}: no end-to-end plot")
        return
    data = json.loads(path.read_text())
    panels = []
    for _, key, title in samples(data, "title"):
        series = [(system, v) for system, _, v in samples(data, "ms", key) if v]
        if series:
            panels.append((title + " (fault -> new leader's app acting)", series))
    run = data["run"]
    draw(panels, f"End to end on the real cluster ({run['started_at']}, {run['machine'].get('cores', '?')} cores, shared machine; "
         f"node-monitor-grace-period {value(data, 'node_monitor_grace_period_s')} s)", repo / "docs" / "benchmarks-e2e.png")


e2e()
if only == "e2e":
    sys.exit(0)

panels = []
for scenario, title in [("graceful", "1. graceful termination"), ("crash", "2. crash (ours: from the NotReady report)")]:
    data = load(scenario)
    panels.append((title, [(system, v) for system, _, v in samples(data, "ms") if v]))
scale = load("scale")
rows = []
triggers = {"handover_notready_ms": "NotReady", "handover_deleted_ms": "deletion"}
for s in scale["samples"]:
    if s["metric"] in triggers and s["value"]:
        rows.append((f"ours, {s['case']} groups, {triggers[s['metric']]}", s["value"]))
burst = load("burst")
rows.append((f"ours, burst of {value(burst, 'groups')}: per group", [x for _, _, v in samples(burst, "per_group_ms") for x in v]))
floor = load("floor")
rows.append(("floor: one Lease CAS", value(floor, "ms")))
panels.append(("3./4./5. ours at scale, burst, and the floor", rows))

draw(panels, f"Handover latency ({scale['run']['started_at']}, {scale['run']['machine'].get('cores', '?')} cores, shared machine)",
     repo / "docs" / "benchmarks-handover.png")
