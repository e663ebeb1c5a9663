#!/usr/bin/env bash
# Runs one program inside the real-kernel VM lab and exits with the program's exit status.
#
# The guest (Debian's 6.1 kernel under QEMU TCG, q35) loads vfio, vfio_iommu_type1, mdev and the
# sample drivers mtty, mdpy and mbochs, mounts this machine's / read-only over 9p with a RAM
# overlay, and runs PROGRAM as root in a chroot of it: host-built binaries, python3, qemu and
# the lab's mdevctl all run there unchanged, at the same paths. Output streams to stdout.
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

info() { echo "run-in-vm: $*" >&2; }
die() {
  echo "run-in-vm: error: $*" >&2
  exit 125
}

usage() {
  cat <<EOF
usage: ${0##*/} [--timeout SEC] [--out DIR] [--keep] PROGRAM [ARGS...]
Boots the VM lab, runs PROGRAM inside it as root and exits with its exit status
(124 on timeout, 125 when the VM itself failed).
  --timeout SEC  whole VM run, boot included (default \$KVGPU_VM_TIMEOUT or 300)
  --out DIR      copy what the program wrote to \$KVGPU_VM_OUT into DIR
  --keep         keep the run directory (console.log, cmd.sh) and print its path
Inside the guest: \$KVGPU_IN_VM=1, \$KVGPU_LAB (the lab dir; mdevctl is on PATH),
\$KVGPU_VM_OUT (a directory written back to the host). KVGPU_* and GTEST_* variables and the
working directory are passed through. Memory and CPUs: \$KVGPU_VM_MEM (1024), \$KVGPU_VM_SMP (2).
\$KVGPU_VM_EDU=1 adds QEMU's edu PCI device (the parent mttypci.ko needs). \$KVGPU_VM_NET=user adds
a virtio NIC on QEMU's user network, where 10.0.2.2 is this machine's loopback (the guest loads
virtio_net and sets the NIC up itself).
EOF
}

timeout=${KVGPU_VM_TIMEOUT:-300}
out_dir=""
keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
  --timeout)
    timeout=$2
    shift
    ;;
  --out)
    out_dir=$2
    shift
    ;;
  --keep) keep=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  --)
    shift
    break
    ;;
  -*)
    usage >&2
    exit 2
    ;;
  *) break ;;
  esac
  shift
done
[[ $# -ge 1 ]] || {
  usage >&2
  exit 2
}
[[ $timeout =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds, got '$timeout'"

program=$1
shift
# The guest sees this machine's / at the same paths, so an absolute path is all it needs.
given=$program
if [[ $given == */* ]]; then
  program=$(realpath -e "$given" 2>/dev/null) || die "no such program: $given"
else
  program=$(command -v "$given") || die "program not found on PATH: $given"
fi

command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run scripts/install-deps.sh"
lab=$("$here/setup-lab.sh" --cached) || die "setup-lab.sh failed"

run=$(mktemp -d "${TMPDIR:-/tmp}/kvgpu-vm.XXXXXX")
[[ $run != *[[:space:]]* ]] || die "run directory '$run' contains blanks (set TMPDIR)"
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ $keep -eq 1 ]]; then
    info "kept $run"
  else
    rm -rf "$run"
  fi
}
trap cleanup EXIT
mkdir -p "$run/out"

# The command the guest runs, with the caller's environment of interest, quoted by bash.
{
  echo "# written by run-in-vm.sh; run by the guest's /init in the chroot"
  printf 'export PATH=%q\n' "$lab/bin:$PATH"
  printf 'export HOME=/root TERM=dumb KVGPU_IN_VM=1 KVGPU_LAB=%q KVGPU_VM_OUT=%q\n' "$lab" "$run/out"
  while IFS= read -r name; do
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(compgen -e | grep -E '^(KVGPU_|GTEST_)' | grep -vE '^KVGPU_(IN_VM|LAB|VM_OUT)$' || true)
  printf 'cd %q 2>/dev/null || cd /\n' "$PWD"
  printf 'exec'
  printf ' %q' "$program" "$@"
  printf '\n'
} >"$run/cmd.sh"

qemu=(
  qemu-system-x86_64
  # No KVM: /dev/kvm on these machines is a paravirtual flavour that stock kernels crash on.
  -accel tcg -cpu max -machine q35
  -m "${KVGPU_VM_MEM:-1024}" -smp "${KVGPU_VM_SMP:-2}"
  -display none -nodefaults -no-reboot -serial stdio
  -kernel "$lab/vmlinux" -initrd "$lab/initramfs.cpio"
  -append "console=ttyS0 loglevel=3 panic=-1 rdinit=/init kvgpu.run=$run"
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
  -virtfs "local,path=$run,mount_tag=kvgpurun,security_model=none,multidevs=remap"
)
# A PCI device for mttypci.ko to make an mdev parent of (libvirt-lab.sh): QEMU's edu.
if [[ ${KVGPU_VM_EDU:-0} == 1 ]]; then qemu+=(-device edu); fi
# A service on this machine's loopback for the guest (the k8s scenario's control plane): QEMU's
# user network forwards the guest's connections to 10.0.2.2 there. Nothing listens for the guest.
case ${KVGPU_VM_NET:-} in
"") ;;
user) qemu+=(-netdev "user,id=net0" -device "virtio-net-pci,netdev=net0") ;;
*) die "KVGPU_VM_NET: only 'user' is known, got '$KVGPU_VM_NET'" ;;
esac

start_us=${EPOCHREALTIME/./}
set +o errexit
timeout --kill-after=10 "$timeout" "${qemu[@]}" </dev/null 2>"$run/qemu.stderr" |
  sed -u 's/\r$//' | tee "$run/console.log" |
  # Hide the status line (it follows the program's last line, which may lack its newline) and
  # the kernel's farewell.
  sed -u -E '/^\[ *[0-9.]+\] reboot: Power down$/d; s/KVGPU-VM-EXIT: [0-9]+$//; T; /^$/d'
statuses=("${PIPESTATUS[@]}")
set -o errexit
elapsed_ds=$(((${EPOCHREALTIME/./} - start_us) / 100000))

if [[ -n $out_dir ]]; then
  mkdir -p "$out_dir"
  cp -a "$run/out/." "$out_dir/"
fi

if [[ ${statuses[0]} -eq 124 || ${statuses[0]} -eq 137 ]]; then
  info "timed out after ${timeout} s: $program"
  exit 124
fi
rc=$(sed -n 's/.*KVGPU-VM-EXIT: \([0-9]*\)$/\1/p' "$run/console.log" | tail -n 1)
if [[ -z $rc ]]; then
  cat "$run/qemu.stderr" >&2
  die "the VM ended without reporting an exit status (qemu exit ${statuses[0]})"
fi
info "${program##*/} exited with $rc (VM run $((elapsed_ds / 10)).$((elapsed_ds % 10)) s)"
exit "$rc"
