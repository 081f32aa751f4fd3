#!/usr/bin/env bash
# Side-by-side: `inferdb serve` (release build) and Prometheus 2.42 (Debian package) scraping the
# same N simulated vLLM servers (one `inferdb simulate --servers N` process, not measured) at a
# 1 s interval for D seconds each, one after the other:
#   cpu_s       user+system CPU seconds of the server over the whole run (start, D seconds of
#               scraping, query, clean shutdown), from /usr/bin/time
#   cpu_scrape  CPU seconds from ready to the end of the D seconds (from /proc/<pid>/stat)
#   rss_MB      peak resident memory while scraping (VmHWM at the end of the D seconds, before
#               the counting queries, which load every sample)
#   maxrss_MB   peak resident memory of the whole run (/usr/bin/time %M, queries included)
#   disk        bytes of the data folder after the clean shutdown
#   samples     samples stored by the end of the D seconds, counted per metric name through
#               the query API (at that time):
#               sum(count_over_time({__name__="NAME"}[1h])) for every name (Prometheus refuses
#               {__name__=~".+"} there: the names dropped, label sets collide)
#   win_samples the same over the last W seconds (both servers scraping in steady state;
#               Prometheus starts its scrape loops up to 5 s after it is ready)
#   appended    prometheus_tsdb_head_samples_appended_total from each one's /metrics
#
# Run by hand (not in CI):
#   benches/compare_scrape_prometheus.sh [WORKDIR]         # default /tmp/inferdb-scrape-compare
#   SERVERS=200 DURATION=120 WINDOW=100 PORT=23000 benches/compare_scrape_prometheus.sh
#   INFERDB_BIN=path/to/inferdb ...   skip the cargo build
#   ONLY=inferdb|prometheus ...       run one side only
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-scrape-compare}
SERVERS=${SERVERS:-200}
DURATION=${DURATION:-120}
WINDOW=${WINDOW:-100}
PORT=${PORT:-23000}
IPORT=${IPORT:-29090}
PPORT=${PPORT:-29091}
ONLY=${ONLY:-}

command -v prometheus >/dev/null || {
	echo "prometheus missing: apt-get update && apt-get install -y prometheus" >&2
	exit 1
}
[ -x /usr/bin/time ] || {
	echo "/usr/bin/time missing: apt-get install -y time" >&2
	exit 1
}
if [ -z "${INFERDB_BIN:-}" ]; then
	(cd "$ROOT" && cargo build --release --bin inferdb)
	INFERDB_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/inferdb
fi

