#!/bin/sh
# PID 1 of the nested guest that attach_driver_vm_test.py starts inside the lab VM with the QEMU
# arguments Kata would use. Loads the guest kernel's bochs-drm driver, says it is up (the test
# hot-plugs the vGPU then), waits for the mbochs display (PCI 1234:1111) and for a driver to bind
# it, and prints one result line for the test to read:
#   KVGPU-NESTED-RESULT: bdf=<addr> driver=<name|none> bar0=<start>-<end>/<flags> bar2=...
# followed by the kernel's lines about that device and its bridge (KVGPU-NESTED-LOG: ...).
# shellcheck shell=dash

/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

while read -r module; do
  insmod "/lib/modules/$module" || echo "KVGPU-NESTED-LOG: insmod $module failed"
done </etc/modules

wait_device=120
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case $arg in
  kvgpu.wait=*) wait_device=${arg#kvgpu.wait=} ;;
  esac
done

echo "KVGPU-NESTED-READY"

find_display() {
  for dev in /sys/bus/pci/devices/*; do
    [ "$(cat "$dev/vendor")" = 0x1234 ] && [ "$(cat "$dev/device")" = 0x1111 ] && {
      echo "$dev"
      return 0
    }
  done
  return 1
}

# A BAR as start-end/flags from the device's resource file (line N+1 is BAR N).
bar() {
  sed -n "$(($2 + 1))p" "$1/resource" | {
    read -r start end flags
    echo "$start-$end/$flags"
  }
}

dev=""
waited=0
while [ "$waited" -lt "$wait_device" ]; do
  dev=$(find_display) && break
  sleep 1
  waited=$((waited + 1))
done

if [ -z "$dev" ]; then
  echo "KVGPU-NESTED-RESULT: bdf=none driver=none bar0=none bar2=none"
else
  # bochs-drm binds during the scan that found the device; give a slow emulated probe time.
  i=0
  while [ ! -e "$dev/driver" ] && [ "$i" -lt 20 ]; do
    sleep 1
    i=$((i + 1))
  done
  driver=none
  [ -e "$dev/driver" ] && driver=$(basename "$(readlink "$dev/driver")")
  bdf=${dev##*/}
  echo "KVGPU-NESTED-RESULT: bdf=$bdf driver=$driver bar0=$(bar "$dev" 0) bar2=$(bar "$dev" 2)"
  # The root port above it: its bridge windows are what the BARs had to fit in.
  port=$(basename "$(dirname "$(readlink -f "$dev")")")
  dmesg | grep -E "$bdf|$port|bochs|no space|can't assign|failed to assign" | sed 's/^/KVGPU-NESTED-LOG: /'
fi
sync
poweroff -f
