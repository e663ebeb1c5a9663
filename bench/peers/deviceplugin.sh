#!/usr/bin/env bash
# Benchmarks kvgpu-device-plugin against NVIDIA's kubevirt-gpu-device-plugin (v1.6.0, pinned by
# commit, built from its own go.mod, go.sum and vendor/ with the go on PATH into the cache outside
# the clone) on the same simulated node: kvgpu-sim's t4x2 profile (two Tesla T4), both plugins
# driven by the same kubelet, build/bench/peers/kvgpu-bench-kubelet-client (kubelet_client.cpp).
#
#   bash bench/peers/deviceplugin.sh [build-dir]      # as root; default build dir: build-dpbench
#
# The build dir holds kvgpu-device-plugin, kvgpu-sim and the client:
#   cmake -S . -B build-dpbench -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#     -DKVGPU_COMPONENTS="mdev;sim;kube;deviceplugin" -DKVGPU_BUILD_BENCH=ON
#   nice ninja -C build-dpbench kvgpu-device-plugin kvgpu-sim kvgpu-bench-kubelet-client
#
# Each run is one plugin in a private mount namespace of its own (unshare -m): a tmpfs over
# /var/lib/kubelet (NVIDIA's plugin has kubelet's socket directory built in; the tmpfs is mounted
# in an overlay of /var/lib, so the mount point need not exist on the host), kvgpu-sim mounted
# in it, and for NVIDIA's plugin the simulator's sys/ bound over /sys (its paths are built in too)
# and its pci.ids at /usr/pci.ids (where its image puts it), both through overlays that change
# nothing outside the namespace. NVIDIA's plugin only hands out vGPUs made beforehand, so its
# simulator gets 16 GRID T4-1Q (nvidia-230) on each GPU first, through the sysfs create files;
# ours starts on an empty node and creates a vGPU in every Allocate.
# Per run: STARTS starts timed to the first ListAndWatch with devices, then IDLE_S seconds idle
# (CPU, RSS), then ALLOCATE calls of Allocate for one T4-1Q device, GAP_MS apart (ours: the
# kernel's create time from its own metrics, so also the time without it; its vGPUs removed each
# time all 32 are made). ROUNDS rounds, the plugins' order alternating.
# Prints Markdown; writes docs/images/bench-peers-deviceplugin.png and the section between the
# markers in docs/bench-peers.md (DOC=0: print only; DOC=FILE: there).
# Env: ROUNDS (3), STARTS (5), IDLE_S (60), ALLOCATE (200), GAP_MS (100), KVGPU_CACHE
# (~/.cache/kata-vgpu), NVIDIA_DP_GIT (where the peer's source is fetched from: its GitHub
# repository, or any clone holding tag v1.6.0). For checks by hand: ONLY=ours or ONLY=nvidia runs
# one plugin and prints the client's lines instead of the report; OURS_CONFIG=FILE gives ours
# that config instead of the DaemonSet's.
set -o errexit -o nounset -o pipefail

