# The measuring both webhook benchmarks share, sourced (not run) by bench/webhook/run.sh
# (kvgpu-webhook against the standard-library Go peer and nginx) and bench/peers/webhook.sh
# (against a controller-runtime webhook): the certificate, the benchmark review, the Go peers'
# builds, starting kvgpu-webhook, wrk, the paired and interleaved rounds and their medians.
#
# Before sourcing, the caller sets bench_name (the prefix of its messages) and may set
# default_duration and default_connections. Read from the environment here: DURATION (s per
# measurement), CONNECTIONS, ROUNDS (3), WRK_THREADS (1 pinned, else 2), WORKERS (1: the
# webhook's --workers), PIN (1: with two or more cores, servers on CPU 0 and wrk on CPU 1),
# KVGPU_CACHE (~/.cache/kata-vgpu: the Go build cache and the peers' binaries).
# shellcheck shell=bash

harness_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$harness_dir/../.." && pwd)
duration=${DURATION:-${default_duration:-10}}
connection_counts=${CONNECTIONS:-${default_connections:-4 64}}
rounds=${ROUNDS:-3}
cache=${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}
pin_server=()
pin_client=()
if [[ ${PIN:-1} != 0 && $(nproc) -ge 2 ]]; then
  pin_server=(taskset -c 0)
  pin_client=(taskset -c 1)
