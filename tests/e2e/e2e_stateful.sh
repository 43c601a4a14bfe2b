#!/bin/bash
# e2e_stateful.sh - the engine's stateful-model path (model.h ABI version 2,
# docs/DESIGN.md 2.3) end to end, with simkv: a stateful model that gives
# the sim's tokens but computes them from its own copy of what it
# consumed.  So every run is checked token for token by refdecode's sim,
# and any model state the engine vouched for wrongly (after a new request
# in a slot, a reset, a kill, an isolation run, a pause) shows up as a
# mismatch.  Runs: workers 0..3, batch 1..64, step budgets, kills and
# stops, garbled results, a poison request, a paused and resumed stream,
# refusals, and the model's context limit.
. "$(dirname "$0")/e2e_lib.sh"

VOCAB=500
MODEL="simkv:vocab=$VOCAB"
REF="sim:vocab=$VOCAB"
# prompts up to 300 tokens: with a budget they take many steps to prefill
"$BIN/gen_workload" --n 300 --seed "$SEED" --vocab $VOCAB --max-prompt 300 \
	--max-tokens 40 > "$E2E_TMP/all.jsonl"
# an empty prompt is refused by a stateful model: checked on its own below
grep -v '"prompt":\[\]' "$E2E_TMP/all.jsonl" > "$E2E_TMP/in.jsonl"

# run NAME ARGS...: decode in.jsonl with ARGS and check it
run() {
	local name=$1
	shift
	timeout 300 "$BIN/dynbatch" run --model "$MODEL" --input "$E2E_TMP/in.jsonl" \
		--output "$E2E_TMP/out.jsonl" "$@" 2> "$E2E_TMP/run.err"
	expect_eq "$name: exit 0" $? 0
	check_results "$name" "$REF" "$E2E_TMP/in.jsonl" "$E2E_TMP/out.jsonl"
}

echo "== worker counts, batch sizes and step budgets"
run "in-process" --workers 0
run "in-process, 16 tokens a step" --workers 0 --step-tokens 16
run "1 worker, batch 1, 1 token a step" --workers 1 --batch 1 --step-tokens 1
run "2 workers, batch 2" --workers 2 --batch 2 --step-tokens 5
run "3 workers, batch 7, 9 tokens a step" --workers 3 --batch 7 --step-tokens 9
run "2 workers, batch 64, no budget" --workers 2 --batch 64 --step-tokens 0
run "3 workers, batch 64, 64 tokens a step" --workers 3 --batch 64 --step-tokens 64

echo "== simkv2: the same model through ABI version 2 (not paged), as older plugins"
MODEL="simkv2:vocab=$VOCAB"
run "v2, in-process" --workers 0 --step-tokens 16
run "v2, 3 workers, batch 7, 9 tokens a step" --workers 3 --batch 7 --step-tokens 9
run "v2, garbled results" --workers 2 --batch 16 --garbage-every 5
grep -q "dynbatch: kv:" "$E2E_TMP/run.err" && fail "v2: a KV pool was made" ||
	pass "v2: no KV pool, no block tables"
MODEL="simkv:vocab=$VOCAB"

echo "== a step budget keeps decoding rows going while long prompts prefill"
# with 1 token a step a 300-token prompt takes 300 steps: decode steps of
# the other rows happen in between, so the run has many more steps than
# rows x tokens would need, and none of its results is refused as stale
timeout 300 "$BIN/dynbatch" run --model "$MODEL" --workers 1 --batch 8 \
	--step-tokens 4 --input "$E2E_TMP/in.jsonl" --output "$E2E_TMP/out.jsonl" \
	--stats "$E2E_TMP/stats.json" 2> "$E2E_TMP/run.err"
check_results "budget 4, batch 8" "$REF" "$E2E_TMP/in.jsonl" "$E2E_TMP/out.jsonl"
expect_eq "no stale results" "$(stats_field "$E2E_TMP/stats.json" stale_results_rejected)" 0

echo "== faults: every request is rebuilt by re-prefill, bit-identical"
"$BIN/fault_inject" --seed "$SEED" --first-kill-ms 50 --kill-rate 20 --stop-rate 5 -- \
	"$BIN/dynbatch" run --model "$MODEL,call_us=200" --workers 3 --batch 24 \
	--step-tokens 8 --step-timeout 2000 --input "$E2E_TMP/in.jsonl" \
	--output "$E2E_TMP/out.jsonl" 2> "$E2E_TMP/kill.err"
expect_eq "kill -9 and SIGSTOP: exit 0" $? 0
check_results "kill -9 and SIGSTOP" "$REF" "$E2E_TMP/in.jsonl" "$E2E_TMP/out.jsonl"
grep -q "kills=[1-9]" "$E2E_TMP/kill.err" && pass "workers were killed" ||
	fail "no worker was killed: $(tail -1 "$E2E_TMP/kill.err")"
