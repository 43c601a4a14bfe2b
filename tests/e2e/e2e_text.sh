#!/bin/bash
# e2e_text.sh - text end to end (issue 16): string prompts, "stop" strings
# on the generated text, the end tokens and ignore_eos, "text" in results.
# A tokenizer trained on a text full of multi-byte characters (euro sign,
# emoji, CJK, Greek, Cyrillic) with a small vocabulary, so the sim (vocab
# = the tokenizer's) emits many multi-byte characters split over byte
# tokens, invalid UTF-8 and pieces of words.  Every result equals
# refdecode --tokenizer's naive decode (naive encoder, every stop searched
# for over the whole text after each token) at workers 0/1/3 x batch
# 1/7/64 and under kill -9; run --stream's deltas (also under kill -9)
# add up to the result's text byte for byte and never take a byte back;
# overlapping stops on a text of two letters (logit_bias) agree too;
# HTTP streamed and non-streamed text agree with the JSON Lines run; EOS
# and BOS end a request unless ignore_eos; a string stop beats a token
# stop completing on the same token; bad stops, a missing or wrong
# tokenizer get clear errors; a tokenizer.bin beside a llama checkpoint
# is picked up.
set -u
. "$(dirname "$0")/e2e_lib.sh"

VOCAB=500
MSEED=$((SEED % 1000))
SIM="sim:vocab=$VOCAB,seed=$MSEED"
T=$E2E_TMP
TOK=$T/tok.bin

run() { timeout -k 5 60 "$BIN/dynbatch" run --no-progress "$@"; }
check_text() { check_results "$@" --tokenizer "$TOK"; }

# A corpus of words in many scripts (seeded): the tokenizer learns some
# of them, the rest falls back to bytes.
python3 - "$SEED" > "$T/corpus.txt" <<'PY'
import random, sys
r = random.Random(int(sys.argv[1]))
words = ["price 5€", "€uro", "naïve café", "日本語のテキスト", "中文字符", "数据",
         "emoji 😀🎉", "👍🏽", "Straße", "Ελληνικά", "русский текст", "hello world",
         "the quick brown fox", "😀😀", "ß€😀", "ünïcödé", "한국어", "ℕ→ℝ", "𝔘𝔫𝔦"]
out = []
for _ in range(2500):
    out.append(r.choice(words))
    out.append(r.choice([" ", " ", "\n", ", ", ". "]))
sys.stdout.write("".join(out))
PY
"$BIN/make_tokenizer" --vocab $VOCAB --out "$TOK" --input "$T/corpus.txt" > /dev/null ||
	fail "make_tokenizer"

"$BIN/gen_workload" --n 300 --seed "$SEED" --model "$SIM" --text "$T/corpus.txt" \
	--tokenizer "$TOK" --max-prompt 80 --max-tokens 48 --stop-frac 0.7 \
	--sampling > "$T/w.jsonl"
# what the reference says the workload does: stops must really fire
"$BIN/refdecode" --model "$SIM" --tokenizer "$TOK" --input "$T/w.jsonl" > "$T/ref.out"
fired=$(python3 - "$T/w.jsonl" "$T/ref.out" <<'PY'
import json, sys
reqs = {}
for l in open(sys.argv[1]):
    q = json.loads(l)
    reqs[q["id"]] = q
TOKEN_STOPS = ("stop_token", "stop_token_ids", "stop_sequence", "stop_sequences")
n_stop = n_string = n_end = n_fffd = 0
for l in open(sys.argv[2]):
    r = json.loads(l)
    q = reqs[r["id"]]
    n_fffd += "\ufffd" in r.get("text", "")
    if r["finish_reason"] != "stop":
        continue
    n_stop += 1
    if any(k in q for k in TOKEN_STOPS):
        continue
    # without token stops a stop is a stop string or an end token (left
    # out of tokens, or the last one with include_stop)
    t = r["tokens"]
    if len(t) < r["usage"]["completion_tokens"] or (t and t[-1] in (1, 2)):
        n_end += 1
    else:
        n_string += 1
print(n_stop, n_string, n_end, n_fffd)
PY
)
set -- $fired
echo "  workload: $(wc -l < "$T/w.jsonl") requests; reference: $1 stopped, $2 surely by a stop string, $3 by an end token, $4 texts with invalid UTF-8"
expect_gt "stop strings fire in the workload" "${2:-0}" 30

