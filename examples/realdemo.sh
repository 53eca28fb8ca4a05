#!/usr/bin/env bash
# `make demo` on the real cluster (as root): the operator installed with its Helm chart, the ledger
# writer (examples/ledger/manifests/sidecar: three pods, each the ledger plus the leadergroup-agent
# sidecar) writing to PostgreSQL on the host, then three handovers, each timed (the leader pod
# deleted, the leader's container frozen, a rolling update), `kubectl get lg` between them, and
# the GC pause: the leader frozen, the new leader writes, the old one thawed writes with its old
# epoch and PostgreSQL refuses it.
#
#   examples/realdemo.sh          (make demo, as root)
#   examples/realdemo.sh stop-db  (make cluster-down calls it: stops the demo's PostgreSQL)
#
# It leaves the cluster, the operator, the ledger and PostgreSQL running for exploring;
# `make cluster-down` stops all of them. Times: wall clock around each step; a handover is timed
# from the action to the first poll (kubectl, every ~0.2 s) that shows another pod as the only
# one labeled leader, so the figures include up to one poll's delay.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cd "$repo"

dir=$repo/.realcluster
# PostgreSQL's folder: under the temp dir, which the server's user (postgres) can traverse.
pg_dir=${TMPDIR:-/tmp}/leadergroup-demo-postgres
pg_addr=10.250.0.1 # the cluster's host bridge (realcluster.sh): pods reach it, nothing outside does
pg_port=5432
pod_cidr=10.244.0.0/16
ns=ledger-demo
release=leadergroup-operator
release_ns=leadergroup-system

