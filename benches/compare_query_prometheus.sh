#!/usr/bin/env bash
# PromQL range queries, inferdb vs Prometheus 2.42, on the same data and machine.
#
# The workload of benches/workload.rs (INFERDB_BENCH_HOURS, default 4 here so that promtool
# finishes in minutes) is written once as OpenMetrics text, then loaded
#   - into Prometheus 2.42: promtool tsdb create-blocks-from openmetrics --max-block-duration=24h,
#     then `prometheus` serves the blocks (no scraping);
#   - into inferdb: `inferdb import openmetrics`, then `inferdb serve --no-gpu` serves them.
# Each query of benches/query.rs runs ROUNDS x REPS times (default 2 x 5) through
# /api/v1/query_range over the whole range at a 15 s step, end to end (JSON included); the
# rounds alternate between the two servers so that both see the same machine load. Each
# request is one `curl` process (a new connection, as before), or, with KEEPALIVE=1, one curl
# sends all REPS requests of a round over one kept-alive connection (as Grafana does).
# Reported per query and server: median wall time of the requests, CPU time the server process
# spent per request (the sum over its threads of /proc/PID/task/*/schedstat run time, in ns;
# `cpu_tick_ms` is the same from /proc/PID/stat utime+stime in 10 ms ticks, as a cross-check;
# the machine is shared, so CPU time is the fairer figure), Prometheus' own count of samples
# scanned (stats=all: totalQueryableSamples) and throughput from it. The two answers are
# compared (series labels, timestamps, values within 1e-9 relative). Last, the in-process
# figures: `cargo bench --bench query` in summary mode.
#
#   benches/compare_query_prometheus.sh [WORKDIR]       # default /tmp/inferdb-qcompare
#   INFERDB_BENCH_HOURS=2 REPS=3 benches/compare_query_prometheus.sh
#   INPROCESS=0 ...      skip the in-process bench
#   NO_BUILD=1 ...       use the binaries already built under CARGO_TARGET_DIR
#   ONLY_QUERIES=rate_one_counter,sum_by_model ...   a subset of the queries
#
# Needs prometheus + promtool 2.42 (Debian: apt-get install -y prometheus), curl, python3.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-qcompare}
export INFERDB_BENCH_HOURS=${INFERDB_BENCH_HOURS:-4}
export INFERDB_FIXTURES=${INFERDB_FIXTURES:-$ROOT/tests/fixtures}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-2}
KEEPALIVE=${KEEPALIVE:-0}
PROM_PORT=${PROM_PORT:-19090}
IDB_PORT=${IDB_PORT:-19091}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
for c in promtool prometheus curl python3; do
	command -v $c >/dev/null || {
		echo "$c missing" >&2
		exit 1
	}
done

[ -n "${NO_BUILD:-}" ] || (cd "$ROOT" && cargo build --release --bin inferdb && cargo build --release -p inferdb-storage --example workload_db)
IDB=${IDB:-$TARGET/release/inferdb}
WDB=$TARGET/release/examples/workload_db

mkdir -p "$W"
H=$INFERDB_BENCH_HOURS
OM=$W/workload-${H}h.om
PD=$W/prom-${H}h
ID=$W/inferdb-${H}h
if [ -d "$PD" ] && [ -d "$ID" ]; then
	echo "reusing $PD and $ID"
elif [ -s "$OM" ] && grep -q '^openmetrics_samples=' "$W/openmetrics-${H}h.txt" 2>/dev/null; then
	echo "reusing $OM"
else
	"$WDB" openmetrics "$OM" | tee "$W/openmetrics-${H}h.txt"
fi

# the same range as benches/query.rs: whole workload on 15 s multiples
START_MS=1796202000000
DUR_MS=$(python3 -c "print(int(float('$H')*3600000))")
START=$(((START_MS / 15000 + 1) * 15))
END=$(((START_MS + DUR_MS) / 15000 * 15))
echo "range: $START .. $END s, step 15 s"

if [ ! -d "$PD" ]; then
	echo "== promtool tsdb create-blocks-from openmetrics (--max-block-duration=24h)"
	/usr/bin/time -f 'promtool wall %e s, cpu %U+%S s' promtool tsdb create-blocks-from openmetrics -q --max-block-duration=24h "$OM" "$PD.tmp"
	mv "$PD.tmp" "$PD"
