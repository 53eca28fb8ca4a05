#!/usr/bin/env bash
# Writes a release into target/dist/, for installing somewhere else than this checkout:
#   leadergroup-operator-<chart version>.tgz        the chart (helm package)
#   leadergroup-crd-<version>.yaml                  the CRD (also inside the chart)
#   leadergroup-{operator,agent,ledger}-<version>.oci.tar
#                                                   the images as OCI archives: `ctr image import`,
#                                                   `kind load image-archive`, `skopeo copy
#                                                   oci-archive:FILE docker://REGISTRY/NAME:TAG`
#   kubectl-leadergroup-<version>-linux-<arch>      the kubectl plugin
#   SHA256SUMS                                      of all of the above
# <version> is the chart's appVersion, the images' tag. The images and the binaries are built (or
# found built) by images/build.sh and cargo; helm is the pinned one of controlplane/build.sh.
#
#   images/dist.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

prefix=dist
# shellcheck source=../controlplane/lib.sh
source "$repo/controlplane/lib.sh"
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    *) bad_arg "$1" ;;
  esac
done

chart=$repo/charts/leadergroup-operator
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml")
[[ -n $version ]] || die "no appVersion in $chart/Chart.yaml"
case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) arch=$(uname -m) ;;
esac
out=$repo/target/dist
rm -rf "$out"
mkdir -p "$out"

bin=$("$repo/controlplane/build.sh")
"$bin/helm" package "$chart" --destination "$out" >/dev/null
cp "$repo/crds/leadergroup.yaml" "$out/leadergroup-crd-$version.yaml"
"$here/build.sh" operator agent ledger
for image in operator agent ledger; do
  cp "$repo/target/images/$image.tar" "$out/leadergroup-$image-$version.oci.tar"
done
(cd "$repo" && nice -n 10 cargo build --release --locked --bin kubectl-leadergroup)
cp "$repo/target/release/kubectl-leadergroup" "$out/kubectl-leadergroup-$version-linux-$arch"
(cd "$out" && sha256sum -- * >SHA256SUMS)
say "release $version in $out:"
find "$out" -maxdepth 1 -type f -printf '  %s bytes\t%f\n' | sort -k3 >&2
