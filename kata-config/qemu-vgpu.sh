#!/usr/bin/env bash
# The QEMU the kata-vgpu handler (mdev hot plug) runs: Kata's own, with every pcie-root-port
# reserving bridge windows that a hot-plugged vGPU's BARs fit in.
#
# Why: a device hot-plugged onto an empty root port gets only the windows the firmware gave that
# port at boot (2 MiB each from SeaBIOS; OVMF adds a 64-bit window but no room for a 16 MiB
# 32-bit BAR), and with QEMU's ACPI hot plug the guest cannot grow them. Kata 3.2 to 3.27 sized
# reservations from the host's GPUs; 3.28 removed that (docs/kata-config.md). This puts it back,
# for any Kata release, as QEMU defaults (-global) that explicit per-port values still override.
#
# Sizes come from the node's NVIDIA display functions (vendor 0x10de, class 0x03xx), the largest
# of each; a vGPU's BARs are never larger than its GPU's. No GPU: nothing is added. For each
# window (mem-reserve: the BARs that need the 32-bit window, non-prefetchable or 32-bit;
# pref64-reserve: the 64-bit prefetchable ones) the size is the sum of its BARs plus the largest
# BAR less 1 MiB, rounded up to a power of two. Why each part, from the lab (docs/kata-config.md,
# "BAR space"):
# - plus the largest less 1 MiB: SeaBIOS places a window on a 1 MiB boundary only, and a BAR
#   must sit on a multiple of its size; a 16 MiB window for a 16 MiB BAR left it unassigned;
# - a power of two: OVMF aligns each reservation to its size rounded up to a power of two, in a
#   32-bit aperture of a few hundred MiB shared by every port; Kata 3.2-3.27's twice the sum
#   (2 x (64 MiB + 4 KiB)) needed 256 MiB alignment on four ports, OVMF dropped them all and the
#   vGPU got no driver.

# Environment (tests): KVGPU_QEMU (the QEMU to run, default Kata's), KVGPU_SYSFS_ROOT (/sys).
set -o errexit -o nounset -o pipefail

qemu=${KVGPU_QEMU:-/opt/kata/bin/qemu-system-x86_64}
sysfs=${KVGPU_SYSFS_ROOT:-/sys}

readonly IORESOURCE_MEM=0x200 IORESOURCE_PREFETCH=0x2000 IORESOURCE_MEM_64=0x100000
readonly MiB=$((1 << 20))

# window SUM LARGEST: the reservation that holds BARs of that sum, the largest that size.
window() {
  local need=$(($1 + ($2 > MiB ? $2 - MiB : 0))) size=$MiB
  while ((size < need)); do size=$((size * 2)); done
  echo "$size"
}

mem_reserve=0
pref64_reserve=0
for dev in "$sysfs"/bus/pci/devices/*; do
  [[ -r $dev/vendor && -r $dev/class && -r $dev/resource ]] || continue
  [[ $(<"$dev/vendor") == 0x10de && $(<"$dev/class") == 0x03* ]] || continue
  low=0 low_max=0 high=0 high_max=0 bar=0
  # The first six lines of `resource` are BARs 0-5: "start end flags", in hex.
  while read -r start end flags && ((bar++ < 6)); do
    ((flags & IORESOURCE_MEM)) || continue
    ((end > start)) || continue
    size=$((end - start + 1))
    if ((flags & IORESOURCE_MEM_64 && flags & IORESOURCE_PREFETCH)); then
      high=$((high + size))
      ((size > high_max)) && high_max=$size
    else
      low=$((low + size))
      ((size > low_max)) && low_max=$size
    fi
  done <"$dev/resource"
  if ((low > 0)); then
    size=$(window "$low" "$low_max")
    ((size > mem_reserve)) && mem_reserve=$size
  fi
  if ((high > 0)); then
    size=$(window "$high" "$high_max")
    ((size > pref64_reserve)) && pref64_reserve=$size
  fi
done

extra=()
((mem_reserve > 0)) && extra+=(-global "pcie-root-port.mem-reserve=${mem_reserve}")
((pref64_reserve > 0)) && extra+=(-global "pcie-root-port.pref64-reserve=${pref64_reserve}")
exec "$qemu" "${extra[@]}" "$@"