echo "== workers 0/1/3 x batch 1/7/64: text exact against refdecode --tokenizer"
for workers in 0 1 3; do
	for batch in 1 7 64; do
		name="workers $workers batch $batch"
		out="$T/out-$workers-$batch.jsonl"
		if run --workers $workers --batch $batch --model "$SIM" --tokenizer "$TOK" \
			--input "$T/w.jsonl" --output "$out" 2> "$T/err"; then
			check_text "$name" "$SIM" "$T/w.jsonl" "$out"
		else
			fail "$name: exit $?"; tail -n 5 "$T/err"
		fi
	done
done

echo "== kill -9 of workers"
timeout -k 5 60 "$BIN/fault_inject" --seed "$SEED" --first-kill-ms 50 --kill-rate 20 -- \
	"$BIN/dynbatch" run --no-progress --model "$SIM,call_us=300" --tokenizer "$TOK" \
	--workers 3 --batch 7 --step-timeout 2000 --input "$T/w.jsonl" \
	--output "$T/fault.out" 2> "$T/fault.err"
expect_eq "kill -9: exit 0" $? 0
check_text "kill -9" "$SIM" "$T/w.jsonl" "$T/fault.out"
grep -q "kills=[1-9]" "$T/fault.err" && pass "workers were killed" ||
	fail "no worker was killed: $(tail -n 1 "$T/fault.err")"

echo "== run --stream: the deltas add up to the text, no byte taken back"
# stream_check.py OUT: per (id, index) the deltas are a prefix of the
# result's text and with its "delta" add up to it (decoded JSON strings);
# the delta lines' tokens are a prefix of the result's
cat > "$T/stream_check.py" <<'PY'
import json, sys
sent, toks, bad, n_delta, n_held = {}, {}, [], 0, 0
for l in open(sys.argv[1]):
    d = json.loads(l)
    key = (d["id"], d.get("index", 0))
    if "finish_reason" not in d:        # a delta line
        n_delta += 1
        n_held += d["delta"] == "" and len(d["tokens"]) > 0
        sent[key] = sent.get(key, "") + d["delta"]
        toks[key] = toks.get(key, []) + d["tokens"]
        continue
    text = d["text"]
    got = sent.pop(key, "")
    if not text.startswith(got):         # a byte sent that is not in the answer
        bad.append("%s: deltas %r are not a prefix of the text %r" % (key, got, text))
    elif got + d.get("delta", "") != text:
        bad.append("%s: deltas %r + result delta %r != text %r" % (key, got, d.get("delta"), text))
    t = toks.pop(key, [])
    if d["tokens"][:len(t)] != t:
        bad.append("%s: delta tokens %r are not a prefix of the tokens" % (key, t))
if sent:
    bad.append("deltas without a result: %r" % list(sent)[:3])
for b in bad[:5]:
    print(b)
print("%d delta lines, %d of them with tokens but no text (held back), %d problems" % (n_delta, n_held, len(bad)))
sys.exit(1 if bad else 0)
PY
for workers in 0 3 kill; do
	label="workers $workers"
	if [ $workers = kill ]; then	# 3 workers, some killed: rows redone
		label="workers 3, kill -9"
		timeout -k 5 60 "$BIN/fault_inject" --seed "$SEED" --kill-rate 20 -- \
			"$BIN/dynbatch" run --no-progress --stream --model "$SIM,call_us=300" \
			--tokenizer "$TOK" --workers 3 --batch 7 --step-timeout 2000 \
			--input "$T/w.jsonl" --output "$T/stream-$workers.out" 2> "$T/err"
	else
		run --stream --workers $workers --batch 7 --model "$SIM" --tokenizer "$TOK" \
			--input "$T/w.jsonl" --output "$T/stream-$workers.out" 2> "$T/err"
	fi
	grep '"finish_reason"' "$T/stream-$workers.out" > "$T/stream-$workers.results"
	check_text "stream, $label: result lines" "$SIM" "$T/w.jsonl" \
		"$T/stream-$workers.results"
	if python3 "$T/stream_check.py" "$T/stream-$workers.out" > "$T/stream.log"
	then
		pass "stream, $label: $(tail -n 1 "$T/stream.log")"
	else
		fail "stream, $label:"; sed 's/^/       /' "$T/stream.log"
	fi
