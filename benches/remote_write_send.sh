#!/usr/bin/env bash
# Remote write, sending: how fast `inferdb serve` forwards a WAL holding a known number of
# samples to a real Prometheus 2.42 receiver (--web.enable-remote-write-receiver).
#
#   benches/remote_write_send.sh [WORKDIR]            # default /tmp/inferdb-rw-send
#   SERIES=10000 SCRAPES=100 MAX_PER_SEND=2000 MAX_SHARDS=8 benches/remote_write_send.sh
#
# Steps: examples/remote_write_wal.rs writes SERIES x SCRAPES samples into a fresh data
# folder's WAL (left as a crash leaves it: segments, no checkpoint); a fresh Prometheus starts
# as receiver; `inferdb serve` (release build, nothing to scrape) starts with one remote_write
# entry and sends the WAL from its beginning. Measured: wall time from serve's start until
# `prometheus_remote_storage_samples_total` reaches the sample count (polled every 100 ms),
# and the CPU seconds of inferdb and of Prometheus over the run (from /proc). The receiver's
# count is checked with its prometheus_tsdb_head_samples_appended_total afterwards.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-rw-send}
SERIES=${SERIES:-10000}
SCRAPES=${SCRAPES:-100}
MAX_PER_SEND=${MAX_PER_SEND:-500}
MAX_SHARDS=${MAX_SHARDS:-200}
MIN_SHARDS=${MIN_SHARDS:-1}
command -v prometheus >/dev/null || {
	echo "prometheus missing: apt-get update && apt-get install -y prometheus" >&2
	exit 1
}
PROFILE=${PROFILE:-release} # PROFILE=debug for a quick look (not a figure to quote)
if [ "$PROFILE" = release ]; then
	(cd "$ROOT" && cargo build --release --bin inferdb --example remote_write_wal)
else
	(cd "$ROOT" && cargo build --bin inferdb --example remote_write_wal)
fi
TD=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=$TD/$PROFILE
BIN=$OUT/inferdb

rm -rf "$W" && mkdir -p "$W"
N=$("$OUT/examples/remote_write_wal" "$W/idata" "$SERIES" "$SCRAPES")
echo "WAL: $N samples, $(du -sh "$W/idata/wal" | cut -f1)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PP=$(free_port)
IP=$(free_port)
echo 'global: {scrape_interval: 1h}' >"$W/prom.yml"
prometheus --config.file="$W/prom.yml" --storage.tsdb.path="$W/pdata" \
	--web.listen-address=127.0.0.1:$PP --web.enable-remote-write-receiver >"$W/prom.log" 2>&1 &
PROM=$!
cleanup() { kill "$PROM" "${IDB:-}" 2>/dev/null || true; }
trap cleanup EXIT
until curl -sf "127.0.0.1:$PP/-/ready" >/dev/null; do sleep 0.2; done

cat >"$W/idb.yml" <<EOF
remote_write:
  - url: http://127.0.0.1:$PP/api/v1/write
    name: bench
    queue_config: {max_samples_per_send: $MAX_PER_SEND, min_shards: $MIN_SHARDS, max_shards: $MAX_SHARDS, batch_send_deadline: 1s}
EOF
cpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }
P0=$(cpu $PROM)
T0=$(date +%s.%N)
"$BIN" serve --config.file "$W/idb.yml" --data-dir "$W/idata" --web.listen-address 127.0.0.1:$IP \
	--no-gpu --storage.remote.flush-deadline 5s >"$W/idb.log" 2>&1 &
IDB=$!
sent=0
while [ "${sent%.*}" -lt "$N" ]; do
	sleep 0.1
	sent=$(curl -s "127.0.0.1:$IP/metrics" | awk '/^prometheus_remote_storage_samples_total/ {print $2}' || true)
	sent=${sent:-0}
done
T1=$(date +%s.%N)
ICPU=$(cpu $IDB)
P1=$(cpu $PROM)
SHARDS=$(curl -s "127.0.0.1:$IP/metrics" | awk '/^prometheus_remote_storage_shards/ {print $2}')
WALL=$(echo "$T1 - $T0" | bc -l)
GOT=$(curl -s "127.0.0.1:$PP/metrics" | awk '/^prometheus_tsdb_head_samples_appended_total/ {s += $2} END {print s}')
printf 'samples %s  wall %.2f s (incl. serve start-up)  %.0f samples/s  shards at the end %s\n' "$N" "$WALL" "$(echo "$N / $WALL" | bc -l)" "$SHARDS"
printf 'CPU: inferdb %.2f s (%.0f samples per CPU-second), prometheus receiver %.2f s\n' "$ICPU" "$(echo "$N / $ICPU" | bc -l)" "$(echo "$P1 - $P0" | bc -l)"
echo "receiver appended $GOT samples (prometheus_tsdb_head_samples_appended_total; expected $N)"
