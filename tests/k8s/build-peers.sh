#!/usr/bin/env bash
# Builds the upstream programs the k8s tests run against (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, and the node's kubelet) for one pinned Kubernetes release, from
# source through the Go module proxy, into a cache outside the clone:
#
#   ${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}/k8s/<k8s version>/bin/
#
# and the container runtime of the real-kubelet node (tests/k8s/node.py): containerd v2's
# containerd, ctr and containerd-shim-runc-v2, pinned by tests/k8s/containerd/ (its go.mod
# requires github.com/containerd/containerd/v2 and names the three main packages as tools), into
#
#   ${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}/containerd/<containerd version>/bin/
#
# usage: tests/k8s/build-peers.sh [--print-bin-dir | --skip-without-go] TARGET...
#   TARGET is a minor release with a pin in tests/k8s/peers/ (1.36, v1.36, or its exact pinned
#   version v1.36.3), `containerd`, or `all` for every pinned release and containerd.
#   --print-bin-dir prints each target's bin directory and builds nothing.
#   --skip-without-go: where Go is not installed, say so and exit 0 without building (CTest's
#   fixture: the k8s tests then skip themselves, naming what is missing).
#
# The pin of a release is the Go module tests/k8s/peers/v1.<minor>/: its go.mod requires
# k8s.io/kubernetes and go.etcd.io/etcd/server/v3 (the etcd version that Kubernetes release
# requires), replaces the staging modules with their published v0.<minor>.<patch>, and names the
# six main packages as tools; its go.sum pins every module's checksum. Go builds with
# -mod=readonly and GOTOOLCHAIN=local: nothing outside those two files decides what is compiled.
#
# A target whose bin/ holds all its programs built from the same pin (bin/PINS: the checksum of
# go.mod, go.sum, the Go version and this script's build flags) is reused: the script says so and
# builds nothing. Otherwise it builds into a temporary directory beside bin/ and renames it into
# place, so bin/ is either absent or complete. One build per cache at a time (flock); a second
# caller waits and then reuses what the first built.
#
# The Go build runs at nice 19 with KVGPU_PEERS_JOBS parallel compiles (default 2): a cold build
# of one release is long (containerd's is shorter) (docs/development.md has the measured times) and is meant to overlap
# other work, as in .ci/run.
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peers=$here/peers
cache_base=${KVGPU_CACHE:-${HOME:?}/.cache/kata-vgpu}
cache_root=$cache_base/k8s
containerd_pin=$here/containerd
jobs=${KVGPU_PEERS_JOBS:-2}

die() {
  echo "build-peers: error: $*" >&2
  exit 1
}
info() { echo "build-peers: $*" >&2; }

k8s_programs=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kubelet)
k8s_packages=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3
  k8s.io/kubernetes/cmd/kubelet)
containerd_module=github.com/containerd/containerd/v2
containerd_programs=(containerd ctr containerd-shim-runc-v2)
containerd_packages=("$containerd_module/cmd/containerd" "$containerd_module/cmd/ctr"
  "$containerd_module/cmd/containerd-shim-runc-v2")

