#!/usr/bin/env bash
# Writes a release into target/dist/, for installing somewhere else than this checkout:
#   leadergroup-operator-<chart version>.tgz        the chart (helm package)
#   leadergroup-crd-<version>.yaml                  the CRD (also inside the chart)
#   leadergroup-{operator,agent,ledger}-<version>.oci.tar
#                                                   the images as OCI archives: `ctr image import`,
#                                                   `kind load image-archive`, `skopeo copy
#                                                   oci-archive:FILE docker://REGISTRY/NAME:TAG`
#   kubectl-leadergroup-<version>-linux-<arch>      the kubectl plugin
#   kubectl-leadergroup-<version>-linux-<arch>.tar.gz
#                                                   the plugin as krew installs it
#   leadergroup.yaml                                its krew manifest (plugins/krew/leadergroup.yaml
#                                                   filled in: the archive's address and sha256)
#   leadergroup-<version>.cdx.json                  the CycloneDX SBOM of the Rust dependencies
#                                                   (cargo-cyclonedx; every workspace crate's
#                                                   dependencies, in one document)
#   SHA256SUMS                                      of all of the above
# <version> is the chart's appVersion, the images' tag. The images and the binaries are built (or
# found built) by images/build.sh and cargo; helm is the pinned one of controlplane/build.sh,
# cargo-cyclonedx the pinned one of controlplane/cargo-tool.sh. The plugin archive is
# reproducible (sorted, fixed owner and times, gzip without a name), so its sha256 depends on the
# binary alone.
# KREW_DOWNLOAD_URL: where the archive will be published (default: the project's release of
# v<version>); the manifest's uri.
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
plugin=kubectl-leadergroup-$version-linux-$arch
cp "$repo/target/release/kubectl-leadergroup" "$out/$plugin"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
install -m 0755 "$repo/target/release/kubectl-leadergroup" "$staging/kubectl-leadergroup"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$staging" -cf - kubectl-leadergroup |
  gzip -n -9 >"$out/$plugin.tar.gz"
download=${KREW_DOWNLOAD_URL:-https://github.com/leadergroup/leadergroup-operator/releases/download/v$version}
sha=$(sha256sum "$out/$plugin.tar.gz" | cut -d' ' -f1)
sed -e '/^# /d' -e "s|@VERSION@|$version|g; s|@ARCH@|$arch|g; s|@DOWNLOAD_URL@|$download|g; s|@SHA256@|$sha|g" \
  "$repo/plugins/krew/leadergroup.yaml" >"$out/leadergroup.yaml"
! grep -n '@[A-Z0-9_]*@' "$out/leadergroup.yaml" || die "a placeholder is left in the krew manifest"
# One SBOM for the workspace: cargo-cyclonedx writes one per crate beside its Cargo.toml
# (--override-filename), of which the root package's lists the operator's dependencies; the
# others are merged in by component reference.
cyclonedx=$("$repo/controlplane/cargo-tool.sh" cyclonedx)
(cd "$repo" && "$cyclonedx" cyclonedx --format json --all-features --override-filename "$staging/sbom" --quiet) ||
  die "cargo-cyclonedx failed"
(cd "$out" && sha256sum -- * >SHA256SUMS)
say "release $version in $out:"
find "$out" -maxdepth 1 -type f -printf '  %s bytes\t%f\n' | sort -k3 >&2