fi
if [ ! -d "$ID" ]; then
	echo "== inferdb import openmetrics"
	/usr/bin/time -f 'inferdb import wall %e s, cpu %U+%S s' "$IDB" import openmetrics --data-dir "$ID.tmp" "$OM"
	mv "$ID.tmp" "$ID"
fi

printf 'global:\n  scrape_interval: 15s\nscrape_configs: []\n' >"$W/prometheus.yml"
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$PD" \
	--storage.tsdb.retention.time=100y --web.listen-address=127.0.0.1:$PROM_PORT \
	--log.level=warn >"$W/prometheus.log" 2>&1 &
PROM_PID=$!
"$IDB" serve --no-gpu --data-dir "$ID" --web.listen-address 127.0.0.1:$IDB_PORT >"$W/inferdb-serve.log" 2>&1 &
IDB_PID=$!
trap 'kill $PROM_PID $IDB_PID 2>/dev/null || true' EXIT
for u in "http://127.0.0.1:$PROM_PORT/-/ready" "http://127.0.0.1:$IDB_PORT/-/ready"; do
	for _ in $(seq 1 120); do
		curl -sf "$u" >/dev/null 2>&1 && break
		sleep 1
	done
done

# let start-up work (inferdb compacts imported blocks, Prometheus loads its blocks) finish:
# wait until neither server used CPU for 3 s in a row (at most 2 min)
idle=0
for _ in $(seq 1 120); do
	a=$(awk '{s += $14 + $15} END {print s}' /proc/$PROM_PID/stat /proc/$IDB_PID/stat)
	sleep 1
	b=$(awk '{s += $14 + $15} END {print s}' /proc/$PROM_PID/stat /proc/$IDB_PID/stat)
	if [ "$a" = "$b" ]; then idle=$((idle + 1)); else idle=0; fi
	[ $idle -ge 3 ] && break
done

# name|query, as in benches/query.rs
QUERIES=(
	'rate_one_counter|rate(vllm:generation_tokens_total[5m])'
	'rate_gpu_energy_1s|rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5m])'
	'histogram_quantile_p99|histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))'
	'sum_by_model|sum by (model_name) (rate(vllm:request_success_total[5m]))'
	'binop_two_rates|rate(vllm:e2e_request_latency_seconds_sum[5m]) / rate(vllm:e2e_request_latency_seconds_count[5m])'
)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# run time of every thread of the process, ns (threads that exit in between are lost: both
# servers keep their threads while requests keep coming)
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }
TCK=$(getconf CLK_TCK)

# q PORT QUERY OUTFILE [extra curl args]
q() {
	curl -sS -o "$3" -w '%{time_total}\n' "http://127.0.0.1:$1/api/v1/query_range" \
		--data-urlencode "query=$2" --data-urlencode "start=$START" \
		--data-urlencode "end=$END" --data-urlencode "step=15" "${@:4}"
}

# round PORT QUERY: REPS requests, one wall time (s) per line
round() {
	if [ "$KEEPALIVE" = 1 ]; then
		local url
		url="http://127.0.0.1:$1/api/v1/query_range?$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlencode({"query": sys.argv[1], "start": sys.argv[2], "end": sys.argv[3], "step": "15"}))' "$2" "$START" "$END")"
		for _ in $(seq 1 "$REPS"); do printf 'url = "%s"\noutput = /dev/null\n' "$url"; done >"$W/curl-round.cfg"
		curl -sS -w '%{time_total}\n' -K "$W/curl-round.cfg"
	else
		for _ in $(seq 1 "$REPS"); do q "$1" "$2" /dev/null; done
	fi
}

