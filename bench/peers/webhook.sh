#!/usr/bin/env bash
# Benchmarks kvgpu-webhook against a controller-runtime admission webhook doing the same mutation
# (bench/peers/webhook/: sigs.k8s.io/controller-runtime's webhook.Server serving
# admission.WithDefaulter for *corev1.Pod, pinned by its go.mod and go.sum, built with the go on
# PATH into the cache outside the clone), with bench/webhook/harness.sh's measuring (the one
# bench/webhook/run.sh uses): each server pinned to CPU 0 and wrk to CPU 1, TLS keep-alive,
# paired and interleaved rounds at 1, 4 and 64 connections, medians and per-round ratios.
#
#   bash bench/peers/webhook.sh [path/to/kvgpu-webhook]
#
# Before measuring, both servers answer the benchmark review and a 4 MiB one, and both patches,
# applied to the review's pod (python3-jsonpatch), must give the same pod, or the script stops.
# After the rounds, each server is started afresh, answers one benchmark review and then one
# 4 MiB review; its RSS is read after each.
# Prints Markdown tables; writes the plot docs/images/bench-peers-webhook.png and the tables, with
# the date, commit, machine and load, into docs/bench-peers.md between the markers of its section
# "Webhook: kvgpu-webhook vs a controller-runtime webhook" (DOC=0: print only; DOC=FILE: there).
# Env: DURATION (s per measurement, 8), CONNECTIONS ("1 4 64"), ROUNDS (3), WORKERS (1),
# PIN, WRK_THREADS, KVGPU_CACHE: see bench/webhook/harness.sh.
set -o errexit -o nounset -o pipefail

bench_name=bench-peers
default_duration=8
default_connections="1 4 64"
# shellcheck source=bench/webhook/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../webhook/harness.sh"
peers=$root/bench/peers
webhook=${1:-$root/build-webhook/webhook/kvgpu-webhook}
[[ -x "$webhook" ]] || die "no webhook binary at $webhook (build with -DKVGPU_COMPONENTS=webhook)"
require_tools wrk openssl curl go gnuplot taskset
"$python" -c 'import jsonpatch' 2>/dev/null || die "python3-jsonpatch missing (apt-get install python3-jsonpatch)"
doc=${DOC:-$root/docs/bench-peers.md}
plot=$root/docs/images/bench-peers-webhook.png
peer_bin=$cache/peers/controller-runtime-webhook
cr_version=$(awk '$1 == "sigs.k8s.io/controller-runtime" {print $2}' "$peers/webhook/go.mod")
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

make_cert
make_review "$work/review.json"
export REVIEW_FILE=$work/review.json

# A 4 MiB review of the same pod: annotations up to the API server's 256 KiB total, then
# environment variables in the vGPU container until the review is exactly 4 MiB. (The API server
# itself takes request bodies up to 3 MiB; kvgpu-webhook reads up to 19 MiB, controller-runtime
# up to 7 MiB.)
big_review=$("$python" - "$work/review.json" "$work/review-4mib.json" <<'PY'
import json, random, string, sys
review = json.load(open(sys.argv[1]))
pod = review["request"]["object"]
rng = random.Random(47)
text = lambda n: "".join(rng.choices(string.ascii_letters + string.digits + " -_/.", k=n))
annotations = pod["metadata"].setdefault("annotations", {})
for i in range(60):
    annotations[f"bench.kata-vgpu.io/note-{i:03d}"] = text(4000)
env = pod["spec"]["containers"][0].setdefault("env", [])
target = 4 << 20
size = len(json.dumps(review, separators=(",", ":")))
while size < target - 400:
    entry = {"name": f"BENCH_SETTING_{len(env):05d}", "value": text(200)}
    env.append(entry)
    size += len(json.dumps(entry, separators=(",", ":"))) + 1
last = env[-1]
last["value"] += text(target - len(json.dumps(review, separators=(",", ":"))))
body = json.dumps(review, separators=(",", ":"))
assert len(body) == target, len(body)
open(sys.argv[2], "w").write(body)
print(f"{len(env):,} environment variables of about 200 B", end="")
PY
)
info "4 MiB review: 60 annotations of 4,000 B, $big_review"

