#!/usr/bin/env python3
"""Follows this pod's role through the leadergroup-agent's long poll and leads only while the pod
is the leader and the agent's answer still holds (`validUntil`). Python's standard library only.

  LEADERGROUP_AGENT=http://127.0.0.1:8686 python3 examples/agent-clients/role.py
"""

import json
import os
import socket
import time
import urllib.parse
import urllib.request

AGENT = os.environ.get("LEADERGROUP_AGENT", "http://127.0.0.1:8686")
UNKNOWN = {"role": "unknown", "epoch": None, "validUntil": None, "version": ""}


def remaining(state):
    """Seconds the answer still holds: a leader's until its validUntil (on this node's clock),
    anything else for good."""
    if state["role"] != "leader":
        return None
    return (state.get("validUntil") or 0) / 1000 - time.time()


def poll(version, holds_for):
    """The agent's state once it differs from `version`, or after 60 s; unknown if unreachable,
    or if no answer came while the leader's answer held (the agent may be paused)."""
    query = urllib.parse.urlencode({"wait": version, "timeoutSeconds": 60})
    timeout = 70 if holds_for is None else max(holds_for, 0.01)
    try:
        with urllib.request.urlopen(f"{AGENT}/role?{query}", timeout=timeout) as answer:
            return json.load(answer)
    except (socket.timeout, TimeoutError):
        return UNKNOWN
    except OSError:
        # The agent is gone or does not answer: nothing is confirmed.
        time.sleep(1)
        return UNKNOWN


def main():
    state, last = UNKNOWN, None
    while True:
        state = poll(state["version"], remaining(state))
        left = remaining(state)
        if left is not None and left <= 0:
            state = dict(UNKNOWN, version=state["version"])  # answered, but no longer holds
        role, epoch = state["role"], state["epoch"]
        if (role, epoch) == last:
            continue
        last = (role, epoch)
        print(f"role={role} epoch={epoch if epoch is not None else ''}", flush=True)
        if role == "leader":
            pass  # start leading until validUntil at most; present `epoch` to every write
        else:
            pass  # stop at once: follower, and unknown too


if __name__ == "__main__":
    main()
