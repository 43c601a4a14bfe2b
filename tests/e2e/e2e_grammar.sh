#!/bin/bash
# e2e_grammar.sh - structured output (issue 29 s.1): "grammar" (GBNF) and
# response_format (json_object, json_schema) hold the output to the
# grammar.  The sim model's random logits have no preference for valid
# output, so only the mask makes it valid.  Random grammars and schemas
# (tests/e2e/grammar_cases.py: each GBNF is written beside a Python
# regex from the same random tree, each schema checked by a validator of
# its own) with random sampling fields: every answer that ends with
# "stop" parses and validates; the answers are the same bytes at workers
# 0/1/2, batches 3..64, a step budget, speculation on, garbled results
# and kill -9 / SIGSTOP; the coordinator refuses no token of an honest
# worker.  Then the edges: a grammar that allows only EOS ends with
# "stop", one that allows nothing (with logit_bias) fails clearly, and
# bad grammars, schemas and combinations get errors that name them.
# Over HTTP the official openai client's structured-output helper
# (beta.chat.completions.parse) gets valid objects, streams agree
# (openai_grammar.mjs).
. "$(dirname "$0")/e2e_lib.sh"

T=$E2E_TMP
TOK=$T/tok.bin
SIM="sim:vocab=300,seed=$((SEED % 1000))"
CASES="python3 $(dirname "$0")/grammar_cases.py"

# a tokenizer whose merges are pieces of JSON and words (so tokens span
# several characters of a grammar's terminals), byte tokens for the rest
python3 - "$SEED" > "$T/corpus.txt" <<'PY'
import random, sys
r = random.Random(int(sys.argv[1]))
w = ['{"a": 1}', '[1, 2, 3]', '"hello"', 'true', 'false', 'null',
     '{"name": "x", "n": 42}', 'hello world', 'the quick brown fox', '{"k0": ',
     '"k1": [', ', "k2": ', '"red"', '"green"', '"blue"', '0123456789', 'xyz']
sys.stdout.write("".join(r.choice(w) + r.choice([" ", "\n", "", ", "]) for _ in range(3000)))
PY
"$BIN/make_tokenizer" --vocab 300 --out "$TOK" --input "$T/corpus.txt" > /dev/null ||
	fail "make_tokenizer"

$CASES gen "$SEED" 160 > "$T/cases.jsonl"
$CASES strip < "$T/cases.jsonl" > "$T/in.jsonl"

# run NAME OUT ARGS...: decode in.jsonl into OUT (sorted), stats beside it
run() {
	local name=$1 out=$2
	shift 2
	timeout 300 "$BIN/dynbatch" run --no-progress --model "$SIM" --tokenizer "$TOK" \
		--input "$T/in.jsonl" --output "$T/raw.jsonl" --stats "$out.stats" "$@" \
		2> "$T/run.err"
	expect_eq "$name: exit 0" $? 0
	sort "$T/raw.jsonl" > "$out"
	expect_eq "$name: no token refused" "$(stats_field "$out.stats" grammar_refused)" 0
}
same() {
	if cmp -s "$2" "$3"; then pass "$1: the same answers as in-process"
	else fail "$1: answers differ"; diff "$2" "$3" | head -4; fi
}

echo "== random grammars and schemas: every answer is a sentence"
run "in-process" "$T/ref" --workers 0 --batch 8
if out=$($CASES check "$T/cases.jsonl" "$T/ref"); then
	pass "every finished answer parses and validates ($out)"
else
	fail "an answer breaks its grammar: $out"
fi
stops=$(echo "$out" | awk '{print $2}')
expect_gt "most answers finished (stop) rather than ran out" "${stops:-0}" 100

for cfg in "--workers 1 --batch 16" "--workers 2 --batch 64" \
	   "--workers 2 --batch 3 --step-tokens 2" "--workers 2 --batch 16 --speculate ngram" \
	   "--workers 2 --batch 16 --garbage-every 5"; do
	# shellcheck disable=SC2086
	run "$cfg" "$T/got" $cfg
	same "$cfg" "$T/ref" "$T/got"
done

timeout -k 5 120 "$BIN/fault_inject" --seed "$SEED" --first-kill-ms 30 --kill-rate 30 \
	--stop-rate 8 -- "$BIN/dynbatch" run --model "$SIM" --tokenizer "$TOK" --workers 3 \
	--batch 6 --step-timeout 2000 --input "$T/in.jsonl" --output "$T/kill.jsonl" \
	2> "$T/kill.err"
expect_eq "kill -9 and SIGSTOP: exit 0" $? 0
sort "$T/kill.jsonl" | cmp -s - "$T/ref" && pass "kill -9 and SIGSTOP: the same answers" ||
	fail "kill -9 and SIGSTOP: answers differ"
