#!/usr/bin/env bash
# Installs every Debian package the project needs. Non-interactive and idempotent: packages
# already present are skipped, so a second run costs one dpkg query.
# Package lists live in scripts/deps/*.txt, one package a line, '#' comments allowed.
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "install-deps: $*" >&2; exit 1; }

# A line may end in `unless-command=NAME`: the package is only wanted when no NAME is on PATH
# (some images ship kubectl from another package that conflicts with Debian's).
wanted=()
for list in "$here"/deps/*.txt; do
  while read -r pkg rest; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    if [[ "$rest" =~ unless-command=([^[:space:]]+) ]] && command -v "${BASH_REMATCH[1]}" >/dev/null; then
      continue
    fi
    wanted+=("$pkg")
  done <"$list"
done

missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

# JavaScript packages the tests run (npm's registry is the one other registry these machines
# reach): each folder with a package-lock.json gets exactly what its lock file names.
npm_installs() {
  local lock dir
  for lock in "$here"/../tests/*/*/package-lock.json; do
    [[ -e $lock ]] || continue
    dir=$(dirname "$lock")
    [[ -d $dir/node_modules && $dir/node_modules/.package-lock.json -nt $lock ]] && continue
    echo "install-deps: npm ci in ${dir#"$here"/../}"
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >/dev/null
  done
}

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#wanted[@]} packages present"
  npm_installs
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "not root and no sudo: install ${missing[*]}"
  sudo_cmd=(sudo)
fi

echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A stale or empty package index makes installs fail on a fresh machine; refresh it once.
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
npm_installs
echo "install-deps: done"
