#!/usr/bin/env bash
# Benchmarks kvgpu-webhook against the peer users would otherwise run, a Go net/http +
# encoding/json webhook doing the same mutation (go-peer/, built here with the `go` on PATH into
# a cache outside the clone), paired and interleaved: every round measures both servers at each
# connection count, in alternating order, so that a machine shared with other work weighs on both
# alike. nginx serving a static response of the same size is measured once, as the ceiling of an
# HTTPS server here. All over TLS with keep-alive, wrk posting a realistic AdmissionReview;
# loopback only, bounded time. With two or more cores each server is pinned to CPU 0 and wrk to
# CPU 1 (PIN=0: no pinning).
#   bash bench/webhook/run.sh [path/to/kvgpu-webhook]
# Env: DURATION (s per measurement, default 10), CONNECTIONS ("4 64"), ROUNDS (3), WRK_THREADS
# (1 pinned, else 2), WORKERS (1: the webhook's --workers and nginx's worker_processes; Go's
# GOMAXPROCS follows the pinning), NGINX (1: measure nginx's static answer too),
# KVGPU_CACHE (~/.cache/kata-vgpu: the Go build cache and the peer's binary).
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
webhook=${1:-$root/build-webhook/webhook/kvgpu-webhook}
duration=${DURATION:-10}
connection_counts=${CONNECTIONS:-4 64}
rounds=${ROUNDS:-3}
cache=${KVGPU_CACHE:-$HOME/.cache/kata-vgpu}
pin_server=()
pin_client=()
if [[ ${PIN:-1} != 0 && $(nproc) -ge 2 ]]; then
  pin_server=(taskset -c 0)
  pin_client=(taskset -c 1)
