#!/bin/bash
# bench_gguf.sh - dynbatch against llama.cpp on the same GGUF files (make
# bench-gguf): stories15M-shaped random weights as Q8_0 and Q4_K_M (the
# 288-wide rows put Q4_K_M's K types on their Q5_0/Q8_0 fallback),
# dynbatch tokens/s at batch 1 and 16 with workers 1 and 2, llama.cpp
# (node-llama-cpp 3.22.1, one sequence, greedy) with 1 and 2 threads,
# and bin/machine_limits' FMA peak and read bandwidth, in one run.
# Kernels are not tuned here: this only reports.
#
#   bench/bench_gguf.sh [WORKDIR]      writes WORKDIR/gguf.txt
set -u
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
D=${1:-$BUILD/bench}
NM=$BUILD/llamacpp
TESTS=$(cd "$(dirname "$0")/../tests/llamacpp" && pwd)
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
"$BIN/gen_workload" --n 16 --seed 3 --vocab 32000 --max-prompt 8 \
	--max-tokens 128 --stop-frac 0 --max-context 256 > "$D/gguf1.jsonl"
"$BIN/gen_workload" --n 64 --seed 3 --vocab 32000 --max-prompt 8 \
	--max-tokens 128 --stop-frac 0 --max-context 256 > "$D/gguf16.jsonl"

one() {	# ARGS...: tokens/s of one dynbatch run
	"$BIN/dynbatch" run "$@" --output /dev/null --stats "$D/gguf.st.json" 2> /dev/null ||
		{ echo FAIL; return; }
	grep -o '"tokens_per_s":[0-9.e+-]*' "$D/gguf.st.json" | cut -d: -f2 |
		xargs printf "%.1f"
}
{
	echo "bench_gguf.sh $(date -u +%FT%TZ), $(nproc) cores"
	"$BIN/machine_limits" --mib 256 | head -n 1
	for q in q8_0 q4_k_m; do
		f=$D/s15.$q.gguf
		[ -f "$f" ] || "$BIN/make_gguf" --out "$f" --shape stories15M \
			--type "$q" --seed 1 --tokenizer "$D/tok32000.bin" > /dev/null
		for w in 1 2; do
			echo "$q dynbatch workers $w: batch 1 $(one --model "gguf:$f" --workers $w --batch 1 --input "$D/gguf1.jsonl") tok/s, batch 16 $(one --model "gguf:$f" --workers $w --batch 16 --input "$D/gguf16.jsonl") tok/s"
		done
		for t in 1 2; do
			echo "$q llama.cpp threads $t: $(node "$NM/llamacpp_speed.mjs" "$f" $t 128 3) tok/s (one sequence)"
		done
	done
} | tee "$D/gguf.txt"