fi
threads=${WRK_THREADS:-$([[ ${#pin_client[@]} -gt 0 ]] && echo 1 || echo 2)}
# Event loops of the webhook (and worker processes of nginx in run.sh): the same footing for all.
workers=${WORKERS:-1}
python=/usr/bin/python3

die() { echo "${bench_name:-bench}: $*" >&2; exit 1; }
info() { echo "${bench_name:-bench}: $*" >&2; }

# Fails at once, naming what to install, when a tool is missing: nothing below waits on one.
require_tools() {
  local tool hint
  for tool in "$@"; do
    command -v "$tool" >/dev/null && continue
    case $tool in
      go) hint="Go 1.26 or newer on PATH (go.dev; Debian bookworm's golang-go is 1.19): the Go peers are built with it" ;;
      gnuplot) hint="apt-get install gnuplot-nox" ;;
      *) hint="scripts/deps/webhook.txt" ;;
    esac
    die "$tool missing: $hint"
  done
  if [[ " $* " == *" go "* ]]; then
    # Both Go peers' go.mod ask for 1.26; with GOTOOLCHAIN=local an older go only fails to parse it.
    local version
    version=$(go env GOVERSION 2>/dev/null || true)
    [[ $(printf '%s\n' go1.26 "$version" | sort -V | head -n 1) == go1.26 ]] ||
      die "the go on PATH ($(command -v go)) is ${version:-unknown}; the Go peers need Go 1.26 or newer first on PATH"
  fi
  [[ -x $python ]] || die "$python missing"
}

# A scratch folder, removed with every process started through start_server on exit.
work=$(mktemp -d)
pids=()
harness_cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap harness_cleanup EXIT

# $work/tls.crt and tls.key: a P-256 certificate for 127.0.0.1 and localhost.
make_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -keyout "$work/tls.key" -out "$work/tls.crt" -subj /CN=localhost \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
}

# The benchmark review into $1: the real kube-apiserver review, made a Kata pod asking for one
# vGPU, the common, mutating case.
make_review() {
  "$python" - "$root/tests/webhook/data/pod-create.json" "$1" <<'PY'
import json, sys
review = json.load(open(sys.argv[1]))
spec = review["request"]["object"]["spec"]
spec["runtimeClassName"] = "kata"
spec["containers"][0]["resources"] = {"limits": {"tencent.com/vgpu-492": "1"}}
json.dump(review, open(sys.argv[2], "w"), separators=(",", ":"))
PY
}

# Builds the Go module in $1 into the binary $2 with the go on PATH: GOTOOLCHAIN=local (no
# toolchain download), -mod=readonly (go.mod and go.sum decide every module), the build cache in
# the cache folder, never in the clone.
go_build() {
  mkdir -p "$(dirname "$2")"
  info "building $1 with $(go version | cut -d' ' -f3)"
  (cd "$1" && GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" GOCACHE="$cache/go-build" \
    nice -n 10 go build -trimpath -o "$2" .) || die "go build of $1 failed"
}

# Starts "$@" pinned to the server CPU with output into $work/$1's log; its pid in server_pid.
# Usage: start_server NAME COMMAND...
start_server() {
  local name=$1
  shift
  "${pin_server[@]}" "$@" >"$work/$name.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
}

# Waits until something answers TLS on 127.0.0.1:$1; with a pid $2, fails as soon as it exits.
wait_port() {
  for _ in $(seq 100); do
    curl -sk --max-time 2 "https://127.0.0.1:$1/" -o /dev/null && return 0
    if [[ -n ${2:-} ]] && ! kill -0 "$2" 2>/dev/null; then
      die "the server for port $1 exited: $(tail -n 5 "$work"/*.log 2>/dev/null)"
    fi
    sleep 0.1
  done
  die "nothing listening on 127.0.0.1:$1"
}

# The kvgpu-webhook binary $1 on port $2, metrics on $3; its pid in webhook_pid.
start_webhook() {
  start_server "webhook-$2" "$1" --workers "$workers" --listen "127.0.0.1:$2" \
    --tls-cert-file "$work/tls.crt" --tls-key-file "$work/tls.key" --metrics-addr "127.0.0.1:$3"
  webhook_pid=$server_pid
  wait_port "$2" "$webhook_pid"
}

# POSTs the review $2 to https://127.0.0.1:$1/mutate, the answer into $3; fails unless 200.
post_review() {
  local code
  code=$(curl -sk --max-time 60 -o "$3" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @"$2" "https://127.0.0.1:$1/mutate") || die "POST to port $1 failed"
  [[ $code == 200 ]] || die "port $1 answered $code to $(basename "$2"): $(head -c 300 "$3")"
}

# The server's CPU time so far (user + system, clock ticks) and its resident set (KiB).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
peak_rss_kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

# The time the process $1's threads have spent runnable but waiting for a CPU, in ns (schedstat).
cpu_wait_ns() { awk '{w += $2} END {printf "%.0f", w}' /proc/"$1"/task/*/schedstat; }

# Prints "req/s p50 p99 non2xx requests wrk-cpu-seconds" from wrk --latency output, posting
# $REVIEW_FILE to URL $1 over $2 connections; wrk's own output goes to stderr. wrk's CPU time is
# the subshell's children's (bash's `times`).
run_wrk() {
  local out
  out=$("${pin_client[@]}" wrk -t"$threads" -c"$2" -d"${duration}s" --latency -s "$harness_dir/post.lua" "$1"; times)
  echo "$out" >&2
  local rps p50 p99 non2xx requests wrk_cpu
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  requests=$(awk '/ requests in / {print $1}' <<<"$out")
  # `times`' last line: the children's user and system time, as 0m1.234s 0m0.567s.
  wrk_cpu=$(tail -n 1 <<<"$out" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } print t }')
  echo "$rps $p50 $p99 ${non2xx:-0} ${requests:-0} $wrk_cpu"
}

# Paired, interleaved rounds: every round measures every server at each connection count, the
# order rotating by round, so that other work on the machine weighs on all alike. Per request it
# also takes the server's CPU time (user + system, /proc/PID/stat), the time the server's threads
# waited for a CPU while runnable (/proc/PID/task/*/schedstat), and wrk's CPU time.
# Usage: interleaved_rounds RESULTS NAME:PORT:PID... Prints a Markdown row per measurement and
# appends "NAME CONNECTIONS REQ/S P50 P99 CPU-µs LOAD WAIT-µs WRK-CPU-µs" (the last three per
# request) to the file RESULTS.
interleaved_rounds() {
  local results=$1
  shift
  local servers=("$@") round c i n=$# name port pid load rps p50 p99 bad requests wrk_cpu
  local t0 t1 w0 w1 cpu_us wait_us wrk_us tick
  tick=$(getconf CLK_TCK)
  echo "| round | connections | server | requests/s | p50 | p99 | non-2xx | server CPU per request | server's wait for a CPU per request | wrk CPU per request | load before |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for ((round = 1; round <= rounds; round++)); do
    for c in $connection_counts; do
      for ((i = 0; i < n; i++)); do
        IFS=: read -r name port pid <<<"${servers[(i + round - 1) % n]}"
        load=$(cut -d' ' -f1 /proc/loadavg)
        t0=$(cpu_ticks "$pid")
        w0=$(cpu_wait_ns "$pid")
        read -r rps p50 p99 bad requests wrk_cpu < <(run_wrk "https://127.0.0.1:$port/mutate" "$c")
        t1=$(cpu_ticks "$pid")
        w1=$(cpu_wait_ns "$pid")
        read -r cpu_us wait_us wrk_us < <(awk -v n="$requests" -v d=$((t1 - t0)) -v hz="$tick" \
          -v w=$((w1 - w0)) -v k="$wrk_cpu" \
          'BEGIN { if (n < 1) n = 1; printf "%.0f %.0f %.0f\n", d / hz * 1e6 / n, w / 1e3 / n, k * 1e6 / n }')
        echo "| $round | $c | $name | $rps | $p50 | $p99 | $bad | $cpu_us µs | $wait_us µs | $wrk_us µs | $load |"
        echo "$name $c $rps $p50 $p99 $cpu_us $load $wait_us $wrk_us" >>"$results"
      done
    done
  done
}

# Medians over the rounds in the file $1 and, per connection count, the per-round ratios of
# server $2's requests/s to server $3's (labels $4 and $5), against the bar of 2x with a p99 at or
# below. Usage: summarize RESULTS OURS PEER OURS_LABEL PEER_LABEL
summarize() {
  "$python" - "$@" <<'PY'
import statistics, sys
results, ours, peer, ours_label, peer_label = sys.argv[1:6]
def ms(text):
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    raise ValueError(text)
rows = {}
for line in open(results):
    server, c, rps, p50, p99, cpu = line.split()[:6]
    rows.setdefault((int(c), server), []).append((float(rps), ms(p50), ms(p99), float(cpu)))
print("| connections | server | median requests/s | median p50 | median p99 | median CPU per request | rounds |")
print("|---|---|---|---|---|---|---|")
for (c, server), samples in sorted(rows.items()):
    med = [statistics.median(s[i] for s in samples) for i in range(4)]
    print(f"| {c} | {server} | {med[0]:.0f} | {med[1]:.2f} ms | {med[2]:.2f} ms | {med[3]:.0f} µs | {len(samples)} |")
for c in sorted({c for c, _ in rows}):
    w, g = rows.get((c, ours)), rows.get((c, peer))
    if not (w and g):
        continue
    wins = sum(1 for a, b in zip(w, g) if a[0] >= 2 * b[0])
    p99_ok = sum(1 for a, b in zip(w, g) if a[2] <= b[2])
    print(f"\n{c} connections: {ours_label}/{peer_label} requests/s per round "
          + ", ".join(f"{a[0] / b[0]:.2f}" for a, b in zip(w, g))
          + f" (>= 2 in {wins} of {len(w)}); p99 <= {peer_label}'s in {p99_ok} of {len(w)}")
PY
}