go_build "$peers/webhook" "$peer_bin"

# kvgpu-webhook's answer to the benchmark review is the peer's template (bench/peers/webhook/main.go):
# the review's pod, and the same pod with kvgpu-webhook's patch applied.
start_webhook "$webhook" 18453 19453
post_review 18453 "$REVIEW_FILE" "$work/template-response.json"
"$python" - "$REVIEW_FILE" "$work/template-response.json" "$work/pod-before.json" "$work/pod-after.json" <<'PY'
import base64, json, sys, jsonpatch
pod = json.load(open(sys.argv[1]))["request"]["object"]
response = json.load(open(sys.argv[2]))["response"]
if response.get("patchType") != "JSONPatch":
    sys.exit("bench-peers: kvgpu-webhook did not mutate the benchmark review")
patch = json.loads(base64.b64decode(response["patch"]))
json.dump(pod, open(sys.argv[3], "w"))
json.dump(jsonpatch.apply_patch(pod, patch), open(sys.argv[4], "w"))
PY
start_server controller-runtime "$peer_bin" -host 127.0.0.1 -port 18455 -cert-dir "$work" \
  -before "$work/pod-before.json" -after "$work/pod-after.json"
peer_pid=$server_pid
wait_port 18455 "$peer_pid"

# The same mutation: both answers, applied to the review's pod, give the same pod.
same_mutation() {
  local review=$1 name
  name=$(basename "$review" .json)
  post_review 18453 "$review" "$work/$name-kvgpu.json"
  post_review 18455 "$review" "$work/$name-cr.json"
  "$python" - "$review" "$work/$name-kvgpu.json" "$work/$name-cr.json" <<'PY' || die "the two webhooks mutate $name differently"
import base64, json, sys, jsonpatch
review = json.load(open(sys.argv[1]))
pod = review["request"]["object"]
results = []
for path in sys.argv[2:4]:
    answer = json.load(open(path))
    response = answer["response"]
    assert answer["kind"] == "AdmissionReview", path
    assert response["uid"] == review["request"]["uid"], path
    assert response["allowed"] is True and response["patchType"] == "JSONPatch", path
    patch = json.loads(base64.b64decode(response["patch"]))
    results.append((len(patch), jsonpatch.apply_patch(pod, patch)))
(n_ours, ours), (n_peer, peer) = results
if ours != peer:
    for key in sorted(set(ours) | set(peer)):
        if ours.get(key) != peer.get(key):
            print(f"bench-peers: differs at {key}", file=sys.stderr)
    sys.exit(1)
print(f"bench-peers: {sys.argv[1].rsplit('/', 1)[-1]}: the same pod from both patches "
      f"(kvgpu-webhook {n_ours} operations, controller-runtime {n_peer})", file=sys.stderr)
PY
}
same_mutation "$REVIEW_FILE"
same_mutation "$work/review-4mib.json"

