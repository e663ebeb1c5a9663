#!/usr/bin/env bash
# Builds the real-kernel VM lab: a Debian 12 kernel with the whole VFIO mediated-device stack and
# the kernel's sample mdev drivers (mtty, mdpy, mbochs), which Debian builds without.
#
# Everything comes from Debian's registry. The kernel, its headers and kbuild, the kernel source
# (for samples/vfio-mdev), busybox-static and mdevctl are fetched with `apt-get download` and
# unpacked with `dpkg -x`, never installed: the host's own kernel and packages stay untouched.
# Only qemu-system-x86, kmod and cpio are installed (scripts/deps/vm.txt).
#
# For the libvirt backend's tests (libvirt-lab.sh), Debian's libvirtd, virsh and udevd, with the
# two libraries they need that a build machine lacks, are unpacked (not installed) into
# lab/<kver>/libvirt-root, and mttypci.ko (make-mttypci.sh) gives them a PCI mdev parent.
#
# Idempotent and cached under ${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}:
#   debs/<name>_<version>_<arch>.deb    as `apt-get download` names them (shared with other tools)
#   lab/<kver>/                         the built lab; `.complete` marks a finished one
#   lab/current                         -> the lab built or used last
# A second run costs one apt-cache query (none with --cached). Prints the lab directory.
set -o errexit -o nounset -o pipefail

# Bump when the lab's content changes so that cached labs are rebuilt.
readonly RECIPE=4

# Modules the guest loads at boot, in this order (modprobe resolves their dependencies):
# 9p + virtio + overlay mount the host's root; vfio, the type1 IOMMU backend (what QEMU's
# vfio-pci uses) and the mdev core carry the samples; mbochs64 is the large 64-bit-BAR variant
# (make_mbochs64).
readonly GUEST_MODULES=(virtio_pci 9pnet_virtio 9p overlay vfio vfio_iommu_type1 mdev mtty mdpy mbochs
  mbochs64)

# The nested guest's modules (attach_driver_vm_test.py): the guest kernel's own driver for the
# mbochs display, standing in for the NVIDIA guest driver binding to a vGPU.
readonly NESTED_MODULES=(bochs)

# Unpacked into libvirt-root; the guest copies it over its RAM overlay (libvirt-lab.sh).
readonly LIBVIRT_PACKAGES=(libvirt-daemon libvirt-clients udev libpcap0.8 libparted2)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}

info() { echo "setup-lab: [${SECONDS}s] $*" >&2; }
die() {
  echo "setup-lab: error: $*" >&2
  exit 1
}