done

echo "== overlapping stops on a text of two letters (and the euro sign in bytes)"
# logit_bias keeps the sampled text to the byte tokens of a and b (byte b
# is token b + 3), and for some requests the bytes of U+20AC: stops such
# as "abab" and "bab" overlap, share prefixes and end together, the euro
# sign comes and goes in pieces
python3 - "$SEED" > "$T/ab.jsonl" <<'PY'
import json, random, sys
r = random.Random(int(sys.argv[1]))
for i in range(200):
    bias = {"100": 20, "101": 20}
    euro = i % 3 == 0
    if euro:
        bias.update({"229": 19.5, "133": 19.5, "175": 19.5})
    stops = []
    for _ in range(r.randint(1, 6)):
        if euro and r.random() < 0.5:
            stops.append("".join(r.choice(["\u20ac", "a", "b"]) for _ in range(r.randint(2, 4))))
        else:
            stops.append("".join(r.choice("ab") for _ in range(r.randint(2, 9))))
    q = {"id": "ab%d" % i, "prompt": [5, 6, i % 50 + 3], "max_tokens": 60,
         "temperature": 1.0, "seed": i, "logit_bias": bias, "stop": stops,
         "include_stop": r.random() < 0.3}
    if r.random() < 0.3:
        q["stop_sequences"] = [[r.choice([100, 101]) for _ in range(r.randint(2, 5))]]
    if r.random() < 0.3:
        q["n"] = 2
    print(json.dumps(q, ensure_ascii=False))
PY
run --stream --workers 3 --batch 16 --model "$SIM" --tokenizer "$TOK" \
	--input "$T/ab.jsonl" --output "$T/ab.out" 2> "$T/err"
grep '"finish_reason"' "$T/ab.out" > "$T/ab.results"
check_text "two letters: results" "$SIM" "$T/ab.jsonl" "$T/ab.results"
if python3 "$T/stream_check.py" "$T/ab.out" > "$T/stream.log"; then
	pass "two letters, stream: $(tail -n 1 "$T/stream.log")"
else
	fail "two letters, stream:"; sed 's/^/       /' "$T/stream.log"
fi

echo "== HTTP: streamed and non-streamed text agree with the JSON Lines run"
# requests of one choice that do not draw with an engine-picked seed
python3 - "$T/w.jsonl" > "$T/h.jsonl" <<'PY'
import json, sys
n = 0
for l in open(sys.argv[1]):
    q = json.loads(l)
    if q.get("n", 1) != 1 or (q.get("temperature", 0) > 0 and "seed" not in q):
        continue
    if "stop" not in q or q["max_tokens"] < 8:
        continue
    print(l, end="")
    n += 1
    if n == 12:
        break
PY
run --workers 0 --model "$SIM" --tokenizer "$TOK" --input "$T/h.jsonl" \
	--output "$T/h.out" 2> "$T/err"
check_text "the HTTP requests as JSON Lines" "$SIM" "$T/h.jsonl" "$T/h.out"
serve_start http --workers 2 --batch 8 --model "$SIM" --tokenizer "$TOK"
if python3 - "$URL" "$T/h.jsonl" "$T/h.out" > "$T/h.log" <<'PY'
import json, sys, urllib.request
url, reqs, outs = sys.argv[1], sys.argv[2], sys.argv[3]
want = {json.loads(l)["id"]: json.loads(l)["text"] for l in open(outs)}
bad = n = 0
def post(body):
    rq = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(rq, timeout=20).read().decode()
for l in open(reqs):
    q = json.loads(l)
    plain = json.loads(post(q))["choices"][0]["text"]
    streamed = ""
    for line in post(dict(q, stream=True)).split("\n"):
        if line.startswith("data: {"):
            ev = json.loads(line[6:])
            for c in ev.get("choices", []):
                streamed += c.get("text", "")
    n += 1
    if not (plain == streamed == want[q["id"]]):
        bad += 1
        print("%s: non-streamed %r, streamed %r, JSON Lines %r" % (q["id"], plain, streamed, want[q["id"]]))
