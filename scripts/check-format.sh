#!/usr/bin/env bash
# Fails when a tracked C++ file differs from what .clang-format makes of it.
set -o errexit -o nounset -o pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cc' '*.hpp')
[[ ${#files[@]} -gt 0 ]] || exit 0
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "check-format: run clang-format -i on the files above" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as .clang-format says"