fi
threads=${WRK_THREADS:-$([[ ${#pin_client[@]} -gt 0 ]] && echo 1 || echo 2)}
# Event loops of the webhook and worker processes of nginx alike: the same footing for both.
workers=${WORKERS:-1}
python=/usr/bin/python3

die() { echo "bench-webhook: $*" >&2; exit 1; }
info() { echo "bench-webhook: $*" >&2; }
[[ -x "$webhook" ]] || die "no webhook binary at $webhook (build with -DKVGPU_COMPONENTS=webhook)"
for tool in wrk nginx openssl curl go; do
  command -v "$tool" >/dev/null || die "$tool missing (scripts/deps/webhook.txt; go: golang-go or go.dev)"
done

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -keyout "$work/tls.key" -out "$work/tls.crt" -subj /CN=localhost \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null

# The real kube-apiserver review, made a Kata pod asking for one vGPU: the common, mutating case.
"$python" - "$root/tests/webhook/data/pod-create.json" "$work/review.json" <<'PY'
import json, sys
review = json.load(open(sys.argv[1]))
spec = review["request"]["object"]["spec"]
spec["runtimeClassName"] = "kata"
spec["containers"][0]["resources"] = {"limits": {"tencent.com/vgpu-492": "1"}}
json.dump(review, open(sys.argv[2], "w"), separators=(",", ":"))
PY
export REVIEW_FILE=$work/review.json

wait_port() {
  for _ in $(seq 50); do curl -sk "https://127.0.0.1:$1/" -o /dev/null && return 0; sleep 0.1; done
  die "nothing listening on 127.0.0.1:$1"
}

# Prints "req/s p50 p99 non2xx" from wrk --latency output.
run_wrk() {
  local out
  out=$("${pin_client[@]}" wrk -t"$threads" -c"$2" -d"${duration}s" --latency -s "$here/post.lua" "$1")
  echo "$out" >&2
  local rps p50 p99 non2xx
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  echo "$rps $p50 $p99 ${non2xx:-0}"
}

# The Go peer, built with the go on PATH (the module's own go.mod: standard library only, so there
# is no dependency for go.sum to pin) into the cache, never into the clone; no toolchain download.
mkdir -p "$cache"
(cd "$here/go-peer" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly GOCACHE="$cache/go-build" \
  go build -trimpath -o "$cache/go-peer" .) || die "go build of bench/webhook/go-peer failed"

"${pin_server[@]}" "$webhook" --workers "$workers" --listen 127.0.0.1:18443 --tls-cert-file "$work/tls.crt" --tls-key-file "$work/tls.key" \
  --metrics-addr 127.0.0.1:19443 >"$work/webhook.log" 2>&1 &
webhook_pid=$!
pids+=("$webhook_pid")
wait_port 18443
curl -sk -X POST -H 'Content-Type: application/json' --data-binary @"$REVIEW_FILE" \
  https://127.0.0.1:18443/mutate -o "$work/response.json"
grep -q '"patchType":"JSONPatch"' "$work/response.json" || die "the webhook did not mutate"

# The Go peer is given the webhook's own patch as its template (go-peer/main.go).
"$python" -c 'import base64, json, sys; print(base64.b64decode(json.load(open(sys.argv[1]))["response"]["patch"]).decode())' \
  "$work/response.json" >"$work/patch.json"
"${pin_server[@]}" "$cache/go-peer" -listen 127.0.0.1:18445 -cert "$work/tls.crt" -key "$work/tls.key" \
  -template "$work/patch.json" >"$work/go-peer.log" 2>&1 &
go_pid=$!
pids+=("$go_pid")
wait_port 18445
curl -sk -X POST -H 'Content-Type: application/json' --data-binary @"$REVIEW_FILE" \
  https://127.0.0.1:18445/mutate -o "$work/go-response.json"
cmp -s <("$python" -c 'import json,sys; r=json.load(open(sys.argv[1]))["response"]; print(r["patch"])' "$work/response.json") \
  <("$python" -c 'import json,sys; r=json.load(open(sys.argv[1]))["response"]; print(r["patch"])' "$work/go-response.json") ||
  info "note: the Go peer's patch differs in bytes from the webhook's (same operations, its own encoding)"

info "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | connections | server | requests/s | p50 | p99 | non-2xx | load before |"
echo "|---|---|---|---|---|---|---|---|"
results=$work/results
for ((round = 1; round <= rounds; round++)); do
  for c in $connection_counts; do
    order=(webhook go)
    ((round % 2 == 0)) && order=(go webhook)
    for server in "${order[@]}"; do
      port=18443
      [[ $server == go ]] && port=18445
      load=$(cut -d' ' -f1 /proc/loadavg)
      read -r rps p50 p99 bad < <(run_wrk "https://127.0.0.1:$port/mutate" "$c")
      echo "| $round | $c | $server | $rps | $p50 | $p99 | $bad | $load |"
      echo "$server $c $rps $p50 $p99" >>"$results"
    done
  done
done
w_rss=$(awk '/VmHWM/ {print $2}' "/proc/$webhook_pid/status")
g_rss=$(awk '/VmHWM/ {print $2}' "/proc/$go_pid/status")
mutations=$(curl -s http://127.0.0.1:19443/metrics | awk '/^kvgpu_webhook_mutations_total/ {print $2}')

# nginx: same certificate, same request, a fixed body of the webhook's exact response size.
if [[ ${NGINX:-1} != 0 ]]; then
  grep -q "'" "$work/response.json" && die "response contains a quote; cannot inline it for nginx"
  mkdir -p "$work/nginx"
  cat >"$work/nginx/nginx.conf" <<NGINX
worker_processes $workers;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  server {
    listen 127.0.0.1:18444 ssl;
    ssl_certificate $work/tls.crt;
    ssl_certificate_key $work/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 1000000;
    client_body_buffer_size 64k;
    location = /mutate {
      default_type application/json;
      # The webhook's own response, inlined: nginx's static file module refuses POST.
      return 200 '$(cat "$work/response.json")';
    }
  }
}
NGINX
  "${pin_server[@]}" nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
  pids+=($!)
  wait_port 18444
  for c in $connection_counts; do
    read -r rps p50 p99 bad < <(run_wrk https://127.0.0.1:18444/mutate "$c")
    echo "| - | $c | nginx static, same size ($(wc -c <"$work/response.json") B) | $rps | $p50 | $p99 | $bad | $(cut -d' ' -f1 /proc/loadavg) |"
  done
fi

# Medians over the rounds, and the ratios the issue asks for.
echo
"$python" - "$results" <<'PY'
import statistics, sys
def ms(text):
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    raise ValueError(text)
rows = {}
for line in open(sys.argv[1]):
    server, c, rps, p50, p99 = line.split()
    rows.setdefault((int(c), server), []).append((float(rps), ms(p50), ms(p99)))
print("| connections | server | median requests/s | median p50 | median p99 | rounds |")
print("|---|---|---|---|---|---|")
for (c, server), samples in sorted(rows.items()):
    med = [statistics.median(s[i] for s in samples) for i in range(3)]
    print(f"| {c} | {server} | {med[0]:.0f} | {med[1]:.2f} ms | {med[2]:.2f} ms | {len(samples)} |")
for c in sorted({c for c, _ in rows}):
    w, g = rows.get((c, "webhook")), rows.get((c, "go"))
    if not (w and g):
        continue
    wins = sum(1 for a, b in zip(w, g) if a[0] >= 2 * b[0])
    p99_ok = sum(1 for a, b in zip(w, g) if a[2] <= b[2])
    print(f"\n{c} connections: webhook/Go requests/s per round "
          + ", ".join(f"{a[0] / b[0]:.2f}" for a, b in zip(w, g))
          + f" (>= 2 in {wins} of {len(w)}); p99 <= Go's in {p99_ok} of {len(w)}")
PY
cat <<TAIL

peak RSS: kvgpu-webhook $((w_rss / 1024)) MiB, Go peer $((g_rss / 1024)) MiB; mutations counted by the webhook: $mutations
(wrk -t$threads -d${duration}s per measurement, $workers event loop(s) / nginx worker(s), TLS keep-alive, $(wc -c <"$REVIEW_FILE") B request,
$(nproc) cores, servers pinned: ${pin_server[*]:-no}, wrk pinned: ${pin_client[*]:-no}; $(go version))
TAIL