# The demo narrates on stdout; errors go to stderr.
prefix=demo say_fd=1
# shellcheck source=../controlplane/lib.sh
source "$repo/controlplane/lib.sh"
step() { echo; echo "==> $*"; t_step=$(date +%s%N); }
took() { echo "    ($(ms_since "$t_step") ms)"; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# The newest installed PostgreSQL's bin folder; empty when none is (stop-db then has nothing to stop).
pg_bin() { compgen -G '/usr/lib/postgresql/*/bin' | sort -V | tail -n1 || true; }
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

stop_db() {
  local bin
  bin=$(pg_bin)
  if [[ -n $bin && -f $pg_dir/data/postmaster.pid ]]; then
    as_postgres "$bin/pg_ctl" -D "$pg_dir/data" -m fast -w stop >/dev/null && say "PostgreSQL stopped"
  fi
  rm -rf "$pg_dir"
}

if [[ ${1:-} == stop-db ]]; then
  stop_db
  exit 0
fi
[[ $# == 0 ]] || die "usage: examples/realdemo.sh [stop-db]"
[[ $(id -u) == 0 ]] || die "the real cluster needs root (make light-demo runs the light one)"

t_all=$(date +%s%N)

step "node packages (containerd, runc, CNI plugins, iptables, busybox-static) and PostgreSQL: installed from Debian when missing"
controlplane/node-deps.sh
controlplane/postgres-deps.sh
took
step "binaries: the pinned control plane and node binaries (cached), the release operator, agent and ledger"
bin=$(controlplane/build.sh)
controlplane/node-build.sh >/dev/null
nice -n 10 cargo build -q --release --locked --bin leadergroup-operator
nice -n 10 cargo build -q --release --locked -p leadergroup-agent --bin leadergroup-agent
nice -n 10 cargo build -q --release --locked --example ledger
took
kubectl() { "$bin/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }
helm() { "$bin/helm" --kubeconfig "$dir/kubeconfig" "$@"; }

# The demo's images only (the end-to-end tests' client-go peer is not one of them).
demo_images=(pause busybox webapp operator agent ledger)
step "images (images/build.sh): ${demo_images[*]} as OCI archives, no registry"
images/build.sh "${demo_images[@]}" 2>&1 | grep -v '^images: cargo build' || true
took

step "the real cluster (controlplane/realcluster.sh up): etcd, kube-apiserver, controller-manager, scheduler, two kubelets with their containerd, kube-proxy"
controlplane/realcluster.sh up --dir "$dir" 2>&1 | grep -E 'realcluster: (up in|reusing|two nodes)' || true
kubectl get nodes
took
step "importing the images into both nodes' containerd"
images/build.sh --import "$dir" --no-build "${demo_images[@]}"
took

step "helm install $release (charts/leadergroup-operator, default values): CRD, ServiceAccount, RBAC, 2 operator replicas with leader election, metrics Service"
if helm status "$release" -n "$release_ns" >/dev/null 2>&1; then
  say "release $release already installed: kept"
else
  helm install "$release" charts/leadergroup-operator -n "$release_ns" --create-namespace >/dev/null
fi
holder=""
for _ in $(seq 1 600); do
  holder=$(kubectl -n "$release_ns" get lease "operator-$release" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  if [[ -n $holder ]] && [[ $(kubectl -n "$release_ns" get pod "$holder" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; then
    break
  fi
  holder=""
  sleep 0.2
done
[[ -n $holder ]] || die "no active operator replica within 120 s: kubectl -n $release_ns get pods"
kubectl -n "$release_ns" get pods -o wide
say "active operator replica: $holder"
took

step "PostgreSQL on the host, listening on $pg_addr:$pg_port only (the cluster's host bridge), trust for the pod network $pod_cidr only"
pgb=$(pg_bin)
[[ -n $pgb ]] || die "no PostgreSQL in /usr/lib/postgresql (controlplane/postgres-deps.sh)"
# Afresh at each run (the ledger of an earlier run first): an earlier fence row would refuse the
# new group's epochs.
if kubectl get namespace "$ns" >/dev/null 2>&1; then
  say "deleting the namespace $ns of an earlier run"
  kubectl delete namespace "$ns" --timeout=120s >/dev/null
fi
stop_db
mkdir -p "$pg_dir"
chmod 0711 "$(dirname "$pg_dir")" 2>/dev/null || true
chown postgres:postgres "$pg_dir"
as_postgres "$pgb/initdb" -D "$pg_dir/data" -U postgres --auth-local=trust --auth-host=reject >/dev/null
cat >>"$pg_dir/data/postgresql.conf" <<EOF
listen_addresses = '$pg_addr'
port = $pg_port
unix_socket_directories = '$pg_dir'
fsync = off
EOF
# Only the pods (and the local socket): every other host connection is refused.
cat >"$pg_dir/data/pg_hba.conf" <<EOF
local all postgres trust
host  all all $pod_cidr trust
EOF
as_postgres "$pgb/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w start >/dev/null
say "PostgreSQL $("$pgb/postgres" --version | awk '{print $3}') on $pg_addr:$pg_port, data in $pg_dir (log: $pg_dir/server.log)"
took

step "the ledger (examples/ledger/manifests/sidecar): namespace $ns, Secret ledger-db, RBAC, LeaderGroup, leader Service, Deployment of 3 (ledger + leadergroup-agent sidecar)"
kubectl create namespace "$ns" >/dev/null
kubectl -n "$ns" create secret generic ledger-db --from-literal=url="postgres://postgres@$pg_addr:$pg_port/postgres" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$ns" apply -f examples/ledger/manifests/sidecar/
kubectl -n "$ns" rollout status deployment/ledger --timeout=180s
took

# ---- helpers on the group ----
leader_now() { kubectl -n "$ns" get pods -l leadergroup.io/role=leader -o jsonpath='{.items[*].metadata.name}'; }
epoch_now() { kubectl -n "$ns" get lg ledger -o jsonpath='{.status.epoch}'; }
show() { echo; kubectl -n "$ns" get lg -o wide; kubectl -n "$ns" get pods -L leadergroup.io/role -o wide | cut -c1-160; }
# wait_leader_not OLD T0: waits until one pod other than OLD is the only one labeled leader;
# prints it and the time since T0.
wait_leader_not() {
  local old=$1 t0=$2 now
  for _ in $(seq 1 600); do
    now=$(leader_now)
    if [[ -n $now && $now != "$old" && $now != *" "* ]]; then
      echo "$now $(ms_since "$t0")"
      return 0
    fi
    sleep 0.2
  done
  die "no new leader within 120 s: $(kubectl -n "$ns" get lg -o wide)"
}
container_dir() { # container_dir POD: the freezer cgroup of POD's ledger container
  local pod=$1 id node
  id=$(kubectl -n "$ns" get pod "$pod" -o jsonpath='{.status.containerStatuses[?(@.name=="ledger")].containerID}')
  id=${id#containerd://}
  node=$(kubectl -n "$ns" get pod "$pod" -o jsonpath='{.spec.nodeName}')
  [[ -n $id && -n $node ]] || die "no running ledger container in $pod"
  find "/sys/fs/cgroup/freezer/$node" -maxdepth 6 -type d -name "$id" | head -n1
}
frozen=""
thaw() { [[ -z $frozen ]] || { echo THAWED >"$frozen/freezer.state"; frozen=""; }; }
trap thaw EXIT

step "the group settles on a leader"
for _ in $(seq 1 300); do [[ -n $(leader_now) ]] && break; sleep 0.2; done
leader=$(leader_now)
[[ -n $leader ]] || die "no leader within 60 s"
sleep 2
say "leader $leader, epoch $(epoch_now); its last entries:"
kubectl -n "$ns" logs "$leader" -c ledger --tail=2
show
took

step "handover 1: the leader pod $leader deleted"
t0=$(date +%s%N)
kubectl -n "$ns" delete pod "$leader" --wait=false >/dev/null
read -r leader ms < <(wait_leader_not "$leader" "$t0")
say "new leader $leader at epoch $(epoch_now), $ms ms after the DELETE (leadership moves at the deletionTimestamp, before the container stops)"
kubectl -n "$ns" rollout status deployment/ledger --timeout=180s >/dev/null
show

step "handover 2: the leader's ledger container frozen (cgroup freezer): its readiness probe fails (every 2 s, 2 failures)"
old=$leader
frozen=$(container_dir "$old")
[[ -n $frozen ]] || die "no freezer cgroup for $old's ledger container"
t0=$(date +%s%N)
echo FROZEN >"$frozen/freezer.state"
read -r leader ms < <(wait_leader_not "$old" "$t0")
say "new leader $leader at epoch $(epoch_now), $ms ms after the freeze (mostly the probe: 2 failures 2 s apart)"
thaw
kubectl -n "$ns" wait --for=condition=Ready "pod/$old" --timeout=60s >/dev/null
say "$old thawed: Ready again, and a follower (sticky: the leader stays)"
show

step "handover 3: a rolling update (kubectl set env deployment/ledger LEDGER_WRITE_THROUGH_PAUSE=true, used by the GC pause below)"
e0=$(epoch_now)
t0=$(date +%s%N)
kubectl -n "$ns" set env deployment/ledger -c ledger LEDGER_WRITE_THROUGH_PAUSE=true >/dev/null
kubectl -n "$ns" rollout status deployment/ledger --timeout=300s >/dev/null
rolled=$(ms_since "$t0")
for _ in $(seq 1 300); do [[ $(kubectl -n "$ns" get pods -l app=ledger --no-headers | wc -l) == 3 ]] && break; sleep 0.2; done
for _ in $(seq 1 300); do leader=$(leader_now); [[ -n $leader && $leader != *" "* ]] && break; sleep 0.2; done
say "rollout of 3 pods done in $rolled ms; leader $leader; epoch $e0 -> $(epoch_now) (one move per old leader deleted; each at its deletionTimestamp)"
kubectl -n "$ns" get events --field-selector involvedObject.kind=LeaderGroup --sort-by=.lastTimestamp | tail -n 4
show

step "the GC pause: the leader $leader frozen mid-work; leadership moves; the new leader writes; the old one is thawed"
old=$leader
old_epoch=$(epoch_now)
sleep 2 # the leader has written at its epoch
frozen=$(container_dir "$old")
t0=$(date +%s%N)
echo FROZEN >"$frozen/freezer.state"
say "$old frozen at epoch $old_epoch (as a stop-the-world GC pause would)"
read -r leader ms < <(wait_leader_not "$old" "$t0")
new_epoch=$(epoch_now)
say "new leader $leader at epoch $new_epoch after $ms ms"
for _ in $(seq 1 150); do
  line=$(kubectl -n "$ns" logs "$leader" -c ledger | grep -m1 "wrote .*epoch=$new_epoch" || true)
  [[ -n $line ]] && break
  sleep 0.2
done
[[ -n $line ]] || die "the new leader did not write within 30 s"
say "the new leader writes: $line"
t_thaw=$(date +%s%N)
thaw
say "$old thawed: it resumes where it stopped, still holding epoch $old_epoch"
refused=""
for _ in $(seq 1 150); do
  refused=$(kubectl -n "$ns" logs "$old" -c ledger | grep -m1 "refused" || true)
  [[ -n $refused ]] && break
  sleep 0.2
done
kubectl -n "$ns" logs "$old" -c ledger | grep -E "resumed|refused|stopped" | tail -n 3 | sed 's/^/    /'
[[ -n $refused ]] || die "no refusal in $old's log within 30 s after the thaw"
say "PostgreSQL refused the stale write $(ms_since "$t_thaw") ms after the thaw: $refused"
kubectl -n "$ns" wait --for=condition=Ready "pod/$old" --timeout=60s >/dev/null
say "the ledger table (epochs in commit order never decrease):"
as_postgres "$pgb/psql" -h "$pg_dir" -U postgres -d postgres -c \
  "SELECT epoch, writer, count(*) AS entries, min(id) AS first_id, max(id) AS last_id FROM ledger GROUP BY epoch, writer ORDER BY min(id)"
show

echo
say "done in $(ms_since "$t_all") ms. The cluster, the operator, the ledger and PostgreSQL keep running:"
cat <<EOF
  export KUBECONFIG=$dir/kubeconfig PATH=$bin:\$PATH
  kubectl -n $ns get lg -o wide; kubectl -n $ns get pods -L leadergroup.io/role
  kubectl -n $ns logs -f deploy/ledger -c ledger
  kubectl -n $ns exec deploy/ledger -c leadergroup-agent -- cat /var/run/leadergroup/role   # the agent's files
  make cluster-down     # stops everything: the cluster, and PostgreSQL (examples/realdemo.sh stop-db)
EOF
