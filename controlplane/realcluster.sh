#!/usr/bin/env bash
# Starts and stops a real two-node cluster on this machine: etcd + kube-apiserver (cluster.sh),
# kube-controller-manager, kube-scheduler, and two nodes, each a kubelet with a containerd of its
# own (config, root, state, socket, runc root, cgroup root) and a bridge with its own pod CIDR,
# plus kube-proxy (iptables mode, or nftables). As root. Everything lives in one folder.
#
#   controlplane/realcluster.sh up   [--dir DIR] [--node-monitor-grace-period SECS]
#                                    [--proxy-mode iptables|nftables] [--proxy-min-sync-period DUR]
#   controlplane/realcluster.sh down [--dir DIR]
#   controlplane/realcluster.sh stop-node|start-node N [--dir DIR]
#   controlplane/realcluster.sh cut-node|uncut-node N [--dir DIR]
#
# DIR defaults to .realcluster/ in the repository. `up` reuses a healthy cluster and cleans up a
# half-started one first; every wait has a timeout. `down` stops every process and container and
# removes every mount, cgroup, bridge, veth, route and iptables rule the cluster made.
# --node-monitor-grace-period SECS (default: Kubernetes' 50): how long the node controller waits
# for a silent node before it marks it and its pods NotReady. Below 40 the kubelets renew their
# node Lease every 2 s (nodeLeaseDurationSeconds 8) and the controller checks every 2 s, so a
# short grace period does not make healthy nodes flap. The end-to-end tests use 10.
# --proxy-mode (default iptables): kube-proxy's mode; nftables uses Debian's nftables (node-deps.sh).
# --proxy-min-sync-period DUR (default: kube-proxy's, 1s): the mode's minSyncPeriod, the least
# time between two syncs of the rules (a Go duration: 100ms); a sync that follows another
# sooner waits for it, so a handover right after another change of endpoints waits this long.
# 0s measured as the default does (docs/service.md): give a small duration rather than zero.
# stop-node N stops node N's kubelet and containerd (its containers keep running, as on a node
# that lost its control-plane connection); start-node N starts both again with the same config.
# cut-node N is a lost node: stop-node N, then node N's pods (10.244.N.0/24) lose every packet to
# and from anything outside node N: the host (the API server, through its Service IP or not, and
# the rest of the control plane) and the other node's pods; open connections included. It prints
# on stdout the wall clock (seconds since the epoch, nanoseconds) just before the drop started.
# uncut-node N lets the packets through again, then starts node N as start-node does.
#
# Network (one cluster per machine: the names and addresses below are fixed):
#   bridge lg-host   10.250.0.1 (kube-apiserver, controller-manager, scheduler, kube-proxy),
#                    10.250.0.11 and .12 (node IPs: kubelet), and the route of the service range
#                    10.96.0.0/24, so a ClusterIP kube-proxy does not translate goes nowhere
#   bridge lg-cniN   node N's pods, 10.244.N.0/24 (CNI bridge + host-local), gateway 10.244.N.1
#   chain LG-REALCLUSTER (filter FORWARD): drops pod traffic to or from anything but pods, so no
#                    packet of the pod network leaves the machine (there is no masquerading either)
#   nft table ip lg-cut-nodeN (cut-node N only; uncut-node N and down delete it)
# Both nodes share the host's network namespace, so one kube-proxy programs it for both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

prefix=realcluster
# shellcheck source=lib.sh
source "$here/lib.sh"

cmd=${1:-}
case $cmd in up | down | stop-node | start-node | cut-node | uncut-node) ;; *) usage; exit 2 ;; esac
shift
node_arg=""
if [[ $cmd == *-node ]]; then
  node_arg=${1:-}
  [[ $node_arg == 1 || $node_arg == 2 ]] || { usage; die "$cmd needs a node number, 1 or 2"; }
  shift
fi
dir=$repo/.realcluster
grace=""
proxy_mode=iptables
min_sync=""
while (($#)); do
  case $1 in
    --dir) need_value "$@"; dir=$2; shift 2 ;;
    --node-monitor-grace-period)
      need_value "$@"
      grace=$2
      [[ $grace =~ ^[0-9]+$ && $grace -ge 6 ]] || die "--node-monitor-grace-period: whole seconds, at least 6 (got $grace)"
      shift 2
      ;;
    --proxy-mode)
      need_value "$@"
      proxy_mode=$2
      [[ $proxy_mode == iptables || $proxy_mode == nftables ]] || die "--proxy-mode: iptables or nftables (got $proxy_mode)"
      shift 2
      ;;
    --proxy-min-sync-period)
      need_value "$@"
      min_sync=$2
      [[ $min_sync =~ ^[0-9]+(ms|s)$ ]] || die "--proxy-min-sync-period: a duration in ms or s, e.g. 100ms (got $min_sync)"
      shift 2
      ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "$1" ;;
  esac
