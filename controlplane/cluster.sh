#!/usr/bin/env bash
# Starts and stops a local control plane: etcd + kube-apiserver on loopback, on free ports, with a
# CA of its own. Everything (certificates, data, logs, pid files, kubeconfig) lives in one folder.
#
#   controlplane/cluster.sh up   [--dir DIR] [--watch-pid PID] [--bin-dir BIN]
#   controlplane/cluster.sh down [--dir DIR]
#   controlplane/cluster.sh restart etcd|kube-apiserver [--dir DIR] [--kill]
#
# DIR defaults to .cluster/ in the repository. `up` is idempotent: a healthy cluster in DIR is
# reused. `--watch-pid PID` adds a watchdog that runs `down` once PID has exited, so a test binary
# that exits or is killed never leaks processes. `--bin-dir` skips controlplane/build.sh (which
# builds the binaries on first use unless LEADERGROUP_NO_BUILD=1).
# For controlplane/realcluster.sh: `--address IP` serves on IP instead of loopback (reachable from
# pods; the `kubernetes` Service then has endpoints), `--service-cidr CIDR` (default 10.0.0.0/24).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

prefix=cluster
# shellcheck source=lib.sh
source "$here/lib.sh"

cmd=${1:-}
[[ $cmd == up || $cmd == down || $cmd == restart ]] || { usage; exit 2; }
shift
# restart NAME: stops that process and starts it again with the same ports and data, as a crash
# and a restart by its supervisor would (the tests of the operator's recovery use it). SIGTERM
# first (a loaded kube-apiserver may drain for 15 s), or with --kill SIGKILL at once (a crash, an
# OOM kill; the chaos run's restarts).
component=""
if [[ $cmd == restart ]]; then
  component=${1:-}
  [[ $component == etcd || $component == kube-apiserver ]] || { usage; exit 2; }
  shift
fi
dir=$repo/.cluster watch_pid="" bin="" address=127.0.0.1 service_cidr=10.0.0.0/24 kill_at_once=""
while (($#)); do
  case $1 in
    --kill) kill_at_once=1; shift ;;
    --dir) need_value "$@"; dir=$2; shift 2 ;;
    --watch-pid) need_value "$@"; watch_pid=$2; shift 2 ;;
    --bin-dir) need_value "$@"; bin=$2; shift 2 ;;
    --address) need_value "$@"; address=$2; shift 2 ;;
    --service-cidr) need_value "$@"; service_cidr=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "$1" ;;
  esac
