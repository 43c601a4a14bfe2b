#!/bin/bash
# bench_llama.sh - the built-in llama model against this machine's limits
# (make bench-llama; part of make bench).
#
#   bench/bench_llama.sh [OUTDIR]          (default build/bench)
#
# Knobs (environment): BIN (bin), SHAPES ("stories15M stories110M"),
# RUN_S (about 3: seconds each decode run aims at), BATCHES
# ("1 2 4 8 16 32 64"), WORKERS ("1 2"), STEP_TOKENS ("64 128 256": the
# chunked-prefill runs of stories15M) and STEP_TOKENS_LARGE ("16 32 64":
# those of the larger shape; "none" is always run), LOAD_S (8: seconds of each
# chunked-prefill run), DRY=1 (print the commands, run nothing but
# machine_limits; for checking the script where the engine has no llama).
#
# What it does:
#  1. bin/machine_limits: one core's float32 FMA peak and streaming read
#     bandwidth; per shape, bin/bench_matmul: the batched matmul alone at
#     32 and 64 rows, in one process and in one per core at once.
#  2. For each shape, a checkpoint of that shape with random weights
#     (bin/make_checkpoint --shape, legacy format) in OUTDIR, made once and
#     kept (not committed: 60 MB and 440 MB).
#  3. Decode tokens/s at each batch size with 1 and 2 workers, short
#     prompts, each as a share of its roofline bound:
#       bandwidth bound = batch x read_gbs / weight bytes per token
#         (each step streams every weight once for the whole batch);
#       compute bound   = workers x fma_gflops_per_core / (2 x parameters
#         per token) (attention's own flops are left out: small at these
#         context lengths);
#     the bound of a run is the lower of the two.  "kernel" is the flop
#     rate while the model runs (model_s of --stats, prompt and generated
#     tokens) as a share of FMA peak: the kernels alone, without the
#     engine around them.  tokens/s counts generated tokens (the 8-token
#     prompts' prefill is in the time).
#  4. Prefill: one long prompt (110M: 1000 tokens; 15M: seq_len 256 holds
#     248 + a few), max_tokens 1, three times to an idle `dynbatch serve`
#     (1 worker): TTFT is the request's time (curl), prefill tokens/s the
#     prompt over it.
#  5. Chunked prefill: `dynbatch serve` with decode streams (short prompts,
#     64 tokens, streamed) while long prompts (up to the context) arrive,
#     (bin/loadgen for the streams, two curl clients for the long
#     prompts): decode TPOT p50/p99 and the long prompts' TTFT, without --step-tokens and with each STEP_TOKENS value (when
#     the engine has --step-tokens).
# It prints markdown tables (also in OUTDIR/llama.md) and the ratio
# "110M batch 64 2 workers / batch 1 1 worker" (target >= 12).  A
# benchmark does not judge: it prints what it measured, and fails only
# when something could not run.
set -euo pipefail
BIN=${BIN:-bin}
OUT=${1:-build/bench}
SHAPES=${SHAPES:-"stories15M stories110M"}
RUN_S=${RUN_S:-3}
BATCHES=${BATCHES:-"1 2 4 8 16 32 64"}
WORKERS=${WORKERS:-"1 2"}
STEP_TOKENS=${STEP_TOKENS:-"64 128 256"}
LOAD_S=${LOAD_S:-8}
DRY=${DRY:-0}
TABLE="$OUT/llama.md"

