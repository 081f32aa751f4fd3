#!/usr/bin/env bash
# WAL bytes per sample with --storage.tsdb.wal-compression on and off, inferdb beside
# Prometheus 2.42: one `inferdb simulate --servers N` scraped every 1 s for D seconds by five
# servers at once (the same pages for all):
#   inferdb (default: snappy), inferdb --storage.tsdb.wal-compression-type=zstd,
#   inferdb --no-storage.tsdb.wal-compression,
#   prometheus (2.42's default: snappy), prometheus --no-storage.tsdb.wal-compression.
# At the end of the D seconds (before any shutdown checkpoint) it reads each one's WAL folder
# size (`du -sb <data>/wal`) and prometheus_tsdb_head_samples_appended_total, and prints bytes
# per appended sample, and each server's CPU seconds (user+system, /proc/<pid>/stat) over the D
# seconds per sample appended in them. The bytes do not depend on the build profile, so a debug binary gives the same
# bytes; the CPU column means something only for a release build.
#
# Run by hand (not in CI):
#   benches/wal_compression.sh [WORKDIR]                   # default /tmp/inferdb-wal-compression
#   SERVERS=20 DURATION=120 PORT=24000 benches/wal_compression.sh
#   INFERDB_BIN=target/debug/inferdb ...                   skip the cargo build
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-wal-compression}
SERVERS=${SERVERS:-20}
DURATION=${DURATION:-120}
PORT=${PORT:-24000}
BASE=${BASE:-29190}

command -v prometheus >/dev/null || {
	echo "prometheus missing: apt-get update && apt-get install -y prometheus" >&2
	exit 1
}
if [ -z "${INFERDB_BIN:-}" ]; then
	(cd "$ROOT" && cargo build --release --bin inferdb)
	INFERDB_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/inferdb
fi

mkdir -p "$W"
rm -rf "${W:?}"/*
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

"$INFERDB_BIN" simulate --port "$PORT" --servers "$SERVERS" >"$W/sim.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$((PORT + SERVERS - 1))/metrics" >/dev/null && break
	sleep 0.2
done
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

NAMES=(inferdb_snappy inferdb_zstd inferdb_off prometheus_snappy prometheus_off)
start() { # index name args...
	local i=$1 name=$2 port=$((BASE + $1))
	shift 2
	case $name in
	inferdb*) "$INFERDB_BIN" serve --config.file "$W/prometheus.yml" --data-dir "$W/$name" \
		--web.listen-address "127.0.0.1:$port" --no-gpu "$@" >"$W/$name.out" 2>&1 & ;;
	prometheus*) prometheus --config.file "$W/prometheus.yml" --storage.tsdb.path "$W/$name" \
		--web.listen-address "127.0.0.1:$port" "$@" >"$W/$name.out" 2>&1 & ;;
	esac
	PIDS+=($!)
}
start 0 inferdb_snappy
start 1 inferdb_zstd --storage.tsdb.wal-compression-type=zstd
start 2 inferdb_off --no-storage.tsdb.wal-compression
start 3 prometheus_snappy
start 4 prometheus_off --no-storage.tsdb.wal-compression
for i in 0 1 2 3 4; do
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$((BASE + i))/-/ready" >/dev/null && break
		sleep 0.1
	done
done
CLK=$(getconf CLK_TCK)
cpu_of() { # pid -> utime+stime seconds
	awk -v clk="$CLK" '{ sub(/^.*\) /, ""); print ($12 + $13) / clk }' "/proc/$1/stat"
}
appended() { # index -> prometheus_tsdb_head_samples_appended_total
	curl -sf "http://127.0.0.1:$((BASE + $1))/metrics" |
		awk '/^prometheus_tsdb_head_samples_appended_total/ { s += $NF } END { printf "%d", s }'
}
C0=()
A0=()
for i in 0 1 2 3 4; do
	C0+=("$(cpu_of "${PIDS[$((i + 1))]}")")
	A0+=("$(appended "$i")")
done
sleep "$DURATION"
C1=()
for i in 0 1 2 3 4; do C1+=("$(cpu_of "${PIDS[$((i + 1))]}")"); done

echo "$SERVERS simulated vLLM servers, 1 s interval, ${DURATION} s, all five servers at once"
printf '%-18s %12s %12s %10s %8s %12s\n' server wal_bytes appended B/sample cpu_s us/sample
for i in 0 1 2 3 4; do
	n=${NAMES[$i]}
	app=$(appended "$i")
	bytes=$(du -sb "$W/$n/wal" | cut -f1)
	awk -v n="$n" -v b="$bytes" -v a="$app" -v c0="${C0[$i]}" -v c1="${C1[$i]}" -v a0="${A0[$i]}" \
		'BEGIN { printf "%-18s %12d %12d %10.3f %8.2f %12.3f\n", n, b, a, b / a, c1 - c0, (c1 - c0) * 1e6 / (a - a0) }'
done
