#!/usr/bin/env bash
# Bytes per sample of a live store's whole data folder after HOURS (4) of scraping SERVERS (50)
# simulated vLLM servers at 15 s, inferdb (release build) beside Prometheus 2.42 (Debian
# package), both stopped cleanly and measured whole (issue #20 point iii).
#
# Time warp: 4 h of sample time in ~16 min of wall time. One `inferdb simulate --start T0
# --time-warp 15` process serves the SERVERS pages with explicit timestamps; sample time runs
# 15x the wall clock from T0, a 2 h boundary at least HOURS before now (nothing is in the
# future, and both heads cut the same [T0, T0+2h) block once they span more than 3 h and keep
# [T0+2h, T0+4h) in the head). A connection scraping every 1 s gets timestamps exactly 15 s
# apart (the scraper's jitter is not warped).
#
# Why a relay: a scraper stores its own series (up, scrape_*) at wall time, and a Prometheus
# head refuses samples more than 1 h (half a block) older than its newest one, so a Prometheus
# scraping warped pages itself would drop them (and its scrape loop refuses samples more than
# 10 min ahead, and its remote-write only forwards samples newer than its start, so neither a
# future clock nor a Prometheus agent relay works either). So one `inferdb serve` (the relay,
# not measured; its blocks made 24 h long so that its head takes the pages' past samples
# beside its own series' wall-time ones) scrapes the SERVERS targets, honouring their
# timestamps as Prometheus does, and remote-writes the pages' samples (its synthetic series
# dropped by write_relabel_configs) to the two stores measured: `inferdb serve` and
# `prometheus`, each with its remote-write receiver on. Both receive the same samples in the
# same requests, append them to their heads and WALs, and cut blocks by sample time as they do
# for scraped samples.
#
# At the end: once sample time has passed T0 + HOURS the simulator is stopped, the relay is
# stopped when both stores hold every sample it sent (SIGTERM), the samples each store holds
# are counted through its query API (sum(count_over_time(...)) per metric name) and
# prometheus_tsdb_head_samples_appended_total, both servers get SIGTERM and are waited for,
# then `du -sb` of each whole data folder and of its parts (blocks, WAL, head chunks).
#
# Run by hand (not in CI):
#   benches/compare_live_size.sh [WORKDIR]           # default /tmp/inferdb-live-size
#   SERVERS=50 HOURS=4 WARP=15 INTERVAL=1 CYCLE=14400 PORT=24000 benches/compare_live_size.sh
#   INFERDB_BIN=path/to/inferdb ...   skip the cargo build
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-/tmp/inferdb-live-size}
SERVERS=${SERVERS:-50}
HOURS=${HOURS:-4}
WARP=${WARP:-15}
INTERVAL=${INTERVAL:-1}
CYCLE=${CYCLE:-14400}
PORT=${PORT:-24000}
RPORT=${RPORT:-29190}
PPORT=${PPORT:-29191}
IPORT=${IPORT:-29192}

command -v prometheus >/dev/null || {
	echo "prometheus missing: apt-get update && apt-get install -y prometheus" >&2
	exit 1
}
if [ -z "${INFERDB_BIN:-}" ]; then
	(cd "$ROOT" && cargo build --release --bin inferdb)
	INFERDB_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/inferdb
fi