die() { echo "bench_llama: $*" >&2; exit 1; }
note() { echo "bench_llama: $*" >&2; }
row() { printf '%s\n' "$*" >> "$TABLE"; printf '%s\n' "$*"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
# json FILE KEY: a number from a --stats file.
json() {
	local v
	v=$(grep -o "\"$2\":[0-9.e+-]*" "$1" | head -1 | cut -d: -f2) || true
	[ -n "$v" ] || die "$1: no '$2' in the stats"
	echo "$v"
}

command -v curl >/dev/null || die "curl is missing (make test-deps)"
for tool in dynbatch dynbatch-worker machine_limits bench_matmul loadgen; do
	[ -x "$BIN/$tool" ] || die "$BIN/$tool is missing: build first (make)"
done
# read whole, not piped into grep -q: with pipefail, grep leaving early
# made dynbatch die of SIGPIPE, and the check fail now and then
HELP=$("$BIN/dynbatch" --help 2>&1 || true)
if [ "$DRY" != 1 ]; then
	[ -x "$BIN/make_checkpoint" ] || die "$BIN/make_checkpoint is missing: build first (make)"
	grep -q "llama" <<< "$HELP" ||
		die "$BIN/dynbatch --help does not mention the llama model: this engine has none"
fi
HAVE_STEP_TOKENS=0
grep -q -- "--step-tokens" <<< "$HELP" && HAVE_STEP_TOKENS=1
mkdir -p "$OUT"
: > "$TABLE"

# --- 1. the machine ------------------------------------------------------
limits=$("$BIN/machine_limits") || die "machine_limits failed"
FMA=$(printf '%s\n' "$limits" | head -1 | sed -n 's/.*fma_gflops_per_core=\([0-9.]*\).*/\1/p')
BW=$(printf '%s\n' "$limits" | head -1 | sed -n 's/.*read_gbs=\([0-9.]*\).*/\1/p')
[ -n "$FMA" ] && [ -n "$BW" ] || die "cannot parse machine_limits output: $limits"
row "## llama model against this machine ($(nproc) CPUs)"
row ""
row "- $(printf '%s\n' "$limits" | tail -1)"
row ""

# run NAME ARGS...: one dynbatch run, stats in $OUT/NAME.json.  DRY: print
# the command and write stats of zeros.
run() {
	local name=$1; shift
	if [ "$DRY" = 1 ]; then
		echo "+ $BIN/dynbatch run --no-progress --output $OUT/$name.out.jsonl --stats $OUT/$name.json $*" >&2
		echo '{"tokens":0,"wall_s":1,"tokens_per_s":0,"model_s":1,"latency_p50_ms":0,"latency_p99_ms":0}' > "$OUT/$name.json"
		return 0
	fi
	"$BIN/dynbatch" run --no-progress --output "$OUT/$name.out.jsonl" \
		--stats "$OUT/$name.json" "$@" 2> "$OUT/$name.log" ||
		die "run $name failed (see $OUT/$name.log): dynbatch run $*"
}

# workload N PROMPT MAX_TOKENS VOCAB SEED: N requests, PROMPT random tokens
# each.
workload() {
	awk -v n="$1" -v p="$2" -v m="$3" -v v="$4" -v seed="$5" 'BEGIN {
		srand(seed);
		for (i = 0; i < n; i++) {
			s = "";
			for (j = 0; j < p; j++)
				s = s (j ? "," : "") int(rand() * v);
			print "{\"id\":\"l" i "\",\"prompt\":[" s "],\"max_tokens\":" m "}";
		}
	}'
}

# checkpoint SHAPE: make it once; prints its path.
checkpoint() {
	local f="$OUT/$1.bin"
	if [ ! -s "$f" ]; then
		if [ "$DRY" = 1 ]; then
			echo "+ $BIN/make_checkpoint --out $f --shape $1 --format legacy --seed 1" >&2
		else
			note "making $f (once; kept for later runs)"
			"$BIN/make_checkpoint" --out "$f.tmp" --shape "$1" --format legacy --seed 1 >&2 ||
				die "make_checkpoint --shape $1 failed"
			mv "$f.tmp" "$f"
		fi
	fi
	echo "$f"
}

# header FILE: "dim hidden layers heads kv_heads vocab seq_len" of a
# legacy checkpoint (vocab made positive).
header() {
	od -An -t d4 -N 28 -v "$1" | tr -s ' \n' ' ' |
		awk '{ v = $6 < 0 ? -$6 : $6; print $1, $2, $3, $4, $5, v, $7 }'
}

# shape_dims SHAPE: the header, from the file or (DRY, no file) known.
shape_dims() {
	if [ -s "$OUT/$1.bin" ]; then
		header "$OUT/$1.bin"
	else
		case $1 in
		stories15M) echo "288 768 6 6 6 32000 256" ;;
		stories110M) echo "768 2048 12 12 12 32000 1024" ;;
		*) die "unknown shape $1" ;;
		esac
	fi
}

# start_server LOG ARGS...: dynbatch serve on a free port; sets SERVER_PID
# and PORT.
start_server() {
	local log=$1 i; shift
	"$BIN/dynbatch" serve --listen 127.0.0.1:0 "$@" 2> "$log" &
	SERVER_PID=$!
	PORT=""
	for i in $(seq 600); do
		PORT=$(grep -o 'listening on http://[^ ]*' "$log" 2>/dev/null | sed 's/.*://') || true
		[ -n "$PORT" ] && return 0
		kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited (see $log)"
		sleep 0.1
	done
	kill -TERM "$SERVER_PID" 2>/dev/null || true
	die "the server did not start listening within 60 s (see $log)"
}

