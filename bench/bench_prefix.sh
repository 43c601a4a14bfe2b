#!/bin/bash
# bench_prefix.sh - the paged KV cache and its prefix cache (docs/DESIGN.md
# 11) on the built-in llama model (make bench-prefix).
#
#   bench/bench_prefix.sh [OUTDIR]          (default build/bench/prefix)
#
# Knobs (environment): BIN (bin), REPS (2: rounds of cache on, cache off
# in the shared-prefix cases), REPS_UNIQUE (3: rounds of the no-sharing
# case), N15 (240: requests of the 15M shared-prefix case), N110 (48: of
# the 110M one), SHAPES ("stories15M stories110M": the shared-prefix
# case's shapes), OLD_BIN (a folder with the dynbatch and dynbatch-worker
# of an older build, e.g. 7cfea4b, the commit before the paged cache:
# the no-sharing case runs it too; none by default).
#
# Every case measures the cache on and off (or the two pools) in
# interleaved rounds (on, off, on, off, ...) so that the machine's drift
# hits both, and keeps the best of each.  All of it in one run:
#  0. bin/machine_limits: one core's FMA peak and read bandwidth.
#  1. Shared prefixes: 8 system prompts of 400 tokens, each request one of
#     them + a 20-token suffix, 16 tokens greedy
#     (tests/e2e/gen_prefix.py --kinds system --fixed), to `dynbatch
#     serve` (batch 64) from bin/loadgen --input (64 connections, every
#     request streamed: TTFT is the client's time to the first token,
#     as in bench_llama.sh; tokens/s and requests/s over the whole load).
#     The 15M shape with 1 and 2 workers; the 110M shape with 2 (batch
#     16, fewer requests).  The llama2.c shapes, but with seq_len 512
#     (stories15M's own 256 cannot hold a 400-token prompt).  The prefix
#     hits (the server's --stats kv object) against the workload's ideal:
#     for each request the longest prefix, in whole blocks and at most
#     prompt_len - 1, of an earlier request's prompt (computed here).
#  2. n = 8 choices of one 400-token prompt (temperature 0.8, seeded, 32
#     tokens): peak_used_blocks against the prompt's blocks + 8 tails,
#     where a tail is the blocks from the one holding the last prompt
#     position (recomputed per choice, so copied) to the end, + 1 block of
#     run-ahead slack per choice.
#  3. Preemption: 64 requests that grow to 8 blocks each (16-token
#     prompts, 112 tokens) at batch 64, 1 worker, with a pool of a
#     quarter of the working set (64 x 8 x block bytes, block bytes = 16 x
#     layers x 2 x kv_dim x 4) against the default pool.
#  4. No sharing: unique prompts (bin/gen_workload), 2 workers, batch 64:
#     cache on against off (and against OLD_BIN when given).
# Outputs of on and off (and of the two pools) are compared token for
# token; a difference fails the run, since it is a bug of the engine.
# Tables in OUTDIR/prefix.md.  A benchmark does not judge: it prints what
# it measured against the issue's targets, and fails only when something
# could not run or the outputs differ.
set -euo pipefail
BIN=${BIN:-bin}
OUT=${1:-build/bench/prefix}
REPS=${REPS:-2}
REPS_UNIQUE=${REPS_UNIQUE:-3}
N15=${N15:-240}
N110=${N110:-48}
SHAPES=${SHAPES:-"stories15M stories110M"}
OLD_BIN=${OLD_BIN:-}
[ -z "$OLD_BIN" ] || OLD_BIN=$(realpath "$OLD_BIN")
GEN=tests/e2e/gen_prefix.py
TABLE="$OUT/prefix.md"
BT=16