mkdir -p "$W"
rm -rf "$W/inferdb" "$W/prom" "$W/relay" "$W"/*.out
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

SPAN=$(awk -v h="$HOURS" 'BEGIN { printf "%d", h * 3600 }')
NOW=$(date +%s)
T0=$(((NOW - SPAN) / 7200 * 7200))
T_END=$((T0 + SPAN))
WALL_S=$(awk -v s="$SPAN" -v w="$WARP" 'BEGIN { printf "%d", s / w + 0.999 }')

echo "global: {}" >"$W/receiver.yml"
{
	echo "global:"
	echo "  scrape_interval: ${INTERVAL}s"
	echo "  scrape_timeout: ${INTERVAL}s"
	echo "scrape_configs:"
	echo "  - job_name: vllm"
	echo "    static_configs:"
	echo "      - targets:"
	for i in $(seq 0 $((SERVERS - 1))); do echo "          - 127.0.0.1:$((PORT + i))"; done
	echo "remote_write:"
	for p in "$IPORT" "$PPORT"; do
		echo "  - url: http://127.0.0.1:$p/api/v1/write"
		echo "    name: to_$p"
		echo "    write_relabel_configs:"
		echo "      - {source_labels: [__name__], regex: 'up|scrape_.+', action: drop}"
	done
} >"$W/relay.yml"

ready() { # port
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$1/-/ready" >/dev/null && return 0
		sleep 0.1
	done
	echo "port $1 not ready" >&2
	return 1
}

"$INFERDB_BIN" serve --config.file "$W/receiver.yml" --data-dir "$W/inferdb" \
	--web.listen-address "127.0.0.1:$IPORT" --web.enable-remote-write-receiver --no-gpu >"$W/inferdb.out" 2>&1 &
IPID=$!
PIDS+=("$IPID")
prometheus --config.file "$W/receiver.yml" --storage.tsdb.path "$W/prom" \
	--web.listen-address "127.0.0.1:$PPORT" --web.enable-remote-write-receiver >"$W/prometheus.out" 2>&1 &
PPID_=$!
PIDS+=("$PPID_")
ready "$IPORT"
ready "$PPORT"

WALL0=$(date +%s.%N)
"$INFERDB_BIN" simulate --port "$PORT" --servers "$SERVERS" --cycle "$CYCLE" \
	--start "$T0" --time-warp "$WARP" >"$W/sim.out" 2>&1 &
SIM=$!
PIDS+=("$SIM")
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$((PORT + SERVERS - 1))/metrics" >/dev/null && break
	sleep 0.1
done
"$INFERDB_BIN" serve --config.file "$W/relay.yml" --data-dir "$W/relay" \
	--storage.tsdb.min-block-duration 24h --web.listen-address "127.0.0.1:$RPORT" --no-gpu >"$W/relay.out" 2>&1 &
RELAY=$!
PIDS+=("$RELAY")
ready "$RPORT"
echo "sample time $T0 .. $T_END ($(date -u -d @"$T0" +%FT%TZ) + ${HOURS} h) at ${WARP}x: ~${WALL_S} s of wall time; $SERVERS servers every ${INTERVAL} s (wall)"

# until the simulator's sample time passes T_END (plus two scrapes)
END_WALL=$(awk -v a="$WALL0" -v s="$WALL_S" -v i="$INTERVAL" 'BEGIN { printf "%.3f", a + s + 2 * i }')
while :; do
	left=$(awk -v e="$END_WALL" -v n="$(date +%s.%N)" 'BEGIN { printf "%d", e - n }')
	[ "$left" -le 0 ] && break
	sleep $((left > 60 ? 60 : left + 1))
	echo "  $(date -u +%T) sample time $(awk -v t0="$T0" -v a="$WALL0" -v w="$WARP" -v n="$(date +%s.%N)" 'BEGIN { printf "%d", t0 + (n - a) * w }')"
done

# stop the relay (it writes no staleness markers when it shuts down) once it has sent what it
# scraped, then the simulator (a failed scrape would write staleness markers at wall time)
sent_until() { # the oldest of the relay's queues' highest sent timestamps, seconds
	curl -sf "http://127.0.0.1:$RPORT/metrics" |
		awk 'index($1, "prometheus_remote_storage_queue_highest_sent_timestamp_seconds{") == 1 { if (!k || $NF < m) m = $NF; k = 1 } END { printf "%d", m }'
}
for _ in $(seq 120); do
	[ "$(sent_until)" -ge "$T_END" ] && break
	sleep 0.5
done
sleep 1
kill -TERM "$RELAY"
wait "$RELAY" || true
kill -TERM "$SIM"
wait "$SIM" 2>/dev/null || true

count_samples() { # port -> samples stored, summed over every metric name
	python3 - "$1" "$T0" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port, t0 = sys.argv[1], int(sys.argv[2])
base = f"http://127.0.0.1:{port}/api/v1"
at = int(time.time()) + 60
rng = at - t0 + 3600
names = json.load(urllib.request.urlopen(f"{base}/label/__name__/values", timeout=300))["data"]
total = 0
for n in names:
    q = urllib.parse.urlencode({"query": f'sum(count_over_time({{__name__="{n}"}}[{rng}s]))', "time": at})
    r = json.load(urllib.request.urlopen(f"{base}/query?{q}", timeout=600))["data"]["result"]
    total += int(float(r[0]["value"][1])) if r else 0
print(total)
PY
}
appended() { # port
	curl -sf "http://127.0.0.1:$1/metrics" | awk '/^prometheus_tsdb_head_samples_appended_total/ { s += $NF } END { printf "%d", s }'
}
I_SAMPLES=$(count_samples "$IPORT")
P_SAMPLES=$(count_samples "$PPORT")
I_APP=$(appended "$IPORT")
P_APP=$(appended "$PPORT")

kill -TERM "$IPID"
wait "$IPID" || true
kill -TERM "$PPID_"
wait "$PPID_" || true

parts() { # dir -> "total blocks nblocks wal chunks_head other"
	local d=$1 total blocks=0 nb=0 wal=0 ch=0 other=0 s e
	total=$(du -sb "$d" | cut -f1)
	for e in "$d"/* "$d"/.[!.]*; do
		[ -e "$e" ] || continue
		s=$(du -sb "$e" | cut -f1)
		case "$(basename "$e")" in
		wal) wal=$((wal + s)) ;;
		chunks_head) ch=$((ch + s)) ;;
		*) if [ -f "$e/meta.json" ]; then
			blocks=$((blocks + s))
			nb=$((nb + 1))
		else other=$((other + s)); fi ;;
		esac
	done
	echo "$total $blocks $nb $wal $ch $other"
}
block_ranges() { # dir: each block's range, samples, index and chunk bytes (both meta.json layouts)
	for m in "$1"/*/meta.json; do
		[ -f "$m" ] || continue
		python3 - "$m" <<'PY'
