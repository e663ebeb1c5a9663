#!/usr/bin/env bash
# The system's main job on any Debian machine: builds what is needed and runs the demo on a
# simulated NVIDIA vGPU node (no GPU needed). Building kvgpu-demo builds the programs it runs
# (kvgpu-sim, kvgpu-device-plugin, kvgpu-webhook, vgpuctl).
set -o errexit -o nounset -o pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
build=${KVGPU_BUILD_DIR:-build}

bash scripts/install-deps.sh >&2
cmake -S . -B "$build" -G Ninja >/dev/null
cmake --build "$build" -j"$(nproc)" --target kvgpu-demo >&2
exec "$build/demo/kvgpu-demo" "$@"
