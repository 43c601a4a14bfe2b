#!/bin/bash
# bench_gguf.sh - dynbatch against llama.cpp on the same GGUF files (make
# bench-gguf; issue 25 section 5), in one run: per weight type of a
# stories110M-shaped file (random weights, dim 768, 12 layers, vocab
# 32000, tied classifier; made once in WORKDIR):
#   b1    batch-1 decode tok/s: dynbatch --workers 1 --batch 1 against
#         llama.cpp with 1 thread, one sequence;
#   s64   64 parallel sequences: dynbatch --workers 2 --batch 64 against
#         llama.cpp with 2 threads and 64 context sequences in one
#         context (batched into one llama_decode per step); s64_1 the
#         same at 1 worker against 1 thread (llama.cpp's threads wait
#         for each other spinning, so on cores other work shares its 2
#         threads can fall far below its 1: both are printed);
#   pf    prefill of a 512-token prompt at one thread each: dynbatch's
#         run of that one request with max_tokens 1 (--workers 1; its
#         wall_s: the latency percentiles are histogram buckets),
#         llama.cpp's time to the first token; prompt tokens a second;
# the ratios (dynbatch / llama.cpp), and bin/machine_limits' read
# bandwidth measured in the same run with the batch-1 bound (bandwidth /
# file bytes: every weight is read once a token, the tied classifier
# included) and the fraction of it dynbatch reaches.  llama.cpp is
# node-llama-cpp 3.22.1's prebuilt CPU library (bench/llamacpp_speed.mjs),
# installed once under BUILD/llamacpp.  A benchmark does not judge: it
# prints the figures and the issue's targets beside them.
#
#   bench/bench_gguf.sh [WORKDIR]      writes WORKDIR/gguf.txt
#
# Environment: BIN (bin), BUILD (build), SHAPE (stories110M), TYPES
# ("f32 q8_0 q4_0 q4_k_m"), SMALL=1 (quick iteration: q4_0 and q4_k_m,
# fewer tokens, one repetition), REPS (2: the batch-1 and prefill runs
# of llama.cpp and dynbatch's prefill take their best; 64 sequences run
# once).  About 4 minutes on 2 idle cores, far more when others load them.
set -u
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
D=${1:-$BUILD/bench}
NM=$BUILD/llamacpp
SHAPE=${SHAPE:-stories110M}
TESTS=$(cd "$(dirname "$0")/../tests/llamacpp" && pwd)
if [ "${SMALL:-0}" = 1 ]; then
	TYPES=${TYPES:-"q4_0 q4_k_m"}
	B1_TOKENS=32 S64_TOKENS=16 REPS=${REPS:-1}
else
	TYPES=${TYPES:-"f32 q8_0 q4_0 q4_k_m"}
	B1_TOKENS=64 S64_TOKENS=32 REPS=${REPS:-2}
fi
PF=512
mkdir -p "$D"
if [ ! -f "$NM/node_modules/@node-llama-cpp/linux-x64/package.json" ]; then
	mkdir -p "$NM"
	npm install --no-audit --no-fund --omit=optional --ignore-scripts \
		--prefix "$NM" node-llama-cpp@3.22.1 \
		@node-llama-cpp/linux-x64@3.22.1 > "$NM/npm.log" 2>&1 ||
		{ echo "npm install failed: see $NM/npm.log"; exit 1; }
fi
cp "$(dirname "$0")/llamacpp_speed.mjs" "$NM/"
# llama.cpp will not load a file without a vocabulary
[ -f "$D/tok32000.bin" ] ||
	python3 "$TESTS/llamacpp_compare.py" tokenizer "$D/tok32000.bin" 32000

# N requests of an 8-token prompt (first token distinct) and M tokens each,
# EOS ignored: both engines make the same number of tokens
workload() {
	for ((i = 0; i < $1; i++)); do
		printf '{"id":"r%d","prompt":[1,%d,500,600,700,800,900,1000],"max_tokens":%d,"ignore_eos":true}\n' \
			"$i" $((400 + i)) "$2"
	done
}
workload 2 "$B1_TOKENS" > "$D/gguf_b1.jsonl"
workload 64 "$S64_TOKENS" > "$D/gguf_s64.jsonl"
{
	printf '{"id":"p","prompt":[1'
	for ((i = 1; i < PF; i++)); do printf ',%d' $((3 + (i * 7919) % 31000)); done
	printf '],"max_tokens":1,"ignore_eos":true}\n'
} > "$D/gguf_pf.jsonl"

