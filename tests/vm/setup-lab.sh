#!/usr/bin/env bash
# Builds the real-kernel VM lab: a Debian 12 kernel with the whole VFIO mediated-device stack and
# the kernel's sample mdev drivers (mtty, mdpy, mbochs), which Debian builds without.
#
# Everything comes from Debian's registry. The kernel, its headers and kbuild, the kernel source
# (for samples/vfio-mdev), busybox-static and mdevctl are fetched with `apt-get download` and
# unpacked with `dpkg -x`, never installed: the host's own kernel and packages stay untouched.
# Only qemu-system-x86, kmod and cpio are installed (scripts/deps/vm.txt).
#
# Idempotent and cached under ${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}:
#   debs/<name>_<version>_<arch>.deb    as `apt-get download` names them (shared with other tools)
#   lab/<kver>/                         the built lab; `.complete` marks a finished one
# A second run costs a few apt-cache queries. Prints the lab directory on stdout.
set -o errexit -o nounset -o pipefail

# Bump when the lab's content changes so that cached labs are rebuilt.
readonly RECIPE=2

# Modules the guest loads at boot, in this order (modprobe resolves their dependencies):
# 9p + virtio + overlay mount the host's root; vfio, the type1 IOMMU backend (what QEMU's
# vfio-pci uses) and the mdev core carry the samples.
readonly GUEST_MODULES=(virtio_pci 9pnet_virtio 9p overlay vfio vfio_iommu_type1 mdev mtty mdpy mbochs)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}

info() { echo "setup-lab: $*" >&2; }
die() {
  echo "setup-lab: error: $*" >&2
  exit 1
}

