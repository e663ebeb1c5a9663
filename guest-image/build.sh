#!/usr/bin/env bash
# Builds what a kata-vgpu node needs inside the pod VM, once per NVIDIA driver version:
#   kernel   the Kata guest kernel: base config + kernel/fragments/*.conf, checked after
#            `make olddefconfig`, then built with its modules and the headers NVIDIA's installer
#            compiles against
#   driver   runs the NVIDIA GRID guest .run installer into a staging root
#   bundle   lays out the driver bundle pods mount (/usr/local/nvidia in the container)
#   install  puts kernel and bundle where kata-config/ and the webhook expect them
#   check    lints the fragments and the config-version file
# Every step writes into a fresh temporary directory and renames it into place at the end, so a
# failed or interrupted step leaves nothing half-made behind.
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here
readonly ARCH=x86_64
readonly NODE_PREFIX=/opt/kata-vgpu

info() { echo "build.sh: $*" >&2; }
die() {
  echo "build.sh: error: $*" >&2
  exit 1
}

usage() {
  cat <<EOF
usage: ${0##*/} <command> [options]

  kernel  --source PATH --out DIR [--base defconfig|FILE] [--fragments DIR] [--jobs N]
          [--config-only]
      PATH is a kernel source tree, a source tarball (.tar, .tar.gz, .tar.xz) or Debian's
      linux-source-*.deb. The build happens out of tree in DIR/build. --config-only stops after
      the configuration is made and checked (and then unpacks only what Kconfig reads).
      Output: DIR/{vmlinuz,config,kernel-release,config-version,modules/,headers/}
  driver  --installer NVIDIA-Linux-x86_64-<version>-grid.run --kernel DIR --staging DIR
          [--driver-version V]
      DIR is a 'kernel' output. Fails if --staging exists and is not empty.
  bundle  --staging DIR --kernel DIR --out DIR
      Output: the bundle with MANIFEST.sha256 and bundle-info.
  install --kernel DIR --bundle DIR [--root DIR] [--dry-run]
      Installs to ROOT$NODE_PREFIX/guest and ROOT$NODE_PREFIX/driver (symlinks to the
      versioned copies). Idempotent.
  check   [--fragments DIR] [--config-version FILE]
      Each option in a fragment has a comment above it, no symbol is in two fragments, and the
      config-version file's last line matches the fragments.

Environment: KVGPU_JOBS (default: number of CPUs) for 'kernel'.
EOF
}

need_value() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }
need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found: run scripts/install-deps.sh"
  done
}
abspath() { realpath -m -- "$1"; }

# A fresh temporary sibling of DEST, renamed to DEST by commit_dir.
temp_beside() {
  mkdir -p "$(dirname "$1")"
  mktemp -d "$(dirname "$1")/.$(basename "$1").XXXXXX"
}
commit_dir() {
  local tmp=$1 dest=$2
  if [[ -d $dest ]]; then
    rmdir "$dest" 2>/dev/null || die "$dest appeared while building"
  fi
  mv -T "$tmp" "$dest"
}

# --- fragments --------------------------------------------------------------------------------

fragments_hash() {
  local dir=$1 f
  (
    cd "$dir"
    for f in *.conf; do
      printf '%s\n' "$f"
      cat "$f"
    done
  ) | sha256sum | cut -d' ' -f1
}

# Prints "SYMBOL VALUE FILE" for every option in the fragments; VALUE is n for "is not set".
fragment_options() {
  local dir=$1
  awk '
    /^CONFIG_[A-Za-z0-9_]+=/ { i = index($0, "="); print substr($0, 1, i - 1), substr($0, i + 1), FILENAME; next }
    /^# CONFIG_[A-Za-z0-9_]+ is not set$/ { print $2, "n", FILENAME }
  ' "$dir"/*.conf | sed "s|$dir/||"
}

