#!/usr/bin/env bash
# Prints the path of a Debian package's .deb in the shared download cache, fetching it with
# `apt-get download` (from Debian's archive, never installed) when it is not there yet.
#   debian-deb.sh linux-source-6.1      the kernel source the guest kernel is configured from
#   debian-deb.sh linux-image           Debian's generic amd64 kernel (for its /boot/config-*)
# Cache: ${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}/debs, shared with tests/vm/setup-lab.sh.
set -o errexit -o nounset -o pipefail

die() {
  echo "debian-deb: error: $*" >&2
  exit 1
}
[[ $# -eq 1 ]] || die "usage: ${0##*/} linux-source-6.1|linux-image"
name=$1
if [[ $name == linux-image ]]; then
  # The package linux-image-amd64 depends on, e.g. linux-image-6.1.0-56-amd64.
  name=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
  [[ -n $name ]] || die "apt-cache knows no linux-image-amd64: run apt-get update"
fi
debs=${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}/debs
mkdir -p "$debs"
version=$(apt-cache policy "$name" 2>/dev/null | awk '/Candidate:/ { print $2 }')
if [[ -n $version && $version != "(none)" ]]; then
  deb=$debs/${name}_${version//:/%3a}_$(dpkg --print-architecture).deb
  [[ -f $deb ]] || deb=$debs/${name}_${version//:/%3a}_all.deb
  if [[ ! -f $deb ]]; then
    (cd "$debs" && apt-get download -q "$name=$version" >&2) || die "apt-get download $name=$version failed"
  fi
fi
# Offline, or the archive moved on: any cached version will do.
found=$(find "$debs" -maxdepth 1 -name "${name}_*.deb" | sort -V | tail -n1)
[[ -n $found ]] || die "no $name .deb cached and none could be downloaded"
echo "$found"