done

marker=.leadergroup-realcluster
host_link=lg-host
api_ip=10.250.0.1
nodes=(lg-node-1 lg-node-2)
node_ips=(10.250.0.11 10.250.0.12)
pod_cidr=10.244.0.0/16
service_cidr=10.96.0.0/24
chain=LG-REALCLUSTER
pause_ref=localhost/leadergroup/pause:1
# The nodes' fixed ports live on their own addresses (10.250.0.x), so they never meet a loopback
# port another cluster on this machine picked.
kubelet_port=10250 kubelet_healthz_port=10248 kcm_port=10257 scheduler_port=10259
# Host paths the components create whatever their flags say (the kubelet's device-plugin socket
# folder is a constant, /var/lib/kubelet/device-plugins; libcni caches results in /var/lib/cni; the
# kubelet links container logs into /var/log/containers; the shims' sockets go to
# /run/containerd/s). `up` notes which did not exist; `down` removes those again.
host_paths=(/var/lib/kubelet /var/lib/cni /var/log/containers /run/containerd /usr/libexec/kubernetes)

now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }

# ---- processes (running, alive, spawn, lock: lib.sh, as in cluster.sh) ----
stop_pid() { # stop_pid NAME PID: SIGTERM, SIGKILL after 15 s
  local i
  kill -TERM "$2" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    running "$2" || return 0
    sleep 0.1
  done
  say "$1 (pid $2) ignored SIGTERM for 15 s; killing it"
  kill -KILL "$2" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do running "$2" || return 0; sleep 0.1; done
  say "$1 (pid $2) survives SIGKILL"
}
stop() { alive "$1" || return 0; stop_pid "$1" "$(cat "$dir/$1.pid")"; }
# stop_strays: every process left whose command line names a path under DIR (its config, socket or
# data), which no pid file tracks any more: a kubelet started twice while a node came back, one
# copy orphaned. This script's own runs are left alone.
stop_strays() {
  local pid cmd
  for pid in $(pgrep -f -- "$dir/" || true); do
    cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || continue
    [[ $cmd == *cluster.sh* || $pid == "$$" ]] && continue
    say "a process of this cluster no pid file tracks: $pid (${cmd:0:120})"
    stop_pid "${cmd%% *}" "$pid"
  done
}
wait_for() { # wait_for NAME SECONDS CHECK...: polls CHECK; fails at the limit or when NAME died
  local name=$1 limit=$2 i
  shift 2
  for ((i = 0; i < limit * 5; i++)); do
    "$@" 2>/dev/null && return 0
    alive "$name" || return 1
    sleep 0.2
  done
  return 1
}
fail() { # fail NAME MESSAGE: the end of NAME's log, then the error
  say "last lines of $dir/$1.log:"
  tail -n 25 "$dir/$1.log" >&2 || true
  die "$2 (log: $dir/$1.log; stop the rest with: controlplane/realcluster.sh down --dir $dir)"
}