grep -q "kills=[1-9]" "$T/kill.err" && pass "workers were killed" ||
	fail "no worker was killed: $(tail -1 "$T/kill.err")"

echo "== real vocabularies (GGUF): SentencePiece's space prefix, byte-level BPE"
# the vocabularies e2e_gguf_text.sh exports from the published tokenizers
for v in llama2:llama qwen3:qwen2; do
	name=${v%%:*} arch=${v#*:}
	vocab=$BUILD/node-tok/$name.vocab
	if [ ! -f "$vocab" ]; then
		echo "  skipped: $name (no $vocab: e2e_gguf_text.sh makes it with node)"
		continue
	fi
	"$BIN/make_gguf" --out "$T/$name.gguf" --vocab-file "$vocab" --arch "$arch" \
		--dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --seq-len 256 \
		--type q8_0 --seed "$SEED" > /dev/null 2>&1 || { fail "$name: make_gguf"; continue; }
	$CASES gen "$((SEED + 7))" 60 > "$T/$name.cases"
	$CASES strip < "$T/$name.cases" > "$T/$name.in"
	timeout 300 "$BIN/dynbatch" run --no-progress --model "gguf:$T/$name.gguf" --workers 2 \
		--batch 16 --input "$T/$name.in" --output "$T/$name.out" 2> /dev/null
	expect_eq "$name: exit 0" $? 0
	if out=$($CASES check "$T/$name.cases" "$T/$name.out"); then
		pass "$name: every finished answer parses and validates ($out)"
	else
		fail "$name: $out"
	fi
done

echo "== a hostile worker breaks grammars: its requests end, none is answered wrong"
DYNBATCH_WORKER="$BIN/dynbatch-hostile-worker" DYNBATCH_HOSTILE="grammar,shard=0,lives=2" \
	DYNBATCH_HOSTILE_DIR="$T" timeout 120 "$BIN/dynbatch" run --no-progress --model "$SIM" \
	--tokenizer "$TOK" --workers 2 --batch 8 --input "$T/in.jsonl" --output "$T/hostile.jsonl" \
	--stats "$T/hostile.stats" 2> "$T/hostile.err"
expect_eq "hostile worker: exit 0 or 1 (some requests fail)" "$(( $? <= 1 ))" 1
if out=$($CASES check "$T/cases.jsonl" "$T/hostile.jsonl" "grammar"); then
	pass "every answer is still a sentence, or ended with a grammar error ($out)"
else
	fail "hostile worker: $out"
fi
expect_gt "the coordinator refused the worker's tokens" \
	"$(stats_field "$T/hostile.stats" grammar_refused)" 0
expect_gt "requests still finished on the honest shard" \
	"$(echo "$out" | awk '{print $2}')" 10

echo "== edges"
# byte token of 0x01 (llama2.c ids 3..258 are the bytes): nothing else spells it
cat > "$T/edge.jsonl" <<'EOF'
{"id":"only-eos","prompt":"x","max_tokens":20,"grammar":"root ::= \"xyz\"","temperature":1.0,"seed":3}
{"id":"nothing","prompt":"x","max_tokens":5,"grammar":"root ::= \"\\x01\"","logit_bias":{"4":-100}}
{"id":"bad-gbnf","prompt":"x","grammar":"root ::= \"a\" | (\n"}
{"id":"undefined","prompt":"x","grammar":"root ::= item"}
{"id":"keyword","prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"string","pattern":"a+"}}}}
{"id":"both","prompt":"x","grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}
{"id":"with-ignore-eos","prompt":"x","grammar":"root ::= \"a\"","ignore_eos":true}
{"id":"format-type","prompt":"x","response_format":{"type":"yaml"}}
{"id":"format-member","prompt":"x","response_format":{"type":"json_object","schema":{}}}
{"id":"text-format","prompt":"x","max_tokens":3,"response_format":{"type":"text"}}
{"id":"not-string","prompt":"x","grammar":["root"]}
EOF
timeout 60 "$BIN/dynbatch" run --no-progress --model "$SIM" --tokenizer "$TOK" --workers 1 \
	--input "$T/edge.jsonl" --output "$T/edge.out" 2> /dev/null
# edge ID FINISH PATTERN: the result of ID finished so, its text or error
# matching PATTERN
edge() {
	local line
	line=$(grep "\"id\":\"$1\"" "$T/edge.out")
	if echo "$line" | grep -q "\"finish_reason\":\"$2\"" && echo "$line" | grep -q -- "$3"; then
		pass "$1: $2"
	else
		fail "$1: wanted $2 and '$3': $line"
	fi
}
edge only-eos stop '"text":"xyz"'
edge nothing error "grammar allows none here"
edge bad-gbnf error "field 'grammar': grammar line 1 column 16: ( without its )"
edge undefined error "field 'grammar'.*item"
edge keyword error "field 'response_format'.*pattern"
edge both error "cannot both be given"
edge with-ignore-eos error "ignore_eos"
edge format-type error 'unknown type \\"yaml\\"'
edge format-member error "unknown member 'schema'"
edge text-format '[a-z]*' '"text":'
edge not-string error "field 'grammar' must be a string"

printf '%s\n' '{"id":"long","prompt":"x","grammar":"root ::= \"abcdefghijklmnopqrstuvwxyz\""}' |
	timeout 30 "$BIN/dynbatch" run --no-progress --model "$SIM" --tokenizer "$TOK" \
	--grammar-max-bytes 16 --workers 0 > "$T/long.out" 2> /dev/null
grep -q "more than --grammar-max-bytes (16)" "$T/long.out" &&
	pass "a grammar past --grammar-max-bytes is refused, naming the limit" ||
	fail "long grammar: $(cat "$T/long.out")"
printf '%s\n' '{"id":"off","prompt":[5],"grammar":"root ::= \"a\""}' |
	timeout 30 "$BIN/dynbatch" run --no-progress --model "$SIM" --workers 0 \
	> "$T/notok.out" 2> /dev/null
grep -q "grammars need the model's tokenizer" "$T/notok.out" &&
	pass "without a tokenizer a grammar is refused, saying why" ||
	fail "no tokenizer: $(cat "$T/notok.out")"

printf 'root ::= "yes" | "no"\n' > "$T/yn.gbnf"
printf '%s\n' '{"id":"d","prompt":"x","max_tokens":9,"temperature":1,"seed":1}' \
	'{"id":"own","prompt":"x","max_tokens":9,"grammar":"root ::= \"maybe\""}' \
	'{"id":"plain","prompt":"x","max_tokens":5,"response_format":{"type":"text"}}' |
	timeout 30 "$BIN/dynbatch" run --no-progress --model "$SIM" --tokenizer "$TOK" \
	--grammar-file "$T/yn.gbnf" --workers 1 > "$T/gf.out" 2> /dev/null
grep '"id":"d"' "$T/gf.out" | grep -Eq '"text":"(yes|no)"' &&
	grep '"id":"own"' "$T/gf.out" | grep -q '"text":"maybe"' &&
	grep '"id":"plain"' "$T/gf.out" | grep -q '"finish_reason":"length"' &&
	pass "--grammar-file holds requests with no grammar of their own" ||
	fail "--grammar-file: $(cat "$T/gf.out")"
printf 'root ::= "yes" | (\n' > "$T/bad.gbnf"
timeout 30 "$BIN/dynbatch" run --model "$SIM" --tokenizer "$TOK" --grammar-file "$T/bad.gbnf" \
	< /dev/null > /dev/null 2> "$T/gf.err"
expect_eq "a bad --grammar-file: exit 2" $? 2
grep -q "grammar-file .*bad.gbnf: grammar line 1 column 18" "$T/gf.err" &&
	pass "a bad --grammar-file is named with its line and column" ||
	fail "bad --grammar-file: $(cat "$T/gf.err")"

echo "== over HTTP, through the official openai client"
serve_start http --model "$SIM" --tokenizer "$TOK" --chat-template chatml --workers 2 \
	--batch 8
code=$(curl -s -o "$T/bad.json" -w '%{http_code}' "$URL/v1/chat/completions" -d \
	'{"model":"sim","messages":[{"role":"user","content":"x"}],"grammar":"root ::= x"}')
if [ "$code" = 400 ] && grep -q '"param":"grammar"' "$T/bad.json"; then
	pass "a bad grammar is a 400 whose param is grammar"
else
	fail "bad grammar over HTTP: $code $(cat "$T/bad.json")"
fi
openai_setup
case $? in
0)
	ln -s "$(cd "$NODE_DIR" && pwd)/node_modules" "$T/node_modules"
	cp "$(dirname "$0")/openai_grammar.mjs" "$T/"
	if (cd "$T" && timeout -k 5 60 node openai_grammar.mjs "$URL/v1" sim) > "$T/node.out" 2>&1; then
		pass "$(tail -n 1 "$T/node.out")"
	else
		fail "openai client: $(tail -n 5 "$T/node.out")"
	fi ;;
esac
serve_stop
expect_eq "serve exits 0 after SIGTERM" "$SRV_RC" 0

finish
