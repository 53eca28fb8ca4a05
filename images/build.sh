#!/usr/bin/env bash
# Builds the images the real cluster runs, as OCI archives, with no registry and no container
# builder: a root filesystem is put together in a temporary folder, tarred as the one layer, and the
# OCI layout (config, manifest, index.json) is written by hand, digests from sha256sum.
#
#   images/build.sh [--import DIR [--no-build]] [NAME...]
#
# NAME: pause, busybox, webapp, operator, agent, ledger, client-go, agent-clients, rust-peer
# (default: all but rust-peer, which only the benchmark uses). Archives go to target/images/NAME.tar.
# --import DIR: also import them into the containerd of every node of the real cluster in DIR
# (controlplane/realcluster.sh; default .realcluster/ when it runs). --no-build: import the
# archives built before, without building them again.
#   pause     localhost/leadergroup/pause:1         busybox-static's sleep; the nodes' sandbox_image
#   busybox   localhost/leadergroup/busybox:1.35     busybox-static with every applet (httpd, nc, sh);
#             Debian's 1.35 `wget -q` dies of SIGSEGV (on the host too): use `wget -O-` or nc
#   webapp    localhost/leadergroup/webapp:1         the end-to-end tests' application: busybox httpd on
#             port 8080 serving a page that names its pod ($POD_NAME, else $HOSTNAME), also at
#             /healthz; on SIGTERM it waits $STOP_DELAY seconds (default 0: a drain), then stops
#   operator  leadergroup-operator:<appVersion>      target/release/leadergroup-operator (images/release-build.sh
#             shipped), the libraries ldd lists, CA certificates, user 65532: the chart's default
#   agent     leadergroup-agent:<version>            target/release/leadergroup-agent (the same build), its
#             libraries, CA certificates, user 65532, and busybox-static as /bin/sh (--on-change runs
#             `/bin/sh -c`)
#   ledger    leadergroup-ledger:<version>           target/release/examples/ledger (images/release-build.sh
#             ledger), its libraries, user 65532; no CA certificates: it reaches PostgreSQL
#             without TLS and the API server with the ServiceAccount's CA
#   client-go localhost/leadergroup/client-go-peer:1 bench/peers/client-go (client-go's leaderelection
#             candidate, built from its pinned modules by its build.sh): a static Go binary
#             (CGO_ENABLED=0), user 65532, and busybox-static as /bin/sh (the end-to-end benchmark
#             starts it through a shell that appends its stdout to a file); in a pod it uses the
#             ServiceAccount
#   agent-clients localhost/leadergroup/agent-clients:1  the book's three clients of the agent
#             (examples/agent-clients): role.sh with busybox-static's sh and wget, role.py with
#             Debian's python3 (the binary, its standard library, the libraries ldd lists), and the
#             Go one built static (CGO_ENABLED=0) as /usr/local/bin/agent-role; user 65532
#   rust-peer localhost/leadergroup/rust-peer:1      bench/peers/rust (kube-leader-election and
#             kube-lease-manager candidates: --lib kle|klm), built with CARGO_TARGET_DIR=target/bench-peers,
#             its libraries, CA certificates, user 65532, busybox-static as /bin/sh (as client-go)
# The agent's and the ledger's names are the ones examples/ledger/manifests use (version: the
# workspace's), stored as docker.io/library/NAME:TAG, what the CRI makes of a bare `NAME:TAG`.
# The images hold the host's binaries and the libraries ldd lists: they run on Linux of the
# building machine's architecture (the config says which). Only the operator's and the ledger's
# build without busybox-static.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

prefix=images
# shellcheck source=../controlplane/lib.sh
source "$repo/controlplane/lib.sh"

import_dir="" names=() build=1
while (($#)); do
  case $1 in
    --import) need_value "$@"; import_dir=$2; shift 2 ;;
    --no-build) build=""; shift ;;
    -h | --help) usage; exit 0 ;;
    pause | busybox | webapp | operator | agent | ledger | client-go | agent-clients | rust-peer) names+=("$1"); shift ;;
    *) bad_arg "$1 (images: pause, busybox, webapp, operator, agent, ledger, client-go, agent-clients, rust-peer)" ;;
  esac