RES=$W/results-${H}h.txt
: >"$RES"
echo "reps $ROUNDS x $REPS per query and server, keepalive=$KEEPALIVE, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RES"
printf '%-24s %-8s %12s %10s %10s %11s %12s %12s %9s\n' query server scanned wall_ms cpu_ms cpu_tick_ms "M/s wall" "M/s per CPU" bytes | tee -a "$RES"
for entry in "${QUERIES[@]}"; do
	name=${entry%%|*}
	query=${entry#*|}
	if [ -n "${ONLY_QUERIES:-}" ] && [[ ",$ONLY_QUERIES," != *",$name,"* ]]; then continue; fi
	# Prometheus' count of samples scanned, and both answers for the comparison
	q $PROM_PORT "$query" "$W/$name.prom.json" --data-urlencode stats=all >/dev/null
	q $IDB_PORT "$query" "$W/$name.inferdb.json" >/dev/null
	scanned=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['data']['stats']['samples']['totalQueryableSamples'])" "$W/$name.prom.json")
	declare -A ns=([prom]=0 [inferdb]=0) ticks=([prom]=0 [inferdb]=0) times=([prom]="" [inferdb]="")
	for _ in $(seq 1 "$ROUNDS"); do
		for srv in prom inferdb; do
			if [ $srv = prom ]; then port=$PROM_PORT pid=$PROM_PID; else port=$IDB_PORT pid=$IDB_PID; fi
			n0=$(cpu_ns $pid) c0=$(cpu_ticks $pid)
			t=$(round $port "$query" | tr '\n' ' ')
			n1=$(cpu_ns $pid) c1=$(cpu_ticks $pid)
			ns[$srv]=$((ns[$srv] + n1 - n0)) ticks[$srv]=$((ticks[$srv] + c1 - c0)) times[$srv]="${times[$srv]} $t"
		done
	done
	for srv in prom inferdb; do
		bytes=$(stat -c %s "$W/$name.$srv.json")
		# shellcheck disable=SC2086
		python3 - "$name" "$srv" "$scanned" "$((REPS * ROUNDS))" "${ns[$srv]}" "${ticks[$srv]}" "$TCK" "$bytes" ${times[$srv]} <<'EOF' | tee -a "$RES"
import sys, statistics
name, srv, scanned, reps, ns, ticks, tck, nbytes = sys.argv[1:9]
times = sorted(float(x) for x in sys.argv[9:])
wall = statistics.median(times)
cpu = int(ns) / 1e9 / int(reps)
cpu_tick = int(ticks) / int(tck) / int(reps)
s = float(scanned)
print(f"{name:<24} {srv:<8} {s:>12.0f} {wall*1e3:>10.2f} {cpu*1e3:>10.3f} {cpu_tick*1e3:>11.2f} {s/wall/1e6:>12.1f} {(s/cpu/1e6 if cpu > 0 else float('nan')):>12.1f} {nbytes:>9}")
EOF
	done
	python3 - "$W/$name.prom.json" "$W/$name.inferdb.json" <<'EOF' | tee -a "$RES"
import json, sys, math
a = json.load(open(sys.argv[1]))["data"]["result"]
b = json.load(open(sys.argv[2]))["data"]["result"]
key = lambda s: tuple(sorted(s["metric"].items()))
da = {key(s): s["values"] for s in a}
db = {key(s): s["values"] for s in b}
bad = 0
if da.keys() != db.keys():
    print(f"  answers differ: {len(da)} vs {len(db)} series, {len(da.keys() ^ db.keys())} label sets not in both")
    bad = 1
worst = 0.0
same_text = 0
pts = 0
for k in da.keys() & db.keys():
    va, vb = da[k], db[k]
    if [p[0] for p in va] != [p[0] for p in vb]:
        bad += 1
        continue
    for (_, x), (_, y) in zip(va, vb):
        pts += 1
        same_text += x == y
        x, y = float(x), float(y)
        if math.isnan(x) and math.isnan(y):
            continue
        if x == y:
            continue
        worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
print(f"  answers: {len(da)} series, {pts} points; timestamp mismatches {bad}; max rel diff {worst:.2e}; values with identical text {same_text}/{pts}")
EOF
done
kill $PROM_PID $IDB_PID 2>/dev/null || true
wait 2>/dev/null || true

if [ "${INPROCESS:-1}" = 1 ]; then
	echo "== in-process (cargo bench --bench query)"
	(cd "$ROOT" && INFERDB_BENCH_SUMMARY_ONLY=1 INFERDB_BENCH_REPS=$REPS cargo bench --bench query) | tee -a "$RES"
fi
echo "results in $RES"
