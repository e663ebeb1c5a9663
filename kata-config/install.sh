#!/usr/bin/env bash
# Puts the kata-vgpu runtime configuration on a node: the two Kata configurations, the kata-vgpu
# class's QEMU wrapper (qemu-vgpu.sh) and the containerd runtime tables for the kata-vgpu and
# kata-vgpu-vf handlers. Everything of ours lives under /opt/kata-vgpu, which kata-deploy's
# cleanup (it empties /opt/kata) does not touch. With --kata-deploy, kata-deploy registers the
# handlers itself (deploy/kata-deploy/values-kata-vgpu.yaml), so containerd is left alone.
#
# containerd 2.x (config version 3) merges imported files into the main config, so the tables go
# into a drop-in, /etc/containerd/conf.d/kata-vgpu.toml, named in config.toml's `imports`.
# containerd 1.x (version 2) replaces a whole plugin section with an imported file's: a drop-in
# would wipe the node's own CRI settings (sandbox image, CNI, cgroup driver). There the tables go
# into config.toml itself, between "# BEGIN kata-vgpu" and "# END kata-vgpu" lines that a rerun
# replaces.
#
# Idempotent: a file already holding the wanted content is left alone, so a second run changes
# nothing and reports every step as unchanged. All checks run before the first write, so bad
# input changes nothing. The RuntimeClasses are cluster objects: apply runtimeclass.yaml once
# with kubectl. The guest kernel and driver bundle come from guest-image/build.sh install.
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here
readonly KATA_CONFIG_DIR=/opt/kata-vgpu/share/defaults/kata-containers
readonly DROP_IN=/etc/containerd/conf.d/kata-vgpu.toml
readonly CONTAINERD_CONFIG=/etc/containerd/config.toml
readonly SHIM=/opt/kata/bin/containerd-shim-kata-v2
readonly KATA_QEMU=/opt/kata/bin/qemu-system-x86_64
readonly WRAPPER=/opt/kata-vgpu/bin/qemu-system-x86_64

info() { echo "install: $*"; }
warn() { echo "install: warning: $*" >&2; }
die() {
  echo "install: error: $*" >&2
  exit 1
}

