#!/bin/bash
# e2e_openai.sh - `dynbatch serve` driven by the official openai npm client
# (v4) under Node.js, as a user of an OpenAI-compatible server would: every
# request of a workload as a plain completion and as a stream (the two must
# agree), the model list, a wrong API key (401) and out-of-range tokens
# (400); the answers are checked against the reference decoder, and SIGTERM
# must drain the server to exit 0 with no shared segment left.
# Then text: a server per chat template (--tokenizer from make_tokenizer,
# a sim of its vocabulary, --chat-template llama2 and chatml), where the
# client's string prompts, stop strings, streams, seeds and chats (plain,
# streamed, n = 2) must give what `dynbatch run` gives for the same
# requests, the chats' prompts rendered by the client's own templates
# (openai_client.mjs --text).
#
# Needs node; the openai package is installed once into $BUILD/node (from
# the npm registry).  Without node, or without a way to install the
# package, the test says it is skipped and exits 0.
set -u
. "$(dirname "$0")/e2e_lib.sh"

TESTS=$(cd "$(dirname "$0")" && pwd)
MODEL=sim:vocab=64
T0=$(date +%s.%N)

openai_setup
case $? in
1) exit 0 ;;
2) finish; exit ;;
esac
# `import "openai"` resolves from the script's own folder upwards, so the
# script runs from a folder whose node_modules is the installed one.
ln -s "$(cd "$NODE_DIR" && pwd)/node_modules" "$E2E_TMP/node_modules"
cp "$TESTS/openai_client.mjs" "$E2E_TMP/openai_client.mjs"

# --- the server ----------------------------------------------------------
# without its empty prompts: OpenAI's API needs a token (400, checked
# by the client on its own)
"$BIN/gen_workload" --n 60 --seed "$SEED" --vocab 64 --model "$MODEL" \
	--max-tokens 40 | grep -v '"prompt":\[\]' > "$E2E_TMP/w.jsonl"
KEY="e2e-key-$SEED"
"$BIN/dynbatch" serve --listen 127.0.0.1:0 --workers 2 --batch 16 \
	--model "$MODEL" --api-key "$KEY" --served-model-name sim,alias-a \
	--served-model-name alias-b --allowed-origins http://ok.example,http://b.example:8000 \
	2> "$E2E_TMP/serve.err" &
SERVER=$!
# Whatever ends this script, the server does not outlive it.  LIVE is
# cleared once it is reaped: its pid may then belong to someone else.
LIVE=$SERVER
trap '[ -n "$LIVE" ] && kill -KILL $LIVE 2>/dev/null; rm -rf "$E2E_TMP"' EXIT
PORT=""
for _ in $(seq 100); do
	PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\) .*|\1|p' \
		"$E2E_TMP/serve.err" | head -n 1)
	[ -n "$PORT" ] || ! kill -0 $SERVER 2>/dev/null && break
	sleep 0.1
done
if [ -z "$PORT" ]; then
	kill -KILL $SERVER 2>/dev/null
	wait $SERVER 2>/dev/null
	rc=$?
	LIVE=""
	fail "server did not say where it listens (exit status $rc)"
	sed 's/^/       /' "$E2E_TMP/serve.err" | tail -n 20
	finish
	exit
fi
pass "server $SERVER listening on port $PORT"

# --- the client ------------------------------------------------------------
if (cd "$E2E_TMP" && timeout -k 5 60 node openai_client.mjs \
	"http://127.0.0.1:$PORT/v1" "$KEY" w.jsonl results.jsonl) \
	> "$E2E_TMP/node.out" 2> "$E2E_TMP/node.err"; then
	pass "$(tail -n 1 "$E2E_TMP/node.out")"
else
	rc=$?
	fail "openai client: exit $rc$([ $rc = 124 ] && echo ' (timed out)')"
	# The first problems say what went wrong; the rest are usually its echo.
	cat "$E2E_TMP/node.out" "$E2E_TMP/node.err" | sed 's/^/       /' |
		awk 'NR <= 25 { print } END { if (NR > 25) print "       ... (" NR - 25 " more lines)" }'
	echo "       server log so far:"
	sed 's/^/       /' "$E2E_TMP/serve.err" | tail -n 20
