#!/usr/bin/env bash
# Builds the kube-apiserver of the oldest supported Kubernetes minor (oldest/versions.env, modules
# pinned in oldest/kubernetes/go.mod) into a cache outside the clone keyed by those pins, beside
# links to the newest control plane's etcd, kubectl and helm (build.sh: etcd 3.6 serves the 3.5
# client of older apiservers, and the tests' kubectl and helm are clients the range must serve
# anyway), and prints that bin folder: `cluster.sh up --bin-dir` takes it like build.sh's.
# A second run with the same pins finds the cache and returns at once.
# LEADERGROUP_NO_BUILD=1: never build; exit 3 when the binary is missing.
#
#   controlplane/build-oldest.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=oldest/versions.env
source "$here/oldest/versions.env"
module=$here/oldest/kubernetes

newest=$("$here/build.sh")
key=$(cat "$here/oldest/versions.env" "$module/go.mod" "$module/go.sum" "$0" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin=$cache_root/controlplane/k8s-$KUBERNETES_VERSION-apiserver-$key/bin

if [[ ! -x $bin/kube-apiserver ]]; then
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    echo "build-oldest: kube-apiserver $KUBERNETES_VERSION is not built yet: run controlplane/build-oldest.sh" >&2
    exit 3
  fi
  echo "build-oldest: building kube-apiserver $KUBERNETES_VERSION (first build takes minutes)" >&2
  start=$SECONDS
  mkdir -p "$bin"
  version=${KUBERNETES_VERSION#v}
  major=${version%%.*} minor=$(echo "$version" | cut -d. -f2)
  stamp=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  done
  (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -trimpath -tags "selinux,notest,grpcnotrace" \
    -ldflags "-s -w$stamp -X k8s.io/component-base/version.gitTreeState=clean" \
    -o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
  echo "build-oldest: built kube-apiserver in $((SECONDS - start)) s" >&2
fi
for tool in etcd kubectl helm; do
  ln -sfn "$newest/$tool" "$bin/$tool"
done
echo "$bin"