# The pin directory of a release argument.
pin_dir() {
  local arg=${1#v} minor
  [[ $arg =~ ^1\.([0-9]+)(\.[0-9]+)?$ ]] || die "not a Kubernetes release: $1 (want e.g. 1.36 or v1.36.3)"
  minor=${BASH_REMATCH[1]}
  [[ -f $peers/v1.$minor/go.mod ]] || die "no pin for Kubernetes 1.$minor in $peers (pinned: $(pinned_list))"
  if [[ -n ${BASH_REMATCH[2]} && $(pinned_version "$peers/v1.$minor") != "v$arg" ]]; then
    die "Kubernetes 1.$minor is pinned at $(pinned_version "$peers/v1.$minor"), not v$arg"
  fi
  echo "$peers/v1.$minor"
}
pinned_list() {
  local d
  for d in "$peers"/v1.*/; do
    d=${d%/}
    printf '%s ' "${d##*/}"
  done
}
pinned_version() {
  local version
  version=$(sed -n -E 's/^[[:space:]]*k8s\.io\/kubernetes (v[0-9][^ ]*).*/\1/p' "$1/go.mod" | head -n 1)
  [[ -n $version ]] || die "$1/go.mod does not require k8s.io/kubernetes"
  echo "$version"
}

# The containerd version tests/k8s/containerd/go.mod requires.
containerd_version() {
  local version
  version=$(sed -n -E 's/^[[:space:]]*github\.com\/containerd\/containerd\/v2 (v2\.[^ ]*).*/\1/p' \
    "$containerd_pin/go.mod" | head -n 1)
  [[ -n $version ]] || die "$containerd_pin/go.mod does not require $containerd_module"
  echo "$version"
}

# What upstream's release build stamps into the binaries (hack/lib/version.sh sets the same
# variables): `kube-apiserver --version` and the API server's /version then name the release.
ldflags_for() {
  local version=$1 major minor flags=(-s -w) pkg
  major=${version#v}
  minor=${major#*.}
  minor=${minor%%.*}
  major=${major%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=("-X $pkg.gitVersion=$version" "-X $pkg.gitMajor=$major" "-X $pkg.gitMinor=$minor"
      "-X $pkg.gitTreeState=clean")
  done
  echo "${flags[*]}"
}

# What containerd's Makefile stamps (`containerd --version` names the pinned version; the
# revision, a git commit upstream, is the module version here).
containerd_ldflags_for() {
  local version=$1
  echo "-s -w -X $containerd_module/version.Version=$version -X $containerd_module/version.Revision=$version" \
    "-X $containerd_module/version.Package=$containerd_module"
}

# The Go that builds: the first `go` on PATH, else /usr/local/go/bin/go (where Go's own tarball
# installs), whichever is 1.26 or newer (the pins' go.mod says `go 1.26.0` and uses `tool`). Debian
# 12's golang (1.19, /usr/bin/go) cannot read them.
find_go() {
  local candidate version
  for candidate in "$(command -v go || true)" /usr/local/go/bin/go; do
    [[ -n $candidate && -x $candidate ]] || continue
    version=$(GOTOOLCHAIN=local "$candidate" env GOVERSION 2>/dev/null) || continue
    if [[ $version =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] >= 26)); then
      echo "$candidate"
      return 0
    fi
    info "$candidate is $version; the pins need Go 1.26 or newer"
  done
  return 1
}

have_all() {
  local bin=$1 program
  for program in "${programs[@]}"; do
    [[ -x $bin/$program ]] || return 1
  done
}

building=""
cleanup() { [[ -z $building ]] || rm -rf "$building" "$building.old"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# What build_target builds, set by target_release or target_containerd: its name for messages,
# pin directory, version, bin directory, programs, main packages and linker flags.
what="" dir="" version="" bin="" ldflags=""
programs=()
packages=()
target_release() {
  dir=$1
  version=$(pinned_version "$dir")
  what="Kubernetes $version"
  bin=$cache_root/$version/bin
  programs=("${k8s_programs[@]}")
  packages=("${k8s_packages[@]}")
  ldflags=$(ldflags_for "$version")
}
target_containerd() {
  dir=$containerd_pin
  version=$(containerd_version)
  what="containerd $version"
  bin=$cache_base/containerd/$version/bin
  programs=("${containerd_programs[@]}")
  packages=("${containerd_packages[@]}")
  ldflags=$(containerd_ldflags_for "$version")
}

build_target() {
  local cache pins go started
  cache=$(dirname "$bin")
  go=$(find_go) || die "no Go 1.26 or newer: the k8s tests need it and the module proxy to build $what"
  pins=$(cat "$dir/go.mod" "$dir/go.sum" <(GOTOOLCHAIN=local "$go" version) <(echo "CGO_ENABLED=0 -trimpath $ldflags") |
    sha256sum | cut -d' ' -f1)
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  if ! flock -n 9; then
    info "another build of $what is running; waiting for it"
    flock 9
  fi
  if have_all "$bin" && [[ -f $bin/PINS && $(cat "$bin/PINS") == "$pins" ]]; then
    info "reused $what in $bin (built from the same pin)"
    exec 9>&-
    return 0
  fi
  [[ -d $bin ]] && info "$bin was built from another pin; rebuilding"
  info "building $what (${programs[*]}) from $dir into $bin, $jobs compiles at a time at nice 19"
  # A failed or interrupted build leaves no partial directory behind (cleanup, on exit).
  building=$(mktemp -d "$cache/bin.building.XXXXXX")
  started=$SECONDS
  (
    cd "$dir"
    GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
      nice -n 19 "$go" build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$building/" "${packages[@]}"
  )
  # `go build -o DIR` names a major-version module's main package after the path element before
  # /vN: go.etcd.io/etcd/server/v3 becomes "server".
  if [[ -f $building/server ]]; then
    mv "$building/server" "$building/etcd"
  fi
  have_all "$building" || die "the build of $what did not produce all of: ${programs[*]}"
  echo "$pins" >"$building/PINS"
  chmod 0755 "$building"
  if [[ -d $bin ]]; then
    mv "$bin" "$building.old"
  fi
  mv "$building" "$bin"
  rm -rf "$building.old"
  building=""
  info "built $what in $((SECONDS - started)) s: $bin"
  exec 9>&-
}

print_only=0
if [[ ${1:-} == "--print-bin-dir" ]]; then
  print_only=1
  shift
elif [[ ${1:-} == "--skip-without-go" ]]; then
  shift
  if ! command -v go >/dev/null && [[ ! -x /usr/local/go/bin/go ]]; then
    info "Go is not installed: not building $*; the k8s tests will skip"
    exit 0
  fi
fi
[[ $# -ge 1 ]] || die "usage: ${0##*/} [--print-bin-dir] TARGET... (pinned: $(pinned_list)containerd) or all"
targets=()
for arg in "$@"; do
  if [[ $arg == all ]]; then
    for d in "$peers"/v1.*/; do targets+=("${d%/}"); done
    targets+=(containerd)
  elif [[ $arg == containerd ]]; then
    targets+=(containerd)
  else
    targets+=("$(pin_dir "$arg")")
  fi
done
for target in "${targets[@]}"; do
  if [[ $target == containerd ]]; then
    target_containerd
  else
    target_release "$target"
  fi
  if [[ $print_only -eq 1 ]]; then
    echo "$bin"
  else
    build_target
  fi
done
