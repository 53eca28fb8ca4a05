#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver, kubectl, helm) from the wrapper modules in
# this folder into a cache outside the clone, keyed by the pins, and prints the bin directory.
# A second run with the same pins finds the cache and returns in well under a second.
# LEADERGROUP_NO_BUILD=1: never build; exit 3 with "run make controlplane" when a binary is missing
# (used by the test support, which must fail fast instead of compiling for 13 minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

key=$(cat "$here/versions.env" "$here"/*/go.mod "$here"/*/go.sum "$here/build.sh" | sha256sum | cut -c1-12)
cache_root=${LEADERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leadergroup-operator}
bin="$cache_root/controlplane/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION-$key/bin"

say() { echo "controlplane: $*" >&2; }

build() { # build NAME MODULE_DIR PACKAGE LDFLAGS...
  local name=$1 dir=$2 pkg=$3 ldflags=$4 tags=${5:-}
  if [[ -x $bin/$name ]]; then return; fi
  if [[ -n ${LEADERGROUP_NO_BUILD:-} ]]; then
    say "$name is not built yet ($bin/$name missing): run \`make controlplane\` (first build takes about 14 minutes)"
    exit 3
  fi
  say "building $name from $pkg (first build takes minutes; modules are downloaded, then compiled)"
  local start=$SECONDS
  (cd "$here/$dir" && CGO_ENABLED=0 go build -trimpath ${tags:+-tags "$tags"} -ldflags "-s -w $ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  say "built $name in $((SECONDS - start)) s"
}

mkdir -p "$bin"
major_minor=${KUBERNETES_VERSION#v}
k8s_stamp="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
 -X k8s.io/component-base/version.gitMajor=${major_minor%%.*} \
 -X k8s.io/component-base/version.gitMinor=$(echo "$major_minor" | cut -d. -f2) \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=${major_minor%%.*} \
 -X k8s.io/client-go/pkg/version.gitMinor=$(echo "$major_minor" | cut -d. -f2)"
k8s_tags="selinux,notest,grpcnotrace"

build etcd etcd go.etcd.io/etcd/server/v3 "" ""
build kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver "$k8s_stamp" "$k8s_tags"
build kubectl kubernetes k8s.io/kubernetes/cmd/kubectl "$k8s_stamp" "$k8s_tags"
build helm helm helm.sh/helm/v4/cmd/helm "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" ""

echo "$bin"
