#!/bin/sh
# Optional node setup for GPUs whose vGPU mode the device plugin only reads, never sets
# (docs/gpu-shapes.md, "MIG and mixed-size mode are node configuration"): mixed-size
# (heterogeneous) mode or MIG with GPU instances, in the order the driver needs, idempotent.
# Run it before the device plugin starts on the node (a systemd unit or an init container with
# host PID and /sys). Facts and sources: docs/gpu-shapes.md.
#
#   mixed-size: sriov-manage -e <pf>  ->  nvidia-smi vgpu -i <pf> -shm 1  ->  (vGPUs are typed later)
#   mig:        nvidia-smi -i <pf> -mig 1  ->  sriov-manage -e <pf>  ->  nvidia-smi mig -i <pf> -cgi <profiles>
#
# Mixed-size mode must be set after the VFs are enabled and before any VF is typed, and
# sriov-manage clears it; MIG mode must be on before the VFs are enabled, and the VF re-enable
# destroys every GPU instance, so instances come last. Nothing is changed on a GPU that carries a
# vGPU (the modes cannot change then, and the VFs must not be re-enabled under a VM).
set -eu

usage() {
  cat <<'USAGE'
usage: vgpu-modes.sh --mode mixed-size|mig --pf <pci-address> [--pf ...] [options]
  --mode mixed-size|mig   what to set up on every --pf
  --pf ADDR               a physical GPU (PF), 0000:41:00.0; repeatable
  --gi-profiles LIST      mig: the GPU-instance profile ids to make, comma-separated (19,19,14)
  --sysfs-root DIR        read sysfs under DIR (tests); default /
  --sriov-manage PATH     default /usr/lib/nvidia/sriov-manage
  --nvidia-smi PATH       default nvidia-smi
  --dry-run               print the commands, run none
USAGE
}

mode=""
pfs=""
gi_profiles=""
root=""
sriov_manage=/usr/lib/nvidia/sriov-manage
nvidia_smi=nvidia-smi
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode="${2:?--mode needs a value}"; shift 2 ;;
    --pf) pfs="$pfs ${2:?--pf needs a value}"; shift 2 ;;
    --gi-profiles) gi_profiles="${2:?--gi-profiles needs a value}"; shift 2 ;;
    --sysfs-root) root="${2:?--sysfs-root needs a value}"; shift 2 ;;
    --sriov-manage) sriov_manage="${2:?--sriov-manage needs a value}"; shift 2 ;;
    --nvidia-smi) nvidia_smi="${2:?--nvidia-smi needs a value}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "vgpu-modes.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$mode" in
  mixed-size|mig) ;;
  *) echo "vgpu-modes.sh: --mode must be mixed-size or mig" >&2; exit 2 ;;
esac
[ -n "$pfs" ] || { echo "vgpu-modes.sh: give at least one --pf" >&2; exit 2; }
if [ "$mode" = mig ]; then
  case "$gi_profiles" in
    ''|*[!0-9,]*|,*|*,|*,,*) echo "vgpu-modes.sh: mig needs --gi-profiles as ids like 19,19,14" >&2; exit 2 ;;
  esac
fi

run() {
  if [ "$dry_run" = 1 ]; then
    echo "would run: $*"
  else
    echo "running: $*"
    "$@"
  fi
}

# Every argument is checked before anything runs: bad input changes nothing.
for pf in $pfs; do
  case "$pf" in
    [0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f].[0-7]) ;;
    *) echo "vgpu-modes.sh: '$pf' is not a PCI address like 0000:41:00.0" >&2; exit 2 ;;
  esac
  [ -d "$root/sys/bus/pci/devices/$pf" ] || { echo "vgpu-modes.sh: no PCI device $pf" >&2; exit 1; }
done

for pf in $pfs; do
  dev="$root/sys/bus/pci/devices/$pf"
  vfs_enabled=0
  [ -e "$dev/virtfn0" ] && vfs_enabled=1
  typed=0
  for current in "$dev"/virtfn*/nvidia/current_vgpu_type; do
    [ -r "$current" ] || continue
    [ "$(cat "$current")" = 0 ] || typed=1
  done
  if [ "$typed" = 1 ]; then
    echo "$pf: carries a vGPU; its mode cannot change now: left as it is"
    continue
  fi
  if [ "$mode" = mixed-size ]; then
    [ "$vfs_enabled" = 1 ] || run "$sriov_manage" -e "$pf"
    # Setting it again is harmless; after any sriov-manage run it must be set again.
    run "$nvidia_smi" vgpu -i "$pf" -shm 1
    continue
  fi
  # MIG: the machine-readable query (--query-gpu ... --format=csv), not the human table.
  mig=$("$nvidia_smi" --query-gpu=mig.mode.current --format=csv,noheader -i "$pf")
  if [ "$mig" = Enabled ] && [ "$vfs_enabled" = 1 ]; then
    echo "$pf: MIG on and VFs enabled: GPU instances are left as they are (a VF re-enable would destroy them)"
    continue
  fi
  if [ "$mig" != Enabled ]; then
    # -mig 1 is refused while VFs are enabled; none is typed, so disabling them loses nothing.
    [ "$vfs_enabled" = 1 ] && run "$sriov_manage" -d "$pf"
    run "$nvidia_smi" -i "$pf" -mig 1
  fi
  run "$sriov_manage" -e "$pf"
  run "$nvidia_smi" mig -i "$pf" -cgi "$gi_profiles"
done
