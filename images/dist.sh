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
#   leadergroup-{operator,agent}-<version>.cdx.json the CycloneDX SBOMs of their Rust dependencies
#                                                   (cargo-cyclonedx; the operator's covers the
#                                                   kubectl plugin and the ledger example too)
#   SHA256SUMS                                      of all of the above
# <version> is the chart's appVersion, the images' tag. The images and the binaries are built (or
# found built, as after make e2e) by images/build.sh and images/release-build.sh; helm is the
# pinned one of controlplane/build.sh, cargo-cyclonedx the pinned one of controlplane/cargo-tool.sh.
# The plugin archive is reproducible (sorted, fixed owner and times, gzip without a name), so its
# sha256 depends on the binary alone.
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
# The plugin is a binary of the operator package: build.sh's release build made it above.
"$here/release-build.sh" shipped
plugin=kubectl-leadergroup-$version-linux-$arch
cp "$repo/target/release/kubectl-leadergroup" "$out/$plugin"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
install -m 0755 "$repo/target/release/kubectl-leadergroup" "$staging/kubectl-leadergroup"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$staging" -cf - kubectl-leadergroup |
  gzip -n -9 >"$out/$plugin.tar.gz"
# Where the krew manifest says the archive is, and the project's page: placeholders by default (no
# public address of the project is confirmed yet; plugins/krew/leadergroup.yaml).
homepage=${KREW_HOMEPAGE:-https://github.com/leadergroup/leadergroup-operator}
download=${KREW_DOWNLOAD_URL:-$homepage/releases/download/v$version}
sha=$(sha256sum "$out/$plugin.tar.gz" | cut -d' ' -f1)
sed -e '/^# /d' -e "s|@VERSION@|$version|g; s|@ARCH@|$arch|g; s|@DOWNLOAD_URL@|$download|g; s|@HOMEPAGE@|$homepage|g; s|@SHA256@|$sha|g" \
  "$repo/plugins/krew/leadergroup.yaml" >"$out/leadergroup.yaml"
! grep -n '@[A-Z0-9_]*@' "$out/leadergroup.yaml" || die "a placeholder is left in the krew manifest"
# The SBOMs: cargo-cyclonedx writes one per workspace member beside its Cargo.toml (named
# sbom-name below); the shipped ones are the root package's (the operator, the kubectl plugin and
# the ledger example) and the agent's. The others are removed with the rest.
sbom_name=dist-sbom.cdx
cyclonedx=$("$repo/controlplane/cargo-tool.sh" cyclonedx)
remove_sboms() { find "$repo" -path "$repo/target" -prune -o -name "$sbom_name.json" -type f -exec rm -f {} +; }
trap 'rm -rf "$staging"; remove_sboms' EXIT
(cd "$repo" && "$cyclonedx" cyclonedx --format json --spec-version 1.5 --override-filename "$sbom_name" --quiet) ||
  die "cargo-cyclonedx failed"
cp "$repo/$sbom_name.json" "$out/leadergroup-operator-$version.cdx.json"
cp "$repo/agent/$sbom_name.json" "$out/leadergroup-agent-$version.cdx.json"
remove_sboms
(cd "$out" && sha256sum -- * >SHA256SUMS)
say "release $version in $out:"
find "$out" -maxdepth 1 -type f -printf '  %s bytes\t%f\n' | sort -k3 >&2