cmd_check() {
  local fragments=$here/kernel/fragments version_file=$here/kernel/config-version
  while [[ $# -gt 0 ]]; do
    case $1 in
    --fragments) need_value "$@"; fragments=$2; shift ;;
    --config-version) need_value "$@"; version_file=$2; shift ;;
    *) die "check: unknown argument $1" ;;
    esac
    shift
  done
  compgen -G "$fragments/*.conf" >/dev/null || die "no fragments in $fragments"
  local problems
  # An option line must follow a comment line that is not itself an option.
  problems=$(awk '
    FNR == 1 { prev = "" }
    /^CONFIG_/ || /^# CONFIG_[A-Za-z0-9_]+ is not set$/ {
      if (prev !~ /^#/ || prev ~ /^# CONFIG_[A-Za-z0-9_]+ is not set$/)
        printf "%s:%d: %s has no comment saying why\n", FILENAME, FNR, $0
    }
    !/^[[:space:]]*$/ && !/^CONFIG_/ && !/^#/ { printf "%s:%d: not an option or a comment: %s\n", FILENAME, FNR, $0 }
    { prev = $0 }
  ' "$fragments"/*.conf)
  problems+=$(fragment_options "$fragments" | awk '
    seen[$1] != "" { printf "\n%s is set twice (%s, %s): one place per symbol, one concern per file", $1, seen[$1], $3 }
    { seen[$1] = $3 }')
  local current wanted
  current=$(grep -v '^#' "$version_file" | awk 'NF { last = $0 } END { print last }')
  wanted=$(fragments_hash "$fragments")
  if [[ ${current#* } != "$wanted" ]]; then
    problems+=$'\n'"$version_file: the fragments changed; append the line '$((${current%% *} + 1)) $wanted'"
  fi
  problems+=$(grep -v '^#' "$version_file" | awk 'NF {
    if ($1 !~ /^[0-9]+$/ || $1 <= last) printf "\nconfig-version: versions must increase, line %s", $0
    if (hash[$2]++) printf "\nconfig-version: hash %s listed twice", $2
    last = $1 }')
  problems=$(sed '/^$/d' <<<"$problems")
  [[ -z $problems ]] || die "fragment check failed:"$'\n'"$problems"
  info "fragments ok, config version ${current%% *}"
}

config_version() {
  grep -v '^#' "$here/kernel/config-version" | awk 'NF { last = $1 } END { print last }'
}

# --- kernel -----------------------------------------------------------------------------------

# unpack_source PATH DEST CONFIG_ONLY: the kernel tree of PATH in DEST (top directory stripped).
unpack_source() {
  local source=$1 dest=$2 config_only=$3
  # Kconfig reads only these; unpacking just them takes seconds instead of a minute.
  local filters=()
  if [[ $config_only -eq 1 ]]; then
    filters=(--wildcards '*/Makefile' '*/Kconfig*' '*/scripts/*' "*/arch/x86/configs/*" '*/arch/x86/Makefile*')
  fi
  mkdir -p "$dest"
  case $source in
  *.deb)
    local inner
    inner=$(dpkg-deb --fsys-tarfile "$source" | tar -t | grep -E '^\./usr/src/linux-source-[^/]*\.tar\.(xz|gz|bz2)$' | head -n1) ||
      die "$source has no usr/src/linux-source-*.tar.*"
    dpkg-deb --fsys-tarfile "$source" | tar -xO "$inner" | tar -xa -f - --strip-components=1 -C "$dest" \
      --use-compress-program="$(compressor "$inner")" "${filters[@]}"
    ;;
  *.tar | *.tar.gz | *.tgz | *.tar.xz | *.tar.bz2)
    tar -x -f "$source" --strip-components=1 -C "$dest" "${filters[@]}"
    ;;
  *) die "--source $source: want a directory, a .tar[.gz|.xz|.bz2] or a linux-source .deb" ;;
  esac
  [[ -f $dest/Makefile && -f $dest/Kconfig ]] || die "--source $source: no kernel tree inside"
}
compressor() {
  case $1 in
  *.xz) echo "xz -d" ;;
  *.gz) echo "gzip -d" ;;
  *.bz2) echo "bzip2 -d" ;;
  esac
}