# wait_healthy: until /health says a worker is ready (the checkpoint is
# loaded), so no figure includes the start.
wait_healthy() {
	local i
	for i in $(seq 1200); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
		kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited before it was healthy"
		sleep 0.1
	done
	stop_server
	die "the server was not healthy within 120 s"
}

stop_server() {
	kill -TERM "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
}

# long_client FILE [COUNT]: for LOAD_S seconds (or COUNT requests), POST
# $OUT/long.json (one long prompt, max_tokens 1) to the server one after
# another; appends each request's time in ms to FILE.
long_client() {
	local end=$((SECONDS + LOAD_S)) left=${2:-0} t
	while [ "$SECONDS" -lt "$end" ] || [ "$left" -gt 0 ]; do
		left=$((left - 1))
		t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H 'Content-Type: application/json' \
			--data-binary @"$OUT/long.json" "http://127.0.0.1:$PORT/v1/completions") || break
		[ "${t%% *}" = 200 ] || { note "long prompt: HTTP ${t%% *}"; break; }
		calc "%.3f\n" "${t#* } * 1000" >> "$1"
	done
}

# pct FILE P: the P-th percentile of the numbers in FILE, "-" when none.
pct() {
	sort -g "$1" | awk -v p="$2" '{ v[NR] = $1 } END {
		if (!NR) { print "-"; exit }
		i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR
		print v[i] }'
}

# kv FILE KEY: a key=value figure of loadgen's output.
kv() { awk -F= -v k="$2" '$1 == k { print $2 }' "$1"; }

