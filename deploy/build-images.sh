#!/usr/bin/env bash
# Builds the kata-vgpu container images from deploy/docker/*.Dockerfile with the repository root
# as the build context (each Dockerfile has a <name>.Dockerfile.dockerignore beside it, read by
# BuildKit, so only the sources it compiles are sent), and optionally pushes them.
#
#   device-plugin  kvgpu-device-plugin (DaemonSet)
#   webhook        kvgpu-webhook (Deployment)
#   scheduler-extender  kvgpu-scheduler-extender (Deployment, base/scheduler-extender)
#   guest-tools    the image of the containers the webhook injects into vGPU pods
#
# Image names are <registry>/kata-vgpu/<name>:<tag>, or kata-vgpu/<name>:<tag> without a
# registry: the names deploy/base uses. Point an overlay at your registry with kustomize's
# `images:` (docs/install.md) and set the guest-tools image in the webhook config.
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly here
top=$(cd "$here/.." && pwd)
readonly top
readonly ALL_IMAGES=(device-plugin webhook scheduler-extender guest-tools)

info() { echo "build-images: $*" >&2; }
die() {
  echo "build-images: error: $*" >&2
  exit 1
}

usage() {
  cat <<EOF
usage: ${0##*/} [options] [IMAGE...]
Builds the images (default: all of ${ALL_IMAGES[*]}).
  --registry HOST[/PATH]  prefix of the image names (default: none)
  --tag TAG               image tag (default: the project version, $(project_version))
  --push                  push each image after building it
  --tool docker|podman    the container tool (default: \$CONTAINER_TOOL, else docker)
  --platform P            e.g. linux/amd64 (default: the tool's)
  --dry-run               print the commands, run nothing
  -h, --help              this text
EOF
}

# The version in the top-level CMakeLists.txt: project(kata-vgpu VERSION x.y.z ...).
project_version() {
  sed -n 's/^project(kata-vgpu VERSION \([0-9][0-9.]*\).*/\1/p' "$top/CMakeLists.txt"
}

registry=
tag=$(project_version)
push=0
tool=${CONTAINER_TOOL:-docker}
platform=
dry_run=0
images=()
while [[ $# -gt 0 ]]; do
  case $1 in
  --registry)
    [[ $# -ge 2 && -n $2 ]] || die "--registry needs a value"
    registry=${2%/}
    shift
    ;;
  --tag)
    [[ $# -ge 2 && -n $2 ]] || die "--tag needs a value"
    tag=$2
    shift
    ;;
  --push) push=1 ;;
  --tool)
    [[ $# -ge 2 && -n $2 ]] || die "--tool needs docker or podman"
    tool=$2
    shift
    ;;
  --platform)
    [[ $# -ge 2 && -n $2 ]] || die "--platform needs a value"
    platform=$2
    shift
    ;;
  --dry-run) dry_run=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  -*)
    usage >&2
    die "unknown option: $1"
    ;;
  *)
    images+=("$1")
    ;;
  esac
  shift
done

[[ -n $tag ]] || die "no --tag and no version in $top/CMakeLists.txt"
# The OCI distribution spec's tag grammar.
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--tag '$tag' is not a valid image tag"
[[ -z $registry || $registry =~ ^[a-z0-9]([a-z0-9.:-]*[a-z0-9])?(/[a-z0-9._-]+)*$ ]] ||
  die "--registry '$registry' is not a registry host (and optional path)"
[[ $tool == docker || $tool == podman ]] || die "--tool must be docker or podman, not '$tool'"
[[ ${#images[@]} -gt 0 ]] || images=("${ALL_IMAGES[@]}")
for image in "${images[@]}"; do
  [[ -f $here/docker/$image.Dockerfile ]] || die "unknown image '$image' (known: ${ALL_IMAGES[*]})"
done
if [[ $dry_run -eq 0 ]]; then
  command -v "$tool" >/dev/null || die "$tool not found; --dry-run prints the commands without it"
fi

run() {
  printf '%q ' "$@" | sed 's/ $//'
  echo
  if [[ $dry_run -eq 0 ]]; then "$@"; fi
}

prefix=${registry:+$registry/}kata-vgpu
for image in "${images[@]}"; do
  ref=$prefix/$image:$tag
  info "$ref"
  args=(build --file "$here/docker/$image.Dockerfile" --tag "$ref")
  [[ -n $platform ]] && args+=(--platform "$platform")
  # The per-Dockerfile .dockerignore is a BuildKit feature; classic docker build would send the
  # whole tree, build directories included.
  if [[ $tool == docker ]]; then
    run env DOCKER_BUILDKIT=1 "$tool" "${args[@]}" "$top"
  else
    run "$tool" "${args[@]}" "$top"
  fi
  if [[ $push -eq 1 ]]; then run "$tool" push "$ref"; fi
done
