#!/usr/bin/env bash
# HTTP API under load: inferdb vs Prometheus 2.42, one after the other, on the same machine,
# each scraping the same simulated vLLM fleet (`inferdb simulate`) while CLIENTS concurrent
# clients (examples/query_load.rs) send the provisioned dashboard's query_range requests.
#
# For each server: start it with the same scrape configuration (SERVERS simulated vLLM servers,
# SCRAPE interval), let it scrape for WARMUP seconds (same data volume on both), then run the
# load for DURATION seconds while it keeps scraping; report throughput, p50/p90/p99 latency and
# errors (anything but 200 + "success", timeouts included; must be 0: requests queue), the CPU
# seconds the server process spent during the load (/proc/PID/stat; the machine is shared, so
# CPU time is the fairer figure), and the data volume it held (series, samples in the last hour).
#
#   benches/compare_api_load.sh [WORKDIR]                 # default /tmp/inferdb-apiload
#   CLIENTS=200 DURATION=60 SERVERS=20 WARMUP=180 SCRAPE=5s benches/compare_api_load.sh
#   BUILD=0 IDB=/path/to/inferdb LOAD=/path/to/query_load ...   use prebuilt binaries
#
# Needs prometheus 2.42 (Debian: apt-get install -y prometheus), curl, python3.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-apiload}
CLIENTS=${CLIENTS:-200}
DURATION=${DURATION:-60}
SERVERS=${SERVERS:-20}
WARMUP=${WARMUP:-180}
SCRAPE=${SCRAPE:-5s}
SIM_PORT=${SIM_PORT:-18600}
PORT=${PORT:-19190}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
for c in prometheus curl python3; do
	command -v $c >/dev/null || {
		echo "$c missing" >&2
		exit 1
	}
done
if [ "${BUILD:-1}" = 1 ]; then
	(cd "$ROOT" && cargo build --release --bin inferdb --example query_load)
fi
IDB=${IDB:-$TARGET/release/inferdb}
LOAD=${LOAD:-$TARGET/release/examples/query_load}
TCK=$(getconf CLK_TCK)

rm -rf "$W"
mkdir -p "$W"
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT

"$IDB" simulate --port "$SIM_PORT" --servers "$SERVERS" >"$W/simulate.log" 2>&1 &
PIDS+=($!)
{
	printf 'global:\n  scrape_interval: %s\n  scrape_timeout: %s\nscrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets:\n' "$SCRAPE" "$SCRAPE"
	for i in $(seq 0 $((SERVERS - 1))); do
		printf '          - 127.0.0.1:%d\n' $((SIM_PORT + i))
	done
} >"$W/scrape.yml"

cpu_s() { awk -v t="$TCK" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }

q() { # instant query, first value of the result
	curl -s --data-urlencode "query=$2" "http://127.0.0.1:$PORT/api/v1/query" |
		python3 -c 'import json,sys; d=json.load(sys.stdin); r=d.get("data",{}).get("result"); print((r[0]["value"][1] if r else 0) if r is not None else "error: "+d.get("error",""))'
}

run_one() { # NAME, then the server command
	local name=$1
	shift
	"$@" >"$W/$name.log" 2>&1 &
	local pid=$!
	PIDS+=($pid)
	for _ in $(seq 1 300); do
		curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null 2>&1 && break
		sleep 0.2
	done
	echo "== $name: scraping $SERVERS simulated servers every $SCRAPE for ${WARMUP}s"
	sleep "$WARMUP"
	local c0 c1
	c0=$(cpu_s $pid)
	set +e
	"$LOAD" --url "http://127.0.0.1:$PORT" --clients "$CLIENTS" --duration "$DURATION" \
		--dashboard "$ROOT/deploy/grafana/dashboards/vllm.json" --label "$name" | tee "$W/$name.load.txt"
	local rc=${PIPESTATUS[0]}
	set -e
	c1=$(cpu_s $pid)
	local series samples
	series=$(q "$name" 'count({__name__=~"vllm:.+"})')
	samples=$(q "$name" 'sum(count_over_time(vllm:num_requests_running[1h]))')
	echo "$name: server CPU during the load $(python3 -c "print(round($c1 - $c0, 1))") s; held $series vLLM series, $samples samples of vllm:num_requests_running in the last hour; load generator exit $rc" |
		tee -a "$W/$name.load.txt"
	kill $pid
	wait $pid 2>/dev/null || true
}

run_one inferdb "$IDB" serve --config.file "$W/scrape.yml" --data-dir "$W/inferdb-data" \
	--web.listen-address "127.0.0.1:$PORT" --no-gpu
run_one prometheus prometheus --config.file "$W/scrape.yml" --storage.tsdb.path "$W/prom-data" \
	--web.listen-address "127.0.0.1:$PORT"

echo
echo "== summary ($CLIENTS clients, ${DURATION}s, $SERVERS simulated servers scraped every $SCRAPE after ${WARMUP}s)"
grep -h -E '^(inferdb|prometheus)' "$W"/*.load.txt