ratio_110=""
for shape in $SHAPES; do
	ckpt=$(checkpoint "$shape")
	# into the page cache first: the first run would otherwise pay for
	# reading the file (438 MB for 110M) in its tokens/s
	[ "$DRY" = 1 ] || cat "$ckpt" > /dev/null
	read -r dim hid layers heads kvh vocab seq <<< "$(shape_dims "$shape")"
	kvd=$((dim / heads * kvh))
	# Parameters a token goes through (the classifier included, the
	# embedding lookup not), and the bytes a step streams (+ the norms).
	params=$((layers * (2 * dim * dim + 2 * dim * kvd + 3 * dim * hid) + vocab * dim))
	# A token that only feeds the cache (a prompt token before the last)
	# skips the classifier.
	body=$((params - vocab * dim))
	bytes=$((4 * (params + layers * 2 * dim + dim)))
	bw_bound=$(calc %.3f "$BW * 1e9 / $bytes")
	fma_bound=$(calc %.3f "$FMA * 1e9 / (2 * $params)")
	prefill_bound=$(calc %.3f "$FMA * 1e9 / (2 * $body)")
	model="llama:$ckpt"
	row "### $shape (dim $dim, hidden $hid, $layers layers, $heads heads, $kvh kv heads, vocab $vocab, seq_len $seq)"
	row ""
	row "- $(calc %.1f "$params / 1e6") M parameters per token, $(calc %.1f "$bytes / 1e6") MB of weights streamed per step"
	row "- bounds: $(calc %.1f "$bw_bound") tokens/s per batch row from bandwidth, $(calc %.1f "$fma_bound") tokens/s per core from FMA peak"
	# The batched matmul alone (the issue's target: >= 50% of the 2-core
	# FMA peak): one process, then one per core at once.
	if [ "$DRY" != 1 ]; then
		for R in 32 64; do
			mm="--dim $dim --hidden $hid --vocab $vocab --rows $R"
			one=$("$BIN/bench_matmul" $mm | sed -n 's/.*matmul_gflops=\([0-9.]*\).*/\1/p')
			"$BIN/bench_matmul" $mm > "$OUT/mm-a.txt" &
			"$BIN/bench_matmul" $mm > "$OUT/mm-b.txt"
			wait
			two=$(cat "$OUT/mm-a.txt" "$OUT/mm-b.txt" |
			      sed -n 's/.*matmul_gflops=\([0-9.]*\).*/\1/p' | awk '{ s += $1 } END { print s }')
			row "- batched matmul alone, $R rows (bin/bench_matmul): one core $one GFLOP/s ($(calc %.3f "$one / $FMA") of its peak); two processes at once $two GFLOP/s ($(calc %.3f "$two / (2 * $FMA)") of the 2-core peak)"
		done
	fi
	row ""
	row "| workers | batch | tokens/s | bound | bound by | share of bound | kernel share of FMA peak |"
	row "| ---: | ---: | ---: | ---: | :--- | ---: | ---: |"
	# One-token prompts, so that the runs measure decode (a prompt token
	# costs a forward pass but is not counted as a generated one); fewer
	# tokens per request for 110M.
	prompt=1
	max_tokens=$([ "$dim" -ge 512 ] && echo 48 || echo 96)
	[ $((prompt + max_tokens)) -le "$seq" ] || die "$shape: seq_len $seq is too short"
	declare -A tps=()
	for W in $WORKERS; do : > "$OUT/llama-$shape-w$W.dat"; done
	for W in $WORKERS; do
		for B in $BATCHES; do
			[ "$B" -ge "$W" ] || continue
			bound=$(calc %.3f "($B * $bw_bound < $W * $fma_bound) ? $B * $bw_bound : $W * $fma_bound")
			by=$(calc %s "($B * $bw_bound < $W * $fma_bound) ? \"bandwidth\" : \"FMA\"")
			# Enough requests for about RUN_S seconds at half the
			# bound, and at least one per slot.
			n=$(calc %.0f "$bound * 0.5 * $RUN_S / $max_tokens + 0.5")
			[ "$n" -ge "$B" ] || n=$B
			name="$shape-w$W-b$B"
			workload "$n" "$prompt" "$max_tokens" "$vocab" "$B" > "$OUT/$name.jsonl"
			run "$name" --model "$model" --workers "$W" --batch "$B" --input "$OUT/$name.jsonl"
			t=$(json "$OUT/$name.json" tokens_per_s)
			tokens=$(json "$OUT/$name.json" tokens)
			model_s=$(json "$OUT/$name.json" model_s)
			tps[$W-$B]=$t
			echo "$B $t $(calc %.3f "$t / $bound")" >> "$OUT/llama-$shape-w$W.dat"
			# The forward passes of the run: every generated token
			# went through the classifier; the tokens fed to the
			# model are the prompts and all generated tokens but
			# each request's last.
			kernel=$(calc %.3f "($model_s > 0) ? 2 * ($tokens * $params + ($n * $prompt - $n) * $body) / ($model_s * $FMA * 1e9) : 0")
			row "| $W | $B | $(calc %.1f "$t") | $(calc %.1f "$bound") | $by | $(calc %.3f "$t / $bound") | $kernel |"
		done
	done
	row ""
	if [ -n "${tps[1-1]:-}" ] && [ -n "${tps[2-64]:-}" ]; then
		r=$(calc %.2f "(${tps[1-1]} > 0) ? ${tps[2-64]} / ${tps[1-1]} : 0")
		row "- batch 64 with 2 workers / batch 1 with 1 worker: $r"
		[ "$shape" = stories110M ] && ratio_110=$r
	fi

	# --- 4. prefill -------------------------------------------------
	# One long prompt at a time to a healthy server (a `run` would count
	# the workers' start in the first request's latency); median of 3.
	long=$((seq >= 1024 ? 1000 : seq - 8))
	workload 1 "$long" 1 "$vocab" 9 | sed 's/"id":"l0",//' > "$OUT/long.json"
	name="$shape-prefill"
	if [ "$DRY" = 1 ]; then
		echo "+ $BIN/dynbatch serve --workers 1 --batch 1 --model $model & 3 x POST a $long-token prompt" >&2
		ttft=0
	else
		# a 1000-token prompt of the 110M shape is one step of several
		# seconds: no budget here, and no step timeout in the way
		start_server "$OUT/$name.server.log" --workers 1 --batch 1 --model "$model" \
			--step-timeout 600000
		wait_healthy
		: > "$OUT/$name.txt"
		LOAD_S=0 long_client "$OUT/$name.txt" 3
		stop_server
		ttft=$(pct "$OUT/$name.txt" 50)
		[ "$ttft" != - ] || die "$name: no long prompt was answered (see $OUT/$name.server.log)"
	fi
	pre_tps=$(calc %.1f "($ttft > 0) ? $long / ($ttft / 1000) : 0")
	row "- prefill of a $long-token prompt$([ "$long" = 1000 ] || echo " (seq_len $seq: the longest that fits with room to decode)"), 1 worker: TTFT $ttft ms (median of 3), $pre_tps tokens/s, $(calc %.3f "$pre_tps / $prefill_bound") of one core's FMA bound (prompt tokens skip the classifier)"
	row ""

	# --- 5. chunked prefill -------------------------------------------
	row "Decode streams (8 clients, prompts <= 8, 64 tokens) while long prompts (2 clients, $long tokens, max_tokens 1) arrive; 1 worker, batch 16, $LOAD_S s:"
	row ""
	row "| --step-tokens | decode TPOT p50 ms | TPOT p99 ms | decode tokens/s | long prompt TTFT p50 ms | TTFT p99 ms |"
	row "| ---: | ---: | ---: | ---: | ---: | ---: |"
	settings="none"
	if [ "$HAVE_STEP_TOKENS" = 1 ]; then
		settings="none $STEP_TOKENS"
		# a 110M-shaped token costs 7x a 15M one: smaller budgets
		[ "$dim" -lt 512 ] || settings="none ${STEP_TOKENS_LARGE:-16 32 64}"
	else
		note "this dynbatch has no --step-tokens: chunked-prefill runs only without it"
	fi
	for st in $settings; do
		extra=(--step-tokens 0)
		[ "$st" = none ] || extra=(--step-tokens "$st")
		name="$shape-chunk-$st"
		if [ "$DRY" = 1 ]; then
			echo "+ $BIN/dynbatch serve --listen 127.0.0.1:0 --workers 1 --batch 16 --model $model ${extra[*]} & two loadgen for $LOAD_S s" >&2
			row "| $st | - | - | - | - | - |"
			continue
		fi
		start_server "$OUT/$name.server.log" --workers 1 --batch 16 --model "$model" \
			--step-timeout 600000 "${extra[@]}"
		wait_healthy
		"$BIN/loadgen" --port "$PORT" --requests 1000000 --duration-s "$LOAD_S" \
			--concurrency 8 --stream-frac 1 --max-prompt 8 --max-tokens 64 \
			--stop-frac 0 --vocab "$vocab" --seed 1 --quiet > "$OUT/$name.decode.txt" &
		dec_pid=$!
		# Two clients of long prompts (loadgen's ids would collide with
		# the other loadgen's, so curl; max_tokens 1: the time is TTFT).
		: > "$OUT/$name.long.txt"
		long_client "$OUT/$name.long.txt" &
		long1=$!
		long_client "$OUT/$name.long.txt" &
		long2=$!
		wait "$dec_pid" || note "$name: the decode loadgen reported errors (see $OUT/$name.decode.txt)"
		wait "$long1" "$long2" || true
		stop_server
		d="$OUT/$name.decode.txt"
		l="$OUT/$name.long.txt"
		row "| $st | $(kv "$d" tpot_p50_ms) | $(kv "$d" tpot_p99_ms) | $(kv "$d" tokens_per_s) | $(pct "$l" 50) | $(pct "$l" 99) |"
	done
	row ""
	unset tps