die() { echo "bench_prefix: $*" >&2; exit 1; }
note() { echo "bench_prefix: $*" >&2; }
row() { printf '%s\n' "$*" >> "$TABLE"; printf '%s\n' "$*"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
# cmd ARGS...: print a command as the table shows it
cmd() { row "    \$ $*"; }
# json FILE KEY: a number from a --stats file (the first KEY).
json() {
	local v
	v=$(grep -o "\"$2\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2) || true
	[ -n "$v" ] || die "$1: no '$2' in the stats"
	echo "$v"
}
# kv FILE KEY: a key=value figure of loadgen's output.
kv() { awk -F= -v k="$2" '$1 == k { print $2 }' "$1"; }
best() { tr ' ' '\n' | grep . | sort -g | tail -1; }
least() { tr ' ' '\n' | grep . | sort -g | head -1; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
yesno() { calc %s "($1) ? \"met\" : \"MISSED\""; }

command -v curl >/dev/null || die "curl is missing (make test-deps)"
command -v python3 >/dev/null || die "python3 is missing"
for tool in dynbatch dynbatch-worker machine_limits loadgen make_checkpoint gen_workload; do
	[ -x "$BIN/$tool" ] || die "$BIN/$tool is missing: build first (make)"
done
HELP=$("$BIN/dynbatch" --help 2>&1 || true)
grep -q -- "--prefix-cache" <<< "$HELP" || die "this dynbatch has no --prefix-cache"
grep -q -- "--input" <<< "$("$BIN/loadgen" --help 2>&1 || true)" ||
	die "$BIN/loadgen has no --input: rebuild it"
mkdir -p "$OUT"
: > "$TABLE"
export DYNBATCH_WORKER="$PWD/$BIN/dynbatch-worker"
[[ $BIN = /* ]] && DYNBATCH_WORKER="$BIN/dynbatch-worker"

# --- 0. the machine ------------------------------------------------------
limits=$("$BIN/machine_limits") || die "machine_limits failed"
FMA=$(printf '%s\n' "$limits" | head -1 | sed -n 's/.*fma_gflops_per_core=\([0-9.]*\).*/\1/p')
BW=$(printf '%s\n' "$limits" | head -1 | sed -n 's/.*read_gbs=\([0-9.]*\).*/\1/p')
[ -n "$FMA" ] && [ -n "$BW" ] || die "cannot parse machine_limits output: $limits"
row "## The paged KV cache on this machine ($(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(date -u +%F))"
row ""
cmd "$BIN/machine_limits"
row "- $(printf '%s\n' "$limits" | tail -1)"
row "- every figure below is the best of $REPS interleaved rounds (cache on, cache off, on, off, ...) unless it says otherwise"
row ""

# checkpoint NAME SHAPE: a random-weight checkpoint of SHAPE with seq_len
# 512, made once in OUT; prints its path.
checkpoint() {
	local f="$OUT/$1.bin"
	if [ ! -s "$f" ]; then
		note "making $f (once; kept for later runs)"
		"$BIN/make_checkpoint" --out "$f.tmp" --shape "$2" --seq-len 512 \
			--format legacy --seed 1 >&2 || die "make_checkpoint --shape $2 failed"
		mv "$f.tmp" "$f"
	fi
	cat "$f" > /dev/null	# into the page cache: no run pays for the read
	echo "$f"
}

# start_server LOG ARGS...: dynbatch serve on a free port; sets SERVER_PID
# and PORT, returns once /health answers 200 (the model is loaded).
start_server() {
	local log=$1 i; shift
	"$BIN/dynbatch" serve --listen 127.0.0.1:0 "$@" 2> "$log" &
	SERVER_PID=$!
	PORT=""
	for i in $(seq 600); do
		PORT=$(grep -o 'listening on http://[^ ]*' "$log" 2>/dev/null | sed 's/.*://') || true
		[ -n "$PORT" ] && break
		kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited (see $log)"
		sleep 0.1
	done
	[ -n "$PORT" ] || { stop_server; die "the server did not listen within 60 s (see $log)"; }
	for i in $(seq 1200); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
		kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited before it was healthy (see $log)"
		sleep 0.1
	done
	stop_server
	die "the server was not healthy within 120 s (see $log)"
}
stop_server() {
	kill -TERM "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
}

# serve_load NAME INPUT CONC SERVER_ARGS...: INPUT to a fresh server from
# loadgen with CONC connections, every request streamed; loadgen's figures
# in OUT/NAME.lg, its results in OUT/NAME.res, the server's stats in
# OUT/NAME.json.
serve_load() {
	local name=$1 input=$2 conc=$3; shift 3
	start_server "$OUT/$name.log" --stats "$OUT/$name.json" --step-timeout 600000 "$@"
	"$BIN/loadgen" --port "$PORT" --input "$input" --requests 1000000 \
		--concurrency "$conc" --stream-frac 1 --stop-frac 0 --seed 1 \
		--timeout-s 600 --quiet --results-out "$OUT/$name.res" > "$OUT/$name.lg" ||
		{ stop_server; die "$name: loadgen failed (see $OUT/$name.lg)"; }
	stop_server
	[ -s "$OUT/$name.json" ] || die "$name: the server wrote no stats (see $OUT/$name.log)"
	[ "$(kv "$OUT/$name.lg" completed)" = "$(wc -l < "$input")" ] ||
		die "$name: $(kv "$OUT/$name.lg" completed) of $(wc -l < "$input") requests completed (see $OUT/$name.lg)"
}

# run NAME ARGS...: one dynbatch run, stats in OUT/NAME.json, output in
# OUT/NAME.out (sorted, for comparing).  BINDIR overrides BIN.
run() {
	local name=$1 bin=${BINDIR:-$BIN}; shift
	"$bin/dynbatch" run --no-progress --output "$OUT/$name.out.raw" \
		--stats "$OUT/$name.json" "$@" 2> "$OUT/$name.log" ||
		die "run $name failed (see $OUT/$name.log): dynbatch run $*"
	sort "$OUT/$name.out.raw" > "$OUT/$name.out"
}

# same A B WHAT: the two outputs give the same tokens and finish reasons
# per id (choices included), else the engine has a bug
same() {
	python3 - "$1" "$2" <<'PY' || die "$3: the outputs differ ($1 and $2): a bug of the engine"
import json, sys
def load(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        keep = {k: r[k] for k in ("tokens", "finish_reason", "choices", "error") if k in r}
        out[(r["id"], r.get("index", 0))] = keep
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a == b and a else 1)
PY
}

# ideal INPUT W: "prompt_tokens ideal ideal_W": the positions each
# request could take from an earlier request's prompt (whole blocks, at
# most prompt_len - 1), summed; the last when W shards, each with its own
# cache, compute each block once (gen_prefix.py --ideal).
ideal() {
	python3 "$GEN" --ideal "$1" --shards "$2" --block-tokens "$BT"
}

# --- 1. shared prefixes ----------------------------------------------------
row "### 1. Shared prefixes: 8 system prompts of 400 tokens + 20-token suffixes, 16 tokens greedy, \`dynbatch serve\` + \`loadgen --input\`"
row ""
row "The llama2.c shapes with seq_len 512 (make_checkpoint --seq-len 512: stories15M's own 256 cannot hold a 400-token prompt), random weights; --max-context 512. TTFT: the client's, request sent to first streamed token."
row ""
declare -A RES=() B=()
SUMMARY=""
for shape in $SHAPES; do
	case $shape in
	stories15M) ckpt=$(checkpoint s15-512 stories15M); n=$N15; batch=64; workers="1 2" ;;
	stories110M) ckpt=$(checkpoint s110-512 stories110M); n=$N110; batch=16; workers="2" ;;
	*) die "unknown shape $shape" ;;
	esac
	wl="$OUT/shared-$shape.jsonl"
	gencmd="python3 $GEN --n $n --seed 1 --vocab 32000 --kinds system --systems 8 --system-len 400 --suffix-len 20 --max-tokens 16 --fixed --ids s"
	$gencmd > "$wl"
	read -r ptoks ideal_all _ <<< "$(ideal "$wl" 1)"
	row "#### $shape, $n requests, batch $batch"
	row ""
	cmd "$gencmd > $wl"
	for W in $workers; do
		cmd "$BIN/dynbatch serve --listen 127.0.0.1:0 --model llama:$ckpt --workers $W --batch $batch --max-context 512 --prefix-cache on|off --stats S.json --step-timeout 600000"
	done
	cmd "$BIN/loadgen --port PORT --input $wl --concurrency $batch --stream-frac 1 --stop-frac 0 --seed 1"
	row ""
	row "| workers | cache | tokens/s | requests/s | TTFT p50 ms | TTFT p99 ms | prefix_hit_tokens | of ideal $ideal_all | of the ideal of W shards | peak blocks | evictions |"
	row "| ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for W in $workers; do
		read -r _ _ ideal_w <<< "$(ideal "$wl" "$W")"
		for pc in on off; do RES[$shape-$W-$pc]=""; done
		for r in $(seq "$REPS"); do
			for pc in on off; do
				name="shared-$shape-w$W-$pc-$r"
				serve_load "$name" "$wl" "$batch" --model "llama:$ckpt" --workers "$W" \
					--batch "$batch" --max-context 512 --prefix-cache "$pc"
				sort "$OUT/$name.res" > "$OUT/$name.res.sorted"
				RES[$shape-$W-$pc]="${RES[$shape-$W-$pc]} $name"
			done
			same "$OUT/shared-$shape-w$W-on-$r.res.sorted" "$OUT/shared-$shape-w$W-off-$r.res.sorted" \
				"$shape workers $W round $r, cache on against off"
		done
		for pc in on off; do
			tps="" rps="" t50="" t99="" hits=""
			for name in ${RES[$shape-$W-$pc]}; do
				tps="$tps $(kv "$OUT/$name.lg" tokens_per_s)"
				rps="$rps $(kv "$OUT/$name.lg" req_per_s)"
				t50="$t50 $(kv "$OUT/$name.lg" ttft_p50_ms)"
				t99="$t99 $(kv "$OUT/$name.lg" ttft_p99_ms)"
				hits="$hits $(json "$OUT/$name.json" prefix_hit_tokens)"
			done
			last=${RES[$shape-$W-$pc]##* }
			h=$(least <<< "$hits")
			B[T-$pc]=$(best <<< "$tps")
			B[P50-$pc]=$(least <<< "$t50")
			B[P99-$pc]=$(least <<< "$t99")
			B[H-$pc]=$h
			row "| $W | $pc | $(best <<< "$tps") | $(best <<< "$rps") | $(least <<< "$t50") | $(least <<< "$t99") | $h (least of$hits) | $(calc %.3f "$h / $ideal_all") | $(calc %.3f "$h / $ideal_w") of $ideal_w | $(json "$OUT/$last.json" peak_used_blocks) | $(json "$OUT/$last.json" evictions) |"
		done
		thr=$(calc %.2f "${B[T-on]} / ${B[T-off]}")
		ttft=$(calc %.2f "(${B[P50-on]} > 0) ? ${B[P50-off]} / ${B[P50-on]} : 0")
		ttft99=$(calc %.2f "(${B[P99-on]} > 0) ? ${B[P99-off]} / ${B[P99-on]} : 0")
		hr=$(calc %.3f "${B[H-on]} / $ideal_all")
		SUMMARY="$SUMMARY$shape workers $W: throughput on/off $thr (target >= 4: $(yesno "$thr >= 4")), TTFT p50 off/on $ttft (target >= 10: $(yesno "$ttft >= 10")), p99 off/on $ttft99, hits / ideal $hr (target >= 0.95: $(yesno "$hr >= 0.95")), hits / the ideal of $W shards $(calc %.3f "${B[H-on]} / $ideal_w")
"
		RES[ratio-$shape-$W]="$thr $ttft $hr"
	done
	row ""
	row "- prompt tokens $ptoks; ideal hits $ideal_all (one cache: each system prompt computed once, requests that arrive together held while it is); the ideal of W shards: each shard, with a cache of its own, computes each system prompt once"
	row ""
done
row "Ratios (best of each):"
row ""
while IFS= read -r l; do [ -n "$l" ] && row "- $l"; done <<< "$SUMMARY"
row ""

# --- 2. n = 8 --------------------------------------------------------------
ckpt=$(checkpoint s15-512 stories15M)
row "### 2. n = 8 choices of one 400-token prompt (stories15M shape, seq_len 512, temperature 0.8, seeded, 32 tokens)"
row ""
wl="$OUT/n8.jsonl"
gencmd="python3 $GEN --n 1 --seed 2 --vocab 32000 --kinds choices --systems 1 --system-len 380 --suffix-len 20 --fixed --n-choices 8 --temperature 0.8 --max-tokens 32 --ids n"
$gencmd > "$wl"
P=400 M=32
cmd "$gencmd > $wl"
cmd "$BIN/dynbatch run --model llama:$ckpt --workers 1 --batch 8 --prefix-cache on|off --input $wl --stats S.json"
for pc in on off; do
	run "n8-$pc" --model "llama:$ckpt" --workers 1 --batch 8 --prefix-cache "$pc" --input "$wl"
done
same "$OUT/n8-on.out" "$OUT/n8-off.out" "n = 8, cache on against off"
pblocks=$(( (P + BT - 1) / BT ))
tail=$(( (P + M + BT - 1) / BT - (P - 1) / BT ))
bound=$(( pblocks + 8 * (tail + 1) ))
row ""
row "| cache | peak_used_blocks | prompt blocks + 8 x (tail + 1 slack) | holds | fork_tokens | cow_copies | prefix_hit_tokens | tokens/s |"
row "| :--- | ---: | ---: | :--- | ---: | ---: | ---: | ---: |"
for pc in on off; do
	s="$OUT/n8-$pc.json"
	pk=$(json "$s" peak_used_blocks)
	row "| $pc | $pk | $pblocks + 8 x ($tail + 1) = $bound | $(calc %s "($pk <= $bound) ? \"yes\" : \"NO\"") | $(json "$s" fork_tokens) | $(json "$s" cow_copies) | $(json "$s" prefix_hit_tokens) | $(json "$s" tokens_per_s) |"
done
row ""
row "- a tail: the blocks from the one holding the last prompt position (each choice recomputes it, so a choice > 0 copies that block) to position $((P + M - 1)); unshared, 8 choices would take 8 x $(( (P + M + BT - 1) / BT )) = $((8 * ((P + M + BT - 1) / BT))) blocks"
row ""

# --- 3. preemption -----------------------------------------------------------
row "### 3. Preemption: a pool of a quarter of the working set (stories15M shape, seq_len 512, 1 worker, batch 64)"
row ""
read -r dim _ layers heads kvh _ _ <<< "$(od -An -t d4 -N 28 -v "$ckpt" | tr -s ' \n' ' ')"
kvd=$((dim / heads * kvh))
block_bytes=$((BT * layers * 2 * kvd * 4))
per_req=$(( (16 + 112 + BT - 1) / BT ))
ws=$((64 * per_req * block_bytes))
quarter_k=$((ws / 4 / 1024))
wl="$OUT/preempt.jsonl"
gencmd="python3 $GEN --n 64 --seed 4 --vocab 32000 --kinds unique --system-len 0 --suffix-len 16 --max-tokens 112 --fixed --ids q"
$gencmd > "$wl"
cmd "$gencmd > $wl"
cmd "$BIN/dynbatch run --model llama:$ckpt --workers 1 --batch 64 --input $wl [--kv-memory ${quarter_k}K] --stats S.json"
row ""
row "- working set 64 requests x $per_req blocks x $block_bytes bytes (16 x $layers layers x 2 x kv_dim $kvd x 4) = $ws bytes; a quarter: ${quarter_k}K"
small="" full=""
for r in $(seq "$REPS"); do
	run "preempt-quarter-$r" --model "llama:$ckpt" --workers 1 --batch 64 --input "$wl" --kv-memory "${quarter_k}K"
	run "preempt-full-$r" --model "llama:$ckpt" --workers 1 --batch 64 --input "$wl"
	same "$OUT/preempt-quarter-$r.out" "$OUT/preempt-full-$r.out" "preemption round $r, a quarter pool against the full one"
	small="$small $(json "$OUT/preempt-quarter-$r.json" tokens_per_s)"
	full="$full $(json "$OUT/preempt-full-$r.json" tokens_per_s)"
done
row ""
row "| pool | blocks | tokens/s (each round) | best | preemptions | evictions | peak blocks |"
row "| :--- | ---: | :--- | ---: | ---: | ---: | ---: |"
s="$OUT/preempt-quarter-$REPS.json"
row "| ${quarter_k}K | $(json "$s" blocks) |$small | $(best <<< "$small") | $(json "$s" preemptions) | $(json "$s" evictions) | $(json "$s" peak_used_blocks) |"
s="$OUT/preempt-full-$REPS.json"
row "| default | $(json "$s" blocks) |$full | $(best <<< "$full") | $(json "$s" preemptions) | $(json "$s" evictions) | $(json "$s" peak_used_blocks) |"
pr=$(calc %.3f "$(best <<< "$small") / $(best <<< "$full")")
row ""
row "- quarter pool / default pool: $pr (target >= 0.5: $(yesno "$pr >= 0.5")); outputs equal"
row ""

# --- 4. no sharing -------------------------------------------------------------
row "### 4. No sharing: unique prompts (stories15M shape, seq_len 512, 2 workers, batch 64; median and best of $REPS_UNIQUE rounds)"
row ""
wl="$OUT/unique.jsonl"
gencmd="$BIN/gen_workload --n 384 --seed 3 --vocab 32000 --max-prompt 256 --max-tokens 48 --stop-frac 0 --max-context 512"
$gencmd > "$wl"
cmd "$gencmd > $wl"
cmd "$BIN/dynbatch run --model llama:$ckpt --workers 2 --batch 64 --input $wl --prefix-cache on|off --stats S.json"
[ -n "$OLD_BIN" ] && cmd "DYNBATCH_WORKER=$OLD_BIN/dynbatch-worker $OLD_BIN/dynbatch run --model llama:$ckpt --workers 2 --batch 64 --input $wl --stats S.json"
on="" off="" old=""
# one run first, thrown away: the first run after a pause was the slowest
run "unique-warm" --model "llama:$ckpt" --workers 2 --batch 64 --input "$wl" --prefix-cache on
for r in $(seq "$REPS_UNIQUE"); do
	run "unique-on-$r" --model "llama:$ckpt" --workers 2 --batch 64 --input "$wl" --prefix-cache on
	run "unique-off-$r" --model "llama:$ckpt" --workers 2 --batch 64 --input "$wl" --prefix-cache off
	same "$OUT/unique-on-$r.out" "$OUT/unique-off-$r.out" "unique prompts round $r, cache on against off"
	on="$on $(json "$OUT/unique-on-$r.json" tokens_per_s)"
	off="$off $(json "$OUT/unique-off-$r.json" tokens_per_s)"
	if [ -n "$OLD_BIN" ]; then
		DYNBATCH_WORKER="$OLD_BIN/dynbatch-worker" BINDIR="$OLD_BIN" \
			run "unique-old-$r" --model "llama:$ckpt" --workers 2 --batch 64 --input "$wl"
		same "$OUT/unique-on-$r.out" "$OUT/unique-old-$r.out" "unique prompts round $r, today against OLD_BIN"
		old="$old $(json "$OUT/unique-old-$r.json" tokens_per_s)"
	fi
done
row ""
row "| binary | tokens/s (each round) | median | best | prefix_hit_tokens |"
row "| :--- | :--- | ---: | ---: | ---: |"
row "| today, cache on |$on | $(median <<< "$on") | $(best <<< "$on") | $(json "$OUT/unique-on-1.json" prefix_hit_tokens) |"
row "| today, cache off |$off | $(median <<< "$off") | $(best <<< "$off") | $(json "$OUT/unique-off-1.json" prefix_hit_tokens) |"
[ -n "$OLD_BIN" ] && row "| $OLD_BIN ($(git -C "$OLD_BIN/.." log -1 --format=%h 2>/dev/null || echo old)) |$old | $(median <<< "$old") | $(best <<< "$old") | - |"
row ""
row "- cache on / off: median $(calc %.3f "$(median <<< "$on") / $(median <<< "$off")"), best $(calc %.3f "$(best <<< "$on") / $(best <<< "$off")")"
if [ -n "$OLD_BIN" ]; then
	ro=$(calc %.3f "$(median <<< "$on") / $(median <<< "$old")")
	row "- today (cache on) / $OLD_BIN: median $ro, best $(calc %.3f "$(best <<< "$on") / $(best <<< "$old")") (target: loses <= 3%: $(yesno "$ro >= 0.97"))"
fi
row ""
echo "bench_prefix: tables in $TABLE"
