#!/usr/bin/env bash
# Benchmarks kvgpu-device-plugin's DRA kubelet plugin against two real DRA kubelet plugins, all
# three driven by one client of kubelet's DRA gRPC API (k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin,
# bench/peers/dra_bench.py) against one real kube-apiserver (tests/k8s/controlplane.py, the
# release's programs from tests/k8s/build-peers.sh):
#   - ours: kvgpu-device-plugin in DRA mode on kvgpu-sim's t4x2 node (two Tesla T4); each prepare
#     makes a vGPU in the simulated kernel, each unprepare removes it;
#   - NVIDIA's gpu-kubelet-plugin (kubernetes-sigs/dra-driver-nvidia-gpu, formerly
#     NVIDIA/k8s-dra-driver-gpu) v0.4.0, unmodified, on NVIDIA's mock libnvidia-ml.so
#     (NVIDIA/k8s-test-infra pkg/gpu/mocknvml v0.3.0: go-nvml's dgxa100 mock behind NVML's C ABI,
#     eight A100s) in a mock driver root, as that project's own CPU-only CI runs it
#     (hack/ci/mock-nvml/setup-mock-gpu.sh); a prepare writes a CDI spec and its checkpoint;
#   - kubernetes-sigs/dra-example-driver v0.4.0's kubelet plugin (simulated GPUs): upstream's
#     reference driver on the same kubeletplugin helper as NVIDIA's.
# Each round, for each plugin in turn (the order alternating): start it, wait for its
# registration socket and its ResourceSlice, create N one-device claims allocated to the node
# (status.allocation written as kube-scheduler writes it, the device taken from the plugin's own
# slice), then N times NodePrepareResources and NodeUnprepareResources of one claim, GAP_MS
# apart; the plugin's CPU time (/proc/<pid>/stat) and RSS around the loop.
#
#   bash bench/peers/dra.sh [build-dir]      # as root; default build dir: build-dra
#
# The build dir holds kvgpu-device-plugin and kvgpu-sim:
#   cmake -S . -B build-dra -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#     -DKVGPU_COMPONENTS="mdev;sim;kube;deviceplugin" -DKVGPU_BUILD_BENCH=ON
#   nice ninja -C build-dra kvgpu-device-plugin kvgpu-sim
#
# Prints Markdown; writes docs/images/bench-peers-dra.png and the section between the markers in
# docs/bench-peers.md (DOC=0: print only; DOC=FILE: there).
# Env: ROUNDS (3), CALLS (200), GAP_MS (120), RELEASE (1.37), KVGPU_CACHE (~/.cache/kata-vgpu),
# ONLY (ours, nvidia or example: that plugin only, no report; the raw numbers stay in the cache's
# dra-last/), BUILD_ONLY=1 (build the peers and stop), BENCH_TMP (/dev/shm: where the plugins
# write), and where each peer's source is fetched from (its GitHub repository, or any
# clone holding the pinned tag): NVIDIA_DRA_GIT, NVML_MOCK_GIT, DRA_EXAMPLE_GIT.
set -o errexit -o nounset -o pipefail