print("%d requests, %d differ" % (n, bad))
sys.exit(1 if bad or not n else 0)
PY
then
	pass "HTTP: $(tail -n 1 "$T/h.log")"
else
	fail "HTTP:"; sed 's/^/       /' "$T/h.log" | tail -n 6
fi
serve_stop
expect_eq "serve exit 0" "$SRV_RC" 0

echo "== the end tokens: EOS ends a request unless ignore_eos"
# the id of the piece " " (the dummy prefix): after BOS it loses its space
SPACE=$(python3 - "$TOK" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
off = 4
for i in range(100000):
    n = struct.unpack_from("<i", d, off + 4)[0]
    if d[off + 8:off + 8 + n] == b" ":
        print(i)
        break
    off += 8 + n
PY
)
cat > "$T/eos.jsonl" <<JSONL
{"id":"space","prompt":[1],"max_tokens":3,"temperature":0,"logit_bias":{"$SPACE":100}}
JSONL
cat >> "$T/eos.jsonl" <<'JSONL'
{"id":"eos","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"2":100}}
{"id":"eos-inc","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"2":100},"include_stop":true}
{"id":"bos","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"1":100}}
{"id":"eos-ign","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"2":100},"ignore_eos":true}
{"id":"eos-stop","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"2":100},"ignore_eos":true,"stop":"s></"}
{"id":"after-bos","prompt":[1],"max_tokens":12,"ignore_eos":true}
{"id":"no-prompt","prompt":[],"max_tokens":12,"ignore_eos":true}
{"id":"empty-text","prompt":"","max_tokens":12,"ignore_eos":true,"stop":[" ","e"]}
{"id":"prio1","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"100":100},"stop":"a","stop_token_ids":[100]}
{"id":"prio2","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"100":100},"stop":["x","aa"],"stop_sequences":[[100,100]]}
{"id":"prio3","prompt":"hello","max_tokens":5,"temperature":0,"logit_bias":{"100":100},"stop":"aa","stop_sequences":[[100,100]],"include_stop":true}
JSONL
run --workers 1 --model "$SIM" --tokenizer "$TOK" --input "$T/eos.jsonl" \
	--output "$T/eos.out" 2> "$T/err"
check_text "end tokens; prompts [1], [] and \"\"" "$SIM" "$T/eos.jsonl" "$T/eos.out"
got() { jq -c "select(.id == \"$1\") | [.finish_reason, .tokens, .text]" "$T/eos.out"; }
expect_eq "EOS: stop, left out of tokens and text" "$(got eos)" '["stop",[],""]'
expect_eq "EOS with include_stop: in tokens, not in text" "$(got eos-inc)" '["stop",[2],""]'
expect_eq "BOS ends too" "$(got bos)" '["stop",[],""]'
expect_eq "ignore_eos: runs to max_tokens" "$(got eos-ign)" \
	'["length",[2,2,2,2,2],"</s></s></s></s></s>"]'
expect_eq "ignore_eos: a stop string across the end tokens' text" "$(got eos-stop)" \
	'["stop",[2,2],"</"]'
expect_eq "after BOS a piece loses its leading space" "$(got space)" \
	"[\"length\",[$SPACE,$SPACE,$SPACE],\"  \"]"
# token 100 is the byte "a": a string stop and a token stop complete on
# the same token, and the string stop wins (its token stays in tokens)
expect_eq "string and token stop on one token: the string stop wins" "$(got prio1)" \
	'["stop",[100],""]'
expect_eq "string and token stop over two tokens: the string stop wins" "$(got prio2)" \
	'["stop",[100,100],""]'
expect_eq "the same with include_stop" "$(got prio3)" '["stop",[100,100],"aa"]'

echo "== bad stops and tokenizers: clear errors"
LONG=$(printf 'a%.0s' $(seq 257))
STOPS17=$(seq 17 | sed 's/.*/"s&"/' | paste -sd,)
cat > "$T/bad.jsonl" <<JSONL
{"id":"b1","prompt":"x","stop":""}
{"id":"b2","prompt":"x","stop":[$STOPS17]}
{"id":"b3","prompt":"x","stop":"$LONG"}
{"id":"b4","prompt":"x","stop":["a",5]}
{"id":"b5","prompt":"x","stop":["a",""]}
JSONL
run --workers 0 --model "$SIM" --tokenizer "$TOK" --input "$T/bad.jsonl" \
	--output "$T/bad.out" 2> "$T/err"
i=0
for want in "empty" "17" "256" "stop\[1\]" "empty"; do
	i=$((i + 1))
	line=$(jq -r "select(.id == \"b$i\") | [.finish_reason, .error] | @tsv" "$T/bad.out")
	if echo "$line" | grep -q "^error.*stop" && echo "$line" | grep -q -- "$want"; then
		pass "b$i: ${line#error	}"
	else
		fail "b$i: want an error about 'stop' saying '$want', got '$line'"
	fi
done
check_text "bad lines" "$SIM" "$T/bad.jsonl" "$T/bad.out"
printf '%s\n' '{"id":"n1","prompt":"x"}' '{"id":"n2","prompt":[5],"stop":"a"}' > "$T/notok.jsonl"
run --workers 0 --model "$SIM" --input "$T/notok.jsonl" --output "$T/notok.out" 2> "$T/err"
for id in n1 n2; do
	line=$(jq -r "select(.id == \"$id\") | [.finish_reason, .error] | @tsv" "$T/notok.out")
	case "$line" in
	error*tokenizer*) pass "$id without --tokenizer: ${line#error	}" ;;
	*) fail "$id without --tokenizer: want an error naming the tokenizer, got '$line'" ;;
	esac
done
# exit 2, naming the file, in time
expect_exit2() {
	local name=$1 file=$2
	shift 2
	timeout -k 2 10 "$BIN/dynbatch" run --no-progress --input "$T/eos.jsonl" \
		--output "$T/x.out" "$@" 2> "$T/x.err"
	local rc=$?
	if [ $rc = 2 ] && grep -q -F "$file" "$T/x.err"; then
		pass "$name: exit 2: $(head -n 1 "$T/x.err" | cut -c1-150)"
	else
		fail "$name: exit $rc, want 2 and a message naming $file: $(head -n 2 "$T/x.err")"
	fi
}
expect_exit2 "a tokenizer of another vocabulary" "$TOK" --model "sim:vocab=600" --tokenizer "$TOK"
head -c 1000 "$TOK" > "$T/trunc.bin"
expect_exit2 "a truncated tokenizer" "$T/trunc.bin" --model "$SIM" --tokenizer "$T/trunc.bin"
mkfifo "$T/fifo.bin"
expect_exit2 "a FIFO as --tokenizer" "$T/fifo.bin" --model "$SIM" --tokenizer "$T/fifo.bin"

echo "== llama: the tokenizer.bin beside the checkpoint, by default"
mkdir -p "$T/llama"
"$BIN/make_checkpoint" --out "$T/llama/model.bin" --dim 48 --hidden 96 --layers 2 \
	--heads 4 --kv-heads 2 --vocab $VOCAB --seq-len 256 --seed "$SEED" > /dev/null
cp "$TOK" "$T/llama/tokenizer.bin"
# greedy, string prompts; ignore_eos so the reference's token check (which
# knows no end tokens) sees the whole generation
"$BIN/gen_workload" --n 40 --seed "$SEED" --vocab $VOCAB --text "$T/corpus.txt" \
	--tokenizer "$TOK" --max-prompt 60 --max-tokens 24 --max-context 256 --stop-frac 0 |
	jq -c '.ignore_eos = true' > "$T/llama.jsonl"
if run --workers 2 --model "llama:$T/llama/model.bin" --input "$T/llama.jsonl" \
	--output "$T/llama.out" 2> "$T/err"; then
	expect_eq "llama: every result has text" \
		"$(jq -r 'select(.text == null or .finish_reason == "error") | .id' "$T/llama.out" | wc -l)" 0
	check_results "llama: string prompts encoded alike, tokens and text" "llama:$T/llama/model.bin" \
		"$T/llama.jsonl" "$T/llama.out" --tokenizer "$T/llama/tokenizer.bin"
else
	fail "llama run: exit $?"; tail -n 3 "$T/err"
fi

finish
