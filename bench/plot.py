"""Plots the handover-latency distributions per system and scenario from bench/results/*.json
into docs/benchmarks-handover.png (run by `make bench` after the harness)."""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
res = repo / "bench" / "results"


def load(name):
    return json.loads((res / f"{name}.json").read_text())


panels = []
for scenario, title in [("graceful", "1. graceful termination"), ("crash", "2. crash (ours: from the NotReady report)")]:
    data = load(scenario)
    panels.append((title, [(s["system"], s["samples_ms"]) for s in data["systems"] if s["samples_ms"]]))
scale = load("scale")
rows = []
for e in scale["entries"]:
    for key, trig in [("handover_notready", "NotReady"), ("handover_deleted", "deletion")]:
        h = e.get(key)
        if h and h["samples_ms"]:
            rows.append((f"ours, {e['groups']} groups, {trig}", h["samples_ms"]))
burst = load("burst")
rows.append((f"ours, burst of {burst['groups']}: per group", [x for b in burst["bursts"] for x in b["per_group_ms"]]))
floor = load("floor")
rows.append(("floor: one Lease CAS", floor["samples_ms"]))
panels.append(("3./4./5. ours at scale, burst, and the floor", rows))

fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.2 + 0.45 * sum(len(r) for _, r in panels)))
for ax, (title, series) in zip(axes, panels):
    labels = [name for name, _ in series]
    values = [v for _, v in series]
    ax.boxplot(values, vert=False, whis=(1, 99), showfliers=False)
    for i, v in enumerate(values, start=1):
        jitter = [i + ((k * 0.618) % 1 - 0.5) * 0.3 for k in range(len(v))]
        ax.scatter(v, jitter, s=6, alpha=0.5)
    ax.set_yticks(range(1, len(labels) + 1), labels)
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log scale); box: quartiles, whiskers: p1-p99, dots: every sample")
    ax.set_title(title)
    ax.grid(axis="x", which="both", alpha=0.3)
fig.suptitle(f"Handover latency ({scale['run']['started_at']}, {scale['run']['machine'].get('cores', '?')} cores, shared machine)")
fig.tight_layout()
out = repo / "docs" / "benchmarks-handover.png"
fig.savefig(out, dpi=110)
print(f"wrote {out}")
