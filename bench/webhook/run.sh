#!/usr/bin/env bash
# Benchmarks kvgpu-webhook against the peer users would otherwise run, a Go net/http +
# encoding/json webhook doing the same mutation (go-peer/, built here when `go` is installed:
# Debian's golang-go), and against nginx serving a static response of the same size; all over
# TLS with keep-alive, with wrk posting a realistic AdmissionReview. Loopback only, bounded time.
# With two or more cores each server is pinned to CPU 0 and wrk to CPU 1 (PIN=0: no pinning).
#   bash bench/webhook/run.sh [path/to/kvgpu-webhook]
# Env: DURATION (s, default 15), CONNECTIONS (64), WRK_THREADS (1 pinned, else 2), WORKERS (1:
# the webhook's --workers and nginx's worker_processes; Go's GOMAXPROCS follows the pinning).
set -o errexit -o nounset -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
webhook=${1:-$root/build-webhook/webhook/kvgpu-webhook}
duration=${DURATION:-15}
connections=${CONNECTIONS:-64}
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
for tool in wrk nginx openssl curl; do
  command -v "$tool" >/dev/null || die "$tool missing (scripts/deps/webhook.txt)"
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
  out=$("${pin_client[@]}" wrk -t"$threads" -c"$connections" -d"${duration}s" --latency -s "$here/post.lua" "$1")
  echo "$out" >&2
  local rps p50 p99 non2xx
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  echo "$rps $p50 $p99 ${non2xx:-0}"
}

info "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"${pin_server[@]}" "$webhook" --workers "$workers" --listen 127.0.0.1:18443 --tls-cert-file "$work/tls.crt" --tls-key-file "$work/tls.key" \
  --metrics-addr 127.0.0.1:19443 >"$work/webhook.log" 2>&1 &
webhook_pid=$!
pids+=("$webhook_pid")
wait_port 18443
curl -sk -X POST -H 'Content-Type: application/json' --data-binary @"$REVIEW_FILE" \
  https://127.0.0.1:18443/mutate -o "$work/response.json"
grep -q '"patchType":"JSONPatch"' "$work/response.json" || die "the webhook did not mutate"
read -r w_rps w_p50 w_p99 w_bad < <(run_wrk https://127.0.0.1:18443/mutate)
w_rss=$(awk '/VmHWM/ {print $2}' "/proc/$webhook_pid/status")
mutations=$(curl -s http://127.0.0.1:19443/metrics | awk '/^kvgpu_webhook_mutations_total/ {print $2}')
kill "$webhook_pid"

# The Go peer, given the webhook's own patch as its template (go-peer/main.go).
g_rps=- g_p50=- g_p99=- g_bad=- g_rss=0
if command -v go >/dev/null; then
  "$python" -c 'import base64, json, sys; print(base64.b64decode(json.load(open(sys.argv[1]))["response"]["patch"]).decode())' \
    "$work/response.json" >"$work/patch.json"
  (cd "$here/go-peer" && GOCACHE="$work/gocache" GOFLAGS=-mod=mod go build -o "$work/go-peer" .) ||
    die "go build of bench/webhook/go-peer failed"
  "${pin_server[@]}" "$work/go-peer" -listen 127.0.0.1:18445 -cert "$work/tls.crt" -key "$work/tls.key" \
    -template "$work/patch.json" >"$work/go-peer.log" 2>&1 &
  go_pid=$!
  pids+=("$go_pid")
  wait_port 18445
  read -r g_rps g_p50 g_p99 g_bad < <(run_wrk https://127.0.0.1:18445/mutate)
  g_rss=$(awk '/VmHWM/ {print $2}' "/proc/$go_pid/status")
  kill "$go_pid"
else
  info "no go on PATH: the Go peer is skipped (apt-get install golang-go)"
fi

# nginx: same certificate, same request, a fixed body of the webhook's exact response size.
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
read -r n_rps n_p50 n_p99 n_bad < <(run_wrk https://127.0.0.1:18444/mutate)

ratio=$("$python" -c "print(f'{$w_rps / $n_rps:.2f}')")
cat <<TABLE
| server | requests/s | p50 | p99 | non-2xx | peak RSS |
|---|---|---|---|---|---|
| kvgpu-webhook (POST /mutate, mutating) | $w_rps | $w_p50 | $w_p99 | $w_bad | $((w_rss / 1024)) MiB |
| Go net/http + encoding/json peer, same mutation | $g_rps | $g_p50 | $g_p99 | $g_bad | $((g_rss / 1024)) MiB |
| nginx static, same size ($(wc -c <"$work/response.json") B) | $n_rps | $n_p50 | $n_p99 | $n_bad | |

webhook / nginx throughput ratio: $ratio; mutations counted by the webhook: $mutations
(wrk -t$threads -c$connections -d${duration}s, $workers event loop(s) / nginx worker(s), TLS keep-alive, $(wc -c <"$REVIEW_FILE") B request,
$(nproc) cores, server pinned: ${pin_server[*]:-no}, wrk pinned: ${pin_client[*]:-no}; load average before: see stderr)
TABLE