usage() {
  cat <<EOF
usage: ${0##*/} [--force]
Builds (or finds cached) the VM lab and prints its directory.
  --force   rebuild the lab even if a complete one is cached (downloads stay cached)
Environment: KVGPU_CACHE (default \$HOME/.cache/kata-vgpu), KVGPU_VM_KVER (kernel ABI to use,
e.g. 6.1.0-56-amd64, instead of what linux-image-amd64 depends on).
EOF
}

force=0
while [[ $# -gt 0 ]]; do
  case $1 in
  --force) force=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    usage >&2
    exit 2
    ;;
  esac
  shift
done

for tool in apt-get apt-cache dpkg-deb depmod modprobe cpio xz make gcc; do
  command -v "$tool" >/dev/null || die "$tool not found: run scripts/install-deps.sh"
done

# Candidate version of a package, as apt would download it.
candidate_version() {
  apt-cache show --no-all-versions "$1" 2>/dev/null | awk '/^Version:/ { print $2; exit }'
}

# kver: the generic -amd64 flavour (the -cloud-amd64 kernel lacks CONFIG_VFIO_MDEV).
resolve_kernel() {
  if [[ -n ${KVGPU_VM_KVER:-} ]]; then
    kver=$KVGPU_VM_KVER
  else
    local dep
    dep=$(apt-cache depends linux-image-amd64 2>/dev/null |
      awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
    kver=${dep#linux-image-}
  fi
  pkgver=""
  if [[ -n $kver ]]; then
    pkgver=$(candidate_version "linux-image-$kver")
  fi
  if [[ -z $kver || -z $pkgver ]]; then
    # Offline with a built lab: use the newest one rather than fail.
    local stamp newest=""
    for stamp in "$cache"/lab/*/.complete; do
      [[ -e $stamp && ( -z $newest || $stamp -nt $newest ) ]] && newest=$stamp
    done
    [[ -n $newest ]] || die "cannot resolve the kernel from apt-cache (run apt-get update)"
    kver=$(basename "$(dirname "$newest")")
    info "apt-cache cannot resolve the kernel; using the cached lab $kver"
  fi
  [[ $kver == *-amd64 && $kver != *-cloud-amd64 ]] ||
    die "kernel '$kver' is not the generic -amd64 flavour (needs CONFIG_VFIO_MDEV)"
}

# Path of a cached .deb for "name=version", named as apt-get download names it ('%3a' for ':').
deb_path() {
  local name=${1%%=*} version=${1#*=}
  local matches=("$cache/debs/${name}_${version//:/%3a}_"*.deb)
  [[ -e ${matches[0]} ]] && echo "${matches[0]}"
}

# Downloads every missing "name=version" in one apt-get call into a private dir, then moves the
# files in one by one: a concurrent reader never sees a half-written .deb.
download() {
  local missing=() spec
  for spec in "$@"; do
    deb_path "$spec" >/dev/null || missing+=("$spec")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  info "downloading ${missing[*]}"
  mkdir -p "$cache/debs"
  local tmp
  tmp=$(mktemp -d "$cache/debs/.download.XXXXXX")
  local apt_opts=(-q)
  # As root apt drops to _apt, who cannot write into a private cache dir.
  [[ $(id -u) -eq 0 ]] && apt_opts+=(-o APT::Sandbox::User=root)
  if ! (cd "$tmp" && apt-get download "${apt_opts[@]}" "${missing[@]}" >/dev/null); then
    rm -rf "$tmp"
    die "apt-get download ${missing[*]} failed"
  fi
  local deb
  for deb in "$tmp"/*.deb; do
    mv -n "$deb" "$cache/debs/"
  done
  rm -rf "$tmp"
}

build_lab() {
  local lab=$1
  local abi=${kver%-amd64} series
  series=$(echo "$kver" | cut -d. -f1,2)
  local specs=(
    "linux-image-$kver=$pkgver"
    "linux-headers-$kver=$pkgver"
    "linux-headers-$abi-common=$pkgver"
    "linux-kbuild-$series=$pkgver"
    "linux-source-$series=$pkgver"
    "busybox-static=$(candidate_version busybox-static)"
    "mdevctl=$(candidate_version mdevctl)"
  )
  local spec
  for spec in "${specs[@]}"; do
    [[ $spec != *= ]] || die "no candidate version for ${spec%=}"
  done
  download "${specs[@]}"

  rm -rf "$lab"
  mkdir -p "$lab/root" "$lab/src" "$lab/modules"
  local root=$lab/root
  for spec in "${specs[@]}"; do
    [[ $spec == linux-source-* ]] && continue
    dpkg-deb -x "$(deb_path "$spec")" "$root"
  done

  # Only samples/vfio-mdev and extract-vmlinux are needed out of the 139 MB source package:
  # stream them out instead of unpacking the tree.
  info "extracting samples/vfio-mdev from linux-source-$series"
  dpkg-deb --fsys-tarfile "$(deb_path "linux-source-$series=$pkgver")" |
    tar -xO "./usr/src/linux-source-$series.tar.xz" | xz -dc |
    tar -x -C "$lab/src" --strip-components=1 --wildcards \
      "linux-source-$series/samples/vfio-mdev/*" "linux-source-$series/scripts/extract-vmlinux"

  # The flavour headers include the common headers by absolute path; point it at our copy.
  local hdr=$root/usr/src/linux-headers-$kver
  sed -i "s|^include /usr/src/|include $root/usr/src/|" "$hdr/Makefile"

  info "building mtty.ko mdpy.ko mbochs.ko against $kver"
  cp "$lab"/src/samples/vfio-mdev/{mtty.c,mdpy.c,mdpy-defs.h,mbochs.c} "$lab/modules/"
  echo 'obj-m := mtty.o mdpy.o mbochs.o' >"$lab/modules/Kbuild"
  # Without the kernel's vmlinux kbuild skips BTF, and says so on every module: not an error.
  make -s -C "$hdr" M="$lab/modules" modules -j"$(nproc)" 2>&1 |
    grep -v 'Skipping BTF generation' >&2 || true
  local ko
  for ko in mtty mdpy mbochs; do
    [[ -f $lab/modules/$ko.ko ]] || die "building $ko.ko failed"
  done
  mkdir -p "$root/lib/modules/$kver/extra"
  cp "$lab"/modules/{mtty,mdpy,mbochs}.ko "$root/lib/modules/$kver/extra/"
  # modules.dep is not shipped in the .deb.
  depmod -b "$root" "$kver"

  # An uncompressed kernel boots about twice as fast under emulation.
  sh "$lab/src/scripts/extract-vmlinux" "$root/boot/vmlinuz-$kver" >"$lab/vmlinux"
  [[ -s $lab/vmlinux ]] || die "extract-vmlinux produced nothing"

  # mdevctl refuses to run without its script dirs; the guest finds them in the lab's tree.
  mkdir -p "$lab/bin"
  ln -sf ../root/usr/bin/mdevctl "$lab/bin/mdevctl"
}

# The base initramfs: busybox, the modules in load order and /init (guest-init.sh). Rebuilt when
# any of those change; cheap (well under a second).
build_initramfs() {
  local lab=$1 root=$1/root
  local order=() path seen=" "
  local mod
  for mod in "${GUEST_MODULES[@]}"; do
    while read -r verb path _; do
      [[ $verb == insmod ]] || continue
      [[ $seen == *" $path "* ]] && continue
      seen+="$path "
      order+=("$path")
    done < <(modprobe -d "$root" -S "$kver" --show-depends "$mod")
  done
  local want
  want=$(
    {
      printf '%s\n' "$RECIPE" "${order[@]}"
      cat "$here/guest-init.sh"
    } | sha256sum | cut -d' ' -f1
  )
  if [[ -f $lab/initramfs.cpio && $(cat "$lab/initramfs.sha256" 2>/dev/null) == "$want" ]]; then
    return 0
  fi
  info "building initramfs (${#order[@]} modules)"
  local stage=$lab/initramfs
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,dev,proc,sys,lower,rw,newroot,lib/modules,etc}
  cp "$root/bin/busybox" "$stage/bin/busybox"
  ln -s busybox "$stage/bin/sh"
  install -m 0755 "$here/guest-init.sh" "$stage/init"
  : >"$stage/etc/modules"
  for path in "${order[@]}"; do
    cp "$path" "$stage/lib/modules/"
    basename "$path" >>"$stage/etc/modules"
  done
  (cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$lab/initramfs.cpio.tmp"
  mv "$lab/initramfs.cpio.tmp" "$lab/initramfs.cpio"
  echo "$want" >"$lab/initramfs.sha256"
}

main() {
  resolve_kernel
  local lab=$cache/lab/$kver
  mkdir -p "$cache/lab"
  # One builder at a time (ctest -j, several checkouts); the others wait and reuse its result.
  exec 9>"$cache/lab/.lock"
  flock 9
  local stamp="recipe=$RECIPE pkgver=$pkgver"
  if [[ -n $pkgver && ($force -eq 1 || $(cat "$lab/.complete" 2>/dev/null) != "$stamp") ]]; then
    local start=$SECONDS
    info "building the lab for $kver ($pkgver) in $lab"
    build_lab "$lab"
    echo "$stamp" >"$lab/.complete"
    info "lab built in $((SECONDS - start)) s"
  fi
  build_initramfs "$lab"
  echo "$lab"
}

main
