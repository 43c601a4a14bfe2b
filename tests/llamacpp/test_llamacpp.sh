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
# past the bounds llamacpp_compare.py states; then tokenizes the same
# texts as llama.cpp with real vocabularies (below).  SEED=N replays.
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
cp "$D/llamacpp_logits.mjs" "$D/llamacpp_tokenize.mjs" "$NM/"

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
# Tokenization on the same text: the real Llama 3, Qwen 3 and Llama 2
# vocabularies in GGUF files (make_gguf --vocab-file, from make
# test-tokenizers' exports), llama.cpp's ids for make test-tokenizers'
# texts against lib/text's (bin/tok_compare).  One known divergence is
# left out: llama.cpp turns a vocabulary's "</s>" into a control token
# by its name (its end-of-generation list) and cuts it out of the text,
# where Qwen 3's and Llama 3's own tokenizers (and ours) spell it with
# ordinary pieces; texts holding "</s>" are compared for Llama 2 only.
NODE_TOK=${NODE_TOK:-$BUILD/node-tok}
if [ ! -f "$NODE_TOK/llama3.vocab" ]; then
	BIN=$BIN NODE_TOK=$NODE_TOK bash "$D/../tokenizers/run.sh" > /dev/null 2>&1
fi
for m in llama3:llama qwen3:qwen2 llama2:llama; do
	name=${m%%:*}
	if [ ! -f "$NODE_TOK/$name.vocab" ]; then
		echo "  FAIL tokenize/$name: no $NODE_TOK/$name.vocab (make test-tokenizers)"
		failed=$((failed + 1))
		continue
	fi
	python3 - "$NODE_TOK/$name.cases" "$name" > "$T/in.cases" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
for i in range(0, len(lines) - 1, 2):
    text = bytes.fromhex(lines[i].split(" ")[1].replace("-", "")).decode()
    if sys.argv[2] != "llama2" and "</s>" in text:
        continue
    print(lines[i]); print(lines[i + 1])
PY
	if "$BIN/make_gguf" --out "$T/v.gguf" --vocab-file "$NODE_TOK/$name.vocab" \
		--arch "${m#*:}" --dim 64 --hidden 96 --layers 1 --heads 4 --kv-heads 2 \
		--seq-len 64 --type q8_0 > /dev/null &&
	   node "$NM/llamacpp_tokenize.mjs" "$T/v.gguf" "$T/in.cases" > "$T/ll.cases" 2> "$T/ll.err" &&
	   "$BIN/tok_compare" "$NODE_TOK/$name.vocab" "$T/ll.cases" > "$T/tc.log"; then
		echo "  ok   tokenize/$name: llama.cpp's ids: $(tail -n 1 "$T/tc.log")"
	else
		echo "  FAIL tokenize/$name: $(grep -m 3 -A 2 FAIL "$T/tc.log" 2>/dev/null; tail -c 300 "$T/ll.err")"
		failed=$((failed + 1))
	fi
done
echo "test_llamacpp.sh: $failed failed ($(( $(date +%s) - start )) s)"
[ "$failed" = 0 ]
