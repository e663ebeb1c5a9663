#!/usr/bin/env bash
# Builds the webhook with clang + libFuzzer + ASan/UBSan in its own build dir and runs the
# AdmissionReview and HTTP framing fuzzers for a bounded time each (default 60 s). CI: bash tests/webhook/run_fuzz.sh
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${KVGPU_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${KVGPU_FUZZ_SECONDS:-60}

die() { echo "run_fuzz: $*" >&2; exit 1; }
command -v clang++ >/dev/null || die "clang++ not found (scripts/deps/webhook.txt installs it)"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DKVGPU_COMPONENTS=webhook \
  -DKVGPU_BUILD_FUZZ=ON -DKVGPU_SANITIZE=address,undefined -DKVGPU_FUZZ_SECONDS="$seconds" \
  -DKVGPU_DEBUG_INFO=lines -DKVGPU_LINKER= -DKVGPU_UNITY_BUILD=ON >/dev/null  # two programs to link: the default linker
nice cmake --build "$build" -j2 --target webhook_fuzz_review webhook_fuzz_http
# --build-only: CI builds the fuzzers in the background while other stages' tests run.
[[ ${1:-} == "--build-only" ]] && exit 0
ctest --test-dir "$build" -L fuzz --output-on-failure
