#!/bin/bash
# e2e_spec.sh - speculative decoding (--speculate ngram) never changes an
# answer: the same result lines, byte for byte (tokens, logprobs, finish
# reasons), as --speculate off, for greedy and seeded requests, at
# workers 0/1/2, batches 1..64, step budgets, 1 and 8 guesses a step, the
# llama model (paged KV: rolled-back guesses) and the sim token model;
# under kill -9 and garbled results; and refdecode agrees.  The speculation
# counters show guesses were made and taken (else the test proves nothing).
. "$(dirname "$0")/e2e_lib.sh"

CK="$E2E_TMP/tiny.bin"
"$BIN/make_checkpoint" --out "$CK" --dim 64 --hidden 96 --layers 2 --heads 4 \
	--kv-heads 2 --vocab 300 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/gen_workload" --n 80 --seed "$SEED" --vocab 300 --max-prompt 60 \
	--max-tokens 80 --max-context 256 > "$E2E_TMP/g.jsonl"
"$BIN/gen_workload" --n 80 --seed "$((SEED + 1))" --vocab 300 --max-prompt 60 \
	--max-tokens 80 --max-context 256 --sampling --ids s > "$E2E_TMP/s.jsonl"
# every sampled request seeded (an engine-picked seed differs per run);
# some end with stops and EOS-like ends inside a guessed run
python3 - "$E2E_TMP/s.jsonl" "$E2E_TMP/g.jsonl" > "$E2E_TMP/in.jsonl" <<'PY'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    r.setdefault("seed", 1000 + i)
    print(json.dumps(r))
for line in open(sys.argv[2]):
    print(line.rstrip("\n"))
PY

# run NAME OUT ARGS...: decode in.jsonl into OUT (sorted), stats beside it
run() {
	local name=$1 out=$2
	shift 2
	timeout 300 "$BIN/dynbatch" run --no-progress --input "$E2E_TMP/in.jsonl" \
		--output "$E2E_TMP/raw.jsonl" --stats "$out.stats" "$@" 2> "$E2E_TMP/run.err"
	expect_eq "$name: exit 0" $? 0
	sort "$E2E_TMP/raw.jsonl" > "$out"
}
# same NAME A B: the two sorted outputs are identical
same() {
	if cmp -s "$2" "$3"; then pass "$1: identical to --speculate off"
	else fail "$1: differs from --speculate off"; diff "$2" "$3" | head -6; fi
}

echo "== llama: speculation on == off, bit for bit"
run "off, in-process" "$E2E_TMP/off" --model "llama:$CK" --workers 0
check_results "off is exact" "llama:$CK" "$E2E_TMP/in.jsonl" "$E2E_TMP/off"
for cfg in "--workers 0 --batch 16" "--workers 1 --batch 1" \
	   "--workers 2 --batch 64" "--workers 2 --batch 7 --step-tokens 3" \
	   "--workers 2 --batch 16 --draft-tokens 1" \
	   "--workers 1 --batch 16 --draft-tokens 8" \
	   "--workers 2 --batch 16 --prefix-cache off"; do
	# shellcheck disable=SC2086
	run "ngram $cfg" "$E2E_TMP/on" --model "llama:$CK" --speculate ngram $cfg
	same "ngram $cfg" "$E2E_TMP/off" "$E2E_TMP/on"
done
drafted=$(stats_field "$E2E_TMP/on.stats" drafted)
accepted=$(stats_field "$E2E_TMP/on.stats" accepted)
expect_gt "guesses were made" "$drafted" 50
expect_gt "guesses were taken" "$accepted" 10
if [ -n "$accepted" ] && [ "$accepted" -lt "$drafted" ]; then
	pass "some guesses were rejected ($accepted of $drafted taken): rollback ran"
else
	fail "no guess was rejected ($accepted of $drafted): rollback untested"
fi
run "off: no spec object" "$E2E_TMP/off2" --model "llama:$CK" --workers 1
grep -q '"spec"' "$E2E_TMP/off2.stats" && fail "--speculate off reports a spec object" ||
	pass "--speculate off reports no spec object"

echo "== per request: \"speculate\": false guesses nothing, and is checked"
python3 - "$E2E_TMP/in.jsonl" > "$E2E_TMP/nospec.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    r["speculate"] = False
    print(json.dumps(r))
print(json.dumps({"id": "bad", "prompt": [1, 2], "speculate": "no"}))
PY
for w in 0 2; do
	timeout 300 "$BIN/dynbatch" run --no-progress --model "llama:$CK" --workers $w \
		--batch 16 --speculate ngram --input "$E2E_TMP/nospec.jsonl" \
		--output "$E2E_TMP/nospec.out" --stats "$E2E_TMP/nospec.stats" 2> /dev/null
	expect_eq "speculate false, $w workers: nothing guessed" \
		"$(stats_field "$E2E_TMP/nospec.stats" drafted)" 0
	grep -v '"id":"bad"' "$E2E_TMP/nospec.out" | sort | cmp -s - "$E2E_TMP/off" &&
		pass "speculate false, $w workers: the same answers" ||
		fail "speculate false, $w workers: answers differ"
	grep '"id":"bad"' "$E2E_TMP/nospec.out" | grep -q "field 'speculate' must be true or false" &&
		pass "speculate \"no\" refused, naming the field" ||
		fail "speculate \"no\": $(grep '"id":"bad"' "$E2E_TMP/nospec.out")"
