#!/usr/bin/env python3
"""The allocation sites that held the most of the heap at its peak, from a dhat-rs profile
(`make profile-heap`): bytes and blocks live at the global peak (t-gmax), and the first frames of
this workspace's code (or else the first frames) of each site.

Usage: dhat_top.py DHAT.json [N]"""
import json
import sys

OURS = ("leadergroup_", "kube_runtime", "kube_client", "k8s_openapi", "serde", "tokio", "hyper")


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    with open(path) as f:
        profile = json.load(f)
    frames = profile["ftbl"]
    sites = sorted(profile["pps"], key=lambda p: p.get("gb", 0), reverse=True)
    total = sum(p.get("gb", 0) for p in profile["pps"])
    mib = lambda b: b / (1 << 20)
    print(f"{path}: {mib(total):.1f} MiB live at the peak (t-gmax), {len(sites)} sites; "
          f"total allocated {mib(sum(p['tb'] for p in profile['pps'])):.0f} MiB")
    for p in sites[:top]:
        names = [frames[i] for i in p["fs"]]
        useful = [n for n in names if any(k in n for k in OURS) and "dhat" not in n][:4] or names[:4]
        print(f"\n{mib(p.get('gb', 0)):8.1f} MiB in {p.get('gbk', 0):>8} blocks at the peak "
              f"({mib(p['tb']):.0f} MiB over the run)")
        for n in useful:
            print(f"           {n[:150]}")


if __name__ == "__main__":
    main()
