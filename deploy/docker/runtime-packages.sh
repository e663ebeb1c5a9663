#!/usr/bin/env bash
# Prints, one per line, the Debian packages that hold the shared libraries the given programs
# load: what a runtime image must install for them, and nothing else. Run in the build stage,
# where the libraries are installed (by their -dev packages); the runtime stage installs the list.
#
# ldd shows where the dynamic loader found each library, which on a merged-/usr system may be
# /lib/... while dpkg recorded /usr/lib/... (or the other way round), so the owner is looked up
# by the library's own path first and then by the other spelling of it.
set -o errexit -o nounset -o pipefail

die() {
  echo "runtime-packages: error: $*" >&2
  exit 1
}

[[ $# -ge 1 ]] || die "usage: ${0##*/} PROGRAM..."
command -v ldd >/dev/null || die "ldd not found"
command -v dpkg-query >/dev/null || die "dpkg-query not found: this runs on Debian"

owner() {
  local path=$1 alt out
  if [[ $path == /usr/* ]]; then alt=${path#/usr}; else alt=/usr$path; fi
  for candidate in "$path" "$alt"; do
    if out=$(dpkg-query --search "$candidate" 2>/dev/null); then
      # "libfoo1:amd64: /usr/lib/x86_64-linux-gnu/libfoo.so.1" -> "libfoo1:amd64"
      echo "${out%%: *}"
      return 0
    fi
  done
  die "no Debian package holds $path"
}

packages=()
for program in "$@"; do
  [[ -f $program && -x $program ]] || die "$program is not an executable file"
  listing=$(ldd "$program") || die "ldd failed on $program (not a dynamic executable?)"
  if grep -q 'not found' <<<"$listing"; then
    die "$program needs libraries that are not installed: $(grep 'not found' <<<"$listing" | tr -s ' \t' ' ')"
  fi
  # "	libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"; the vDSO has no file.
  while read -r path; do
    resolved=$(readlink -f "$path")
    packages+=("$(owner "$resolved")")
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<<"$listing")
  # The dynamic loader itself: "	/lib64/ld-linux-x86-64.so.2 (0x...)"
  while read -r path; do
    packages+=("$(owner "$(readlink -f "$path")")")
  done < <(awk '$1 ~ /^\// { print $1 }' <<<"$listing")
done
printf '%s\n' "${packages[@]}" | sed 's/:[a-z0-9]*$//' | sort -u
