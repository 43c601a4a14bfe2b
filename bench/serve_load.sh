#!/bin/bash
# serve_load.sh - load test of `dynbatch serve`: hundreds of concurrent
# streaming and plain requests, some clients walking away, workers killed
# at random, every completed answer checked against the reference decoder.
#
#   bash bench/serve_load.sh [OUTDIR]        (make load)
#
# Knobs (environment): REQUESTS (6000), CONCURRENCY (256), WORKERS (4),
# BATCH (128), KILL_RATE (2 worker SIGKILLs/s in the fault run),
# DISCONNECT (0.1 of requests abandoned), MODEL (accelerator-like sim).
# Prints one line of figures per run: requests/s, tokens/s, time to first
# token and time per output token (p50/p99).
set -u
BIN=${BIN:-bin}
OUT=${1:-build/load}
REQUESTS=${REQUESTS:-6000}
CONCURRENCY=${CONCURRENCY:-256}
WORKERS=${WORKERS:-4}
BATCH=${BATCH:-128}
KILL_RATE=${KILL_RATE:-2}
DISCONNECT=${DISCONNECT:-0.1}
VOCAB=64
MODEL=${MODEL:-sim:vocab=$VOCAB,mode=sleep,call_us=2000,row_us=5}
SEED=${SEED:-$(( (RANDOM << 15) | RANDOM ))}
mkdir -p "$OUT"
echo "serve_load: seed=$SEED, $REQUESTS requests, $CONCURRENCY connections, $WORKERS workers, batch $BATCH, model $MODEL"
status=0

# run NAME KILL_RATE DISCONNECT: one server, one loadgen run, one check.
run() {
	local name=$1 kills=$2 disc=$3 port pid coord
	local log="$OUT/$name.server.log"

	"$BIN/fault_inject" --seed "$SEED" --kill-rate "$kills" --stop-rate 0 -- \
		"$BIN/dynbatch" serve --listen 127.0.0.1:0 --workers "$WORKERS" \
		--batch "$BATCH" --queue 4096 --model "$MODEL" 2> "$log" &
	pid=$!
	for _ in $(seq 200); do
		port=$(grep -o 'listening on http://[^ ]*' "$log" 2>/dev/null | sed 's/.*://')
		[ -n "$port" ] && break
		sleep 0.05
	done
	coord=$(pgrep -P "$pid" -x dynbatch | head -1)
	"$BIN/loadgen" --port "$port" --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
		--vocab $VOCAB --seed "$SEED" --stream-frac 0.5 --disconnect-frac "$disc" \
		--max-tokens 64 --requests-out "$OUT/$name.requests.jsonl" \
		--results-out "$OUT/$name.results.jsonl" --quiet > "$OUT/$name.load.txt"
	local lrc=$?
	curl -s "http://127.0.0.1:$port/metrics" > "$OUT/$name.metrics.txt" 2>/dev/null
	kill -TERM "$coord" 2>/dev/null
	wait "$pid"
	local src=$?
	get() { awk -F= -v k="$1" '$1 == k { print $2 }' "$OUT/$name.load.txt"; }
	local restarts
	restarts=$(awk '$1 == "dynbatch_worker_restarts_total" { print $2 }' "$OUT/$name.metrics.txt")
	printf '%-10s %6s req/s %7s tokens/s  ttft p50 %6s ms p99 %7s ms  tpot p50 %5s ms p99 %6s ms  (%s completed, %s walked away, %s failed, %s worker restarts)\n' \
		"$name" "$(get req_per_s)" "$(get tokens_per_s)" "$(get ttft_p50_ms)" \
		"$(get ttft_p99_ms)" "$(get tpot_p50_ms)" "$(get tpot_p99_ms)" \
		"$(get completed)" "$(get disconnected)" "$(get failed)" "${restarts:-?}"
	if [ "$lrc" != 0 ]; then
		echo "serve_load: $name: loadgen found protocol errors (see $OUT/$name.load.txt)"
		status=1
	fi
	if [ "$src" != 0 ]; then
		echo "serve_load: $name: the server exited $src (see $log)"
		status=1
	fi
	if ! "$BIN/refdecode" --model "sim:vocab=$VOCAB" --input "$OUT/$name.requests.jsonl" \
		--check "$OUT/$name.results.jsonl" > "$OUT/$name.check.txt" 2>&1; then
		echo "serve_load: $name: answers differ from the reference (see $OUT/$name.check.txt)"
		status=1
	else
		echo "           $(tail -n 1 "$OUT/$name.check.txt")"
	fi
}

run clean 0 0
run faults "$KILL_RATE" "$DISCONNECT"
exit $status
