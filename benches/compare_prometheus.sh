#!/usr/bin/env bash
# Side-by-side: the realistic workload (benches/workload.rs) stored by Prometheus 2.42
# (promtool tsdb create-blocks-from openmetrics) and by inferdb (through Db), bytes on disk per
# sample of the whole data folder after a clean close, and wall/CPU time of each load.
#
# Run by hand (not in CI); needs promtool (Debian: apt-get update && apt-get install -y prometheus)
# and about 6 GB free in WORKDIR for the 24 h OpenMetrics file.
#
#   benches/compare_prometheus.sh [WORKDIR]        # default /tmp/inferdb-compare
#   INFERDB_BENCH_HOURS=2 benches/compare_prometheus.sh   # a quick run
#   PROM_2H=0 ...        skip promtool's default 2 h-block run (it re-parses the file per block)
#
# Loads measured:
#   prom-2h      promtool default: 2 h blocks (what Prometheus would then compact itself)
#   prom-24h     promtool --max-block-duration=24h (hidden flag): 18 h-aligned blocks, i.e.
#                Prometheus' compacted layout
#   inferdb-live scrape-order appends through Db::appender (append_ref, commit per scrape, WAL
#                on, block cuts/compaction as the background thread would do), clean close:
#                blocks + WAL (checkpointed head)
#   inferdb-live+compact  the same folder reopened, every complete 2 h range cut from the head,
#                compacted, closed (the last partial range stays in the WAL)
#   inferdb-import  OpenMetrics text -> BlockBuilder backfill -> compaction (like promtool)
#   inferdb-cli     only with INFERDB_BIN=path/to/inferdb: `inferdb import openmetrics
#                   --data-dir DIR FILE` (the CLI's importer)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-compare}
export INFERDB_BENCH_HOURS=${INFERDB_BENCH_HOURS:-24}
export INFERDB_FIXTURES=${INFERDB_FIXTURES:-$ROOT/tests/fixtures}
command -v promtool >/dev/null || {
	echo "promtool missing: apt-get update && apt-get install -y prometheus" >&2
	exit 1
}
[ -x /usr/bin/time ] || {
	echo "/usr/bin/time missing: apt-get install -y time" >&2
	exit 1
}

(cd "$ROOT" && cargo build --release -p inferdb-storage --example workload_db)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/workload_db

mkdir -p "$W"
rm -rf "$W"/prom-2h "$W"/prom-24h "$W"/inferdb-live "$W"/inferdb-import "$W"/inferdb-cli "$W"/*.time
OM=$W/workload-${INFERDB_BENCH_HOURS}h.om
TF='%e %U %S %M' # wall user sys maxrss_kb

if [ -s "$OM" ] && grep -q '^openmetrics_samples=' "$W/openmetrics-${INFERDB_BENCH_HOURS}h.txt" 2>/dev/null; then
	echo "reusing $OM"
else
	"$BIN" openmetrics "$OM" | tee "$W/openmetrics-${INFERDB_BENCH_HOURS}h.txt"
fi
SAMPLES=$(sed -n 's/^openmetrics_samples=//p' "$W/openmetrics-${INFERDB_BENCH_HOURS}h.txt")
[ -n "$SAMPLES" ] || SAMPLES=$(grep -vc '^#' "$OM")
echo "samples in the OpenMetrics file: $SAMPLES"

# run NAME CMD...: runs CMD under /usr/bin/time, keeps its output in $W/NAME.out
run() {
	local name=$1
	shift
	echo "== $name: $*"
	if ! /usr/bin/time -f "$TF" -o "$W/$name.time" "$@" >"$W/$name.out" 2>&1; then
		echo "$name FAILED (see $W/$name.out)"
		rm -f "$W/$name.time"
	fi
	tail -n 3 "$W/$name.out"
}

run inferdb-live "$BIN" append "$W/inferdb-live"
LIVE_BYTES=$(du -sb "$W/inferdb-live" | cut -f1)
run inferdb-compact "$BIN" compact "$W/inferdb-live"
run inferdb-import "$BIN" import "$OM" "$W/inferdb-import"
"$BIN" breakdown "$W/inferdb-import" >"$W/breakdown.txt" 2>&1 || true
if [ -n "${INFERDB_BIN:-}" ]; then
	rm -rf "$W/inferdb-cli"
	run inferdb-cli "$INFERDB_BIN" import openmetrics --data-dir "$W/inferdb-cli" "$OM"
fi
run prom-24h promtool tsdb create-blocks-from openmetrics -q --max-block-duration=24h "$OM" "$W/prom-24h"
# promtool re-reads the whole file for every block: 13 passes over 24 h with 2 h blocks
if [ "${PROM_2H:-1}" = 1 ]; then
	run prom-2h promtool tsdb create-blocks-from openmetrics -q "$OM" "$W/prom-2h"
fi

echo
echo "workload: ${INFERDB_BENCH_HOURS} h; $SAMPLES samples (inferdb-live also stores the staleness markers)"
printf '%-22s %12s %10s %8s %9s %9s %9s\n' store bytes B/sample vs-prom wall_s cpu_s maxrss_MB
PROM=$(du -sb "$W/prom-24h" | cut -f1)
row() { # name bytes timefile
	local b=$2 t
	[ -f "$3" ] || return 0
	t=($(cat "$3"))
	awk -v n="$1" -v b="$b" -v s="$SAMPLES" -v p="$PROM" -v w="${t[0]}" -v u="${t[1]}" -v y="${t[2]}" -v m="${t[3]}" \
		'BEGIN { printf "%-22s %12d %10.3f %8.3f %9.1f %9.1f %9.0f\n", n, b, b/s, b/p, w, u+y, m/1024 }'
}
row prom-2h "$(du -sb "$W/prom-2h" | cut -f1)" "$W/prom-2h.time"
row prom-24h "$PROM" "$W/prom-24h.time"
row inferdb-live "$LIVE_BYTES" "$W/inferdb-live.time"
row inferdb-live+compact "$(du -sb "$W/inferdb-live" | cut -f1)" "$W/inferdb-compact.time"
row inferdb-import "$(du -sb "$W/inferdb-import" | cut -f1)" "$W/inferdb-import.time"
[ -d "$W/inferdb-cli" ] && row inferdb-cli "$(du -sb "$W/inferdb-cli" | cut -f1)" "$W/inferdb-cli.time"
echo "(vs-prom: bytes / prom-24h bytes; the inferdb time columns include generating the workload"
echo " for 'live' (see generate_s in $W/inferdb-live.out); details in $W/*.out)"
for d in prom-24h inferdb-live inferdb-import; do
	echo "-- $d by part:"
	(cd "$W/$d" && find . -type f -printf '%s %p\n' |
		awk '{ k = ($2 ~ /wal/) ? "wal" : ($2 ~ /chunks/) ? "chunks" : ($2 ~ /index$/) ? "index" : "other"; s[k] += $1 }
		     END { for (k in s) printf "   %-7s %12d\n", k, s[k] }')
done