usage() {
  cat <<EOF
usage: ${0##*/} [options]
Installs the kata-vgpu Kata configurations and containerd handlers on this node.
  --root DIR                   install below DIR instead of / (image builds, tests)
  --dry-run                    print what would change, change nothing
  --containerd-config-version N
                               2 (containerd 1.6/1.7) or 3 (containerd 2.x); default: the
                               'version' in $CONTAINERD_CONFIG
  --restart-containerd         restart containerd with systemctl if anything changed
  --kata-deploy                kata-deploy registers the handlers and their configurations (its
                               customRuntimes, deploy/kata-deploy/values-kata-vgpu.yaml): install
                               only the QEMU wrapper, leave containerd alone
  -h, --help                   this text
EOF
}

root=/
dry_run=0
version=
restart=0
kata_deploy=0
while [[ $# -gt 0 ]]; do
  case $1 in
  --root)
    [[ $# -ge 2 ]] || die "--root needs a directory"
    root=$2
    shift
    ;;
  --dry-run) dry_run=1 ;;
  --containerd-config-version)
    [[ $# -ge 2 ]] || die "--containerd-config-version needs 2 or 3"
    version=$2
    shift
    ;;
  --restart-containerd) restart=1 ;;
  --kata-deploy) kata_deploy=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    usage >&2
    die "unknown argument: $1"
    ;;
  esac
  shift
done

[[ -d $root ]] || die "--root $root: not a directory"
root=${root%/}
main_config=$root$CONTAINERD_CONFIG

# The config version containerd will read the main file with; an explicit flag must agree.
file_version=
if [[ $kata_deploy -eq 1 ]]; then
  [[ -z $version && $restart -eq 0 ]] ||
    die "--kata-deploy leaves containerd to kata-deploy: drop --containerd-config-version/--restart-containerd"
elif [[ -f $main_config ]]; then
  file_version=$(sed -n 's/^version[[:space:]]*=[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' "$main_config" | head -n1)
  [[ -n $file_version ]] ||
    die "$main_config has no 'version = 2|3' line: version 1 configs cannot import a drop-in this way; run 'containerd config migrate' first"
  if [[ -n $version && $version != "$file_version" ]]; then
    die "--containerd-config-version $version, but $main_config says version = $file_version"
  fi
  version=$file_version
fi
if [[ $kata_deploy -eq 0 ]]; then
  [[ -n $version ]] || die "$main_config does not exist: say --containerd-config-version 2 or 3"
  [[ $version == 2 || $version == 3 ]] || die "containerd config version $version is not supported (2 or 3)"
fi

sources=(configuration-kata-vgpu.toml configuration-kata-vgpu-vf.toml qemu-vgpu.sh)
[[ $kata_deploy -eq 1 ]] || sources+=("containerd/kata-vgpu.config-v$version.toml")
for source in "${sources[@]}"; do
  [[ -f $here/$source ]] || die "missing $here/$source"
done

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT

readonly BEGIN_MARK='# BEGIN kata-vgpu (written by the kata-config install script; rerun it instead of editing)'
readonly END_MARK='# END kata-vgpu'

# Version 2: the main config with our tables in the marked block at its end.
plan_main_config_v2() {
  local wanted=$staging/config.toml current=/dev/null
  [[ -f $main_config ]] && current=$main_config
  if sed "/^$BEGIN_MARK\$/,/^$END_MARK\$/d" "$current" |
    grep -Eq '^[[:space:]]*\[.*\.runtimes\.("?)kata-vgpu(-vf)?("?)\]'; then
    die "$main_config already defines a kata-vgpu runtime outside the kata-vgpu block: remove it first"
  fi
  {
    if [[ -f $main_config ]]; then
      # Our old block out, and the blank line we put before it.
      sed "/^$BEGIN_MARK\$/,/^$END_MARK\$/d" "$main_config" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
    else
      echo "version = 2"
    fi
    printf '\n%s\n' "$BEGIN_MARK"
    grep -v '^version[[:space:]]*=' "$here/containerd/kata-vgpu.config-v2.toml" | sed '/^#/d' | sed '/./,$!d'
    echo "$END_MARK"
  } >"$wanted"
}

# Version 3: the main config with our drop-in in `imports`, or unchanged when it is there already.
# Only a one-line top-level `imports = [...]` is edited; anything else is left to the operator.
plan_main_config_v3() {
  local wanted=$staging/config.toml
  if [[ ! -f $main_config ]]; then
    printf 'version = %s\nimports = ["%s"]\n' "$version" "$DROP_IN" >"$wanted"
    return
  fi
  local imports_lines
  imports_lines=$(grep -c '^imports[[:space:]]*=' "$main_config" || true)
  if [[ $imports_lines -eq 0 ]]; then
    # Top-level keys must come before the first table: put it right after the version line.
    sed "0,/^version[[:space:]]*=.*/s||&\nimports = [\"$DROP_IN\"]|" "$main_config" >"$wanted"
    return
  fi
  local line
  line=$(grep '^imports[[:space:]]*=' "$main_config")
  [[ $imports_lines -eq 1 && $line =~ ^imports[[:space:]]*=[[:space:]]*\[.*\][[:space:]]*$ ]] ||
    die "$main_config: cannot edit its multi-line 'imports'; add \"$DROP_IN\" to it by hand"
  if [[ $line == *"\"$DROP_IN\""* || $line == *'"/etc/containerd/conf.d/*.toml"'* ]]; then
    cp "$main_config" "$wanted"
  elif [[ $line =~ \[[[:space:]]*\] ]]; then
    sed "s|^imports[[:space:]]*=.*|imports = [\"$DROP_IN\"]|" "$main_config" >"$wanted"
  else
    sed "s|^\(imports[[:space:]]*=.*[^[:space:]]\)[[:space:]]*\][[:space:]]*$|\1, \"$DROP_IN\"]|" "$main_config" >"$wanted"
  fi
}
if [[ $kata_deploy -eq 1 ]]; then
  :
elif [[ $version == 2 ]]; then
  plan_main_config_v2
else
  plan_main_config_v3
fi

changed=0
# place SOURCE DEST [MODE]: write DEST (atomically, MODE, default 0644) unless it already holds
# SOURCE's bytes with that mode.
place() {
  local source=$1 dest=$root$2 mode=${3:-0644}
  if [[ -f $dest ]] && cmp -s "$source" "$dest" && [[ $(stat -c %a "$dest") == "${mode#0}" ]]; then
    info "unchanged $dest"
    return
  fi
  changed=1
  if [[ $dry_run -eq 1 ]]; then
    info "would write $dest"
    if [[ -f $dest ]]; then
      diff -u "$dest" "$source" | sed 's/^/  /' || true
    fi
    return
  fi
  mkdir -p "$(dirname "$dest")"
  if [[ -f $dest && $2 == "$CONTAINERD_CONFIG" && ! -f $dest.kata-vgpu.orig ]]; then
    cp -p "$dest" "$dest.kata-vgpu.orig"
    info "kept the original as $dest.kata-vgpu.orig"
  fi
  install -m "$mode" "$source" "$dest.kata-vgpu.tmp"
  mv -f "$dest.kata-vgpu.tmp" "$dest"
  info "wrote $dest"
}

place "$here/qemu-vgpu.sh" "$WRAPPER" 0755
# Under kata-deploy the configurations are its custom runtimes' (base config + our drop-in).
if [[ $kata_deploy -eq 0 ]]; then
  place "$here/configuration-kata-vgpu.toml" "$KATA_CONFIG_DIR/configuration-kata-vgpu.toml"
  place "$here/configuration-kata-vgpu-vf.toml" "$KATA_CONFIG_DIR/configuration-kata-vgpu-vf.toml"
  [[ $version == 2 ]] || place "$here/containerd/kata-vgpu.config-v$version.toml" "$DROP_IN"
  place "$staging/config.toml" "$CONTAINERD_CONFIG"
fi

# Things this script does not install but the handlers need at pod start.
[[ -x $root$SHIM ]] || warn "$root$SHIM not found: install Kata Containers"
[[ -x $root$KATA_QEMU ]] || warn "$root$KATA_QEMU not found: the kata-vgpu class's wrapper runs Kata's QEMU; install Kata Containers"
[[ -e $root/opt/kata-vgpu/guest/vmlinuz ]] || warn "no guest kernel at $root/opt/kata-vgpu/guest/vmlinuz: run guest-image/build.sh install"

if [[ $changed -eq 1 && $restart -eq 1 ]]; then
  if [[ $dry_run -eq 1 ]]; then
    info "would restart containerd"
  else
    systemctl restart containerd
    info "restarted containerd"
  fi
elif [[ $changed -eq 1 && $kata_deploy -eq 0 ]]; then
  info "containerd reads the new handlers after a restart (--restart-containerd)"
fi
