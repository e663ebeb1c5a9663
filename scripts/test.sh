#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds everything, runs every CTest test
# (unit, integration, lint and the real-kernel VM lab). Extra arguments go to ctest,
# e.g. `scripts/test.sh -L unit`.
#
# `scripts/test.sh --repeat N [ctest args]` runs the chosen tests N times over one build and ends
# with a flake report: each test that failed in any run, and in how many of the N (a test that
# fails every time is broken, not flaky). Exits non-zero when any run failed.
set -o errexit -o nounset -o pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
build=${KVGPU_BUILD_DIR:-build}

# `scripts/test.sh --build-only` configures and builds exactly as the test command does, and runs no
# test: CI builds this tree in the background while it runs other stages' tests, then runs the test
# command itself, whose build is then up to date.
build_only=0
if [[ ${1:-} == "--build-only" ]]; then
  build_only=1
  shift
fi

repeat=0
if [[ ${1:-} == "--repeat" ]]; then
  [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: --repeat needs a run count (1 or more)" >&2; exit 2; }
  repeat=$2
  shift 2
fi

bash scripts/install-deps.sh
# Line tables only: backtraces need no more, and they take a sixth off the compile time. A unity
# build (each target's files compiled in batches): a third off the rest.
cmake -S . -B "$build" -G Ninja -DKVGPU_BUILD_TESTS=ON -DKVGPU_WARNINGS_AS_ERRORS=ON \
  -DKVGPU_DEBUG_INFO=lines -DKVGPU_UNITY_BUILD=ON >/dev/null
cmake --build "$build" -j"$(nproc)"
[[ $build_only -eq 1 ]] && exit 0
# After a failed run: each failed test's failure lines, last (scripts/failure-digest.py), so the
# end of the output says why; .ci/run names a file in KVGPU_FAILURE_DIGEST to print after its table.
digest() {
  /usr/bin/python3 scripts/failure-digest.py "$build/Testing/Temporary" \
    ${KVGPU_FAILURE_DIGEST:+--append "$KVGPU_FAILURE_DIGEST"} || true
}
if [[ $repeat -eq 0 ]]; then
  status=0
  rm -f "$build/Testing/Temporary/LastTestsFailed.log"
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@" || status=$?
  [[ $status -eq 0 ]] || digest
  exit "$status"
fi

failures=$(mktemp)
trap 'rm -f "$failures"' EXIT
failed_runs=0
for ((run = 1; run <= repeat; run++)); do
  echo "=== test.sh: run $run of $repeat ==="
  rm -f "$build/Testing/Temporary/LastTestsFailed.log"
  if ! ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"; then
    failed_runs=$((failed_runs + 1))
    digest
    # CTest's own list of this run's failures: "<number>:<name>" a line.
    if [[ -f $build/Testing/Temporary/LastTestsFailed.log ]]; then
      cut -d: -f2- "$build/Testing/Temporary/LastTestsFailed.log" >>"$failures"
    else
      echo "(ctest failed without naming a test)" >>"$failures"
    fi
  fi
done

echo "=== test.sh: flake report, $repeat runs, $failed_runs with failures ==="
if [[ $failed_runs -eq 0 ]]; then
  echo "every test passed in every run"
  exit 0
fi
sort "$failures" | uniq -c | sort -rn | while read -r count name; do
  kind=flaky
  [[ $count -eq $repeat ]] && kind="failed every run"
  printf '%-60s failed %d of %d (%s)\n' "$name" "$count" "$repeat" "$kind"
done
exit 1