info "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
interleaved_rounds "$work/results" "kvgpu-webhook:18453:$webhook_pid" "controller-runtime:18455:$peer_pid" | tee "$work/rounds.md"
peak_ours=$(peak_rss_kib "$webhook_pid")
peak_peer=$(peak_rss_kib "$peer_pid")
mutations=$(curl -s --max-time 10 http://127.0.0.1:19453/metrics | awk '/^kvgpu_webhook_mutations_total/ {print $2}')
kill "$webhook_pid" "$peer_pid"
wait "$webhook_pid" "$peer_pid" 2>/dev/null || true

# RSS: each server afresh, after one benchmark review, then after one 4 MiB review (at once and
# 5 s later), and its peak.
rss_after_big() {
  local name=$1 port=$2 pid=$3
  post_review "$port" "$REVIEW_FILE" "$work/rss-small.json"
  local small
  small=$(rss_kib "$pid")
  post_review "$port" "$work/review-4mib.json" "$work/rss-big.json"
  local big
  big=$(rss_kib "$pid")
  sleep 5
  echo "$name $small $big $(rss_kib "$pid") $(peak_rss_kib "$pid")" >>"$work/rss"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}
start_webhook "$webhook" 18463 19463
rss_after_big kvgpu-webhook 18463 "$webhook_pid"
start_server controller-runtime-rss "$peer_bin" -host 127.0.0.1 -port 18465 -cert-dir "$work" \
  -before "$work/pod-before.json" -after "$work/pod-after.json"
wait_port 18465 "$server_pid"
rss_after_big controller-runtime 18465 "$server_pid"

# The tables, the plot's data and the doc's section.
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$(dirname "$webhook")/../CMakeCache.txt" 2>/dev/null || true)
KV_ROUNDS=$rounds
KV_CONNECTIONS=$connection_counts
KV_BINARY_ARG=${1:-}
KV_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
KV_COMMIT=$(git -C "$root" describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
KV_MODEL=$(lscpu | sed -n 's/^Model name: *//p')
KV_CORES=$(nproc)
KV_LOAD_START=$load_start
KV_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
KV_WRK="$( (wrk -v 2>&1 || true) | head -n 1 | cut -d" " -f1-2), -t$threads, ${pin_client[*]:-not pinned}"
KV_SERVERS="${pin_server[*]:-not pinned}, kvgpu-webhook --workers $workers (${build_type:-build type unknown}), $(go version | cut -d' ' -f3) with GOMAXPROCS from the pinning"
KV_PEER="sigs.k8s.io/controller-runtime $cr_version"
KV_PEAK="$peak_ours $peak_peer"
KV_MUTATIONS=${mutations:-?}
KV_DURATION=$duration
KV_BIG="60 annotations of 4,000 B, within the API server's 256 KiB total, and $big_review"
export KV_ROUNDS KV_CONNECTIONS KV_BINARY_ARG KV_DATE KV_COMMIT KV_MODEL KV_CORES KV_LOAD_START KV_LOAD_END KV_WRK KV_SERVERS KV_PEER KV_PEAK \
  KV_MUTATIONS KV_DURATION KV_BIG
"$python" "$peers/webhook_report.py" "$work/results" "$work/rss" "$work/rounds.md" "$work/plot.dat" >"$work/section.md"
cat "$work/section.md"

gnuplot <<GNUPLOT || die "gnuplot failed"
set terminal pngcairo size 1100,440 font "DejaVu Sans,10"
set output "$work/plot.png"
set multiplot layout 1,2 title "kvgpu-webhook vs controller-runtime $cr_version: one CPU each, wrk on the other ($KV_DATE, $KV_COMMIT)"
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.7 border -1
set key top left
set grid ytics
set xlabel "connections"
set ylabel "requests/s (median of $rounds rounds, bars: min-max)"
set yrange [0:*]
plot "$work/plot.dat" using 2:3:4:xtic(1) title "kvgpu-webhook" lc rgb "#1f77b4", \
     "" using 5:6:7 title "controller-runtime" lc rgb "#ff7f0e"
set ylabel "p99 latency, ms (median, bars: min-max)"
set logscale y
set yrange [*:*]
plot "$work/plot.dat" using 8:9:10:xtic(1) title "kvgpu-webhook" lc rgb "#1f77b4", \
     "" using 11:12:13 title "controller-runtime" lc rgb "#ff7f0e"
unset multiplot
GNUPLOT

if [[ ${DOC:-} != 0 ]]; then
  mkdir -p "$(dirname "$plot")"
  cp "$work/plot.png" "$plot"
  "$python" "$peers/write_doc_section.py" "$doc" "$work/section.md" \
    "## Webhook: kvgpu-webhook vs a controller-runtime webhook" "bench/peers/webhook.sh"
  info "wrote $doc and $plot"
fi