mkdir -p "$W"
rm -rf "$W/inferdb" "$W/prom" "$W"/*.time "$W"/*.out
CLK=$(getconf CLK_TCK)
PIDS=()
cleanup() {
	# the servers run under /usr/bin/time: end the child first, then time itself
	for p in "${PIDS[@]}"; do
		pkill -TERM -P "$p" 2>/dev/null || true
		kill "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT

# the simulator: one process, N ports
"$INFERDB_BIN" simulate --port "$PORT" --servers "$SERVERS" >"$W/sim.out" 2>&1 &
SIM=$!
PIDS+=("$SIM")
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$((PORT + SERVERS - 1))/metrics" >/dev/null && break
	sleep 0.2
done
SAMPLES_PER_PAGE=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -vc '^#' || true)

{
	echo "global:"
	echo "  scrape_interval: 1s"
	echo "  scrape_timeout: 1s"
	echo "scrape_configs:"
	echo "  - job_name: vllm"
	echo "    static_configs:"
	echo "      - targets:"
	for i in $(seq 0 $((SERVERS - 1))); do echo "          - 127.0.0.1:$((PORT + i))"; done
} >"$W/prometheus.yml"

cpu_of() { # pid -> utime+stime seconds
	awk -v clk="$CLK" '{ sub(/^.*\) /, ""); print ($12 + $13) / clk }' "/proc/$1/stat"
}
count_samples() { # port range time -> samples stored in the range ending at time, summed over every metric name
	python3 - "$1" "$2" "$3" <<'PY'
import json, sys, urllib.parse, urllib.request
port, rng, at = sys.argv[1], sys.argv[2], sys.argv[3]
base = f"http://127.0.0.1:{port}/api/v1"
names = json.load(urllib.request.urlopen(f"{base}/label/__name__/values", timeout=300))["data"]
total = 0
for n in names:
    q = urllib.parse.urlencode({"query": f'sum(count_over_time({{__name__="{n}"}}[{rng}]))', "time": at})
    r = json.load(urllib.request.urlopen(f"{base}/query?{q}", timeout=300))["data"]["result"]
    total += int(float(r[0]["value"][1])) if r else 0
print(total)
PY
}

# run NAME PORT CMD...: starts CMD under /usr/bin/time, waits until ready, lets it scrape for
# DURATION seconds, counts the samples, stops it with SIGTERM.
run() {
	local name=$1 port=$2
	shift 2
	echo "== $name: $*"
	/usr/bin/time -f '%e %U %S %M' -o "$W/$name.time" "$@" >"$W/$name.out" 2>&1 &
	local tpid=$!
	PIDS+=("$tpid")
	local pid=""
	for _ in $(seq 50); do
		pid=$(pgrep -P "$tpid" | head -n1 || true)
		[ -n "$pid" ] && break
		sleep 0.1
	done
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break
		sleep 0.1
	done
	local c0
	c0=$(cpu_of "$pid")
	sleep "$DURATION"
	local c1 hwm t_end
	c1=$(cpu_of "$pid")
	t_end=$(date +%s.%N)
	hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
	local all win appended
	appended=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^prometheus_tsdb_head_samples_appended_total/ { s += $NF } END { printf "%d", s }')
	# counted at t_end: scrapes after it (the servers keep scraping while counting) do not count
	win=$(count_samples "$port" "${WINDOW}s" "$t_end")
	all=$(count_samples "$port" 1h "$t_end")
	kill -TERM "$pid"
	wait "$tpid" || true
	echo "$c0 $c1 $all $win $appended $hwm" >"$W/$name.counts"
	echo "   cpu while scraping: $(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }') s; peak RSS while scraping: $((hwm / 1024)) MB; samples: $all (last ${WINDOW}s: $win); head_samples_appended_total: $appended"
}

if [ "$ONLY" != prometheus ]; then
	run inferdb "$IPORT" "$INFERDB_BIN" serve --config.file "$W/prometheus.yml" --data-dir "$W/inferdb" \
		--web.listen-address "127.0.0.1:$IPORT" --no-gpu
fi
if [ "$ONLY" != inferdb ]; then
	run prometheus "$PPORT" prometheus --config.file "$W/prometheus.yml" --storage.tsdb.path "$W/prom" \
		--web.listen-address "127.0.0.1:$PPORT"
fi
SIM_CPU=$(cpu_of "$SIM")
kill "$SIM"
wait "$SIM" 2>/dev/null || true

echo
echo "$SERVERS simulated vLLM servers ($SAMPLES_PER_PAGE samples a page), 1 s interval, ${DURATION} s each; simulator CPU (not counted): ${SIM_CPU} s"
echo "every scrape stored would give $((SERVERS * WINDOW * (SAMPLES_PER_PAGE + 5))) samples in the last ${WINDOW} s (page + 5 synthetic series)"
printf '%-11s %7s %7s %10s %7s %9s %11s %10s %10s %10s\n' server wall_s cpu_s cpu_scrape rss_MB maxrss_MB disk_bytes samples win_samples appended
row() {
	local name=$1 dir=$2
	[ -f "$W/$name.time" ] && [ -f "$W/$name.counts" ] || return 0
	local t c
	t=($(cat "$W/$name.time"))
	c=($(cat "$W/$name.counts"))
	awk -v n="$name" -v w="${t[0]}" -v u="${t[1]}" -v s="${t[2]}" -v m="${t[3]}" -v d="$(du -sb "$dir" | cut -f1)" \
		-v c0="${c[0]}" -v c1="${c[1]}" -v all="${c[2]}" -v win="${c[3]}" -v app="${c[4]}" -v hwm="${c[5]}" \
		'BEGIN { printf "%-11s %7.1f %7.1f %10.1f %7.0f %9.0f %11d %10d %10d %10d\n", n, w, u + s, c1 - c0, hwm / 1024, m / 1024, d, all, win, app }'
}
row inferdb "$W/inferdb"
row prometheus "$W/prom"
if [ -f "$W/inferdb.time" ] && [ -f "$W/prometheus.time" ]; then
	awk -v a="$(cat "$W/inferdb.time")" -v b="$(cat "$W/prometheus.time")" \
		-v ca="$(cat "$W/inferdb.counts")" -v cb="$(cat "$W/prometheus.counts")" 'BEGIN {
		split(a, x, " "); split(b, y, " "); split(ca, p, " "); split(cb, q, " ")
		printf "inferdb / prometheus: cpu %.3f, cpu while scraping %.3f, peak RSS while scraping %.3f, peak RSS %.3f, samples in the window %.4f\n",
			(x[2] + x[3]) / (y[2] + y[3]), (p[2] - p[1]) / (q[2] - q[1]), p[6] / q[6], x[4] / y[4], p[4] / q[4] }'
fi