done

echo "== llama: penalties count the guesses taken before each position"
python3 - "$E2E_TMP/in.jsonl" > "$E2E_TMP/pen.jsonl" <<'PY'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    if i % 2:
        r.update(frequency_penalty=0.7, presence_penalty=0.4, repetition_penalty=1.2)
    print(json.dumps(r))
PY
cp "$E2E_TMP/in.jsonl" "$E2E_TMP/plain.jsonl"
cp "$E2E_TMP/pen.jsonl" "$E2E_TMP/in.jsonl"
run "penalties, off" "$E2E_TMP/poff" --model "llama:$CK" --workers 0
run "penalties, ngram" "$E2E_TMP/pon" --model "llama:$CK" --workers 2 --batch 16 \
	--speculate ngram
same "penalties, ngram" "$E2E_TMP/poff" "$E2E_TMP/pon"
cp "$E2E_TMP/plain.jsonl" "$E2E_TMP/in.jsonl"

echo "== llama: faults under speculation"
"$BIN/make_checkpoint" --out "$E2E_TMP/k.bin" --dim 128 --hidden 256 --layers 4 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/gen_workload" --n 200 --seed "$SEED" --vocab 300 --max-prompt 100 \
	--max-tokens 100 --max-context 256 > "$E2E_TMP/k.jsonl"
"$BIN/fault_inject" --seed "$SEED" --first-kill-ms 50 --kill-rate 25 --stop-rate 8 -- \
	"$BIN/dynbatch" run --model "llama:$E2E_TMP/k.bin" --workers 3 --batch 6 \
	--speculate ngram --step-tokens 2 --step-timeout 2000 \
	--input "$E2E_TMP/k.jsonl" --output "$E2E_TMP/kill.jsonl" 2> "$E2E_TMP/kill.err"
expect_eq "kill -9 and SIGSTOP: exit 0" $? 0
check_results "kill -9 and SIGSTOP" "llama:$E2E_TMP/k.bin" "$E2E_TMP/k.jsonl" \
	"$E2E_TMP/kill.jsonl"
grep -q "kills=[1-9]" "$E2E_TMP/kill.err" && pass "workers were killed" ||
	fail "no worker was killed: $(tail -1 "$E2E_TMP/kill.err")"
run "garbled results (resets)" "$E2E_TMP/on" --model "llama:$CK" --workers 2 \
	--batch 16 --speculate ngram --garbage-every 5
same "garbled results (resets)" "$E2E_TMP/off" "$E2E_TMP/on"

echo "== the sim token model: each guessed prefix a row of its own"
"$BIN/gen_workload" --n 300 --seed "$SEED" --vocab 16 --model sim:vocab=16 \
	--max-prompt 40 --max-tokens 60 > "$E2E_TMP/in.jsonl"
run "sim off" "$E2E_TMP/off" --model sim:vocab=16 --workers 0
for w in 0 2; do
	run "sim ngram, $w workers" "$E2E_TMP/on" --model sim:vocab=16 --workers $w \
		--batch 32 --speculate ngram --draft-tokens 8
	same "sim ngram, $w workers" "$E2E_TMP/off" "$E2E_TMP/on"
done
check_results "sim ngram is exact" sim:vocab=16 "$E2E_TMP/in.jsonl" "$E2E_TMP/on"
"$BIN/gen_workload" --n 300 --seed "$((SEED + 2))" --vocab 16 --model sim:vocab=16 \
	--max-prompt 40 --max-tokens 60 --sampling --ids p |
python3 -c '
import json, sys
for i, line in enumerate(sys.stdin):
    r = json.loads(line)
    r.setdefault("seed", 7 + i)
    if i % 2:
        r.update(frequency_penalty=1.0, presence_penalty=0.5, repetition_penalty=1.3)
    print(json.dumps(r))' > "$E2E_TMP/in.jsonl"
run "sim sampled + penalties, off" "$E2E_TMP/off" --model sim:vocab=16 --workers 0
run "sim sampled + penalties, ngram" "$E2E_TMP/on" --model sim:vocab=16 --workers 2 \
	--batch 32 --speculate ngram
same "sim sampled + penalties, ngram" "$E2E_TMP/off" "$E2E_TMP/on"
check_results "sim sampled + penalties is exact" sim:vocab=16 "$E2E_TMP/in.jsonl" "$E2E_TMP/on"
expect_gt "sim: guesses were taken" "$(stats_field "$E2E_TMP/on.stats" accepted)" 10

finish