# check_symbols FRAGMENTS CONFIG: every fragment option kept its value through olddefconfig.
check_symbols() {
  local fragments=$1 config=$2 dropped
  dropped=$(fragment_options "$fragments" | awk -v config="$config" '
    BEGIN {
      while ((getline line < config) > 0) {
        if (line ~ /^CONFIG_/) { i = index(line, "="); got[substr(line, 1, i - 1)] = substr(line, i + 1) }
        else if (line ~ /^# CONFIG_[A-Za-z0-9_]+ is not set$/) { split(line, w, " "); got[w[2]] = "n" }
      }
    }
    {
      have = ($1 in got) ? got[$1] : "n"
      if (have != $2) printf "  %s=%s (%s) is %s after olddefconfig\n", $1, $2, $3, (($1 in got) ? have : "gone")
    }')
  [[ -z $dropped ]] || die "olddefconfig dropped required symbols (a dependency is off, or the symbol does not exist in this kernel):"$'\n'"$dropped"
}

cmd_kernel() {
  local source='' out='' base=defconfig fragments=$here/kernel/fragments config_only=0
  local jobs=${KVGPU_JOBS:-$(nproc)}
  while [[ $# -gt 0 ]]; do
    case $1 in
    --source) need_value "$@"; source=$2; shift ;;
    --out) need_value "$@"; out=$2; shift ;;
    --base) need_value "$@"; base=$2; shift ;;
    --fragments) need_value "$@"; fragments=$2; shift ;;
    --jobs) need_value "$@"; jobs=$2; shift ;;
    --config-only) config_only=1 ;;
    *) die "kernel: unknown argument $1" ;;
    esac
    shift
  done
  [[ -n $source && -n $out ]] || die "kernel: --source and --out are required"
  [[ -e $source ]] || die "--source $source does not exist"
  [[ $base == defconfig || -f $base ]] || die "--base $base: not 'defconfig' nor a file"
  [[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs $jobs: want a positive number"
  compgen -G "$fragments/*.conf" >/dev/null || die "no fragments in $fragments"
  need_tools make gcc flex bison
  [[ $config_only -eq 1 ]] || need_tools bc openssl perl
  source=$(abspath "$source")
  out=$(abspath "$out")
  [[ $base == defconfig ]] || base=$(abspath "$base")
  fragments=$(abspath "$fragments")
  if [[ -e $out ]] && [[ -n $(ls -A "$out") ]]; then
    die "--out $out exists and is not empty"
  fi

  local work
  work=$(temp_beside "$out")
  # shellcheck disable=SC2064 # expand now: the trap must remove this very directory
  trap "rm -rf '$work'" EXIT
  local srctree=$source
  if [[ ! -d $source ]]; then
    info "unpacking $source"
    unpack_source "$source" "$work/src" "$config_only"
    srctree=$work/src
  fi
  [[ -f $srctree/Makefile ]] || die "--source $source: no kernel Makefile"
  # Kbuild refuses an out-of-tree build from a configured tree; say so before it does.
  [[ ! -e $srctree/.config && ! -e $srctree/include/config ]] ||
    die "--source $source has been configured in place: use a clean tree ('make mrproper')"
  local kmake=(make -s -C "$srctree" O="$work/build" ARCH="$ARCH")

  local version
  version=$(config_version)
  info "configuring: base $base, fragments $(basename -a "$fragments"/*.conf | tr '\n' ' ')(config version $version)"
  mkdir -p "$work/build"
  if [[ $base == defconfig ]]; then
    "${kmake[@]}" "${ARCH}_defconfig"
  else
    cp "$base" "$work/build/.config"
  fi
  # Later assignments win in Kconfig, so the fragments override the base; the release name
  # carries the config version so modules built for another version refuse to load.
  {
    cat "$fragments"/*.conf
    printf 'CONFIG_LOCALVERSION="-kvgpu%s"\n# CONFIG_LOCALVERSION_AUTO is not set\n' "$version"
  } >>"$work/build/.config"
  "${kmake[@]}" olddefconfig 2>"$work/olddefconfig.log" ||
    die "olddefconfig failed: $(cat "$work/olddefconfig.log")"
  check_symbols "$fragments" "$work/build/.config"
  cp "$work/build/.config" "$work/config"
  echo "$version" >"$work/config-version"
  info "every required symbol survived olddefconfig"

  if [[ $config_only -eq 0 ]]; then
    info "building bzImage and modules with $jobs jobs (this takes a while)"
    "${kmake[@]}" -j "$jobs" bzImage modules
    "${kmake[@]}" INSTALL_MOD_PATH="$work/modules" INSTALL_MOD_STRIP=1 modules_install
    cp "$work/build/arch/x86/boot/bzImage" "$work/vmlinuz"
    "${kmake[@]}" -s kernelrelease >"$work/kernel-release"
    copy_headers "$srctree" "$work/build" "$work/headers"
    rm -f "$work/modules/lib/modules/$(cat "$work/kernel-release")"/{build,source}
  else
    # kernelrelease reads LOCALVERSION from include/config/auto.conf, which syncconfig writes.
    "${kmake[@]}" syncconfig
    "${kmake[@]}" -s kernelrelease >"$work/kernel-release"
  fi
  rm -rf "$work/build" "$work/src" "$work/olddefconfig.log"
  trap - EXIT
  commit_dir "$work" "$out"
  info "kernel $(cat "$out/kernel-release") in $out"
}

# copy_headers SRC BUILD DEST: a self-contained tree to build external modules against, which
# is what nvidia-installer's --kernel-source-path wants: the Makefiles and Kconfig files, the
# headers, the generated headers and the built host tools of scripts/, .config and
# Module.symvers, with source and output merged into one directory.
copy_headers() {
  local src=$1 build=$2 dest=$3
  mkdir -p "$dest"
  (
    cd "$src"
    find . -name 'Makefile*' -o -name 'Kconfig*' -o -name 'Kbuild*' -o -name '*.lds' -o -name '*.pl' -o -name '*.sh' |
      grep -E '^\./(Makefile|Kbuild|Kconfig|scripts/|include/|arch/x86/|tools/objtool/)' || true
    find include arch/x86/include scripts -type f
  ) | sed 's|^\./||' | sort -u | (cd "$src" && xargs -r cp --parents -t "$dest")
  (
    cd "$build"
    find . -path ./source -prune -o \( -path './include/*' -o -path './arch/x86/include/*' -o -path './scripts/*' \
      -o -path './tools/objtool/objtool' -o -name .config -o -name Module.symvers -o -name System.map \) -type f -print
  ) | (cd "$build" && xargs -r cp --parents -t "$dest")
}

# --- driver -----------------------------------------------------------------------------------

# The installer's options, as nvidia-installer defines them: everything it would put under /usr
# or /lib/modules goes into the staging root instead, nothing is loaded or registered on this
# machine, and only what a compute container in the VM needs is installed.
installer_args() {
  local root=$1 kernel=$2 kver=$3
  printf '%s\n' \
    --silent \
    --kernel-name="$kver" \
    --kernel-source-path="$kernel/headers" \
    --kernel-install-path="$root/lib/modules/$kver/kernel/drivers/video" \
    --utility-prefix="$root/usr" \
    --utility-libdir=lib \
    --opengl-prefix="$root/usr" \
    --opengl-libdir=lib \
    --x-prefix="$root/usr" \
    --x-library-path="$root/usr/lib" \
    --x-module-path="$root/usr/lib/xorg/modules" \
    --x-sysconfig-path="$root/usr/share/X11/xorg.conf.d" \
    --documentation-prefix="$root/usr" \
    --application-profile-path="$root/usr/share/nvidia" \
    --glvnd-egl-config-path="$root/usr/share/glvnd/egl_vendor.d" \
    --egl-external-platform-config-path="$root/usr/share/egl/egl_external_platform.d" \
    --log-file-name="$root/nvidia-installer.log" \
    --no-kernel-module-source \
    --no-install-libglvnd \
    --no-install-compat32-libs \
    --no-opengl-files \
    --no-wine-files \
    --no-drm \
    --no-peermem \
    --no-x-check \
    --no-nouveau-check \
    --no-distro-scripts \
    --no-rpms \
    --no-backup \
    --no-check-for-alternate-installs \
    --no-systemd \
    --skip-depmod
}

cmd_driver() {
  local installer='' kernel='' staging='' driver_version=''
  while [[ $# -gt 0 ]]; do
    case $1 in
    --installer) need_value "$@"; installer=$2; shift ;;
    --kernel) need_value "$@"; kernel=$2; shift ;;
    --staging) need_value "$@"; staging=$2; shift ;;
    --driver-version) need_value "$@"; driver_version=$2; shift ;;
    *) die "driver: unknown argument $1" ;;
    esac
    shift
  done
  [[ -n $installer && -n $kernel && -n $staging ]] || die "driver: --installer, --kernel and --staging are required"
  [[ -f $installer ]] || die "--installer $installer: no such file"
  [[ -f $kernel/kernel-release && -d $kernel/headers ]] || die "--kernel $kernel: not a 'kernel' output (kernel-release, headers/)"
  if [[ -z $driver_version ]]; then
    [[ $(basename "$installer") =~ ^NVIDIA-Linux-x86_64-([0-9]+(\.[0-9]+)+)(-grid|-vgpu-kvm|)(-[a-z0-9]+)*\.run$ ]] ||
      die "cannot read the driver version from $(basename "$installer"): pass --driver-version"
    driver_version=${BASH_REMATCH[1]}
  fi
  [[ $driver_version =~ ^[0-9]+(\.[0-9]+)+$ ]] || die "--driver-version $driver_version: want digits and dots"
  if [[ -e $staging ]] && [[ -n $(ls -A "$staging") ]]; then
    die "--staging $staging exists and is not empty: refusing to mix two installs"
  fi
  installer=$(abspath "$installer")
  kernel=$(abspath "$kernel")
  staging=$(abspath "$staging")
  local kver work
  kver=$(cat "$kernel/kernel-release")
  work=$(temp_beside "$staging")
  # shellcheck disable=SC2064 # expand now: the trap must remove this very directory
  trap "rm -rf '$work'" EXIT
  mkdir -p "$work/tmp"
  local args
  mapfile -t args < <(installer_args "$work" "$kernel" "$kver")
  info "running $(basename "$installer") for kernel $kver"
  if ! TMPDIR=$work/tmp sh "$installer" "${args[@]}" --tmpdir="$work/tmp" </dev/null; then
    local log=''
    [[ -f $work/nvidia-installer.log ]] && log=$'\n'$(tail -n 20 "$work/nvidia-installer.log")
    die "the NVIDIA installer failed; nothing was staged$log"
  fi
  compgen -G "$work/lib/modules/$kver/kernel/drivers/video/nvidia*.ko" >/dev/null ||
    die "the installer built no nvidia*.ko for $kver"
  install -D -m 0644 "$here/driver/gridd.conf.template" "$work/etc/nvidia/gridd.conf.template"
  echo "$driver_version" >"$work/driver-version"
  echo "$kver" >"$work/kernel-release"
  rm -rf "$work/tmp"
  trap - EXIT
  commit_dir "$work" "$staging"
  info "driver $driver_version staged in $staging"
}

# --- bundle -----------------------------------------------------------------------------------

cmd_bundle() {
  local staging='' kernel='' out=''
  while [[ $# -gt 0 ]]; do
    case $1 in
    --staging) need_value "$@"; staging=$2; shift ;;
    --kernel) need_value "$@"; kernel=$2; shift ;;
    --out) need_value "$@"; out=$2; shift ;;
    *) die "bundle: unknown argument $1" ;;
    esac
    shift
  done
  [[ -n $staging && -n $kernel && -n $out ]] || die "bundle: --staging, --kernel and --out are required"
  [[ -f $staging/driver-version && -f $staging/kernel-release ]] || die "--staging $staging: not a 'driver' output"
  [[ -f $kernel/kernel-release ]] || die "--kernel $kernel: not a 'kernel' output"
  local kver driver_version
  kver=$(cat "$kernel/kernel-release")
  driver_version=$(cat "$staging/driver-version")
  [[ $(cat "$staging/kernel-release") == "$kver" ]] ||
    die "the driver was built for kernel $(cat "$staging/kernel-release"), not $kver"
  if [[ -e $out ]] && [[ -n $(ls -A "$out") ]]; then
    die "--out $out exists and is not empty"
  fi
  need_tools depmod sha256sum
  out=$(abspath "$out")
  local work
  work=$(temp_beside "$out")
  # shellcheck disable=SC2064 # expand now: the trap must remove this very directory
  trap "rm -rf '$work'" EXIT

  # The layout the webhook's containers use with the bundle mounted at /usr/local/nvidia:
  # bin/ on PATH, lib64/ on LD_LIBRARY_PATH, `modprobe -d /usr/local/nvidia nvidia`.
  mkdir -p "$work/bin" "$work/lib64" "$work/lib/modules/$kver" "$work/etc/nvidia"
  local f
  for f in "$staging"/usr/bin/*; do
    case $(basename "$f") in
    nvidia-installer | nvidia-uninstall) ;; # they would act on the guest's own root
    *) cp -P "$f" "$work/bin/" ;;
    esac
  done
  if compgen -G "$staging/usr/lib/*.so*" >/dev/null; then
    cp -P "$staging"/usr/lib/*.so* "$work/lib64/"
  fi
  cp -R "$staging/lib/modules/$kver/kernel" "$work/lib/modules/$kver/"
  local mod_meta
  for mod_meta in modules.order modules.builtin modules.builtin.modinfo; do
    if [[ -f $kernel/modules/lib/modules/$kver/$mod_meta ]]; then
      cp "$kernel/modules/lib/modules/$kver/$mod_meta" "$work/lib/modules/$kver/"
    fi
  done
  if [[ -d $staging/lib/firmware ]]; then
    mkdir -p "$work/lib/firmware"
    cp -R "$staging/lib/firmware/." "$work/lib/firmware/"
  fi
  cp "$staging/etc/nvidia/gridd.conf.template" "$work/etc/nvidia/"
  depmod -b "$work" "$kver"

  [[ -f $work/lib/modules/$kver/kernel/drivers/video/nvidia.ko ]] || die "no nvidia.ko for $kver in the staging root"
  [[ -x $work/bin/nvidia-smi ]] || die "no nvidia-smi in the staging root"
  printf 'driver-version=%s\nkernel-release=%s\nconfig-version=%s\n' \
    "$driver_version" "$kver" "$(cat "$kernel/config-version" 2>/dev/null || echo unknown)" >"$work/bundle-info"
  local manifest
  manifest=$(cd "$work" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -r -d '\n' sha256sum)
  printf '%s\n' "$manifest" >"$work/MANIFEST.sha256"
  trap - EXIT
  commit_dir "$work" "$out"
  info "bundle for driver $driver_version, kernel $kver in $out"
}

# --- install ----------------------------------------------------------------------------------

cmd_install() {
  local kernel='' bundle='' root=/ dry_run=0
  while [[ $# -gt 0 ]]; do
    case $1 in
    --kernel) need_value "$@"; kernel=$2; shift ;;
    --bundle) need_value "$@"; bundle=$2; shift ;;
    --root) need_value "$@"; root=$2; shift ;;
    --dry-run) dry_run=1 ;;
    *) die "install: unknown argument $1" ;;
    esac
    shift
  done
  [[ -n $kernel && -n $bundle ]] || die "install: --kernel and --bundle are required"
  [[ -f $kernel/vmlinuz && -f $kernel/kernel-release ]] || die "--kernel $kernel: not a built 'kernel' output (vmlinuz)"
  [[ -f $bundle/bundle-info && -f $bundle/MANIFEST.sha256 ]] || die "--bundle $bundle: not a 'bundle' output"
  [[ -d $root ]] || die "--root $root: not a directory"
  local kver bundle_kver driver_version
  kver=$(cat "$kernel/kernel-release")
  bundle_kver=$(sed -n 's/^kernel-release=//p' "$bundle/bundle-info")
  driver_version=$(sed -n 's/^driver-version=//p' "$bundle/bundle-info")
  [[ $bundle_kver == "$kver" ]] || die "the bundle is for kernel $bundle_kver, the kernel is $kver"
  (cd "$bundle" && sha256sum --quiet --strict -c MANIFEST.sha256) >/dev/null 2>&1 ||
    die "--bundle $bundle does not match its MANIFEST.sha256: rebuild it"
  local missing
  missing=$(cd "$bundle" && find . -type f ! -name MANIFEST.sha256 -printf '%P\n' | LC_ALL=C sort |
    comm -23 - <(awk '{ print substr($0, 67) }' MANIFEST.sha256 | LC_ALL=C sort))
  [[ -z $missing ]] || die "--bundle $bundle has files its manifest does not list: $missing"

  local prefix=${root%/}$NODE_PREFIX
  local guest_dir=$prefix/guest driver_dir=$prefix/driver-$driver_version-$kver
  local changed=0

  # The kernel: a versioned file and the stable vmlinuz symlink the Kata configuration names.
  if [[ -f $guest_dir/vmlinuz-$kver ]] && cmp -s "$kernel/vmlinuz" "$guest_dir/vmlinuz-$kver"; then
    info "unchanged $guest_dir/vmlinuz-$kver"
  else
    changed=1
    if [[ $dry_run -eq 1 ]]; then
      info "would write $guest_dir/vmlinuz-$kver"
    else
      mkdir -p "$guest_dir"
      install -m 0644 "$kernel/vmlinuz" "$guest_dir/.vmlinuz-$kver.tmp"
      install -m 0644 "$kernel/config" "$guest_dir/config-$kver"
      mv -f "$guest_dir/.vmlinuz-$kver.tmp" "$guest_dir/vmlinuz-$kver"
      info "wrote $guest_dir/vmlinuz-$kver"
    fi
  fi
  # The bundle: a versioned directory, compared by manifest.
  if [[ -f $driver_dir/MANIFEST.sha256 ]] && cmp -s "$bundle/MANIFEST.sha256" "$driver_dir/MANIFEST.sha256"; then
    info "unchanged $driver_dir"
  else
    changed=1
    if [[ $dry_run -eq 1 ]]; then
      info "would write $driver_dir"
    else
      local tmp old=''
      tmp=$(temp_beside "$driver_dir")
      cp -a "$bundle/." "$tmp/"
      chmod 0755 "$tmp"
      # A same-named copy that differs is swapped out whole, never patched in place.
      if [[ -e $driver_dir ]]; then
        old=$(temp_beside "$driver_dir")
        mv -T "$driver_dir" "$old/replaced"
      fi
      commit_dir "$tmp" "$driver_dir"
      [[ -z $old ]] || rm -rf "$old"
      info "wrote $driver_dir"
    fi
  fi
  switch_link "$guest_dir/vmlinuz" "vmlinuz-$kver" "$dry_run" || changed=1
  switch_link "$prefix/driver" "driver-$driver_version-$kver" "$dry_run" || changed=1
  [[ $changed -eq 1 ]] || info "nothing to do"
}

# switch_link LINK TARGET DRY_RUN: point LINK at TARGET atomically; returns 1 if it changed.
switch_link() {
  local link=$1 target=$2 dry_run=$3
  if [[ -L $link && $(readlink "$link") == "$target" ]]; then
    info "unchanged $link -> $target"
    return 0
  fi
  if [[ $dry_run -eq 1 ]]; then
    info "would point $link -> $target"
    return 1
  fi
  [[ ! -e $link || -L $link ]] || die "$link exists and is not a symlink: move it away first"
  mkdir -p "$(dirname "$link")"
  ln -sfn "$target" "$link.tmp"
  mv -Tf "$link.tmp" "$link"
  info "pointed $link -> $target"
  return 1
}

main() {
  [[ $# -ge 1 ]] || {
    usage >&2
    exit 2
  }
  local command=$1
  shift
  case $command in
  kernel) cmd_kernel "$@" ;;
  driver) cmd_driver "$@" ;;
  bundle) cmd_bundle "$@" ;;
  install) cmd_install "$@" ;;
  check) cmd_check "$@" ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    die "unknown command: $command"
    ;;
  esac
}

main "$@"