die() { echo "bench-peers: $*" >&2; exit 1; }
info() { echo "bench-peers: $*" >&2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
peers=$root/bench/peers
python=/usr/bin/python3
cache=${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}
nv_tag=v0.4.0
nv_commit=6910a2bea298933cf64cfb061ddf88b6e17743ff
nv_git=${NVIDIA_DRA_GIT:-https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu.git}
mock_tag=v0.3.0
mock_commit=204019fb69e4d49285625a6829ff0e5b143bba3b
mock_git=${NVML_MOCK_GIT:-https://github.com/NVIDIA/k8s-test-infra.git}
ex_tag=v0.4.0
ex_commit=bab2dce4b045e729565c9a3b85554738247cda30
ex_git=${DRA_EXAMPLE_GIT:-https://github.com/kubernetes-sigs/dra-example-driver.git}

for tool in git go; do
  command -v "$tool" >/dev/null || die "$tool missing"
done
go_version=$(go env GOVERSION 2>/dev/null || true)
[[ $(printf '%s\n' go1.26 "$go_version" | sort -V | head -n 1) == go1.26 ]] ||
  die "the go on PATH ($(command -v go)) is ${go_version:-unknown}; the peers' go.mod ask for 1.26 (Debian bookworm's golang-go is 1.19)"

# shellcheck source=bench/peers/pinned_source.sh
. "$peers/pinned_source.sh"

# gobuild OUT PINS DIR ARGS...: go build in DIR unless OUT exists built with the same PINS.
gobuild() {
  local out=$1 pins=$2 dir=$3
  shift 3
  if [[ -e $out && $(cat "$out.pins" 2>/dev/null) == "$pins" ]]; then
    return 0
  fi
  info "building $(basename "$out") with $go_version (minutes the first time)"
  mkdir -p "$(dirname "$out")"
  (cd "$dir" && GOTOOLCHAIN=local GOWORK=off GOCACHE="$cache/go-build" CGO_ENABLED=1 \
    nice -n 19 go build -p 2 -trimpath "$@") || die "go build of $out failed"
  echo "$pins" >"$out.pins"
}

# NVIDIA's plugin and the mock NVML are built from their own vendor/ directories (the Go module
# proxy answers 403 for sigs.k8s.io/dra-driver-nvidia-gpu, github.com/NVIDIA/k8s-dra-driver-gpu
# and github.com/NVIDIA/k8s-test-infra): no module is fetched. The example driver has no vendor/;
# its dependencies come through the module proxy, checked against its own go.sum.
nv_src=$(pinned_source dra-driver-nvidia-gpu "$nv_git" "$nv_tag" "$nv_commit")
mock_src=$(pinned_source k8s-test-infra "$mock_git" "$mock_tag" "$mock_commit")
ex_src=$(pinned_source dra-example-driver "$ex_git" "$ex_tag" "$ex_commit")
nv_bin=$cache/peers/dra-driver-nvidia-gpu-$nv_tag/gpu-kubelet-plugin
mock_lib=$cache/peers/nvml-mock-$mock_tag/libnvidia-ml.so.550.163.01
ex_bin=$cache/peers/dra-example-driver-$ex_tag/dra-example-kubeletplugin
GOPROXY=off GOFLAGS="-mod=vendor -buildvcs=false" \
  gobuild "$nv_bin" "$nv_commit $(go version) -mod=vendor" "$nv_src" -o "$nv_bin.new" ./cmd/gpu-kubelet-plugin
[[ -e $nv_bin.new ]] && mv "$nv_bin.new" "$nv_bin"
# As pkg/gpu/mocknvml/Makefile builds it (its version aliases and soname), without the padding to
# the real library's size (the nopadding tag).
aliases=$(sed -n 's/^\t-Wl,--defsym,\([A-Za-z_0-9]*=[A-Za-z_0-9]*\).*/-Wl,--defsym,\1/p' "$mock_src/pkg/gpu/mocknvml/Makefile" | tr '\n' ' ')
[[ -n $aliases ]] || die "no version aliases found in $mock_src/pkg/gpu/mocknvml/Makefile"
GOPROXY=off GOFLAGS="-mod=vendor -buildvcs=false" CGO_LDFLAGS_ALLOW='--defsym|-soname' \
  CGO_LDFLAGS="$aliases -Wl,-soname,libnvidia-ml.so.1" \
  gobuild "$mock_lib" "$mock_commit $(go version) -mod=vendor nopadding" "$mock_src/pkg/gpu/mocknvml" \
  -tags nopadding -buildmode=c-shared -o "$mock_lib.new" ./bridge
[[ -e $mock_lib.new ]] && mv "$mock_lib.new" "$mock_lib" && rm -f "$(dirname "$mock_lib")"/*.h
GOFLAGS="-mod=readonly -buildvcs=false" \
  gobuild "$ex_bin" "$ex_commit $(go version) -mod=readonly" "$ex_src" -o "$ex_bin.new" ./cmd/dra-example-kubeletplugin
[[ -e $ex_bin.new ]] && mv "$ex_bin.new" "$ex_bin"
# The mock's A100 profile (eight A100-SXM4-40GB, go-nvml's dgxa100 shape) with each PCI bus ID in
# the form real NVML reports (nvmlPciInfo_t.busId: an 8-digit domain, "00000000:07:00.0"). The mock
# writes the 4-digit form ("0000:07:00.0"), which go-nvlib's GetPCIBusID (it strips a leading
# "0000") turns into ":07:00.0"; the plugin then stops at its start ("error getting PCI bus ID for
# device 0: invalid PCI Bus ID format", getGpuInfo in cmd/gpu-kubelet-plugin/nvlib.go).
mock_config=$(dirname "$mock_lib")/mock-nvml-config-a100-busid.yaml
sed -E 's/bus_id: "0000:/bus_id: "00000000:/' "$mock_src/pkg/gpu/mocknvml/configs/mock-nvml-config-a100.yaml" >"$mock_config.new"
[[ $(grep -c 'bus_id: "00000000:' "$mock_config.new") == 8 ]] || die "the mock's A100 profile does not list 8 bus IDs as expected"
mv "$mock_config.new" "$mock_config"
[[ ${BUILD_ONLY:-} == 1 ]] && { info "built: $nv_bin $mock_lib $ex_bin"; exit 0; }

build=$(cd "${1:-$root/build-dra}" 2>/dev/null && pwd) || die "no build dir ${1:-$root/build-dra}"
for program in deviceplugin/kvgpu-device-plugin sim/fuse/kvgpu-sim; do
  [[ -x $build/$program ]] || die "no $build/$program (build it: see the top of this script)"
done
[[ $(id -u) == 0 ]] || die "needs root: FUSE mounts (kvgpu-sim) and the mock driver root's device nodes (mknod)"
[[ -c /dev/fuse ]] || die "no /dev/fuse: kvgpu-sim cannot mount (docs/simulator.md)"
for tool in protoc gnuplot fusermount3; do
  command -v "$tool" >/dev/null || die "$tool missing$([[ $tool == gnuplot ]] && echo ': apt-get install gnuplot-nox')"
done
"$python" -c 'import grpc, google.protobuf, yaml' 2>/dev/null || die "$python lacks grpc, protobuf or yaml: apt-get install python3-grpcio python3-protobuf python3-yaml"
release=${RELEASE:-1.37}
bin_dir=$(bash "$root/tests/k8s/build-peers.sh" --print-bin-dir "$release")
for program in etcd kube-apiserver kubectl; do
  [[ -x $bin_dir/$program ]] || die "no $bin_dir/$program: build Kubernetes $release's programs with tests/k8s/build-peers.sh $release (or RELEASE=1.36)"
done
ROUNDS=${ROUNDS:-3} CALLS=${CALLS:-200} GAP_MS=${GAP_MS:-120}
doc=${DOC:-$root/docs/bench-peers.md}
plot=$root/docs/images/bench-peers-dra.png
# Everything the plugins write (checkpoints, CDI specs, our state) on tmpfs: the plugins, not
# this machine's disk and its fsyncs, are measured.
work=$(mktemp -d "${BENCH_TMP:-/dev/shm}/kvgpu-bench-dra.XXXXXX")
trap 'rm -rf "$work"' EXIT
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

info "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load average $load_start"
"$python" "$peers/dra_bench.py" --bin-dir "$bin_dir" --build "$build" --nvidia-bin "$nv_bin" \
  --mock-lib "$mock_lib" --mock-config "$mock_config" --example-bin "$ex_bin" --work "$work/runs" --rounds "$ROUNDS" \
  --calls "$CALLS" --gap-ms "$GAP_MS" ${ONLY:+--only "$ONLY"} || die "the benchmark failed (logs: $work/runs)"

# The runs' numbers and the plugins' logs, kept for a look afterwards (the last run's only).
last=$cache/peers/dra-last
rm -rf "$last"
mkdir -p "$last"
(cd "$work/runs" && cp order ./*.json "$last/" && for d in */; do
  [[ $d == controlplane/ ]] && continue
  mkdir -p "$last/$d"
  cp "$d"*.log "$last/$d" 2>/dev/null || true
done)
info "raw results and logs: $last"
[[ -n ${ONLY:-} ]] && exit 0

KV_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
KV_COMMIT=$(git -C "$root" describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
KV_MODEL=$(lscpu | sed -n 's/^Model name: *//p')
KV_CORES=$(nproc)
KV_LOAD_START=$load_start
KV_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
KV_BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
KV_GO=$go_version
KV_BUILD_ARG=${1:-}
KV_APISERVER=$("$bin_dir/kube-apiserver" --version 2>/dev/null | awk '{print $2}')
KV_PEERS="dra-driver-nvidia-gpu $nv_tag ($nv_commit) on the mock NVML of k8s-test-infra $mock_tag ($mock_commit); dra-example-driver $ex_tag ($ex_commit)"
KV_SETTINGS="$ROUNDS $CALLS $GAP_MS"
export KV_DATE KV_COMMIT KV_MODEL KV_CORES KV_LOAD_START KV_LOAD_END KV_BUILD_TYPE KV_GO KV_BUILD_ARG KV_APISERVER KV_PEERS KV_SETTINGS
"$python" "$peers/dra_report.py" "$work/runs" "$work/plot.dat" >"$work/section.md"
cat "$work/section.md"

gnuplot <<GNUPLOT || die "gnuplot failed"
set terminal pngcairo size 1100,450 font "DejaVu Sans,10"
set output "$work/plot.png"
set multiplot layout 1,2 title "DRA kubelet plugins: prepare + unprepare of a one-device claim ($KV_DATE, $KV_COMMIT)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7 border -1
set key top right
set grid ytics
set ylabel "ms, client-side (log scale)"
set logscale y
plot "$work/plot.dat" index 0 using 2:xtic(1) title "prepare p50" lc rgb "#1f77b4", \
     "" index 0 using 3 title "prepare p99" lc rgb "#aec7e8", \
     "" index 0 using 4 title "unprepare p50" lc rgb "#ff7f0e", \
     "" index 0 using 5 title "unprepare p99" lc rgb "#ffbb78", \
     "" index 0 using 6 title "client floor p50" lc rgb "#7f7f7f"
unset logscale y
set yrange [0:*]
set key below
set ylabel "plugin CPU ms per pair / VmRSS MiB"
plot "$work/plot.dat" index 1 using 2:xtic(1) title "CPU ms per prepare + unprepare" lc rgb "#2ca02c", \
     "" index 1 using 3 title "VmRSS after the loop, MiB" lc rgb "#9467bd"
unset multiplot
GNUPLOT

if [[ ${DOC:-} != 0 ]]; then
  mkdir -p "$(dirname "$plot")"
  cp "$work/plot.png" "$plot"
  "$python" "$peers/write_doc_section.py" "$doc" "$work/section.md" \
    "## DRA kubelet plugin: ours vs NVIDIA's gpu-kubelet-plugin and dra-example-driver" "bench/peers/dra.sh"
  info "wrote $doc and $plot"
fi
