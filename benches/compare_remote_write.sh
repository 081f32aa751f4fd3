#!/usr/bin/env bash
# Side-by-side: remote-write ingestion of the same load (examples/remote_write_load.rs:
# vLLM-like series, N concurrent senders, batches of one sample per series) into
# `inferdb serve --web.enable-remote-write-receiver` and into Prometheus 2.42
# (`prometheus --web.enable-remote-write-receiver`), each on a fresh data folder. Reports
# samples/s received (wall clock of the whole load, every request answered 2xx) and the CPU
# seconds the receiving server used meanwhile (/proc/<pid>/stat).
#
# Run by hand (not in CI); needs prometheus (Debian: apt-get install -y prometheus).
#
#   benches/compare_remote_write.sh [WORKDIR]          # default /tmp/inferdb-rw-compare
#   SAMPLES=6000000 SENDERS=4 BATCH=2000 INSTANCES=200 benches/compare_remote_write.sh
#   RUNS=3 ...        repeat each server's load (fresh folder each time)
#   ONLY=inferdb ...  or ONLY=prometheus; NO_BUILD=1 uses the binaries already built
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-rw-compare}
SAMPLES=${SAMPLES:-6000000}
SENDERS=${SENDERS:-4}
BATCH=${BATCH:-2000}
INSTANCES=${INSTANCES:-200}
RUNS=${RUNS:-1}
ONLY=${ONLY:-}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

[ -n "${NO_BUILD:-}" ] || (cd "$ROOT" && cargo build --release --bin inferdb --example remote_write_load)
INFERDB=$TARGET/release/inferdb
LOAD=$TARGET/release/examples/remote_write_load

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {
	for _ in $(seq 1 300); do
		curl -sf "$1/-/ready" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "server at $1 not ready" >&2
	return 1
}

PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; PID=; }
trap cleanup EXIT

run_one() { # name
	local name=$1 port dir
	port=$(free_port)
	dir=$W/$name
	rm -rf "$dir" && mkdir -p "$dir"
	case $name in
	inferdb)
		"$INFERDB" serve --data-dir "$dir/data" --web.listen-address "127.0.0.1:$port" \
			--no-gpu --web.enable-remote-write-receiver >"$dir/log" 2>&1 &
		;;
	prometheus)
		printf 'global:\n  scrape_interval: 15s\nscrape_configs: []\n' >"$dir/prometheus.yml"
		prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
			--web.listen-address="127.0.0.1:$port" --web.enable-remote-write-receiver \
			>"$dir/log" 2>&1 &
		;;
	esac
	PID=$!
	wait_ready "http://127.0.0.1:$port"
	local out
	out=$("$LOAD" --url "http://127.0.0.1:$port/api/v1/write" --instances "$INSTANCES" \
		--samples "$SAMPLES" --senders "$SENDERS" --batch "$BATCH" --server-pid "$PID" 2>"$dir/load.log")
	echo "$name $out"
	cleanup
}

echo "# load: $SAMPLES samples, $INSTANCES vLLM instances, $SENDERS senders, batches of $BATCH; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq 1 "$RUNS"); do
	[ "$ONLY" != prometheus ] && run_one inferdb
	if [ "$ONLY" != inferdb ]; then
		command -v prometheus >/dev/null || { echo "prometheus missing" >&2; exit 1; }
		run_one prometheus
	fi
done
