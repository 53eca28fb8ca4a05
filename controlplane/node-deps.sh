#!/usr/bin/env bash
# Installs from Debian what a real node on this machine needs, when missing: containerd, runc, the
# CNI plugins (/usr/lib/cni), iptables (nf_tables backend, for kube-proxy's iptables mode and the
# cluster's own FORWARD rules), nftables, conntrack (kube-proxy flushes stale UDP entries with it),
# busybox-static (the pause image and the test images are built from it), and skopeo and
# docker-registry (the install page's image pushed to a registry on loopback that the nodes pull
# from, tests/e2e/install.rs). As root.
# Packaged services are kept from starting: every node runs a containerd of its own, with its own
# config, root, state and socket (controlplane/realcluster.sh).
# Idempotent: with everything present it changes nothing and says so.
set -euo pipefail
prefix=node-deps
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

packages=(containerd runc containernetworking-plugins iptables nftables conntrack busybox-static skopeo docker-registry)

missing=()
for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  say "all present: ${packages[*]}"
  exit 0
fi
[[ $(id -u) == 0 ]] || die "missing ${missing[*]}; installing them needs root (run this script as root)"
command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install them by hand"

# invoke-rc.d asks policy-rc.d whether a service may start; 101 = no. A file we put there is ours
# to remove again; one that was there already stays as it was.
policy=/usr/sbin/policy-rc.d
own_policy=""
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\n# written by leadergroup-operator node-deps.sh for the time of an install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  own_policy=1
elif ! grep -qx 'exit 101' "$policy"; then
  die "$policy exists and does not refuse service starts (exit 101); refusing to install services that may start"
fi
trap '[[ -z $own_policy ]] || rm -f "$policy"' EXIT

start=$SECONDS
say "installing ${missing[*]}"
# An index older than a day (or none) is refreshed first; a fresh machine has none.
if [[ -z $(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages' -mmin -1440 -print -quit 2>/dev/null) ]]; then
  apt-get update -qq >&2 || die "apt-get update failed"
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
  die "apt-get install ${missing[*]} failed"

# No systemd here, but a packaged init script could still have started something: stop a
# containerd that is not one of ours (ours run with --config under a cluster folder).
for pid in $(pgrep -x containerd || true); do
  if ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- '--config'; then
    say "stopping the packaged containerd (pid $pid) that the install started"
    kill -TERM "$pid" || true
  fi
done

for pid in $(pgrep -x docker-registry || true); do
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q /etc/docker/registry/; then
    say "stopping the packaged docker-registry (pid $pid) that the install started"
    kill -TERM "$pid" || true
  fi
done

for p in "${missing[@]}"; do
  say "installed $p $(dpkg-query -W -f='${Version}' "$p")"
done
say "done in $((SECONDS - start)) s"