fi
if [ -s "$E2E_TMP/results.jsonl" ]; then
	check_results "openai client results vs reference" "$MODEL" \
		"$E2E_TMP/w.jsonl" "$E2E_TMP/results.jsonl"
else
	fail "openai client wrote no results"
fi

# --- CORS: --allowed-origins ----------------------------------------------
# cors_head ORIGIN METHOD PATH [curl args]: the answer's status and headers
cors_head() {
	local origin=$1 method=$2 path=$3
	shift 3
	curl -s -o /dev/null -D - -m 10 -X "$method" -H "Origin: $origin" "$@" \
		"http://127.0.0.1:$PORT$path" | tr -d '\r'
}
h=$(cors_head http://ok.example OPTIONS /v1/completions \
	-H 'Access-Control-Request-Method: POST' \
	-H 'Access-Control-Request-Headers: authorization, content-type, x-stainless-os')
case "$h" in
"HTTP/1.1 204 No Content"*"Access-Control-Allow-Origin: http://ok.example"*)
	echo "$h" | grep -q '^Access-Control-Allow-Methods: POST$' &&
	echo "$h" | grep -q '^Access-Control-Allow-Headers: authorization, content-type, x-stainless-os$' &&
	! echo "$h" | grep -qi '^content-length' &&
	pass "CORS: a listed origin's preflight, without the key: 204 with its headers" ||
	fail "CORS preflight headers: $h" ;;
*) fail "CORS preflight of a listed origin: $h" ;;
esac
h=$(cors_head http://evil.example OPTIONS /v1/completions -H 'Access-Control-Request-Method: POST')
case "$h" in
"HTTP/1.1 403"*) echo "$h" | grep -qi '^access-control' &&
	fail "CORS: a refused origin got CORS headers: $h" ||
	pass "CORS: another origin's preflight: 403, no CORS headers" ;;
*) fail "CORS preflight of another origin: $h" ;;
esac
ok=0
for s in false true; do
	h=$(cors_head http://b.example:8000 POST /v1/completions -H "Authorization: Bearer $KEY" \
		-d "{\"prompt\":[1,2],\"max_tokens\":2,\"stream\":$s}")
	echo "$h" | grep -q '^HTTP/1.1 200' && echo "$h" | grep -q '^Access-Control-Allow-Origin: http://b.example:8000$' &&
		echo "$h" | grep -q '^Vary: Origin$' && ok=$((ok + 1))
