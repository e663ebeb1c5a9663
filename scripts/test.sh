#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds everything, runs every CTest test
# (unit, integration, lint and the real-kernel VM lab). Extra arguments go to ctest,
# e.g. `scripts/test.sh -L unit`.
set -o errexit -o nounset -o pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
build=${KVGPU_BUILD_DIR:-build}

bash scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DKVGPU_BUILD_TESTS=ON -DKVGPU_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