done

if [ -n "$ratio_110" ]; then
	row "- 110M batch 64 2 workers / batch 1 1 worker = $ratio_110 (target >= 12: $(calc %s "($ratio_110 >= 12) ? \"met\" : \"MISSED\""))"
fi
# The plot: decode tokens/s against batch, per shape and worker count,
# with the share of the bound on the right axis.
if command -v gnuplot >/dev/null && [ "$DRY" != 1 ]; then
	plots=""
	for shape in $SHAPES; do
		for W in $WORKERS; do
			f="$OUT/llama-$shape-w$W.dat"
			[ -s "$f" ] || continue
			plots="$plots${plots:+, }\"$f\" using 1:2 with linespoints title \"$shape, $W worker(s): tokens/s\""
			plots="$plots, \"$f\" using 1:3 axes x1y2 with lines dashtype 2 title \"$shape, $W: share of bound\""
		done
	done
	gnuplot <<EOF 2>/dev/null
set terminal pngcairo size 1000,560 noenhanced
set output "$OUT/llama.png"
set title "dynbatch llama decode: tokens/s and share of the machine's bound"
set xlabel "batch"
set ylabel "tokens/s"
set y2label "share of bound (bandwidth or FMA peak)"
set logscale x 2
set logscale y 10
set y2range [0:1.1]
set y2tics
set ytics nomirror
set key left top
set grid
plot $plots
EOF
	[ -s "$OUT/llama.png" ] && echo "bench_llama: plot $OUT/llama.png"
fi
echo "bench_llama: tables in $TABLE"