die() { echo "bench-peers: $*" >&2; exit 1; }
info() { echo "bench-peers: $*" >&2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
peers=$root/bench/peers
python=/usr/bin/python3
cache=${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}
nv_tag=v1.6.0
nv_commit=d26f2374d3c3f4785f52689cf954d1eea6202fb5
nv_git=${NVIDIA_DP_GIT:-https://github.com/NVIDIA/kubevirt-gpu-device-plugin.git}
nv_resource=nvidia.com/GRID_T4-1Q
our_resource=tencent.com/vgpu-230
vgpu_type=nvidia-230

# ---------------------------------------------------------------------------------------------
# Inside the private mount namespace: one run of one plugin.
# Usage: deviceplugin.sh --inside ours|nvidia OUT SCRATCH BUILD NVIDIA_BIN PCI_IDS
if [[ ${1:-} == --inside ]]; then
  which=$2 out=$3 ns=$4 build=$5 nv_bin=$6 pci_ids=$7
  mount -t tmpfs -o size=64m bench-peers "$ns"
  # An overlay whose upper layer is on the tmpfs: what is written under $1 stays in here.
  overlay() {
    local name
    name=$(basename "$1")
    mkdir -p "$ns/$name-upper" "$ns/$name-work"
    mount -t overlay bench-peers -o "lowerdir=$1,upperdir=$ns/$name-upper,workdir=$ns/$name-work" "$1"
  }
  overlay /var/lib
  mkdir -p /var/lib/kubelet
  mount -t tmpfs -o size=16m bench-kubelet /var/lib/kubelet
  mkdir -p /var/lib/kubelet/device-plugins "$ns/mnt" "$ns/state"
  "$build/sim/fuse/kvgpu-sim" --profile t4x2 --mount "$ns/mnt" --quiet >"$ns/sim.log" 2>&1 &
  sim_pid=$!
  trap 'kill "$sim_pid" 2>/dev/null; wait "$sim_pid" 2>/dev/null || true' EXIT
  for _ in $(seq 300); do
    [[ -r $ns/mnt/sim/state ]] && break
    kill -0 "$sim_pid" 2>/dev/null || die "kvgpu-sim exited: $(cat "$ns/sim.log")"
    sleep 0.1
  done
  [[ -r $ns/mnt/sim/state ]] || die "kvgpu-sim did not mount in 30 s"
  client=("$build/bench/peers/kvgpu-bench-kubelet-client" --plugin-dir /var/lib/kubelet/device-plugins
    --log "$out.log" --starts "$STARTS" --idle-s "$IDLE_S" --allocate "$ALLOCATE" --gap-ms "$GAP_MS")
  if [[ $which == ours ]]; then
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # The DaemonSet's own config (deploy/base), unchanged; no API server is given (no --kubeconfig,
    # no KUBERNETES_SERVICE_HOST), so the pod watch, Events and the published state stay off, and
    # no --licensing-source.
    cp "${OURS_CONFIG:-$root/deploy/base/device-plugin/config.yaml}" "$ns/config.yaml"
    env -u KUBERNETES_SERVICE_HOST "${client[@]}" --resource "$our_resource" --metrics-port "$port" \
      --free-sysfs "$ns/mnt" -- \
      "$build/deviceplugin/kvgpu-device-plugin" --sysfs-root "$ns/mnt" --kubelet-dir /var/lib/kubelet \
      --state-dir "$ns/state" --node-name bench-node --config "$ns/config.yaml" \
      --metrics-addr "127.0.0.1:$port" >"$out"
  else
    # The vGPUs NVIDIA's plugin hands out: every T4-1Q each GPU can hold, made as an operator
    # would, by writing UUIDs to the type's create file.
    made=0
    for parent in "$ns"/mnt/sys/class/mdev_bus/*; do
      type_dir=$parent/mdev_supported_types/$vgpu_type
      while (($(cat "$type_dir/available_instances") > 0)); do
        cat /proc/sys/kernel/random/uuid >"$type_dir/create"
        made=$((made + 1))
      done
    done
    echo "precreated $made $vgpu_type" >"$out"
    mount --bind "$ns/mnt/sys" /sys
    overlay /usr
    cp "$pci_ids" /usr/pci.ids
    "${client[@]}" --resource "$nv_resource" -- "$nv_bin" >>"$out"
  fi
  exit 0
fi

# ---------------------------------------------------------------------------------------------
build=$(cd "${1:-$root/build-dpbench}" 2>/dev/null && pwd) || die "no build dir ${1:-$root/build-dpbench}"
for program in deviceplugin/kvgpu-device-plugin sim/fuse/kvgpu-sim bench/peers/kvgpu-bench-kubelet-client; do
  [[ -x $build/$program ]] || die "no $build/$program (build it: see the top of this script)"
done
[[ $(id -u) == 0 ]] || die "needs root: mount namespaces, FUSE mounts and overlays"
[[ -c /dev/fuse ]] || die "no /dev/fuse: kvgpu-sim cannot mount (docs/simulator.md)"
for tool in unshare git go gnuplot; do
  command -v "$tool" >/dev/null || die "$tool missing$([[ $tool == gnuplot ]] && echo ': apt-get install gnuplot-nox')"
done
[[ -x $python ]] || die "$python missing"
go_version=$(go env GOVERSION 2>/dev/null || true)
[[ $(printf '%s\n' go1.26 "$go_version" | sort -V | head -n 1) == go1.26 ]] ||
  die "the go on PATH ($(command -v go)) is ${go_version:-unknown}; the peer's go.mod asks for 1.26 (Debian bookworm's golang-go is 1.19)"
ROUNDS=${ROUNDS:-3} STARTS=${STARTS:-5} IDLE_S=${IDLE_S:-60} ALLOCATE=${ALLOCATE:-200} GAP_MS=${GAP_MS:-100}
export STARTS IDLE_S ALLOCATE GAP_MS
doc=${DOC:-$root/docs/bench-peers.md}
plot=$root/docs/images/bench-peers-deviceplugin.png
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# NVIDIA's source at the pinned commit, fetched once into the cache (NVIDIA_DP_GIT names another
# clone).
# shellcheck source=bench/peers/pinned_source.sh
. "$peers/pinned_source.sh"
src=$(pinned_source kubevirt-gpu-device-plugin "$nv_git" "$nv_tag" "$nv_commit")
# Built as its Dockerfile builds it (CGO_ENABLED=1 go build -trimpath ./cmd), from its vendor/
# directory: no module is fetched. Reused while the commit, the go and the flags are the same.
nv_bin=$cache/peers/kubevirt-gpu-device-plugin-$nv_tag/nvidia-kubevirt-gpu-device-plugin
pins="$nv_commit $(go version) CGO_ENABLED=1 -trimpath -mod=vendor"
if [[ ! -x $nv_bin || $(cat "$nv_bin.pins" 2>/dev/null) != "$pins" ]]; then
  info "building kubevirt-gpu-device-plugin $nv_tag with $go_version (a few minutes the first time)"
  mkdir -p "$(dirname "$nv_bin")"
  (cd "$src" && GOTOOLCHAIN=local GOWORK=off GOPROXY=off GOFLAGS="-mod=vendor -buildvcs=false" \
    GOCACHE="$cache/go-build" CGO_ENABLED=1 nice -n 10 go build -trimpath -o "$nv_bin.new" ./cmd) ||
    die "go build of kubevirt-gpu-device-plugin failed"
  mv "$nv_bin.new" "$nv_bin"
  echo "$pins" >"$nv_bin.pins"
fi

info "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= ROUNDS; round++)); do
  order=(ours nvidia)
  ((round % 2 == 0)) && order=(nvidia ours)
  for which in "${order[@]}"; do
    [[ -n ${ONLY:-} && $which != "$ONLY" ]] && continue
    out=$work/$which-$round.txt
    mkdir -p "$work/ns-$which-$round"
    cut -d' ' -f1 /proc/loadavg >"$out.load"
    echo "$which-$round" >>"$work/order"
    info "round $round: $which (${STARTS} starts, ${IDLE_S} s idle, ${ALLOCATE} Allocate calls)"
    unshare --mount --propagation private "$BASH" "${BASH_SOURCE[0]}" --inside "$which" "$out" \
      "$work/ns-$which-$round" "$build" "$nv_bin" "$src/utils/pci.ids" ||
      die "round $round, $which failed: $(tail -n 20 "$out.log" 2>/dev/null)"
    rmdir "$work/ns-$which-$round"
  done
done

# The client's raw output and the plugins' logs, kept for a look afterwards (the last run's only).
last=$cache/peers/deviceplugin-last
rm -rf "$last"
mkdir -p "$last"
cp "$work"/*.txt* "$work/order" "$last/"
info "raw results and logs: $last"
if [[ -n ${ONLY:-} ]]; then
  grep -hv '^allocate ' "$work"/*.txt
  exit 0
fi

# The tables, the plot's data and the doc's section.
KV_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
KV_COMMIT=$(git -C "$root" describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
KV_MODEL=$(lscpu | sed -n 's/^Model name: *//p')
KV_CORES=$(nproc)
KV_LOAD_START=$load_start
KV_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
KV_BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
KV_BUILD_ARG=${1:-}
KV_GO=$go_version
KV_PEER="kubevirt-gpu-device-plugin $nv_tag ($nv_commit)"
KV_SETTINGS="$ROUNDS $STARTS $IDLE_S $ALLOCATE $GAP_MS"
export KV_DATE KV_COMMIT KV_MODEL KV_CORES KV_LOAD_START KV_LOAD_END KV_BUILD_TYPE KV_BUILD_ARG KV_GO KV_PEER KV_SETTINGS
"$python" "$peers/deviceplugin_report.py" "$work" "$work/plot.dat" >"$work/section.md"
cat "$work/section.md"

gnuplot <<GNUPLOT || die "gnuplot failed"
set terminal pngcairo size 1100,800 font "DejaVu Sans,10"
set output "$work/plot.png"
set multiplot layout 2,2 title "kvgpu-device-plugin vs NVIDIA kubevirt-gpu-device-plugin $nv_tag on kvgpu-sim t4x2 ($KV_DATE, $KV_COMMIT)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7 border -1
set key top left
set grid ytics
set yrange [0:*]
set ylabel "ms from the start (median of the starts)"
plot "$work/plot.dat" index 0 using 2:xtic(1) title "first ListAndWatch with devices" lc rgb "#1f77b4", \
     "" index 0 using 3 title "every resource's first list" lc rgb "#ff7f0e"
set ylabel "Allocate of one device, ms (log scale)"
set logscale y
set yrange [*:*]
plot "$work/plot.dat" index 1 using 2:xtic(1) title "p50" lc rgb "#1f77b4", \
     "" index 1 using 3 title "p99" lc rgb "#ff7f0e"
unset logscale y
set yrange [0:*]
set ylabel "MiB (median of the runs)"
set key top right
plot "$work/plot.dat" index 2 using 2:xtic(1) title "VmRSS idle" lc rgb "#1f77b4", \
     "" index 2 using 3 title "RssAnon idle" lc rgb "#2ca02c", \
     "" index 2 using 4 title "VmHWM at the end" lc rgb "#ff7f0e"
set style histogram errorbars gap 1 lw 1
set ylabel "CPU ms per 60 s idle (log scale)"
set logscale y
set yrange [0.01:1000]
plot "$work/plot.dat" index 3 using 2:3:4:xtic(1) title "threads' run time (schedstat), median; bars: min-max" lc rgb "#1f77b4"
unset multiplot
GNUPLOT

if [[ ${DOC:-} != 0 ]]; then
  mkdir -p "$(dirname "$plot")"
  cp "$work/plot.png" "$plot"
  "$python" "$peers/write_doc_section.py" "$doc" "$work/section.md" \
    "## Device plugin: kvgpu-device-plugin vs NVIDIA's kubevirt-gpu-device-plugin" "bench/peers/deviceplugin.sh"
  info "wrote $doc and $plot"
fi