done
[[ -z $watch_pid || $watch_pid =~ ^[0-9]+$ ]] || die "--watch-pid wants a number, got $watch_pid"
[[ $address =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--address wants an IPv4 address, got $address"
[[ $service_cidr =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.0/(1[6-9]|2[0-4])$ ]] || die "--service-cidr wants a.b.c.0/16..24, got $service_cidr"
service_ip=${BASH_REMATCH[1]}.1 # the `kubernetes` Service's ClusterIP

# The marker guards `rm -rf`: only a folder this script created is ever removed.
marker=.leadergroup-cluster

# running, alive, spawn and lock (lib.sh) keep one pid file per process in DIR.

# stop NAME: SIGTERM, then SIGKILL after 15 s; returns once the process is gone.
stop() {
  alive "$1" || return 0
  local pid i
  pid=$(cat "$dir/$1.pid")
  [[ -z $kill_at_once ]] || kill -KILL "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    running "$pid" || return 0
    sleep 0.1
  done
  say "$1 (pid $pid) ignored SIGTERM for 15 s; killing it"
  kill -KILL "$pid" 2>/dev/null || true
  while running "$pid"; do sleep 0.1; done
}

stop_all() {
  stop kube-apiserver
  stop etcd
  # Watchdogs, except the one running this very `down`.
  local pid
  [[ -f $dir/watchdog.pids ]] || return 0
  while read -r pid; do
    [[ $pid == "$$" ]] && continue
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -F -- "$dir" >/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
  done <"$dir/watchdog.pids"
}

wipe() { # removes DIR, refusing folders this script did not create
  [[ -d $dir ]] || return 0
  if [[ -e $dir/$marker ]]; then
    rm -rf "$dir"
  elif only_lock_left; then
    rm -f "$dir/.lock"
    rmdir "$dir"
  else
    die "$dir is not empty and was not created by cluster.sh; refusing to remove it"
  fi
}

# lock (lib.sh) serialises concurrent `up`/`down` on one DIR.

if [[ $cmd == down ]]; then
  [[ -d $dir ]] || { say "nothing to stop in $dir"; exit 0; }
  dir=$(cd "$dir" && pwd)
  lock
  stop_all
  wipe
  say "stopped; removed $dir"
  exit 0
fi

# ---- up ----
start=$(date +%s.%N)
# Its parents are made with the usual mode first: under umask 077 `mkdir -p` would make every
# missing parent private too (target/testenv, which the PostgreSQL servers of the tests, running
# as another user, must traverse).
mkdir -p "$(dirname "$dir")"
umask 077 # the folder holds the CA key and the admin credentials
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
lock

kubeconfig=$dir/kubeconfig
# ready PORT: /readyz answers 200 to the admin. curl when the machine has it (fastest); otherwise
# the pinned kubectl, so a fresh machine needs nothing beyond what build.sh builds.
ready() {
  if command -v curl >/dev/null; then
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$dir/pki/ca.crt" \
      --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "https://$address:$1/readyz") == 200 ]]
  else
    [[ $("$bin/kubectl" --kubeconfig="$dir/pki/admin.kubeconfig" --server="https://$address:$1" \
      --request-timeout=2s get --raw=/readyz 2>/dev/null) == ok ]]
  fi
}

start_watchdog() {
  [[ -n $watch_pid ]] || return 0
  kill -0 "$watch_pid" 2>/dev/null || die "--watch-pid $watch_pid: no such process"
  # The start time (field 22 of /proc/PID/stat) tells PID apart from a later process that reuses
  # the number; a zombie (state Z) counts as exited. setsid: a signal to the caller's process group
  # (Ctrl-C, a harness killing the test) must not take the watchdog with it.
  local started
  started=$(awk '{print $22}' "/proc/$watch_pid/stat")
  # shellcheck disable=SC2016 # the watchdog's shell expands these, from its own arguments
  setsid bash -c '
    while [[ -r /proc/$1/stat ]] && read -r -a st </proc/$1/stat && [[ ${st[21]} == "$2" && ${st[2]} != Z ]]; do
      sleep 1
    done
    echo "watchdog: pid $1 exited; stopping the cluster in $4"
    exec "$3" down --dir "$4"' watchdog "$watch_pid" "$started" "$here/cluster.sh" "$dir" \
    </dev/null >>"$dir/watchdog.log" 2>&1 9>&- &
  echo $! >>"$dir/watchdog.pids"
  say "watchdog (pid $!) stops the cluster when pid $watch_pid exits"
}

print_usage() {
  local port
  port=$(sed -n 's/^APISERVER_PORT=//p' "$dir/env")
  cat <<EOF
control plane ready at https://$address:$port (kube-apiserver $("$bin/kube-apiserver" --version | cut -d' ' -f2), data and logs in $dir)
  export KUBECONFIG=$kubeconfig
  export LEADERGROUP_KUBECONFIG=$kubeconfig   # tests reuse this cluster instead of starting one
  $bin/kubectl get namespaces
EOF
}

if [[ $cmd == restart ]]; then
  [[ -f $dir/env ]] || die "no control plane in $dir"
  dir=$(cd "$dir" && pwd)
  lock
  bin=$(sed -n 's/^BIN_DIR=//p' "$dir/env")
  address=$(sed -n 's/^ADDRESS=//p' "$dir/env")
  service_cidr=$(sed -n 's/^SERVICE_CIDR=//p' "$dir/env")
  kubeconfig=$dir/kubeconfig
  pki=$dir/pki
else
  [[ -n $bin ]] || bin=$("$here/build.sh")
  for b in etcd kube-apiserver kubectl; do
    [[ -x $bin/$b ]] || die "$bin/$b missing: run \`make controlplane\`"
  done

  if [[ -f $kubeconfig ]] && alive etcd && alive kube-apiserver && ready "$(sed -n 's/^APISERVER_PORT=//p' "$dir/env")"; then
    say "reusing the healthy cluster in $dir"
    start_watchdog
    print_usage
    exit 0
  fi

  # Leftovers of a crashed or half-started cluster: stop what still runs, start from scratch.
  stop_all
  wipe
  mkdir -p "$dir/pki"
  touch "$dir/$marker"
  lock

  # ---- certificates (EC P-256: generated in milliseconds; RSA only where Kubernetes expects it) ----
  pki=$dir/pki
  # shellcheck source=pki.sh
  source "$here/pki.sh"
  new_ca "/CN=leadergroup-testenv-ca"
  # The first address of the service range and kubernetes.default.svc, as a real cluster's serving
  # certificate has them.
  sans=IP:127.0.0.1,DNS:localhost
  [[ $address == 127.0.0.1 ]] || sans+=,IP:$address
  sign server "/CN=kube-apiserver" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=$sans,IP:$service_ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign_client admin admin system:masters
  # What the API server shows the kubelets (exec, logs, port-forward); only a real cluster has them.
  [[ $address == 127.0.0.1 ]] || sign_client kubelet-client kube-apiserver-kubelet-client system:masters
  # ServiceAccount token signing key (RS256, what kubeadm uses).
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

fi

# ---- ports ----
# Random ports below the kernel's ephemeral range (32768+), so an outgoing connection never holds
# one; a port already listening is skipped. Start retries with new ports if a bind still races.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && ! (exec 3<>"/dev/tcp/$address/$1") 2>/dev/null; }
pick_port() {
  local p
  while :; do
    p=$((10000 + (RANDOM * 32768 + RANDOM) % 22000))
    [[ " $* " == *" $p "* ]] && continue
    port_free "$p" && { echo "$p"; return; }
  done
}

# wait_for NAME SECONDS CHECK...: polls CHECK until it succeeds; fails early if NAME died.
wait_for() {
  local name=$1 limit=$2 i
  shift 2
  for ((i = 0; i < limit * 10; i++)); do
    "$@" && return 0
    alive "$name" || return 1
    sleep 0.1
  done
  return 1
}

# Plain HTTP through bash's /dev/tcp: no curl needed.
etcd_healthy() {
  local answer
  # shellcheck disable=SC2016 # the inner shell expands $1: the port, its own argument
  answer=$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && cat <&3' _ "$etcd_port" 2>/dev/null) || return 1
  [[ $answer == *'"health":"true"'* ]]
}

# The two processes, on etcd_port, peer_port and api_port (`up` picks them, `restart` reads them).
# --unsafe-no-fsync: the data is thrown away with the cluster, and fsync on a shared disk is what
# makes etcd (and every write the tests do) slow.
spawn_etcd() {
  spawn etcd "$bin/etcd" --name=testenv --data-dir="$dir/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="testenv=http://127.0.0.1:$peer_port" --initial-cluster-state=new \
    --unsafe-no-fsync --log-level=warn
}
spawn_apiserver() {
  # --endpoint-reconciler-type=none: the reconciler refuses a loopback advertise address (and
  # there is no pod network behind the `kubernetes` Service anyway). On --address, the default
  # (lease) gives the Service that address as its endpoint, for pods of the real cluster.
  real=()
  # The kubelets are reached at their node IPs (exec, logs), not by node names no DNS knows.
  [[ $address == 127.0.0.1 ]] || real=(--kubelet-client-certificate="$pki/kubelet-client.crt" --kubelet-client-key="$pki/kubelet-client.key"
    "--kubelet-preferred-address-types=InternalIP,Hostname")
  # --profiling=false and --enable-logs-handler=false: fewer handlers nobody here uses.
  # The watch cache stays on: the operator's watches should see what a real cluster serves.
  spawn kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address="$address" --secure-port="$api_port" --advertise-address="$address" \
    --cert-dir="$pki" --tls-cert-file="$pki/server.crt" --tls-private-key-file="$pki/server.key" \
    --client-ca-file="$pki/ca.crt" \
    --authorization-mode=Node,RBAC \
    --service-cluster-ip-range="$service_cidr" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --allow-privileged=true \
    --endpoint-reconciler-type="$([[ $address == 127.0.0.1 ]] && echo none || echo lease)" "${real[@]}" \
    --profiling=false --enable-logs-handler=false
}

if [[ $cmd == restart ]]; then
  etcd_port=$(sed -n 's/^ETCD_PORT=//p' "$dir/env")
  peer_port=$(sed -n 's/^ETCD_PEER_PORT=//p' "$dir/env")
  api_port=$(sed -n 's/^APISERVER_PORT=//p' "$dir/env")
  t=$(date +%s.%N)
  stop "$component"
  mv "$dir/$component.log" "$dir/$component.log.before-restart"
  if [[ $component == etcd ]]; then
    spawn_etcd
    wait_for etcd 30 etcd_healthy || die "etcd did not become healthy again (log: $dir/etcd.log)"
  else
    spawn_apiserver
    # The log's tail in the message: a test's cluster folder is removed with the test.
    wait_for kube-apiserver 120 ready "$api_port" ||
      die "kube-apiserver did not become ready again (log: $dir/kube-apiserver.log):$(printf '\n'; tail -n 15 "$dir/kube-apiserver.log" 2>/dev/null)"
  fi
  say "$component restarted in $(awk -v s="$t" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
  exit 0
fi

# The admin kubeconfig (pki.sh) is written for each port tried; it becomes DIR/kubeconfig once the
# server is ready, so DIR/kubeconfig exists only for a cluster that was healthy.

etcd_port="" peer_port="" api_port=""
for attempt in 1 2 3; do
  etcd_port=$(pick_port) peer_port=$(pick_port "$etcd_port")
  rm -rf "$dir/etcd-data"
  # --unsafe-no-fsync: the data is thrown away with the cluster, and fsync on a shared disk is what
  # makes etcd (and every write the tests do) slow.
  spawn_etcd
  if wait_for etcd 30 etcd_healthy; then break; fi
  stop etcd
  grep -q 'address already in use' "$dir/etcd.log" && [[ $attempt -lt 3 ]] && { say "etcd port taken, retrying"; continue; }
  tail -n 20 "$dir/etcd.log" >&2
  die "etcd did not become healthy (log: $dir/etcd.log)"
done
etcd_ready=$(date +%s.%N)

for attempt in 1 2 3; do
  api_port=$(pick_port "$etcd_port" "$peer_port")
  write_kubeconfig "$pki/admin.kubeconfig" "https://$address:$api_port" admin
  spawn_apiserver
  if wait_for kube-apiserver 120 ready "$api_port"; then break; fi
  stop kube-apiserver
  grep -q 'address already in use' "$dir/kube-apiserver.log" && [[ $attempt -lt 3 ]] && { say "apiserver port taken, retrying"; continue; }
  tail -n 30 "$dir/kube-apiserver.log" >&2
  stop etcd
  die "kube-apiserver did not become ready (log: $dir/kube-apiserver.log)"
done

cp "$pki/admin.kubeconfig" "$kubeconfig.tmp"
mv "$kubeconfig.tmp" "$kubeconfig"
cat >"$dir/env" <<EOF
APISERVER_PORT=$api_port
ETCD_PORT=$etcd_port
ETCD_PEER_PORT=$peer_port
ADDRESS=$address
SERVICE_CIDR=$service_cidr
BIN_DIR=$bin
KUBECONFIG=$kubeconfig
EOF

start_watchdog
end=$(date +%s.%N)
say "$(awk -v s="$start" -v e="$etcd_ready" -v r="$end" 'BEGIN { printf "started in %.1f s (certificates + etcd %.1f s, kube-apiserver %.1f s)", r - s, e - s, r - e }')"
print_usage