done
((${#names[@]})) || names=(pause busybox webapp operator agent ledger client-go agent-clients)
[[ -n $build || -n $import_dir ]] || die "--no-build only makes sense with --import"

out=$repo/target/images
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/leadergroup-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

busybox=/bin/busybox
static_busybox() { [[ -x $busybox && $(LC_ALL=C ldd "$busybox" 2>&1 || true) == *"not a dynamic executable"* ]]; }
# Every image but the operator's and the ledger's carries busybox-static (a shell, sleep, httpd).
needs_busybox=()
for name in "${names[@]}"; do [[ $name == operator || $name == ledger ]] || needs_busybox+=("$name"); done
if [[ -n $build ]] && ((${#needs_busybox[@]})) && ! static_busybox; then
  die "$busybox missing or not static, which the images ${needs_busybox[*]} carry: install Debian's busybox-static (apt-get install busybox-static; controlplane/node-deps.sh installs it with the real cluster's packages)"
fi

# The OCI name of this machine's architecture, which the images' binaries are built for.
case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) arch=$(uname -m) ;;
esac
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
blob() { # blob FILE: moves FILE into the layout's blobs, prints its digest
  local d
  d=$(sha "$1")
  mv "$1" "$layout/blobs/sha256/$d"
  echo "$d"
}
json_array() { # json_array WORD...: ["WORD", ...] (words without quotes or backslashes)
  local s="" w
  for w in "$@"; do s+="${s:+,}\"$w\""; done
  echo "[$s]"
}

# oci_archive NAME REF ROOTFS USER ENTRYPOINT_JSON CMD_JSON: writes target/images/NAME.tar.
# One uncompressed layer (the archive is imported locally; gzip would only cost time); entries
# sorted, owned by root, time 0, so the same inputs give the same digests.
oci_archive() {
  local name=$1 ref=$2 rootfs=$3 user=$4 entrypoint=$5 cmd=$6
  layout=$work/$name-layout
  mkdir -p "$layout/blobs/sha256"
  tar -C "$rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$work/layer.tar" .
  local layer_size layer config_size config manifest_size manifest
  layer_size=$(size "$work/layer.tar")
  layer=$(blob "$work/layer.tar")
  cat >"$work/config.json" <<JSON
{"architecture":"$arch","os":"linux","config":{"User":"$user","Env":["PATH=/usr/local/bin:/usr/bin:/bin"],"Entrypoint":$entrypoint,"Cmd":$cmd,"WorkingDir":"/","Labels":{"org.opencontainers.image.title":"$name"}},"rootfs":{"type":"layers","diff_ids":["sha256:$layer"]},"history":[{"created_by":"images/build.sh"}]}
JSON
  config_size=$(size "$work/config.json")
  config=$(blob "$work/config.json")
  cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:$layer","size":$layer_size}]}
JSON
  manifest_size=$(size "$work/manifest.json")
  manifest=$(blob "$work/manifest.json")
  # io.containerd.image.name: the full name containerd stores (what the CRI resolves a pod's
  # `image:` to); org.opencontainers.image.ref.name: the tag, for other OCI tools.
  cat >"$layout/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$manifest_size,"platform":{"architecture":"$arch","os":"linux"},"annotations":{"io.containerd.image.name":"$ref","org.opencontainers.image.ref.name":"${ref##*:}"}}]}
JSON
  echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  tar -C "$layout" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out/$name.tar.tmp" oci-layout index.json blobs
  mv "$out/$name.tar.tmp" "$out/$name.tar"
  echo "$ref" >"$out/$name.ref"
  say "$name: $ref, $((layer_size / 1024)) KiB, manifest sha256:${manifest:0:12} -> $out/$name.tar"
}

base_rootfs() { # base_rootfs DIR: /etc/passwd and /etc/group with root, nobody and nonroot 65532; /tmp
  mkdir -p "$1/etc" "$1/tmp" "$1/bin"
  chmod 1777 "$1/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$1/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$1/etc/group"
}

build_pause() {
  local r=$work/pause-rootfs
  base_rootfs "$r"
  cp "$busybox" "$r/bin/busybox"
  ln -s busybox "$r/bin/sleep"
  # PID 1 of the sandbox only holds the namespaces; containerd stops it with SIGKILL.
  oci_archive pause localhost/leadergroup/pause:1 "$r" 65535 "$(json_array /bin/sleep 2147483647)" null
}

build_busybox() {
  local r=$work/busybox-rootfs a
  base_rootfs "$r"
  cp "$busybox" "$r/bin/busybox"
  for a in $("$busybox" --list); do [[ $a == busybox ]] || ln -s busybox "$r/bin/$a"; done
  oci_archive busybox localhost/leadergroup/busybox:1.35 "$r" 0 null "$(json_array /bin/sh)"
}

# The end-to-end tests' web application. sh stays PID 1 (httpd as PID 1 would ignore SIGTERM) and
# stops httpd on SIGTERM after STOP_DELAY seconds, as an application that drains would.
build_webapp() {
  local r=$work/webapp-rootfs a
  base_rootfs "$r"
  cp "$busybox" "$r/bin/busybox"
  for a in sh httpd mkdir sleep kill cat; do ln -s busybox "$r/bin/$a"; done
  mkdir -p "$r/usr/local/bin"
  cat >"$r/usr/local/bin/webapp" <<'SCRIPT'
#!/bin/sh
name=${POD_NAME:-$HOSTNAME}
mkdir -p /tmp/www
echo "$name" >/tmp/www/index.html
echo ok >/tmp/www/healthz
httpd -f -p "${PORT:-8080}" -h /tmp/www &
pid=$!
echo "webapp: $name serving on port ${PORT:-8080} (httpd pid $pid)"
trap 'echo "webapp: SIGTERM, stopping in ${STOP_DELAY:-0} s"; sleep "${STOP_DELAY:-0}"; kill "$pid"; exit 0' TERM
wait "$pid"
SCRIPT
  chmod 0755 "$r/usr/local/bin/webapp"
  oci_archive webapp localhost/leadergroup/webapp:1 "$r" 65532:65532 "$(json_array /usr/local/bin/webapp)" null
}

# rust_rootfs DIR BINARY: a root filesystem with the release binary at /usr/local/bin/NAME and
# every library at the path ldd names (the loader included), dereferenced: the loader and glibc's
# default search path find them there without an ld.so.cache.
rust_rootfs() {
  local r=$1 binary=$2 lib
  base_rootfs "$r"
  install -D -m 0755 "$binary" "$r/usr/local/bin/$(basename "$binary")"
  for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    install -D -m 0755 "$(readlink -f "$lib")" "$r$lib"
  done
}

# library_ref NAME TAG: a bare NAME:TAG as the CRI resolves it (docker.io/library/NAME:TAG).
library_ref() {
  local ref=$1:$2
  [[ $ref == */* ]] || ref=docker.io/library/$ref
  echo "$ref"
}

# The workspace's version (Cargo.toml [workspace.package]): the agent's and the ledger's tag.
workspace_version() {
  sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([^"]*\)"/\1/p' "$repo/Cargo.toml" | head -1
}

build_operator() {
  local version
  version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/leadergroup-operator/Chart.yaml")
  [[ -n $version ]] || die "no appVersion in charts/leadergroup-operator/Chart.yaml"
  local repository
  repository=$(sed -n 's/^  repository: *//p' "$repo/charts/leadergroup-operator/values.yaml" | head -1)
  [[ -n $repository ]] || die "no image.repository in charts/leadergroup-operator/values.yaml"
  say "images/release-build.sh shipped (the operator, the agent and the kubectl plugin)"
  "$here/release-build.sh" shipped
  local r=$work/operator-rootfs
  rust_rootfs "$r" "$repo/target/release/leadergroup-operator"
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
  # A docker.io/library/ name is what the CRI makes of the chart's `leadergroup-operator:<tag>`.
  oci_archive operator "$(library_ref "$repository" "$version")" "$r" 65532:65532 "$(json_array /usr/local/bin/leadergroup-operator)" null
}

build_agent() {
  local version
  version=$(workspace_version)
  [[ -n $version ]] || die "no version in Cargo.toml's [workspace.package]"
  say "images/release-build.sh shipped (the operator, the agent and the kubectl plugin)"
  "$here/release-build.sh" shipped
  local r=$work/agent-rootfs
  rust_rootfs "$r" "$repo/target/release/leadergroup-agent"
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
  # --on-change runs its command with /bin/sh -c: busybox's sh and applets (cat, echo, wget...).
  cp "$busybox" "$r/bin/busybox"
  for a in $("$busybox" --list); do [[ $a == busybox ]] || ln -s busybox "$r/bin/$a"; done
  oci_archive agent "$(library_ref leadergroup-agent "$version")" "$r" 65532:65532 "$(json_array /usr/local/bin/leadergroup-agent)" null
}

build_ledger() {
  local version
  version=$(workspace_version)
  [[ -n $version ]] || die "no version in Cargo.toml's [workspace.package]"
  say "images/release-build.sh ledger"
  "$here/release-build.sh" ledger
  local r=$work/ledger-rootfs
  rust_rootfs "$r" "$repo/target/release/examples/ledger"
  oci_archive ledger "$(library_ref leadergroup-ledger "$version")" "$r" 65532:65532 "$(json_array /usr/local/bin/ledger)" null
}

# The benchmark's client-go peer, for the end-to-end tests' comparison with client-go in pods. Its
# build.sh builds it static (CGO_ENABLED=0) into a cache keyed by its sources and prints the path.
build_client-go() {
  local bin r=$work/client-go-rootfs
  bin=$(nice -n 10 "$repo/bench/peers/client-go/build.sh")
  [[ $(LC_ALL=C ldd "$bin" 2>&1 || true) == *"not a dynamic executable"* ]] || die "$bin is not static"
  base_rootfs "$r"
  install -D -m 0755 "$bin" "$r/usr/local/bin/leadergroup-bench-client-go"
  with_shell "$r"
  oci_archive client-go localhost/leadergroup/client-go-peer:1 "$r" 65532:65532 "$(json_array /usr/local/bin/leadergroup-bench-client-go)" null
}

# with_shell DIR: busybox-static as /bin/sh and the applets a start script uses.
with_shell() {
  local a
  cp "$busybox" "$1/bin/busybox"
  for a in sh cut cat head; do ln -sf busybox "$1/bin/$a"; done
}

# libraries_of DIR FILE...: every library ldd lists for FILEs, at the path it names, dereferenced.
libraries_of() {
  local r=$1 lib
  shift
  for lib in $(ldd "$@" 2>/dev/null | grep -o '/[^ :]*' | sort -u); do
    [[ -e $r$lib ]] || install -D -m 0755 "$(readlink -f "$lib")" "$r$lib"
  done
}

# The book's clients of the agent, in one image for the end-to-end test that runs them in pods.
# Python is Debian's /usr/bin/python3 (not a python3 earlier on the PATH): its standard library
# without the test suites, its extension modules and their libraries.
build_agent-clients() {
  local r=$work/agent-clients-rootfs a python stdlib
  python=$(readlink -f /usr/bin/python3 2>/dev/null) || true
  [[ -x $python ]] || die "no Debian python3 at /usr/bin/python3 (apt-get install python3)"
  stdlib=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
  base_rootfs "$r"
  cp "$busybox" "$r/bin/busybox"
  for a in sh wget sed sleep kill cat; do ln -s busybox "$r/bin/$a"; done
  install -D -m 0755 "$python" "$r$python"
  ln -s "$python" "$r/usr/bin/python3"
  mkdir -p "$r$stdlib"
  tar -C "$stdlib" --exclude=test --exclude=tests --exclude=__pycache__ --exclude=idlelib \
    --exclude=tkinter --exclude=ensurepip --exclude=site-packages --exclude=dist-packages \
    --exclude='config-*' --exclude=pydoc_data --exclude=lib2to3 --exclude=turtledemo -cf - . |
    tar -C "$r$stdlib" -xf -
  libraries_of "$r" "$python" "$stdlib"/lib-dynload/*.so
  install -D -m 0755 "$repo/examples/agent-clients/role.sh" "$r/usr/local/bin/role.sh"
  install -D -m 0644 "$repo/examples/agent-clients/role.py" "$r/usr/local/bin/role.py"
  say "go build examples/agent-clients/go"
  (cd "$repo/examples/agent-clients/go" && GOTOOLCHAIN=local CGO_ENABLED=0 nice -n 10 go build -trimpath -o "$r/usr/local/bin/agent-role" .)
  oci_archive agent-clients localhost/leadergroup/agent-clients:1 "$r" 65532:65532 null "$(json_array /bin/sh)"
}

# The benchmark's Rust peers (kube-leader-election, kube-lease-manager) in a pod: the same binary
# the bench runs on the host, built in its own workspace (its kube versions stay out of ours).
build_rust-peer() {
  say "cargo build --release --manifest-path bench/peers/rust/Cargo.toml"
  (cd "$repo" && CARGO_TARGET_DIR="$repo/target/bench-peers" nice -n 10 cargo build --release --locked --manifest-path bench/peers/rust/Cargo.toml)
  local r=$work/rust-peer-rootfs
  rust_rootfs "$r" "$repo/target/bench-peers/release/leadergroup-bench-rust-peer"
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
  with_shell "$r"
  oci_archive rust-peer localhost/leadergroup/rust-peer:1 "$r" 65532:65532 "$(json_array /usr/local/bin/leadergroup-bench-rust-peer)" null
}

start=$SECONDS
if [[ -n $build ]]; then
  for n in "${names[@]}"; do "build_$n"; done
  say "built ${names[*]} in $((SECONDS - start)) s"
fi

[[ -n $import_dir ]] || exit 0
import_dir=$(cd "$import_dir" 2>/dev/null && pwd) || die "--import: no folder $import_dir"
socks=()
for s in "$import_dir"/node*/containerd.sock; do [[ -S $s ]] && socks+=("$s"); done
((${#socks[@]})) || die "no node containerd socket in $import_dir (is the real cluster up? controlplane/realcluster.sh up)"
for n in "${names[@]}"; do
  [[ -f $out/$n.tar ]] || die "$out/$n.tar missing: build it first (images/build.sh $n)"
done
for s in "${socks[@]}"; do
  for n in "${names[@]}"; do
    timeout 120 ctr --address "$s" --namespace k8s.io images import "$out/$n.tar" >/dev/null ||
      die "importing $n into $(dirname "$s") failed"
  done
  say "imported ${names[*]} into $(basename "$(dirname "$s")")"
done