done
h=$(cors_head http://ok.example GET /v1/models)
echo "$h" | grep -q '^HTTP/1.1 401' && echo "$h" | grep -q '^Access-Control-Allow-Origin: http://ok.example$' &&
	ok=$((ok + 1))
h=$(cors_head http://evil.example POST /v1/completions -H "Authorization: Bearer $KEY" -d '{"prompt":[1],"max_tokens":1}')
echo "$h" | grep -q '^HTTP/1.1 200' && ! echo "$h" | grep -qi '^access-control' && ok=$((ok + 1))
expect_eq "CORS: answers (plain, stream, 401) carry the listed origin; another's none" "$ok" 4

# --- SIGTERM drains and exits 0, leaving no segment -----------------------
if ! kill -0 $SERVER 2>/dev/null; then
	fail "server $SERVER exited before it was sent SIGTERM"
	sed 's/^/       /' "$E2E_TMP/serve.err" | tail -n 20
fi
kill -TERM $SERVER 2>/dev/null
for _ in $(seq 150); do
	kill -0 $SERVER 2>/dev/null || break
	sleep 0.1
done
if kill -0 $SERVER 2>/dev/null; then
	fail "server still running 15 s after SIGTERM"
	kill -KILL $SERVER
fi
wait $SERVER
rc=$?
LIVE=""
expect_eq "server exit status after SIGTERM" "$rc" 0
expect_eq "no segment left by server $SERVER" "$(segments_of $SERVER)" ""
if grep -Eq ': (error|fatal):|Assertion|Sanitizer|runtime error' "$E2E_TMP/serve.err"; then
	fail "server logged errors"
	sed 's/^/       /' "$E2E_TMP/serve.err" | tail -n 20
else
	pass "server log clean ($(wc -l < "$E2E_TMP/serve.err") lines)"
fi

# --- raw HTTP: every field we do not implement is a 400 naming it ---------
# post PATH BODY: the status, the answer in $E2E_TMP/raw.json
post() {
	curl -s -o "$E2E_TMP/raw.json" -w '%{http_code}' -m 10 \
		-H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
		--data-binary "$2" "http://127.0.0.1:$PORT$1"
}
# refused PATH PARAM BODY: 400 with "param": PARAM
refused() {
	local code
	code=$(post "$1" "$3")
	if [ "$code" = 400 ] && grep -q "\"param\":\"$2\"" "$E2E_TMP/raw.json"; then
		RAW_OK=$((RAW_OK + 1))
	else
		fail "$1 $3: status $code, $(head -c 300 "$E2E_TMP/raw.json"), wanted 400 param $2"
	fi
}
# taken PATH BODY: 200
taken() {
	local code
	code=$(post "$1" "$2")
	if [ "$code" = 200 ]; then
		RAW_OK=$((RAW_OK + 1))
	else
		fail "$1 $2: status $code, $(head -c 300 "$E2E_TMP/raw.json"), wanted 200"
	fi
}
raw_fields() {
	local P='"prompt":"Hi","max_tokens":2' M='"messages":[{"role":"user","content":"Hi"}],"max_tokens":2'
	RAW_OK=0
	for f in 'presence_penalty:2.5' 'frequency_penalty:-3' 'repetition_penalty:0' \
		'suffix:"end"' 'best_of:21' 'presence_penalty:"x"' \
		'echo:1' 'user:5' 'max_token:5' 'messages:[]' 'stream_option:{}' \
		'stream_options:{"include_usage":true}'; do
		refused /v1/completions "${f%%:*}" "{$P,\"${f%%:*}\":${f#*:}}"
	done
	for f in '{"include_usage":"yes"}' '{"usage":true}' '{"include_obfuscation":true}' '[]'; do
		refused /v1/chat/completions stream_options "{$M,\"stream\":true,\"stream_options\":$f}"
	done
	for f in 'tools:[{"type":"function","function":{"name":"f"}}]' \
		'tool_choice:"required"' 'functions:[{"name":"f"}]' \
		'function_call:{"name":"f"}' 'parallel_tool_calls:"yes"' \
		'response_format:{"type":"yaml"}' 'presence_penalty:[1]' \
		'frequency_penalty:true' 'repetition_penalty:-2' 'store:true' \
		'metadata:{"a":"b"}' 'modalities:["text","audio"]' \
		'audio:{"voice":"alloy","format":"wav"}' \
		'prediction:{"type":"content","content":"x"}' 'reasoning_effort:"low"' \
		'service_tier:"flex"' 'web_search_options:{}' 'verbosity:"high"' \
		'echo:false' 'best_of:1' 'suffix:""' 'user:[]' 'max_token:5' \
		'temperature:"hot"'; do
		refused /v1/chat/completions "${f%%:*}" "{$M,\"${f%%:*}\":${f#*:}}"
	done
	# the penalties are implemented: real values are taken
	taken /v1/completions "{$P,\"presence_penalty\":0.5,\"frequency_penalty\":-1,\"repetition_penalty\":1.2}"
	taken /v1/chat/completions "{$M,\"presence_penalty\":1,\"frequency_penalty\":0.5,\"repetition_penalty\":2}"
	# what clients send as defaults is taken
	taken /v1/completions "{$P,\"presence_penalty\":0,\"frequency_penalty\":0,\"echo\":false,\"suffix\":null,\"best_of\":1,\"user\":\"u\",\"repetition_penalty\":1}"
	taken /v1/chat/completions "{$M,\"presence_penalty\":0,\"frequency_penalty\":0.0,\"tools\":[],\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"},\"store\":false,\"metadata\":{},\"modalities\":[\"text\"],\"service_tier\":\"auto\",\"parallel_tool_calls\":true,\"user\":\"u\",\"audio\":null,\"functions\":[],\"function_call\":\"none\"}"
	pass "raw HTTP: $RAW_OK refused fields named in param, defaults taken"
	raw_tokens
}
# without --allowed-origins: no CORS header, OPTIONS is 405
cors_off() {
	local h h2
	h=$(cors_head http://ok.example OPTIONS /v1/completions -H 'Access-Control-Request-Method: POST' \
		-H "Authorization: Bearer $KEY")
	h2=$(cors_head http://ok.example POST /v1/completions -H "Authorization: Bearer $KEY" \
		-d '{"prompt":"Hi","max_tokens":1}')
	echo "$h" | grep -q '^HTTP/1.1 405' && ! echo "$h$h2" | grep -qi '^access-control' &&
		echo "$h2" | grep -q '^HTTP/1.1 200' &&
		pass "CORS off: OPTIONS 405, no CORS headers" || fail "CORS off: $h $h2"
}
# json_get FILE EXPR: a value of the answer in FILE, as JSON
json_get() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps(eval(sys.argv[2], {"d": d})))' "$1" "$2"
}
# /tokenize gives the ids a string prompt becomes; /detokenize of an
# answer's token_ids gives its text
raw_tokens() {
	local ids text code
	[ "$(post /tokenize '{"content":"The quick brown fox","add_special":true}')" = 200 ] ||
		{ fail "/tokenize: $(cat "$E2E_TMP/raw.json")"; return; }
	ids=$(json_get "$E2E_TMP/raw.json" 'd["tokens"]')
	post /v1/completions '{"prompt":"The quick brown fox","max_tokens":12}' > /dev/null
	text=$(json_get "$E2E_TMP/raw.json" 'd["choices"][0]["text"]')
	cp "$E2E_TMP/raw.json" "$E2E_TMP/by_text.json"
	post /v1/completions "{\"prompt\":$ids,\"max_tokens\":12}" > /dev/null
	expect_eq "/tokenize's ids as the prompt: the string prompt's answer" \
		"$(json_get "$E2E_TMP/raw.json" 'd["choices"][0]["token_ids"]')" \
		"$(json_get "$E2E_TMP/by_text.json" 'd["choices"][0]["token_ids"]')"
	post /detokenize "{\"tokens\":$(json_get "$E2E_TMP/by_text.json" 'd["choices"][0]["token_ids"]')}" > /dev/null
	expect_eq "/detokenize of an answer's token_ids: its text" \
		"$(json_get "$E2E_TMP/raw.json" 'd["content"]')" "$text"
	RAW_OK=0
	refused /detokenize tokens '{"tokens":[1,512]}'
	refused /detokenize tokens '{"tokens":"1"}'
	refused /tokenize content '{"content":5}'
	refused /tokenize prompt '{"prompt":"x"}'
	[ $RAW_OK = 4 ] && pass "/tokenize and /detokenize: bad bodies are 400 naming the field"
}
# logprobs named by text, offsets, streamed usage null (openai_logprobs.py)
raw_logprobs() {
	if python3 "$TESTS/openai_logprobs.py" "http://127.0.0.1:$PORT" "$KEY" \
		> "$E2E_TMP/lp.out" 2>&1; then
		pass "$(tail -n 2 "$E2E_TMP/lp.out" | paste -sd ";")"
	else
		fail "$(tail -n 5 "$E2E_TMP/lp.out")"
	fi
}
# /v1/models/{id} percent-decodes the id; a bad escape is 400
raw_model_ids() {
	local name code
	name=$(curl -s -H "Authorization: Bearer $KEY" "http://127.0.0.1:$PORT/v1/models" |
		python3 -c 'import json,sys,urllib.parse; print(urllib.parse.quote(json.load(sys.stdin)["data"][0]["id"], safe=""))')
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" \
		"http://127.0.0.1:$PORT/v1/models/$name")
	expect_eq "/v1/models/{percent-encoded id}" "$code" 200
	code=$(curl -s -o "$E2E_TMP/raw.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
		"http://127.0.0.1:$PORT/v1/models/a%4")
	expect_eq "/v1/models/a%4 (a bad escape)" "$code" 400
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" \
		"http://127.0.0.1:$PORT/v1/models/%6Eo")
	expect_eq "/v1/models/%6Eo (\"no\", not served)" "$code" 404
}

