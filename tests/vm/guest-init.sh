#!/bin/sh
# PID 1 of the lab VM (busybox sh). Loads the mdev stack, mounts the host's root read-only over 9p
# with a RAM overlay on top (so the guest may write /etc, /tmp, ... without touching the host),
# chroots into it and runs the command the host left in its run directory. The last console line
# is the command's exit status for run-in-vm.sh; then the VM powers off.
# shellcheck shell=dash

/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

finish() {
  echo "KVGPU-VM-EXIT: $1"
  sync
  poweroff -f
}

fail() {
  echo "guest-init: $*"
  finish 125
}

while read -r module; do
  insmod "/lib/modules/$module" || fail "insmod $module failed"
done </etc/modules

run=""
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case $arg in
  kvgpu.run=*) run=${arg#kvgpu.run=} ;;
  esac
done
[ -n "$run" ] || fail "no kvgpu.run= on the kernel command line"

# cache=loose: the host's root does not change under a test, and binaries load much faster.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower ||
  fail "cannot mount the host's root over 9p"
mount -t tmpfs -o mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
  fail "cannot mount the overlay on the host's root"

mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
mount -t tmpfs tmpfs /newroot/run
# The run directory is the only place the guest writes back to the host.
mkdir -p "/newroot$run"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 kvgpurun "/newroot$run" ||
  fail "cannot mount the run directory $run"

ip link set lo up
hostname kvgpu-lab

chroot /newroot /bin/bash "$run/cmd.sh" </dev/null
finish $?
