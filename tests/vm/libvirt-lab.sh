#!/usr/bin/env bash
# Inside the VM lab: a real libvirtd over the lab kernel, for the libvirt backend's tests.
#
#   libvirt-lab.sh run PROGRAM [ARGS...]   sets up (below), runs PROGRAM, then checks that the
#                                          persistent mdev survived; exits with PROGRAM's status
#   libvirt-lab.sh stop-libvirtd | start-libvirtd
#                                          for a test that takes libvirtd away mid-way
#
# Setup: Debian's libvirtd, virsh and systemd-udevd (unpacked by setup-lab.sh into the lab's
# libvirt-root) are copied over the guest's RAM overlay; mttypci.ko makes QEMU's edu PCI device
# an mdev parent (run-in-vm.sh with KVGPU_VM_EDU=1); udevd and libvirtd start with the node-device
# driver only; one persistent mdev is defined and started through libvirt, as an operator's or
# another tenant's would be. PROGRAM sees KVGPU_LIBVIRT_URI, KVGPU_PERSISTENT_MDEV and
# KVGPU_LIBVIRT_LAB (this script).
set -o errexit -o nounset -o pipefail

readonly URI=nodedev:///system
readonly PIDFILE=/run/libvirtd.pid
self=$(realpath "${BASH_SOURCE[0]}")

die() {
  echo "libvirt-lab: error: $*" >&2
  exit 125
}
virsh_() { virsh -q -c "$URI" "$@"; }
ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

start_libvirtd() {
  local start
  start=$(ms)
  /usr/sbin/libvirtd --daemon --config /etc/libvirt/libvirtd.conf --pid-file "$PIDFILE" ||
    die "libvirtd did not start"
  # The node-device driver enumerates udev's devices before it answers.
  until virsh_ nodedev-list --cap mdev_types >/dev/null 2>&1; do
    (($(ms) - start < 60000)) || die "libvirtd not answering after 60 s"
    sleep 0.1
  done
  echo "libvirt-lab: libvirtd answering after $(($(ms) - start)) ms" >&2
}

stop_libvirtd() {
  local pid
  pid=$(cat "$PIDFILE") || die "no libvirtd pid file"
  kill "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

setup() {
  [[ ${KVGPU_IN_VM:-0} == 1 ]] || die "runs inside the VM lab: tests/vm/run-in-vm.sh $self run ..."
  local root=$KVGPU_LAB/libvirt-root
  [[ -x $root/usr/sbin/libvirtd ]] || die "no libvirtd in $root: rerun tests/vm/setup-lab.sh"
  cp -a "$root/." /
  # libvirt runs "mdevctl" from PATH; the lab's is Debian's 1.2.0, with its script dirs.
  install -m 0755 "$KVGPU_LAB/root/usr/bin/mdevctl" /usr/sbin/mdevctl
  mkdir -p /etc/mdevctl.d/scripts.d/callouts /etc/mdevctl.d/scripts.d/notifiers
  ldconfig
  # devtmpfs has no /dev/stdin: libvirt hands mdevctl its JSON as --jsonfile=/dev/stdin.
  if [[ ! -e /dev/stdin ]]; then
    ln -s /proc/self/fd /dev/fd
    ln -s /proc/self/fd/0 /dev/stdin
    ln -s /proc/self/fd/1 /dev/stdout
    ln -s /proc/self/fd/2 /dev/stderr
  fi
  # Only the node-device driver: the others would probe hypervisors the lab does not have.
  local drivers=/usr/lib/x86_64-linux-gnu/libvirt/connection-driver so
  for so in "$drivers"/*.so; do
    [[ $so == */libvirt_driver_nodedev.so ]] || rm -f "$so"
  done

  insmod "$KVGPU_LAB/mttypci/mttypci.ko" || die "insmod mttypci.ko failed (KVGPU_VM_EDU=1?)"

  # udevadm refuses to act in a chroot unless told: our PID 1 is the initramfs's, outside it.
  export SYSTEMD_IGNORE_CHROOT=1
  /usr/lib/systemd/systemd-udevd --daemon || die "systemd-udevd did not start"
  udevadm trigger --action=add
  udevadm settle --timeout=60

  mkdir -p /etc/libvirt
  cat >/etc/libvirt/libvirtd.conf <<'CONF'
# The lab's: local UNIX sockets only, no polkit (the guest has no D-Bus), root only.
listen_tls = 0
listen_tcp = 0
unix_sock_rw_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:stderr"
CONF
  start_libvirtd

  local parent uuid
  parent=$(basename "$(ls -d /sys/bus/pci/drivers/mttypci/0000:*)")
  uuid=$(cat /proc/sys/kernel/random/uuid)
  cat >/tmp/persistent-mdev.xml <<XML
<device>
  <parent>pci_${parent//[:.]/_}</parent>
  <capability type='mdev'>
    <type id='mttypci-1'/>
    <uuid>$uuid</uuid>
  </capability>
</device>
XML
  virsh_ nodedev-define /tmp/persistent-mdev.xml >/dev/null || die "nodedev-define failed"
  virsh_ nodedev-start "mdev_${uuid//-/_}_${parent//[:.]/_}" >/dev/null || die "nodedev-start failed"
  [[ -e /sys/bus/mdev/devices/$uuid ]] || die "the persistent mdev $uuid did not appear"
  export KVGPU_LIBVIRT_URI=$URI KVGPU_PERSISTENT_MDEV=$uuid KVGPU_LIBVIRT_LAB=$self
}

# After every scenario: the persistent mdev is still there, running and defined.
check_persistent() {
  local uuid=$KVGPU_PERSISTENT_MDEV ok=1
  [[ -e /sys/bus/mdev/devices/$uuid ]] || ok=0
  mdevctl list --defined | grep -q "^$uuid" || ok=0
  virsh_ nodedev-list --cap mdev | grep -q "^mdev_${uuid//-/_}" || ok=0
  if [[ $ok -eq 0 ]]; then
    echo "libvirt-lab: FAILED: the persistent mdev $uuid did not survive" >&2
    return 1
  fi
  echo "libvirt-lab: the persistent mdev $uuid survived (kernel, mdevctl, virsh)" >&2
}

case ${1:-} in
run)
  shift
  [[ $# -ge 1 ]] || die "usage: libvirt-lab.sh run PROGRAM [ARGS...]"
  setup
  status=0
  "$@" || status=$?
  check_persistent || status=1
  exit "$status"
  ;;
stop-libvirtd) stop_libvirtd ;;
start-libvirtd) start_libvirtd ;;
*) die "usage: libvirt-lab.sh run PROGRAM [ARGS...] | stop-libvirtd | start-libvirtd" ;;
esac
