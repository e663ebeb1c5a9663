#!/usr/bin/env bash
# Benchmarks scheduling vGPU pods with the real kube-scheduler (issue #47 part 1): on N registered
# Nodes (no kubelets) of 8 Tesla T4 each, a burst of pods placed three ways, each by a
# kube-scheduler of its own:
#   extender  deploy/scheduler/kube-scheduler-config.yaml as shipped (nodeCacheCapable, bindVerb,
#             the extender's own Node watch) with this build's kvgpu-scheduler-extender;
#   counts    the same profile without the extender: tencent.com/vgpu-<type> counts alone;
#   dra       ResourceClaimTemplates of the shipped DeviceClasses against the nodes' ResourceSlices.
# The nodes' allocatable, vGPU state annotation and slices are the node daemon's own, computed by
# kvgpu-bench-scheduler-nodes (scheduler_nodes.cpp); the control plane is tests/k8s/controlplane.py's
# with the programs tests/k8s/build-peers.sh builds. scheduler_bench.py says what is measured.
#
#   bash bench/peers/scheduler.sh [build-dir]      # default build dir: build-sched
#
# The build dir holds the extender and the node helper:
#   cmake -S . -B build-sched -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#     -DKVGPU_COMPONENTS="mdev;sim;kube;deviceplugin;extender" -DKVGPU_BUILD_BENCH=ON
#   nice ninja -C build-sched kvgpu-scheduler-extender kvgpu-bench-scheduler-nodes
#
# Prints Markdown; writes docs/images/bench-peers-scheduler.png and the section between the
# markers in docs/bench-peers.md (DOC=0: print only; DOC=FILE: there).
# Env: RELEASE (1.37), SIZES (100,1000,5000), PODS (300), MODES (extender,counts,dra), SEED (1),
# TIMEOUT (300: seconds a burst may take), DRA_MAX_NODES (no limit), DRA_PODS (PODS: the DRA burst,
# the first of the same pods; DRA takes seconds a pod), DRA_TIMEOUT (TIMEOUT), CLIENT_QPS (1000: kube-scheduler's
# clientConnection qps and burst in every mode; 0: its defaults, 50 and 100, which hold binds to 50/s), RESULTS (a JSON file the sizes
# measured are kept in and added to, so sizes can be run one at a time; default: a new one),
# REPORT_ONLY=1 (only the report of RESULTS), KEEP=1 (keep each size's logs and metrics), KVGPU_CACHE.
set -o errexit -o nounset -o pipefail