usage() {
  cat <<EOF
usage: ${0##*/} [--force | --cached]
Builds (or finds cached) the VM lab and prints its directory.
  --force   rebuild the lab even if a complete one is cached (downloads stay cached)
  --cached  use the lab built last without asking apt which kernel is current
Environment: KVGPU_CACHE (default \$HOME/.cache/kata-vgpu), KVGPU_VM_KVER (kernel ABI to use,
e.g. 6.1.0-56-amd64, instead of what linux-image-amd64 depends on).
EOF
}

force=0
cached=0
while [[ $# -gt 0 ]]; do
  case $1 in
  --force) force=1 ;;
  --cached) cached=1 ;;
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

# "name=version" for each package, at the version apt would download; one apt-cache call.
candidate_specs() {
  apt-cache show --no-all-versions "$@" 2>/dev/null |
    awk '/^Package:/ { name = $2 } /^Version:/ { print name "=" $2 }'
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
  if [[ -z $kver ]]; then
    # Offline with a built lab: use the newest one rather than fail.
    [[ -f $cache/lab/current/.complete ]] ||
      die "cannot resolve the kernel from apt-cache (run apt-get update)"
    kver=$(basename "$(readlink "$cache/lab/current")")
    info "apt-cache cannot resolve the kernel; using the cached lab $kver"
  fi
  [[ $kver == *-amd64 && $kver != *-cloud-amd64 ]] ||
    die "kernel '$kver' is not the generic -amd64 flavour (needs CONFIG_VFIO_MDEV)"
}

# "name=version" of a kernel package built from the same source as the kernel but not tied to its
# ABI (linux-kbuild-6.1, linux-source-6.1): the kernel's own version where the archive still has
# it, else the newest build of the same upstream release. The security archive keeps one
# linux-kbuild per series, so right after a new Debian revision (6.1.192-3) it no longer serves the
# kbuild of the kernel linux-image-amd64 still names (6.1.192-2); the tools and sources of one
# upstream release build the same modules.
same_release_spec() {
  local name=$1 pkgver=$2 versions version
  versions=$(apt-cache madison "$name" 2>/dev/null | awk -F' *[|] *' '{ print $2 }')
  if grep -qxF "$pkgver" <<<"$versions"; then
    echo "$name=$pkgver"
    return
  fi
  version=$(awk -v release="${pkgver%-*}-" 'index($0, release) == 1' <<<"$versions" |
    sort -V | tail -n 1)
  [[ -n $version ]] || die "apt has no $name of ${pkgver%-*} (wanted $pkgver; run apt-get update)"
  info "$name $pkgver is gone from the archive; using $version of the same upstream release"
  echo "$name=$version"
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
  # Left by an interrupted run; no other download of ours runs (we hold the lab lock).
  rm -rf "$cache"/debs/.download.*
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
  local abi=${kver%-amd64} series pkgver versions
  versions=$(candidate_specs "linux-image-$kver" busybox-static mdevctl "${LIBVIRT_PACKAGES[@]}")
  pkgver=$(sed -n "s/^linux-image-$kver=//p" <<<"$versions")
  [[ -n $pkgver ]] || die "apt knows no linux-image-$kver (run apt-get update)"
  info "building the lab for $kver ($pkgver) in $lab"
  series=$(echo "$kver" | cut -d. -f1,2)
  local kbuild_spec source_spec
  kbuild_spec=$(same_release_spec "linux-kbuild-$series" "$pkgver") || exit 1
  source_spec=$(same_release_spec "linux-source-$series" "$pkgver") || exit 1
  local specs=(
    "linux-image-$kver=$pkgver"
    "linux-headers-$kver=$pkgver"
    "linux-headers-$abi-common=$pkgver"
    "$kbuild_spec"
    "$source_spec"
    "$(grep '^busybox-static=' <<<"$versions")"
    "$(grep '^mdevctl=' <<<"$versions")"
  )
  local spec
  [[ $versions == *busybox-static=* && $versions == *mdevctl=* ]] ||
    die "apt knows no busybox-static or mdevctl (run apt-get update)"
  local libvirt_specs=() package
  for package in "${LIBVIRT_PACKAGES[@]}"; do
    spec=$(grep "^$package=" <<<"$versions") || die "apt knows no $package (run apt-get update)"
    libvirt_specs+=("$spec")
  done
  download "${specs[@]}" "${libvirt_specs[@]}"

  local stale=("$cache"/lab/.old.*)  # left by an interrupted run
  [[ -e ${stale[0]} ]] && rm -rf "${stale[@]}" >/dev/null 2>&1 9>&- &
  if [[ -e $lab ]]; then
    # Deleting 0.5 GB of small files is slow on a busy disk: move it aside, delete behind us.
    local old
    old=$(mktemp -d "$cache/lab/.old.XXXXXX")
    mv "$lab" "$old/"
    rm -rf "$old" >/dev/null 2>&1 9>&- &
  fi
  mkdir -p "$lab/root" "$lab/src" "$lab/modules"
  local root=$lab/root

  # Only samples/vfio-mdev and extract-vmlinux are needed out of the 139 MB source package:
  # stream them out instead of unpacking the tree, on the second core while the rest unpacks.
  info "unpacking; extracting samples/vfio-mdev from linux-source-$series"
  dpkg-deb --fsys-tarfile "$(deb_path "$source_spec")" |
    tar -xO "./usr/src/linux-source-$series.tar.xz" | xz -dc |
    tar -x -C "$lab/src" --strip-components=1 --wildcards \
      "linux-source-$series/samples/vfio-mdev/*" "linux-source-$series/scripts/extract-vmlinux" &
  local samples=$!
  for spec in "${specs[@]}"; do
    [[ $spec == linux-source-* ]] && continue
    dpkg-deb -x "$(deb_path "$spec")" "$root"
  done
  wait "$samples" || die "extracting the samples from linux-source-$series failed"

  # The flavour headers include the common headers by absolute path; point it at our copy.
  local hdr=$root/usr/src/linux-headers-$kver
  sed -i "s|^include /usr/src/|include $root/usr/src/|" "$hdr/Makefile"

  info "building mtty.ko mdpy.ko mbochs.ko mbochs64.ko against $kver"
  cp "$lab"/src/samples/vfio-mdev/{mtty.c,mdpy.c,mdpy-defs.h,mbochs.c} "$lab/modules/"
  make_mbochs64 "$lab/modules/mbochs.c" "$lab/modules/mbochs64.c"
  echo 'obj-m := mtty.o mdpy.o mbochs.o mbochs64.o' >"$lab/modules/Kbuild"
  # Without the kernel's vmlinux kbuild skips BTF, and says so on every module: not an error.
  make -s -C "$hdr" M="$lab/modules" modules -j"$(nproc)" 2>&1 |
    grep -v 'Skipping BTF generation' >&2 || true
  local ko
  for ko in mtty mdpy mbochs mbochs64; do
    [[ -f $lab/modules/$ko.ko ]] || die "building $ko.ko failed"
  done
  mkdir -p "$root/lib/modules/$kver/extra"
  cp "$lab"/modules/{mtty,mdpy,mbochs,mbochs64}.ko "$root/lib/modules/$kver/extra/"
  info "depmod, extract-vmlinux"
  # modules.dep is not shipped in the .deb.
  depmod -b "$root" "$kver"

  # An uncompressed kernel boots about twice as fast under emulation.
  sh "$lab/src/scripts/extract-vmlinux" "$root/boot/vmlinuz-$kver" >"$lab/vmlinux"
  [[ -s $lab/vmlinux ]] || die "extract-vmlinux produced nothing"

  info "building mttypci.ko; unpacking libvirtd, virsh and udevd"
  "$here/make-mttypci.sh" "$lab" "$lab/mttypci" >/dev/null
  local libvirt_root=$lab/libvirt-root
  mkdir -p "$libvirt_root"
  for spec in "${libvirt_specs[@]}"; do
    dpkg-deb -x "$(deb_path "$spec")" "$libvirt_root"
  done
  # Debian's / is merged-usr: /bin, /sbin and /lib are links the guest cannot copy a directory
  # onto, so their content goes under usr/.
  local dir
  for dir in bin sbin lib; do
    if [[ -d $libvirt_root/$dir && ! -L $libvirt_root/$dir ]]; then
      mkdir -p "$libvirt_root/usr/$dir"
      cp -a "$libvirt_root/$dir/." "$libvirt_root/usr/$dir/"
      rm -rf "${libvirt_root:?}/$dir"
    fi
  done

  # mdevctl refuses to run without its script dirs; the guest finds them in the lab's tree.
  mkdir -p "$lab/bin"
  ln -sf ../root/usr/bin/mdevctl "$lab/bin/mdevctl"
}

# mbochs with what tells a real vGPU's BARs from the stock sample's: its framebuffer BAR 0 is
# 64-bit prefetchable (as a vGPU's BAR 1) and the large type's is 256 MiB; its register BAR 2 is
# 16 MiB of 32-bit non-prefetchable MMIO (as a vGPU's BAR 0). Renamed so that both load.
make_mbochs64() {
  local from=$1 to=$2
  sed -E \
    -e 's/^(#define MBOCHS_(CLASS_)?NAME[[:space:]]+)"mbochs"/\1"mbochs64"/' \
    -e 's/\.name = "mbochs",/.name = "mbochs64",/' \
    -e 's/^(#define MBOCHS_MMIO_BAR_SIZE[[:space:]]+)PAGE_SIZE/\1(16 * 1024 * 1024)/' \
    -e 's/^(static int max_mbytes = )256;/\11024;/' \
    -e 's/(\.mbytes = )64,/\1256,/' \
    "$from" >"$to"
  # BAR 0's type is two lines after its register's name; BAR 2 keeps its 32-bit type.
  sed -i -E '/vconfig\[PCI_BASE_ADDRESS_0\]/{n;n;s/PCI_BASE_ADDRESS_MEM_TYPE_32/PCI_BASE_ADDRESS_MEM_TYPE_64/}' "$to"
  local want
  for want in '"mbochs64"' '(16 \* 1024 \* 1024)' 'max_mbytes = 1024' '.mbytes = 256' \
    'PCI_BASE_ADDRESS_MEM_TYPE_64'; do
    grep -q -- "$want" "$to" || die "mbochs64.c: the sample changed; '$want' not applied"
  done
}

# insmod paths, in load order, for the modules named (modprobe resolves their dependencies).
module_order() {
  local root=$1 path verb seen=" " mod
  shift
  for mod in "$@"; do
    while read -r verb path _; do
      [[ $verb == insmod ]] || continue
      [[ $seen == *" $path "* ]] && continue
      seen+="$path "
      echo "$path"
    done < <(modprobe -d "$root" -S "$kver" --show-depends "$mod")
  done
}

# An initramfs from busybox, modules and an /init script, rebuilt when any of those change
# (cheap: well under a second). Its /etc/modules lists the modules in load order.
make_initramfs() {
  local root=$1 init=$2 out=$3
  shift 3
  local order
  mapfile -t order < <(module_order "$root" "$@")
  local want
  want=$(
    {
      printf '%s\n' "$RECIPE" "${order[@]}"
      cat "$init"
    } | sha256sum | cut -d' ' -f1
  )
  if [[ -f $out && $(cat "$out.sha256" 2>/dev/null) == "$want" ]]; then
    return 0
  fi
  info "building ${out##*/} (${#order[@]} modules)"
  local stage
  stage=$(mktemp -d "${out%/*}/.initramfs.XXXXXX")
  mkdir -p "$stage"/{bin,dev,proc,sys,lower,rw,newroot,lib/modules,etc}
  cp "$root/bin/busybox" "$stage/bin/busybox"
  ln -s busybox "$stage/bin/sh"
  install -m 0755 "$init" "$stage/init"
  : >"$stage/etc/modules"
  local path
  for path in "${order[@]}"; do
    cp "$path" "$stage/lib/modules/"
    basename "$path" >>"$stage/etc/modules"
  done
  (cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out.tmp"
  rm -rf "$stage"
  mv "$out.tmp" "$out"
  echo "$want" >"$out.sha256"
}

# The lab VM's initramfs (guest-init.sh) and the nested guest's (nested-init.sh).
build_initramfs() {
  local lab=$1
  make_initramfs "$lab/root" "$here/guest-init.sh" "$lab/initramfs.cpio" "${GUEST_MODULES[@]}"
  make_initramfs "$lab/root" "$here/nested-init.sh" "$lab/nested-initramfs.cpio" \
    "${NESTED_MODULES[@]}"
}

main() {
  # The lab run-in-vm.sh used last, without asking apt (a few seconds on a busy machine).
  if [[ $cached -eq 1 && -z ${KVGPU_VM_KVER:-} && -f $cache/lab/current/.complete ]]; then
    kver=$(basename "$(readlink "$cache/lab/current")")
  else
    resolve_kernel
  fi
  local lab=$cache/lab/$kver
  mkdir -p "$cache/lab"
  # One builder at a time (ctest -j, several checkouts); the others wait and reuse its result.
  exec 9>"$cache/lab/.lock"
  flock 9
  if [[ $force -eq 1 || $(cat "$lab/.complete" 2>/dev/null) != "recipe=$RECIPE" ]]; then
    local start=$SECONDS
    build_lab "$lab"
    echo "recipe=$RECIPE" >"$lab/.complete"
    info "lab built in $((SECONDS - start)) s"
  fi
  build_initramfs "$lab"
  ln -sfn "$kver" "$cache/lab/current"
  echo "$lab"
}

main
