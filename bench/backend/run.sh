#!/usr/bin/env bash
# Allocate latency, sysfs vs libvirt, in the VM lab with a real libvirtd (docs/libvirt-backend.md).
# usage: bench/backend/run.sh BUILD_DIR [allocations]
set -o errexit -o nounset -o pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:?usage: run.sh BUILD_DIR [allocations]}
bench=$(realpath "$build/bench/backend/kvgpu-bench-backend")
KVGPU_VM_EDU=1 exec "$top/tests/vm/run-in-vm.sh" --timeout 900 \
  "$top/tests/vm/libvirt-lab.sh" run "$bench" "${2:-20}"