# ---- checks: what this machine must have; each failure names itself ----
check_host() {
  local bad=() s
  [[ $(id -u) == 0 ]] || bad+=("not root: kubelet, containerd and the network setup need root")
  [[ $(uname -s) == Linux ]] || bad+=("not Linux")
  grep -qw overlay /proc/filesystems || bad+=("no overlay filesystem in the kernel (containerd's overlayfs snapshotter)")
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] || bad+=("no br_netfilter (/proc/sys/net/bridge/bridge-nf-call-iptables): Services would not work between pods of one bridge")
  [[ -w /proc/sys/net/ipv4/ip_forward ]] || bad+=("/proc/sys/net/ipv4/ip_forward is not writable")
  for s in cpu cpuacct cpuset memory pids freezer devices; do
    [[ -w /sys/fs/cgroup/$s ]] || bad+=("cgroup v1 controller $s is not mounted writable at /sys/fs/cgroup/$s")
  done
  if ! ip link add lg-check type bridge 2>/dev/null; then
    bad+=("cannot create a bridge (ip link add type bridge)")
  else
    ip link add lg-check-v type veth peer name lg-check-p 2>/dev/null && ip link del lg-check-v || bad+=("cannot create a veth pair")
    ip link del lg-check
  fi
  for s in curl openssl containerd runc ctr iptables iptables-save nft conntrack /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback; do
    command -v "$s" >/dev/null || bad+=("$s missing: run controlplane/node-deps.sh (as root)")
  done
  if ((${#bad[@]} == 0)) && ! iptables -S >/dev/null 2>&1; then
    bad+=("iptables does not work: $(iptables -S 2>&1 | head -1 || true)")
  fi
  if ((${#bad[@]})); then
    for s in "${bad[@]}"; do say "check failed: $s"; done
    die "this machine cannot run the real cluster; the light cluster (etcd + kube-apiserver, simulated kubelet) still works: controlplane/cluster.sh up (make light-cluster-up)"
  fi
}

# ---- teardown: works on any half-started state, and only on what this cluster made ----
cgroup_dirs() { # every v1 cgroup folder of node N's cgroup root
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -d $h/${nodes[$1]} ]] && echo "$h${nodes[$1]}"
  done
}
mounts_under() { awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r; }

# tasks N: how many containers (pod sandboxes included) node N's containerd still runs.
tasks() { timeout 5 ctr --address "$dir/node$1/containerd.sock" --namespace k8s.io tasks ls -q 2>/dev/null | grep -c . || true; }

# kill_containers I: node I+1's containers and shims. Containers outlive containerd (their shims
# keep them): kill and delete them through runc's state under the node's runc root, then the shims
# that served the node's containerd. A shim may exit while it is looked at (its /proc entry gone).
kill_containers() {
  local i=$1 nd=$dir/node$(($1 + 1)) c pid
  if [[ -d $nd/runc ]]; then
    for c in $(runc --root "$nd/runc/k8s.io" list -q 2>/dev/null); do
      runc --root "$nd/runc/k8s.io" delete --force "$c" >/dev/null 2>&1 || say "runc delete $c failed"
      rm -f "/var/lib/cni/results/${nodes[$i]}-$c-eth0" "/var/lib/cni/results/cni-loopback-$c-lo"
    done
  fi
  for pid in $(pgrep -f containerd-shim-runc-v2 || true); do
    if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -F -- "$nd/containerd.sock" >/dev/null; then
      stop_pid containerd-shim "$pid"
    fi
  done
}

teardown() {
  local i c t
  stop kube-controller-manager # nothing recreates the pods deleted below
  stop kube-scheduler
  # Pods go the way a node stops them (the kubelet asks the CRI, which runs CNI DEL, so the IP, the
  # veth and libcni's cache go too); what is left after 30 s is killed through runc below.
  local bin kubectl
  bin=$(sed -n 's/^BIN_DIR=//p' "$dir/env" 2>/dev/null) kubectl=""
  [[ -x $bin/kubectl && -f $dir/kubeconfig ]] && kubectl=$bin/kubectl
  if [[ -n $kubectl ]] && alive kubelet-1 && alive kubelet-2 &&
    "$kubectl" --kubeconfig="$dir/kubeconfig" --request-timeout=10s delete pods --all --all-namespaces \
      --force --grace-period=0 --wait=false >/dev/null 2>&1; then
    t=$(now)
    for ((i = 0; i < 150; i++)); do
      [[ $(tasks 1) == 0 && $(tasks 2) == 0 ]] && break
      sleep 0.2
    done
    say "pods stopped by their kubelets in $(since "$t") s"
  fi
  for i in 0 1; do
    stop "kubelet-$((i + 1))"
    stop "containerd-$((i + 1))"
    kill_containers "$i"
  done
  if alive kube-proxy; then
    stop kube-proxy
  fi
  # The API server before its address on lg-host goes: on SIGTERM it deletes its own lease through
  # that address (and hangs for 10 s when the address is gone).
  [[ -d $dir/control ]] && "$here/cluster.sh" down --dir "$dir/control" 2>&1 | sed 's/^/  /' >&2
  stop_strays
  # kube-proxy's own cleanup removes its iptables (and nftables) rules, both families.
  if [[ -x ${node_bin:-} ]] || node_bin=$(sed -n 's/^NODE_BIN_DIR=//p' "$dir/env" 2>/dev/null) && [[ -x $node_bin/kube-proxy ]]; then
    timeout 60 "$node_bin/kube-proxy" --cleanup >"$dir/kube-proxy-cleanup.log" 2>&1 || say "kube-proxy --cleanup failed (log: $dir/kube-proxy-cleanup.log)"
  fi
  # The kubelet's chains: KUBE-FIREWALL (drops martian traffic to 127/8; jumped to from INPUT and
  # OUTPUT), KUBE-IPTABLES-HINT (tells kube-proxy which iptables backend it used), canaries.
  for c in iptables ip6tables; do
    while $c -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    while $c -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    for t in mangle nat filter; do
      for k in KUBE-FIREWALL KUBE-IPTABLES-HINT KUBE-KUBELET-CANARY; do
        if "$c" -t "$t" -F "$k" 2>/dev/null; then "$c" -t "$t" -X "$k" 2>/dev/null || true; fi
      done
    done
  done
  while iptables -D FORWARD -j "$chain" 2>/dev/null; do :; done
  if iptables -F "$chain" 2>/dev/null; then iptables -X "$chain" 2>/dev/null || true; fi
  for i in 1 2; do nft delete table ip "$(cut_table "$i")" 2>/dev/null || true; done
  # Tables iptables-nft created for the rules above (none existed before `up`) and that hold no rule
  # now: gone, so the ruleset is as it was.
  local fam tab
  if [[ -f $dir/nft-tables.orig ]]; then
    while read -r _ fam tab; do
      grep -qx "table $fam $tab" "$dir/nft-tables.orig" && continue
      if ! nft list table "$fam" "$tab" 2>/dev/null | grep -vE '^\s*(table|chain|type|policy|\}|$)' | grep -q .; then
        nft delete table "$fam" "$tab" 2>/dev/null || say "nft table $fam $tab not removed"
      fi
    done < <(nft list tables 2>/dev/null)
  fi
  # Mounts: sandbox network namespaces (netns_mounts_under_state_dir), overlay root filesystems,
  # the kubelet's volumes; deepest first.
  local m
  if [[ -d $dir ]]; then
    for m in $(mounts_under "$dir"); do umount "$m" 2>/dev/null || umount -l "$m" || say "cannot unmount $m"; done
  fi
  for i in 0 1; do
    ip link del "lg-cni$((i + 1))" 2>/dev/null || true
    for c in $(cgroup_dirs "$i"); do
      find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || say "cgroup $c not removed (processes left in it?)"
    done
  done
  # veths of pods whose network namespace is gone are gone with it; one whose bridge was deleted
  # above while a namespace lingered is named veth* and has no master: removed only if it was ours
  # (its peer's namespace was under DIR, and is unmounted now, so it disappears on its own).
  ip link del "$host_link" 2>/dev/null || true
  if [[ -f $dir/ip_forward.orig ]]; then
    cat "$dir/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
  fi
  # The kubelet links every container's log into /var/log/containers; ours point into DIR.
  for m in /var/log/containers/*; do
    [[ -L $m && $(readlink "$m") == "$dir/"* ]] && rm -f "$m"
  done
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  if [[ -f $dir/host-paths.created ]]; then
    while read -r m; do
      [[ " ${host_paths[*]} " == *" $m "* ]] && rm -rf "$m"
    done <"$dir/host-paths.created"
  fi
  return 0
}

wipe() {
  [[ -d $dir ]] || return 0
  if [[ -e $dir/$marker ]]; then
    [[ -z $(mounts_under "$dir") ]] || die "mounts left under $dir; not removing it: $(mounts_under "$dir" | head -3)"
    # A container still running writes on while the folder goes (one of a node that was cut and
    # started again just before `down`): kill what is left and try again.
    local try
    for try in 1 2 3 4 5; do
      rm -rf "$dir" 2>/dev/null && return 0
      say "$dir not removed (try $try): $(find "$dir" -mindepth 3 2>/dev/null | head -3 | tr '\n' ' ')"
      kill_containers 0
      kill_containers 1
      sleep 1
    done
    rm -rf "$dir"
  elif only_lock_left; then
    rm -f "$dir/.lock"
    rmdir "$dir"
  else
    die "$dir is not empty and was not created by realcluster.sh; refusing to remove it"
  fi
}

# Node N's pod CIDR (its CNI bridge's range).
node_cidr() { echo "10.244.$1.0/24"; }

# A lost node's network (cut-node N): a table of its own per node, so uncut-node and down remove
# exactly what cut-node made. Its chains run before the filter tables' (priority -10) and a drop
# in any base chain is final, whatever kube-proxy's and the kubelet's rules accept later. Filter
# hooks see every packet, not only new connections, so open watches die too. input and output:
# the host, where every control-plane process listens (the API server's Service IP is DNATed to
# it before input); forward: the other node's pods. Packets between two pods of node N also pass
# forward (br_netfilter) and are kept.
cut_table() { echo "lg-cut-node$1"; }
cut_network() { # cut_network N: one transaction (add, delete, create), so cutting twice is a no-op
  local t c
  t=$(cut_table "$1") c=$(node_cidr "$1")
  nft -f - <<EOF
add table ip $t
delete table ip $t
table ip $t {
  chain input { type filter hook input priority -10; policy accept; ip saddr $c drop; }
  chain output { type filter hook output priority -10; policy accept; ip daddr $c drop; }
  chain forward {
    type filter hook forward priority -10; policy accept;
    ip saddr $c ip daddr != $c drop
    ip daddr $c ip saddr != $c drop
  }
}
EOF
}

# A node's two processes, with the configuration `up` wrote into DIR/nodeN (start-node reuses it).
spawn_containerd() { spawn "containerd-$1" containerd --config "$dir/node$1/containerd.toml"; }
ctr_up() { timeout 5 ctr --address "$dir/node$1/containerd.sock" version >/dev/null; } # ctr_up N
spawn_kubelet() { # spawn_kubelet N
  local nd=$dir/node$1 i=$(($1 - 1))
  spawn "kubelet-$1" "$node_bin/kubelet" --config="$nd/kubelet.yaml" --kubeconfig="$nd/kubelet.kubeconfig" \
    --root-dir="$nd/kubelet" --cert-dir="$nd/kubelet/pki" --hostname-override="${nodes[$i]}" --node-ip="${node_ips[$i]}" --v=1
}
halt_node() { # halt_node N: its containers keep running (their shims hold them)
  local t
  t=$(now)
  stop "kubelet-$1"
  stop "containerd-$1"
  say "${nodes[$(($1 - 1))]}: kubelet and containerd stopped in $(since "$t") s (its containers keep running)"
}
resume_node() { # resume_node N: with the configuration `up` wrote
  local t
  t=$(now)
  alive "containerd-$1" || spawn_containerd "$1"
  wait_for "containerd-$1" 30 ctr_up "$1" || fail "containerd-$1" "containerd of ${nodes[$(($1 - 1))]} did not answer within 30 s"
  # The kubelet exits at once when containerd's CRI is still recovering the containers that ran
  # on ("server is not initialized yet", though containerd answers): started again until it
  # serves its healthz.
  kubelet_up() { [[ $(curl -s --max-time 2 "http://${node_ips[$(($1 - 1))]}:$kubelet_healthz_port/healthz") == ok ]]; }
  local try
  for ((try = 0; try < 10; try++)); do
    alive "kubelet-$1" || spawn_kubelet "$1"
    wait_for "kubelet-$1" 30 kubelet_up "$1" && break
    say "${nodes[$(($1 - 1))]}: the kubelet exited: $(tail -n 1 "$dir/kubelet-$1.log" | cut -c1-300)"
  done
  kubelet_up "$1" || fail "kubelet-$1" "the kubelet of ${nodes[$(($1 - 1))]} did not serve its healthz"
  say "${nodes[$(($1 - 1))]}: containerd and kubelet started in $(since "$t") s"
}

if [[ $cmd == down ]]; then
  if [[ ! -d $dir ]]; then
    dir=$(realpath -m "$dir")
    stop_strays
    say "nothing else to stop in $dir"
    exit 0
  fi
  [[ $(id -u) == 0 ]] || die "down needs root (it removes bridges, mounts and iptables rules)"
  dir=$(cd "$dir" && pwd)
  lock
  start=$(now)
  teardown
  wipe
  say "stopped; removed $dir in $(since "$start") s"
  exit 0
fi

if [[ $cmd == *-node ]]; then
  [[ -f $dir/env ]] || die "no real cluster in $dir"
  dir=$(cd "$dir" && pwd)
  node_bin=$(sed -n 's/^NODE_BIN_DIR=//p' "$dir/env")
  n=$node_arg
  name=${nodes[$((n - 1))]}
  t=$(now)
  case $cmd in
    stop-node) halt_node "$n" ;;
    start-node) resume_node "$n" ;;
    cut-node)
      # The kubelet goes first: were the pods cut while it still ran, their readiness probes
      # would fail and it would report them NotReady, which no lost node does.
      halt_node "$n"
      at=$(now)
      cut_network "$n"
      say "$name: pods $(node_cidr "$n") cut from the host and the other node (nft table ip $(cut_table "$n")) in $(since "$t") s"
      echo "$at"
      ;;
    uncut-node)
      nft delete table ip "$(cut_table "$n")" 2>/dev/null || say "$name was not cut"
      resume_node "$n"
      ;;
  esac
  exit 0
fi

# ---- up ----
start=$(now)
check_host
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
lock
kubeconfig=$dir/kubeconfig

# Node failure detection: --node-monitor-grace-period, and what a short one needs around it.
kcm_node_flags=() kubelet_lease=""
if [[ -n $grace ]]; then
  kcm_node_flags=(--node-monitor-grace-period="${grace}s")
  if ((grace < 40)); then
    kcm_node_flags+=(--node-monitor-period=2s)
    kubelet_lease=$'nodeLeaseDurationSeconds: 8\nnodeStatusUpdateFrequency: 2s'
  fi
fi

all_alive() {
  local p
  for p in kube-controller-manager kube-scheduler kube-proxy containerd-1 containerd-2 kubelet-1 kubelet-2; do alive "$p" || return 1; done
}
nodes_ready() {
  local ready
  ready=$("$bin/kubectl" --kubeconfig="$kubeconfig" --request-timeout=5s get nodes \
    -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{" "}{end}') || return 1
  [[ $ready == *"${nodes[0]}=True"* && $ready == *"${nodes[1]}=True"* ]]
}
print_usage() {
  cat <<EOF
real cluster ready: ${nodes[0]} (${node_ips[0]}, pods 10.244.1.0/24), ${nodes[1]} (${node_ips[1]}, pods 10.244.2.0/24), services $service_cidr; data and logs in $dir
  export KUBECONFIG=$kubeconfig
  $bin/kubectl get nodes -o wide
  images/build.sh --import $dir     # builds and imports the images (operator included)
EOF
}

if [[ -f $kubeconfig && -f $dir/env ]]; then
  bin=$(sed -n 's/^BIN_DIR=//p' "$dir/env")
  if all_alive && [[ -x $bin/kubectl ]] && nodes_ready && [[ $(sed -n 's/^GRACE=//p' "$dir/env") == "$grace" ]] &&
    [[ $(sed -n 's/^PROXY=//p' "$dir/env") == "$proxy_mode $min_sync" ]]; then
    say "reusing the healthy cluster in $dir"
    print_usage
    exit 0
  fi
fi
if [[ -e $dir/$marker || -d $dir/control ]]; then
  say "cleaning up the half-started cluster in $dir first"
  teardown
fi
wipe
mkdir -p "$dir"
touch "$dir/$marker"
lock

# ---- binaries and images ----
t=$(now)
"$here/node-deps.sh"
bin=$("$here/build.sh")
node_bin=$("$here/node-build.sh")
for b in etcd kube-apiserver kubectl; do [[ -x $bin/$b ]] || die "$bin/$b missing: run make controlplane"; done
for b in kubelet kube-proxy kube-scheduler kube-controller-manager; do [[ -x $node_bin/$b ]] || die "$node_bin/$b missing: run controlplane/node-build.sh"; done
"$repo/images/build.sh" pause busybox
cat >"$dir/env" <<EOF
BIN_DIR=$bin
NODE_BIN_DIR=$node_bin
KUBECONFIG=$kubeconfig
GRACE=$grace
PROXY=$proxy_mode $min_sync
EOF
say "binaries and images ready in $(since "$t") s"

# ---- host network ----
t=$(now)
cat /proc/sys/net/ipv4/ip_forward >"$dir/ip_forward.orig"
nft list tables >"$dir/nft-tables.orig"
for p in "${host_paths[@]}"; do [[ -e $p ]] || echo "$p"; done >"$dir/host-paths.created"
ip link show "$host_link" >/dev/null 2>&1 && die "$host_link exists but $dir does not know it: another real cluster runs on this machine (one at a time); stop it with its realcluster.sh down --dir"
ip link add "$host_link" type bridge
ip link set "$host_link" up
for a in "$api_ip" "${node_ips[@]}"; do ip addr add "$a/32" dev "$host_link"; done
ip route add "$service_cidr" dev "$host_link"
iptables -N "$chain"
iptables -A "$chain" -s "$pod_cidr" ! -d "$pod_cidr" -m comment --comment "leadergroup realcluster: pod traffic stays on the machine" -j DROP
iptables -A "$chain" ! -s "$pod_cidr" -d "$pod_cidr" -m comment --comment "leadergroup realcluster: nothing from outside reaches pods" -j DROP
iptables -I FORWARD 1 -j "$chain"
# Between the two nodes' bridges the host routes; the chain above keeps everything else out.
echo 1 >/proc/sys/net/ipv4/ip_forward
say "host network ($host_link, $chain, ip_forward) in $(since "$t") s"

# ---- etcd + kube-apiserver ----
t=$(now)
"$here/cluster.sh" up --dir "$dir/control" --bin-dir "$bin" --address "$api_ip" --service-cidr "$service_cidr" >/dev/null 2>"$dir/cluster.log" ||
  { cat "$dir/cluster.log" >&2; die "etcd + kube-apiserver did not start"; }
api_port=$(sed -n 's/^APISERVER_PORT=//p' "$dir/control/env")
cp "$dir/control/kubeconfig" "$kubeconfig"
say "etcd + kube-apiserver (https://$api_ip:$api_port) in $(since "$t") s"
echo "APISERVER_PORT=$api_port" >>"$dir/env"

# ---- identities ----
pki=$dir/control/pki
# shellcheck source=pki.sh
source "$here/pki.sh"
server=https://$api_ip:$api_port
sign_client controller-manager system:kube-controller-manager
sign_client scheduler system:kube-scheduler
sign_client kube-proxy system:kube-proxy
write_kubeconfig "$dir/controller-manager.kubeconfig" "$server" controller-manager
write_kubeconfig "$dir/scheduler.kubeconfig" "$server" scheduler
write_kubeconfig "$dir/kube-proxy.kubeconfig" "$server" kube-proxy
for i in 0 1; do
  sign_client "node$((i + 1))" "system:node:${nodes[$i]}" system:nodes
  mkdir -p "$dir/node$((i + 1))"
  write_kubeconfig "$dir/node$((i + 1))/kubelet.kubeconfig" "$server" "node$((i + 1))"
done

# ---- kube-controller-manager, kube-scheduler ----
t=$(now)
mkdir -p "$dir/kube-controller-manager" "$dir/kube-scheduler"
# --use-service-account-credentials: each controller acts as its own ServiceAccount (as kubeadm
# runs it), so RBAC sees what a real cluster's controllers do. No node IPAM: each node's CNI
# config names its pod CIDR.
spawn kube-controller-manager "$node_bin/kube-controller-manager" \
  --kubeconfig="$dir/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$dir/controller-manager.kubeconfig" --authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
  --bind-address="$api_ip" --secure-port="$kcm_port" --cert-dir="$dir/kube-controller-manager" \
  --client-ca-file="$pki/ca.crt" --root-ca-file="$pki/ca.crt" \
  --service-account-private-key-file="$pki/sa.key" --use-service-account-credentials=true \
  --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
  --service-cluster-ip-range="$service_cidr" --allocate-node-cidrs=false \
  --flex-volume-plugin-dir="$dir/kube-controller-manager/volume-plugins" \
  --leader-elect=false --profiling=false "${kcm_node_flags[@]}"
spawn kube-scheduler "$node_bin/kube-scheduler" \
  --kubeconfig="$dir/scheduler.kubeconfig" \
  --authentication-kubeconfig="$dir/scheduler.kubeconfig" --authorization-kubeconfig="$dir/scheduler.kubeconfig" \
  --bind-address="$api_ip" --secure-port="$scheduler_port" --cert-dir="$dir/kube-scheduler" \
  --leader-elect=false --profiling=false
healthz() { [[ $(curl -sk --max-time 2 "https://$api_ip:$1/healthz") == ok ]]; }
wait_for kube-controller-manager 60 healthz "$kcm_port" || fail kube-controller-manager "kube-controller-manager did not answer /healthz within 60 s"
wait_for kube-scheduler 60 healthz "$scheduler_port" || fail kube-scheduler "kube-scheduler did not answer /healthz within 60 s"
say "kube-controller-manager + kube-scheduler in $(since "$t") s"

# ---- nodes ----
start_node() { # start_node INDEX (0, 1)
  local i=$1 n=$(($1 + 1)) nd name=${nodes[$1]} ip=${node_ips[$1]} h t
  nd=$dir/node$n
  t=$(now)
  mkdir -p "$nd/cni" "$nd/cni-ipam" "$nd/containerd/root" "$nd/containerd/state" "$nd/containerd/opt" "$nd/runc" \
    "$nd/kubelet" "$nd/pod-logs" "$nd/volume-plugins"
  # The kubelet's cgroup root, in every v1 hierarchy (cpuset needs its cpus and mems filled in).
  for h in /sys/fs/cgroup/*/; do
    [[ $h == */unified/ ]] && continue
    mkdir -p "$h$name"
    if [[ -f ${h}cpuset.cpus ]]; then
      cat "${h}cpuset.cpus" >"$h$name/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$name/cpuset.mems"
    fi
  done
  cat >"$nd/cni/10-$name.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$name",
  "plugins": [{
    "type": "bridge", "bridge": "lg-cni$n", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": "$nd/cni-ipam",
             "ranges": [[{"subnet": "$(node_cidr "$n")", "gateway": "10.244.$n.1"}]],
             "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
EOF
  # restrict_oom_score_adj: this VM lacks CAP_SYS_RESOURCE, and negative oom_score_adj values
  # would fail every sandbox. netns_mounts_under_state_dir: the pods' network namespaces are
  # mounted under DIR, where `down` finds them. Root: runc's state per node, for the same reason.
  cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd/root"
state = "$nd/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$nd/containerd.sock"
[ttrpc]
  address = "$nd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_ref"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$nd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni"
    max_conf_num = 1
EOF
  spawn_containerd "$n"
  wait_for "containerd-$n" 30 ctr_up "$n" || fail "containerd-$n" "containerd of $name did not answer within 30 s"
  local tc
  tc=$(since "$t")
  for img in pause busybox; do
    timeout 120 ctr --address "$nd/containerd.sock" --namespace k8s.io images import "$repo/target/images/$img.tar" >/dev/null ||
      die "importing $img into $name's containerd failed"
  done
  # The kubelet on this host: cgroup v1 (failCgroupV1: false), cgroupfs, a cgroup root, root dir,
  # ports and addresses of its own. No image garbage collection (nothing can be pulled again) and
  # eviction thresholds low enough for a shared disk. resolvConf "": no DNS server outside.
  # imagePullCredentialsVerificationPolicy NeverVerify: no image here needs credentials, and one
  # the kubelet pulled from a registry (tests/e2e/install.rs) would otherwise stop counting as
  # preloaded under its imported name (docker.io/library/...), which the kubelet would then pull.
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$name
containerRuntimeEndpoint: unix://$nd/containerd.sock
address: $ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: $kubelet_healthz_port
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
podLogsDir: $nd/pod-logs
volumePluginDir: $nd/volume-plugins
resolvConf: ""
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
serializeImagePulls: false
imagePullCredentialsVerificationPolicy: NeverVerify
hairpinMode: hairpin-veth
$kubelet_lease
EOF
  spawn_kubelet "$n"
  say "$name: containerd in $tc s, images imported, kubelet started ($(since "$t") s)"
}
t=$(now)
start_node 0
start_node 1

# ---- kube-proxy (one for both nodes: they share the host's network namespace) ----
cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kube-proxy.kubeconfig}
hostnameOverride: ${nodes[0]}
bindAddress: $api_ip
healthzBindAddress: $api_ip:10256
metricsBindAddress: $api_ip:10249
mode: $proxy_mode
clusterCIDR: $pod_cidr
detectLocalMode: ClusterCIDR
nodePortAddresses: [10.250.0.0/24]
iptables: {localhostNodePorts: false${min_sync:+, minSyncPeriod: $min_sync}}
nftables: {${min_sync:+minSyncPeriod: $min_sync}}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
spawn kube-proxy "$node_bin/kube-proxy" --config="$dir/kube-proxy.yaml"

wait_ready() { nodes_ready; }
for n in 1 2; do alive "kubelet-$n" || fail "kubelet-$n" "kubelet of ${nodes[$((n - 1))]} exited"; done
if ! { wait_for kubelet-1 120 wait_ready && alive kubelet-2; }; then
  "$bin/kubectl" --kubeconfig="$kubeconfig" get nodes >&2 || true
  alive kubelet-1 || fail kubelet-1 "kubelet of ${nodes[0]} exited"
  alive kubelet-2 || fail kubelet-2 "kubelet of ${nodes[1]} exited"
  fail kubelet-1 "the nodes were not Ready within 120 s"
fi
say "two nodes Ready $(since "$t") s after the first containerd started"
healthz_proxy() { [[ $(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "http://$api_ip:10256/healthz") == 200 ]]; }
wait_for kube-proxy 60 healthz_proxy || fail kube-proxy "kube-proxy did not answer /healthz within 60 s"
say "up in $(since "$start") s"
print_usage
