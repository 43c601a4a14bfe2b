#!/bin/bash
# test_llamacpp.sh - dynbatch against llama.cpp on the same GGUF files
# (issue 25): `make test-llamacpp`.  Installs node-llama-cpp 3.22.1 and
# its prebuilt CPU binaries (@node-llama-cpp/linux-x64, libllama
# v0.5.0) under $BUILD/llamacpp once, then for llama and qwen2 files of
# every type bin/make_gguf writes (random weights, vocab 512, and a
# 288-wide Q4_K_M whose rows fall back from the K types), decodes random
# prompts greedily with dynbatch (16 tokens, top-20 logprobs) and has
# llama.cpp evaluate the same prompts and continuations; prints per type
# the largest logprob difference relative to llama.cpp's logit range
# (first step and all) and where the greedy tokens differ, and fails
# past the bounds llamacpp_compare.py states.  SEED=N replays.
set -u
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
D=$(cd "$(dirname "$0")" && pwd)
NM=$BUILD/llamacpp
SEED=${SEED:-$(( (RANDOM << 15) | RANDOM ))}
echo "test_llamacpp.sh: seed=$SEED (replay with SEED=$SEED)"

if [ ! -f "$NM/node_modules/@node-llama-cpp/linux-x64/package.json" ]; then
	mkdir -p "$NM"
	echo "installing node-llama-cpp@3.22.1 into $NM"
	# the platform package by name; no other platforms' optional
	# binaries, no postinstall (it would try to build llama.cpp)
	npm install --no-audit --no-fund --omit=optional --ignore-scripts \
		--prefix "$NM" node-llama-cpp@3.22.1 \
		@node-llama-cpp/linux-x64@3.22.1 > "$NM/npm.log" 2>&1 ||
		{ echo "npm install failed: see $NM/npm.log"; exit 1; }
fi
# an ES module finds node-llama-cpp from its own directory up
cp "$D/llamacpp_logits.mjs" "$NM/"

T=$(mktemp -d "${TMPDIR:-/tmp}/dynbatch-llamacpp.XXXXXX")
trap 'rm -rf "$T"' EXIT
py() { python3 "$D/llamacpp_compare.py" "$@"; }
py tokenizer "$T/tok.bin" 512
py requests "$T/req.jsonl" "$SEED" 8
failed=0

one() {	# TAG ARCH TYPE DIM HIDDEN HEADS
	local tag=$1 arch=$2 type=$3 m=$T/m.gguf
	local sep=--separate-classifier
	[ "$arch" = qwen2 ] && sep=	# qwen2: the tied output
	if ! "$BIN/make_gguf" --out "$m" --arch "$arch" --type "$type" \
		--dim "$4" --hidden "$5" --layers 2 --heads "$6" --kv-heads 2 \
		--vocab 512 --seq-len 256 $sep --seed "$SEED" \
		--tokenizer "$T/tok.bin" > /dev/null ||
	   ! "$BIN/dynbatch" run --model "gguf:$m" --input "$T/req.jsonl" \
		--output "$T/ours.jsonl" --workers 1 2> "$T/err" ||
	   ! py join "$T/req.jsonl" "$T/ours.jsonl" "$T/joined.jsonl" ||
	   ! node "$NM/llamacpp_logits.mjs" "$m" "$T/joined.jsonl" 1 \
		> "$T/ll.json" 2> "$T/ll.err"; then
		echo "  FAIL $tag: a step failed: $(tail -c 400 "$T/err" "$T/ll.err")"
		failed=$((failed + 1))
		return
	fi
	py compare "$T/joined.jsonl" "$T/ll.json" "$tag" || failed=$((failed + 1))
}

start=$(date +%s)
for arch in llama qwen2; do
	for type in ${TYPES:-f32 f16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m}; do
		one "$type/$arch" "$arch" "$type" 256 512 4
	done
	one "q4_k_m@288/$arch" "$arch" q4_k_m 288 768 6
done
echo "test_llamacpp.sh: $failed failed ($(( $(date +%s) - start )) s)"
[ "$failed" = 0 ]