import json, os, sys
p = sys.argv[1]
d = os.path.dirname(p)
m = json.load(open(p))
lo, hi = m.get("minTime", m.get("min_time")), m.get("maxTime", m.get("max_time"))
n = m["stats"]["numSamples"] if "stats" in m else m["num_samples"]
ch = sum(os.path.getsize(os.path.join(d, "chunks", f)) for f in os.listdir(os.path.join(d, "chunks")))
print(f"    block {os.path.basename(d)}: {lo} .. {hi} ms ({(hi - lo) / 3.6e6:.2f} h), {n} samples, index {os.path.getsize(os.path.join(d, 'index'))} B, chunks {ch} B")
PY
	done
}

echo
echo "$SERVERS simulated vLLM servers, $HOURS h of sample time at 15 s ($WARP x warp, ${INTERVAL} s wall interval), relayed by one inferdb serve"
printf '%-11s %12s %12s %7s %11s %12s %9s %12s %12s %9s\n' store disk_bytes blocks_bytes blocks wal_bytes chunks_head other samples appended B/sample
for s in inferdb:"$W/inferdb":"$I_SAMPLES":"$I_APP" prometheus:"$W/prom":"$P_SAMPLES":"$P_APP"; do
	IFS=: read -r name dir n app <<<"$s"
	read -r total blocks nb wal ch other <<<"$(parts "$dir")"
	awk -v n="$name" -v t="$total" -v b="$blocks" -v nb="$nb" -v w="$wal" -v c="$ch" -v o="$other" -v s="$n" -v a="$app" \
		'BEGIN { printf "%-11s %12d %12d %7d %11d %12d %9d %12d %12d %9.3f\n", n, t, b, nb, w, c, o, s, a, (s > 0 ? t / s : 0) }'
	block_ranges "$dir"
done
awk -v a="$(du -sb "$W/inferdb" | cut -f1)" -v b="$(du -sb "$W/prom" | cut -f1)" -v sa="$I_SAMPLES" -v sb="$P_SAMPLES" \
	'BEGIN { printf "inferdb / prometheus: bytes %.3f, bytes per sample %.3f (target <= 0.333)\n", a / b, (a / sa) / (b / sb) }'