die() { echo "bench-peers: $*" >&2; exit 1; }
info() { echo "bench-peers: $*" >&2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
peers=$root/bench/peers
python=/usr/bin/python3
build=${1:-build-sched}
[[ $build == /* ]] || build=$root/$build
RELEASE=${RELEASE:-1.37}
SIZES=${SIZES:-100,1000,5000}
PODS=${PODS:-300}
MODES=${MODES:-extender,counts,dra}
SEED=${SEED:-1}
TIMEOUT=${TIMEOUT:-300}
DRA_MAX_NODES=${DRA_MAX_NODES:-1073741824}
DRA_PODS=${DRA_PODS:-0}
DRA_TIMEOUT=${DRA_TIMEOUT:-0}
CLIENT_QPS=${CLIENT_QPS:-1000}
doc=${DOC:-$root/docs/bench-peers.md}
plot=$root/docs/images/bench-peers-scheduler.png

for tool in openssl gnuplot nice; do
  command -v "$tool" >/dev/null || die "$tool missing$([[ $tool == gnuplot ]] && echo ': apt-get install gnuplot-nox')"
done
[[ -x $python ]] || die "$python missing"
bin_dir=$(bash "$root/tests/k8s/build-peers.sh" --print-bin-dir "$RELEASE")
for program in etcd kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  [[ -x $bin_dir/$program ]] || die "$bin_dir/$program is missing: bash tests/k8s/build-peers.sh $RELEASE builds it"
done
release_version=$(basename "$(dirname "$bin_dir")")
extender=$build/extender/kvgpu-scheduler-extender
nodes_bin=$build/bench/peers/kvgpu-bench-scheduler-nodes
for program in "$extender" "$nodes_bin"; do
  [[ -x $program ]] || die "$program is missing: build it as the top of this script says"
done
grep -q '^KVGPU_BUILD_BENCH:BOOL=ON' "$build/CMakeCache.txt" ||
  die "$build is not configured with -DKVGPU_BUILD_BENCH=ON (its node helper would refuse to run)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=${RESULTS:-$work/results.json}
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

"$python" "$peers/scheduler_bench.py" selftest >"$work/selftest.log" ||
  die "scheduler_bench.py's selftest failed: $(cat "$work/selftest.log")"
if [[ ${REPORT_ONLY:-} != 1 ]]; then
  info "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load average $load_start"
  info "Kubernetes $release_version from $bin_dir; sizes $SIZES; $PODS pods; modes $MODES"
  keep=()
  [[ ${KEEP:-} == 1 ]] && keep=(--keep)
  "$python" "$peers/scheduler_bench.py" run --bin-dir "$bin_dir" --extender "$extender" --nodes-bin "$nodes_bin" \
    --out "$results" --sizes "$SIZES" --pods "$PODS" --modes "$MODES" --seed "$SEED" --timeout "$TIMEOUT" \
    --dra-max-nodes "$DRA_MAX_NODES" --dra-pods "$DRA_PODS" --dra-timeout "$DRA_TIMEOUT" --client-qps "$CLIENT_QPS" "${keep[@]}" || die "the measurement failed"
fi
[[ -f $results ]] || die "no results in $results"

KV_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
KV_COMMIT=$(git -C "$root" describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
KV_MODEL=$(lscpu | sed -n 's/^Model name: *//p')
KV_CORES=$(nproc)
KV_LOAD_START=$load_start
KV_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
KV_BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
KV_RELEASE=$release_version
KV_COMMAND="SIZES=$SIZES PODS=$PODS CLIENT_QPS=$CLIENT_QPS DRA_PODS=$DRA_PODS DRA_TIMEOUT=$DRA_TIMEOUT DRA_MAX_NODES=$DRA_MAX_NODES MODES=$MODES bash bench/peers/scheduler.sh ${1:-}"
export KV_DATE KV_COMMIT KV_MODEL KV_CORES KV_LOAD_START KV_LOAD_END KV_BUILD_TYPE KV_RELEASE KV_COMMAND
"$python" "$peers/scheduler_bench.py" report "$results" "$work/section.md" "$work/plot.dat"
cat "$work/section.md"

gnuplot <<GNUPLOT || die "gnuplot failed"
set terminal pngcairo size 1200,420 font "DejaVu Sans,10"
set output "$work/plot.png"
set multiplot layout 1,3 title "kube-scheduler $release_version: vGPU pods with kvgpu-scheduler-extender, on counts, through DRA ($KV_DATE, $KV_COMMIT)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7 border -1
set key top right
set grid ytics
set xlabel "registered nodes"
set ylabel "pods/s (first bind to last)"
set yrange [0:*]
plot "$work/plot.dat" index 0 using 2:xtic(1) title "extender" lc rgb "#1f77b4", \
     "" index 0 using 3 title "counts" lc rgb "#ff7f0e", "" index 0 using 4 title "DRA" lc rgb "#2ca02c"
set logscale y
set yrange [*:*]
set ylabel "scheduling attempt p50, ms (log)"
plot "$work/plot.dat" index 1 using 2:xtic(1) title "extender" lc rgb "#1f77b4", \
     "" index 1 using 3 title "counts" lc rgb "#ff7f0e", "" index 1 using 4 title "DRA" lc rgb "#2ca02c"
set ylabel "scheduling attempt p99, ms (log)"
plot "$work/plot.dat" index 2 using 2:xtic(1) title "extender" lc rgb "#1f77b4", \
     "" index 2 using 3 title "counts" lc rgb "#ff7f0e", "" index 2 using 4 title "DRA" lc rgb "#2ca02c"
unset multiplot
GNUPLOT

if [[ ${DOC:-} != 0 ]]; then
  mkdir -p "$(dirname "$plot")"
  cp "$work/plot.png" "$plot"
  "$python" "$peers/write_doc_section.py" "$doc" "$work/section.md" \
    "## Scheduler: kube-scheduler with kvgpu-scheduler-extender, on counts alone, through DRA" "bench/peers/scheduler.sh"
  info "wrote $doc and $plot"
fi