run "garbled results (resets)" --workers 2 --batch 16 --garbage-every 5
run "garbled results, 9 tokens a step" --workers 3 --batch 16 --step-tokens 9 \
	--garbage-every 7

echo "== a poison request is isolated and fails alone"
# a crash token that some generated tokens hit: those requests fail as
# poison after running alone, every other one is exact
poison=$("$BIN/refdecode" --model "$REF" --input "$E2E_TMP/in.jsonl" |
	head -40 | grep -o '"tokens":\[[0-9]*' | grep -o '[0-9]*$' | head -1)
timeout 300 "$BIN/dynbatch" run --model "$MODEL,crash_token=$poison" --workers 2 \
	--batch 16 --step-tokens 16 --input "$E2E_TMP/in.jsonl" \
	--output "$E2E_TMP/out.jsonl" 2> "$E2E_TMP/run.err"
expect_eq "poison: exit 0" $? 0
check_results "poison token $poison: the rest exact" "$REF" "$E2E_TMP/in.jsonl" \
	"$E2E_TMP/out.jsonl" --allow-errors
n_err=$(grep -c '"finish_reason":"error"' "$E2E_TMP/out.jsonl")
n_poison=$(grep -c 'giving up on it' "$E2E_TMP/out.jsonl")
[ "$n_err" -ge 1 ] && [ "$n_err" = "$n_poison" ] &&
	pass "$n_err requests failed, each as poison" ||
	fail "errors $n_err, poison $n_poison"

echo "== refusals and the model's context limit"
printf '%s\n' '{"id":"e","prompt":[],"max_tokens":3}' \
	'{"id":"ok","prompt":[1,2],"max_tokens":3}' > "$E2E_TMP/empty.jsonl"
for w in 0 2; do
	timeout 60 "$BIN/dynbatch" run --model "$MODEL" --workers $w \
		--input "$E2E_TMP/empty.jsonl" --output "$E2E_TMP/out.jsonl" 2>/dev/null
	grep '"id":"e"' "$E2E_TMP/out.jsonl" | grep -q '"finish_reason":"error".*prompt is empty' &&
		pass "workers $w: an empty prompt is refused, naming why" ||
		fail "workers $w: $(grep '"id":"e"' "$E2E_TMP/out.jsonl")"
	grep '"id":"ok"' "$E2E_TMP/out.jsonl" | grep -q '"finish_reason":"length"' &&
		pass "workers $w: its neighbour is served" || fail "workers $w: neighbour"
done
timeout 60 "$BIN/dynbatch" run --model "$MODEL,context=64" --workers 1 \
	--max-context 65 --input "$E2E_TMP/empty.jsonl" --output /dev/null 2> "$E2E_TMP/ctx.err"
expect_eq "--max-context above the model's limit: exit 2" $? 2
grep -q "larger than the model's own limit of 64" "$E2E_TMP/ctx.err" &&
	pass "the message names the model's limit" || fail "message: $(cat "$E2E_TMP/ctx.err")"
echo '{"id":"long","prompt":[1,2,3],"max_tokens":100}' > "$E2E_TMP/long.jsonl"
timeout 60 "$BIN/dynbatch" run --model "$MODEL,context=64" --workers 1 \
	--input "$E2E_TMP/long.jsonl" --output "$E2E_TMP/out.jsonl" 2>/dev/null
grep -q '"finish_reason":"error"' "$E2E_TMP/out.jsonl" &&
	pass "the model's limit is the default --max-context: a request past it is refused" ||
	fail "past the model's limit: $(cat "$E2E_TMP/out.jsonl")"

echo "== serve: a stream paused for backpressure resumes by re-prefill"
command -v python3 >/dev/null || { echo "skipped: no python3"; finish; exit; }
serve_start slow --workers 2 --batch 8 --step-tokens 8 --model "$MODEL,call_us=300" \
	--conn-buffer 4096 --write-timeout 20000
# a stream of 600 tokens read only after 2 s: its answers fill the buffer,
# the request pauses (gives up its slot), then resumes from its tokens
python3 "$(dirname "$0")/slow_stream.py" "$PORT" 199 600 60 > "$E2E_TMP/slow.tokens"
printf '{"id":"slow","prompt":%s,"max_tokens":600}\n' \
	"$(python3 -c 'print(list(range(1,200)))' | tr -d ' ')" > "$E2E_TMP/slow_q.jsonl"
want=$("$BIN/refdecode" --model "$REF" --input "$E2E_TMP/slow_q.jsonl" |
	grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens"://')
got=$(tr -d ' \n' < "$E2E_TMP/slow.tokens")
[ -n "$got" ] && [ "$got" = "$want" ] && pass "the resumed stream has exactly its tokens" ||
	fail "resumed stream: got ${got:0:80}..., want ${want:0:80}..."
pauses=$(curl -s "$URL/metrics" | awk '$1 == "dynbatch_http_pauses_total" { print $2 }')
expect_gt "it was paused" "${pauses:-0}" 0
serve_stop
expect_eq "serve exit 0" "$SRV_RC" 0

finish
