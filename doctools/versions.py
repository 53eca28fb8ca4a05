#!/usr/bin/env python3
"""Checks that every page giving the supported Kubernetes range ("1.NN to 1.MM", or "1.NN or
newer" for the chart's floor) gives the one the repository tests: the oldest minor from
controlplane/oldest/versions.env (which the chart's kubeVersion floor must equal) to the newest
from controlplane/versions.env. No output and exit 0 when every page agrees.
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def minor(path):
    with open(os.path.join(ROOT, path)) as f:
        return re.search(r"^KUBERNETES_VERSION=v(1\.\d+)\.", f.read(), re.M).group(1)


def main():
    oldest, newest = minor("controlplane/oldest/versions.env"), minor("controlplane/versions.env")
    errors = []
    with open(os.path.join(ROOT, "charts/leadergroup-operator/Chart.yaml")) as f:
        floor = re.search(r'^kubeVersion: ">=(1\.\d+)\.0-0"', f.read(), re.M)
    if not floor or floor.group(1) != oldest:
        errors.append(f"charts/leadergroup-operator/Chart.yaml: kubeVersion floor is not {oldest}")
    pages = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [
        os.path.join(ROOT, p) for p in ("README.md", "charts/leadergroup-operator/README.md",
                                        "agent/README.md", "client/README.md")]
    for page in pages:
        if not os.path.exists(page):
            continue
        with open(page) as f:
            text = " ".join(f.read().split())
        where = os.path.relpath(page, ROOT)
        for low, high in re.findall(r"Kubernetes (1\.\d+) to (1\.\d+)", text):
            if (low, high) != (oldest, newest):
                errors.append(f"{where}: says Kubernetes {low} to {high}; tested: {oldest} to {newest}")
        for low in re.findall(r"Kubernetes (1\.\d+) or newer", text):
            # Only the chart's own floor may be written so; older floors name an API's GA.
            if low == oldest:
                errors.append(f"{where}: says Kubernetes {low} or newer; say {oldest} to {newest}")
    for e in errors:
        print(e, file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
