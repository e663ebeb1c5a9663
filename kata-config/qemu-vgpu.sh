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
# of each: mem-reserve = twice the sum of the BARs that need the 32-bit window (non-prefetchable,
# or 32-bit), pref64-reserve = the sum of the 64-bit prefetchable BARs. A vGPU's BARs are never
# larger than its GPU's. No GPU: nothing is added.
#
# Environment (tests): KVGPU_QEMU (the QEMU to run, default Kata's), KVGPU_SYSFS_ROOT (/sys).
set -o errexit -o nounset -o pipefail

qemu=${KVGPU_QEMU:-/opt/kata/bin/qemu-system-x86_64}
sysfs=${KVGPU_SYSFS_ROOT:-/sys}

readonly IORESOURCE_MEM=0x200 IORESOURCE_PREFETCH=0x2000 IORESOURCE_MEM_64=0x100000

mem_reserve=0
pref64_reserve=0
for dev in "$sysfs"/bus/pci/devices/*; do
  [[ -r $dev/vendor && -r $dev/class && -r $dev/resource ]] || continue
  [[ $(<"$dev/vendor") == 0x10de && $(<"$dev/class") == 0x03* ]] || continue
  low=0
  high=0
  bar=0
  # The first six lines of `resource` are BARs 0-5: "start end flags", in hex.
  while read -r start end flags && ((bar++ < 6)); do
    ((flags & IORESOURCE_MEM)) || continue
    ((end > start)) || continue
    size=$((end - start + 1))
    if ((flags & IORESOURCE_MEM_64 && flags & IORESOURCE_PREFETCH)); then
      high=$((high + size))
    else
      low=$((low + size))
    fi
  done <"$dev/resource"
  ((2 * low > mem_reserve)) && mem_reserve=$((2 * low))
  ((high > pref64_reserve)) && pref64_reserve=$((high))
done

extra=()
((mem_reserve > 0)) && extra+=(-global "pcie-root-port.mem-reserve=${mem_reserve}")
((pref64_reserve > 0)) && extra+=(-global "pcie-root-port.pref64-reserve=${pref64_reserve}")
exec "$qemu" "${extra[@]}" "$@"