# --- text: string prompts, stop strings and chat, per template -------------
TEXT_VOCAB=512
TEXT_MODEL=sim:vocab=$TEXT_VOCAB
# the client runs `dynbatch run` from $E2E_TMP
DYNBATCH_ABS="$(cd "$BIN" && pwd)/dynbatch"
if ! "$BIN/make_tokenizer" --vocab $TEXT_VOCAB --out "$E2E_TMP/tok.bin" > "$E2E_TMP/tok.log" 2>&1; then
	fail "make_tokenizer --vocab $TEXT_VOCAB"
	sed 's/^/       /' "$E2E_TMP/tok.log"
fi
for TEMPLATE in llama2 chatml; do
	"$BIN/dynbatch" serve --listen 127.0.0.1:0 --workers 2 --batch 16 \
		--model "$TEXT_MODEL" --tokenizer "$E2E_TMP/tok.bin" \
		--chat-template $TEMPLATE --api-key "$KEY" --max-context 512 \
		2> "$E2E_TMP/serve-$TEMPLATE.err" &
	SERVER=$!
	LIVE=$SERVER
	PORT=""
	for _ in $(seq 100); do
		PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\) .*|\1|p' \
			"$E2E_TMP/serve-$TEMPLATE.err" | head -n 1)
		[ -n "$PORT" ] || ! kill -0 $SERVER 2>/dev/null && break
		sleep 0.1
	done
	if [ -z "$PORT" ]; then
		fail "text server ($TEMPLATE) did not say where it listens"
		sed 's/^/       /' "$E2E_TMP/serve-$TEMPLATE.err" | tail -n 20
		continue
	fi
	if (cd "$E2E_TMP" && timeout -k 5 60 node openai_client.mjs --text \
		"http://127.0.0.1:$PORT/v1" "$KEY" $TEMPLATE "$DYNBATCH_ABS" \
		"$E2E_TMP/tok.bin" "$TEXT_MODEL") > "$E2E_TMP/node-$TEMPLATE.out" 2>&1; then
		pass "$(tail -n 1 "$E2E_TMP/node-$TEMPLATE.out")"
	else
		rc=$?
		fail "openai client --text $TEMPLATE: exit $rc$([ $rc = 124 ] && echo ' (timed out)')"
		sed 's/^/       /' "$E2E_TMP/node-$TEMPLATE.out" |
			awk 'NR <= 25 { print } END { if (NR > 25) print "       ... (" NR - 25 " more lines)" }'
	fi
	[ $TEMPLATE = llama2 ] && raw_fields && cors_off && raw_logprobs && raw_model_ids
	kill -TERM $SERVER 2>/dev/null
	for _ in $(seq 150); do
		kill -0 $SERVER 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL $SERVER 2>/dev/null
	wait $SERVER
	rc=$?
	LIVE=""
	expect_eq "text server ($TEMPLATE) exit status after SIGTERM" "$rc" 0
	if grep -Eq ': (error|fatal):|Assertion|Sanitizer|runtime error' "$E2E_TMP/serve-$TEMPLATE.err"; then
		fail "text server ($TEMPLATE) logged errors"
		sed 's/^/       /' "$E2E_TMP/serve-$TEMPLATE.err" | tail -n 20
	fi
done

# --chat-template: an unknown name, or no tokenizer, is a usage error
"$BIN/dynbatch" serve --listen 127.0.0.1:0 --workers 0 --chat-template llama-3 \
	> /dev/null 2> "$E2E_TMP/bad.err"
expect_eq "serve --chat-template llama-3: exit status" "$?" 2
grep -q "unknown --chat-template 'llama-3'" "$E2E_TMP/bad.err" ||
	fail "serve --chat-template llama-3 says: $(head -n 1 "$E2E_TMP/bad.err")"
"$BIN/dynbatch" serve --listen 127.0.0.1:0 --workers 0 --model "$TEXT_MODEL" \
	--chat-template chatml > /dev/null 2> "$E2E_TMP/bad.err"
expect_eq "serve --chat-template without a tokenizer: exit status" "$?" 2
grep -q "needs a tokenizer" "$E2E_TMP/bad.err" ||
	fail "serve --chat-template without a tokenizer says: $(head -n 1 "$E2E_TMP/bad.err")"
"$BIN/dynbatch" run --chat-template chatml < /dev/null > /dev/null 2> "$E2E_TMP/bad.err"
expect_eq "run --chat-template: exit status" "$?" 2

echo "  time $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
finish
