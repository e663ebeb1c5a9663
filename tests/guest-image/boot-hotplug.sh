#!/usr/bin/env bash
# The one-time proof that the guest kernel takes a hot-plugged mdev the way Kata attaches it:
#
#   this machine ── QEMU (VM lab, Debian 6.1 kernel with VFIO/mdev and mtty) ──┐
#       L1: create an mtty mdev in sysfs, start a nested QEMU (q35, one pcie-root-port "rp0",
#           QMP socket) booting the guest kernel with kata-config's kernel_params;
#       L2: the guest kernel under test, busybox as init, polling its PCI bus;
#       L1: once L2 is up, QMP device_add {driver: vfio-pci, sysfsdev: /sys/bus/mdev/devices/
#           <uuid>, bus: rp0, id, romfile} — the arguments Kata's govmm sends for an mdev;
#       L2: must see the mtty card (vendor 0x4348, device 0x3253) appear behind the root port.
#
# Needs the VM lab (tests/vm/run-in-vm.sh, read-only use) and a `build.sh kernel` output. Not
# part of CI: the guest kernel takes long to build. See docs/guest-image.md for a recorded run.
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

die() {
  echo "boot-hotplug: error: $*" >&2
  exit 1
}
usage() {
  echo "usage: ${0##*/} --kernel DIR|FILE [--timeout SEC] [--out DIR] [--native-pcie-hotplug]"
  echo "  DIR: a 'build.sh kernel' output (its vmlinuz is booted); FILE: a kernel image"
  echo "  --native-pcie-hotplug: turn off QEMU's ACPI hot-plug on q35 (default on since QEMU 6.1),"
  echo "      so the root port's native hot-plug (pciehp in the guest) must do the work"
}

kernel='' timeout=1800 out='' qemu_extra=''
while [[ $# -gt 0 ]]; do
  case $1 in
  --kernel) kernel=$2; shift ;;
  --timeout) timeout=$2; shift ;;
  --out) out=$2; shift ;;
  --native-pcie-hotplug) qemu_extra='-global ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off' ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
  esac
  shift
done
[[ -n $kernel ]] || { usage >&2; exit 2; }
[[ -d $kernel ]] && kernel=$kernel/vmlinuz
[[ -f $kernel ]] || die "no kernel image at $kernel"
kernel=$(realpath "$kernel")

work=$(mktemp -d "${TMPDIR:-/tmp}/kvgpu-boot.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=${out:-$work/out}
mkdir -p "$out"

# L2's initramfs: busybox from Debian's busybox-static, and an init that reports its PCI bus.
busybox_deb=$(find "${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}/debs" -name 'busybox-static_*.deb' | sort -V | tail -n1)
if [[ -z $busybox_deb ]]; then
  (cd "$work" && apt-get download -q busybox-static >&2)
  busybox_deb=$(find "$work" -name 'busybox-static_*.deb' | head -n1)
fi
mkdir -p "$work/l2/bin" "$work/l2/proc" "$work/l2/sys" "$work/l2/dev"
dpkg-deb --fsys-tarfile "$busybox_deb" | tar -xO ./bin/busybox >"$work/l2/bin/busybox"
chmod 0755 "$work/l2/bin/busybox"
cat >"$work/l2/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "L2-READY $(uname -r) $(cat /proc/uptime)"
i=0
while [ $i -lt 2400 ]; do
  for d in /sys/bus/pci/devices/*; do
    if [ "$(cat "$d/vendor")" = 0x4348 ] && [ "$(cat "$d/device")" = 0x3253 ]; then
      echo "L2-SEEN $(basename "$d") behind $(basename "$(dirname "$(readlink -f "$d")")") after $(cat /proc/uptime)"
      echo "L2-BARS $(head -n 3 "$d/resource" | tr '\n' ' ')"
      dmesg | grep -iE 'pciehp|acpiphp|hotplug|slot|4348|0000:01:00' | sed 's/^/L2-DMESG /'
      poweroff -f
    fi
  done
  sleep 0.5
  i=$((i + 1))
done
echo "L2-NOT-SEEN"
dmesg | grep -iE 'pciehp|pcieport' | sed 's/^/L2-DMESG /'
poweroff -f
EOF
chmod 0755 "$work/l2/init"
(cd "$work/l2" && find . | cpio -o -H newc --quiet) >"$work/l2.cpio"

kernel_params=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["hypervisor"]["qemu"]["kernel_params"])' \
  "$repo/kata-config/configuration-kata-vgpu.toml")

# What L1 runs, in a chroot of this machine's root.
cat >"$work/in-l1.sh" <<EOF
#!/usr/bin/env bash
set -o errexit -o nounset -o pipefail
log() { echo "L1: \$*"; }
uuid=\$(cat /proc/sys/kernel/random/uuid)
echo "\$uuid" >/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create
log "created mtty mdev \$uuid"
cleanup() { echo 1 >"/sys/bus/mdev/devices/\$uuid/remove" 2>/dev/null || true; }
trap cleanup EXIT
qmp=/tmp/l2-qmp.sock
console=\$KVGPU_VM_OUT/l2-console.log
start=\$(date +%s)
qemu-system-x86_64 -accel tcg -cpu max -machine q35 -m 512 -smp 1 -nodefaults -display none \\
  -no-reboot -serial "file:\$console" -kernel $(printf %q "$kernel") -initrd $(printf %q "$work/l2.cpio") \\
  -append $(printf %q "console=ttyS0 panic=-1 rdinit=/init $kernel_params") \\
  -device pcie-root-port,id=rp0,bus=pcie.0,chassis=0,slot=0 $qemu_extra \\
  -qmp "unix:\$qmp,server=on,wait=off" &
qemu=\$!
until grep -q L2-READY "\$console" 2>/dev/null; do
  kill -0 \$qemu 2>/dev/null || { log "L2 died before it was up"; exit 1; }
  sleep 1
done
log "L2 up after \$((\$(date +%s) - start)) s: \$(grep L2-READY "\$console")"
python3 - "\$qmp" "\$uuid" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rw")
def call(cmd, **args):
    f.write(json.dumps({"execute": cmd, "arguments": args} if args else {"execute": cmd}) + "\n")
    f.flush()
    while True:
        reply = json.loads(f.readline())
        if "return" in reply or "error" in reply:
            return reply
json.loads(f.readline())  # greeting
call("qmp_capabilities")
# The arguments Kata's govmm ExecutePCIVFIOMediatedDeviceAdd sends.
reply = call("device_add", id="vfio-kvgpu0", driver="vfio-pci",
             sysfsdev="/sys/bus/mdev/devices/" + sys.argv[2], romfile="", bus="rp0")
print("L1: QMP device_add ->", json.dumps(reply))
sys.exit(0 if "return" in reply else 1)
PY
plugged=\$(date +%s)
wait \$qemu || true
log "L2 finished \$((\$(date +%s) - plugged)) s after device_add"
grep '^L2-' "\$console" || true
grep -q L2-SEEN "\$console"
EOF
chmod 0755 "$work/in-l1.sh"

start=$(date +%s)
set +o errexit
KVGPU_VM_MEM=${KVGPU_VM_MEM:-2048} "$repo/tests/vm/run-in-vm.sh" --timeout "$timeout" --out "$out" "$work/in-l1.sh"
status=$?
set -o errexit
echo "boot-hotplug: exit $status after $(($(date +%s) - start)) s; L2 console in $out/l2-console.log"
exit $status