# st KEY: a number from the last run's --stats
st() { grep -o "\"$1\":[0-9.e+-]*" "$D/gguf.st.json" | head -1 | cut -d: -f2; }
dyn() {	# ARGS...: one dynbatch run; 1 if it failed
	"$BIN/dynbatch" run "$@" --output /dev/null --stats "$D/gguf.st.json" \
		2> "$D/gguf.err" || { echo "dynbatch $* failed:" >&2; cat "$D/gguf.err" >&2; return 1; }
}
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }

{
	echo "bench_gguf.sh $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), shape $SHAPE"
	ml=$("$BIN/machine_limits" --mib 256 | head -n 1)
	echo "$ml"
	gbs=$(sed -n 's/.*read_gbs=\([0-9.]*\).*/\1/p' <<< "$ml")
	printf '%-7s %8s %8s %5s | %8s %8s %5s | %8s %8s %5s | %8s %8s %5s | %8s %5s\n' type \
		b1_dyn b1_lcpp ratio s64_1dyn s64_1lcp ratio s64_dyn s64_lcpp ratio \
		pf_dyn pf_lcpp ratio b1_bound frac
	for q in $TYPES; do
		f=$D/${SHAPE}.$q.gguf
		[ -f "$f" ] || "$BIN/make_gguf" --out "$f" --shape "$SHAPE" \
			--type "$q" --seed 1 --tokenizer "$D/tok32000.bin" > /dev/null ||
			{ echo "make_gguf $q failed"; exit 1; }
		bytes=$(stat -c %s "$f")
		b1=0 s64=0 s641=0 pf=0
		dyn --model "gguf:$f" --workers 1 --batch 1 --max-context 256 \
			--input "$D/gguf_b1.jsonl" && b1=$(st tokens_per_s)
		dyn --model "gguf:$f" --workers 2 --batch 64 --max-context 256 \
			--input "$D/gguf_s64.jsonl" && s64=$(st tokens_per_s)
		dyn --model "gguf:$f" --workers 1 --batch 64 --max-context 256 \
			--input "$D/gguf_s64.jsonl" && s641=$(st tokens_per_s)
		for ((r = 0; r < REPS; r++)); do
			dyn --model "gguf:$f" --workers 1 --batch 1 --max-context 1024 \
				--input "$D/gguf_pf.jsonl" || break
			pf=$(awk -v b="$pf" -v t="$(st wall_s)" -v n=$PF \
				'BEGIN { v = n / t; print (v > b ? v : b) }')
		done
		lb1=$(node "$NM/llamacpp_speed.mjs" decode "$f" 1 1 "$B1_TOKENS" "$REPS")
		ls64=$(node "$NM/llamacpp_speed.mjs" decode "$f" 2 64 "$S64_TOKENS" 1)
		ls641=$(node "$NM/llamacpp_speed.mjs" decode "$f" 1 64 "$S64_TOKENS" 1)
		lpf=$(node "$NM/llamacpp_speed.mjs" prefill "$f" 1 $PF "$REPS")
		bound=$(calc %.1f "$gbs * 1e9 / $bytes")
		printf '%-7s %8.1f %8s %5s | %8.1f %8s %5s | %8.1f %8s %5s | %8.1f %8s %5s | %8s %5s\n' "$q" \
			"$b1" "$lb1" "$(ratio "$b1" "$lb1")" "$s641" "$ls641" "$(ratio "$s641" "$ls641")" \
			"$s64" "$ls64" "$(ratio "$s64" "$ls64")" \
			"$pf" "$lpf" "$(ratio "$pf" "$lpf")" "$bound" "$(ratio "$b1" "$bound")"
	done
	echo "tok/s; ratio = dynbatch / llama.cpp; b1_bound = read_gbs / file bytes (tok/s); frac = b1_dyn / b1_bound"
	echo "targets (issue 25): b1 ratio >= 1.0, s64 ratio >= 2, pf ratio >= 1.5, 4-bit frac >= 0.6"
} | tee "$D/gguf.txt"
