#!/usr/bin/env python3
"""Follows this pod's role through the leadergroup-agent's long poll and leads only while the pod
is the leader. Python's standard library only.

  LEADERGROUP_AGENT=http://127.0.0.1:8686 python3 examples/agent-clients/role.py
"""

import json
import os
import time
import urllib.parse
import urllib.request

AGENT = os.environ.get("LEADERGROUP_AGENT", "http://127.0.0.1:8686")


def poll(version):
    """The agent's state once it differs from `version`, or after 60 s; unknown if unreachable."""
    query = urllib.parse.urlencode({"wait": version, "timeoutSeconds": 60})
    try:
        with urllib.request.urlopen(f"{AGENT}/role?{query}", timeout=70) as answer:
            return json.load(answer)
    except OSError:
        # The agent is gone or does not answer: nothing is confirmed.
        time.sleep(1)
        return {"role": "unknown", "epoch": None, "version": ""}


def main():
    version, last = "", None
    while True:
        state = poll(version)
        version = state["version"]
        role, epoch = state["role"], state["epoch"]
        if (role, epoch) == last:
            continue
        last = (role, epoch)
        print(f"role={role} epoch={epoch if epoch is not None else ''}", flush=True)
        if role == "leader":
            pass  # start leading; present `epoch` to every write (the book's Fencing writes)
        else:
            pass  # stop at once: follower, and unknown too


if __name__ == "__main__":
    main()
