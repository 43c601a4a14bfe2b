#!/bin/bash
# e2e_llama.sh - the built-in llama transformer end to end, checked by
# refdecode's naive llama forward (tools/refdecode/ref_llama.c: full recompute per
# token, double accumulation, written apart from common/llama_*.c): the
# same tokens at workers 0..3, batch 1..64, step budgets, garbled results
# and kill -9, a separate classifier and GQA, the ak42 formats (version 1
# fp32 and version 2 int8 Q8_0); attention=split's bytes the same with the
# prefix cache and cascade on or off, at workers 0 and 2; bad
# checkpoints exit 2 with a message; weights are shared between workers.
. "$(dirname "$0")/e2e_lib.sh"

CK="$E2E_TMP/tiny.bin"
"$BIN/make_checkpoint" --out "$CK" --dim 64 --hidden 96 --layers 2 --heads 4 \
	--kv-heads 2 --vocab 300 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/gen_workload" --n 150 --seed "$SEED" --vocab 300 --max-prompt 60 \
	--max-tokens 60 --max-context 256 > "$E2E_TMP/in.jsonl"

# run NAME CHECKPOINT ARGS...: decode in.jsonl and check it
run() {
	local name=$1 ck=$2
	shift 2
	timeout 300 "$BIN/dynbatch" run --model "llama:$ck" --input "$E2E_TMP/in.jsonl" \
		--output "$E2E_TMP/out.jsonl" "$@" 2> "$E2E_TMP/run.err"
	expect_eq "$name: exit 0" $? 0
	check_results "$name" "llama:$ck" "$E2E_TMP/in.jsonl" "$E2E_TMP/out.jsonl"
}

echo "== worker counts, batch sizes, step budgets"
run "in-process" "$CK" --workers 0
run "1 worker, batch 1" "$CK" --workers 1 --batch 1
run "2 workers, batch 2, 3 tokens a step" "$CK" --workers 2 --batch 2 --step-tokens 3
run "3 workers, batch 7, 1 token a step" "$CK" --workers 3 --batch 7 --step-tokens 1
run "2 workers, batch 64, no budget" "$CK" --workers 2 --batch 64 --step-tokens 0
run "3 workers, batch 64, 16 tokens a step" "$CK" --workers 3 --batch 64 --step-tokens 16
run "portable kernels" "$CK,kernel=portable" --workers 2 --batch 16

echo "== attention=split: prefix cache on == off, cascade on == off, exact by refdecode"
# prompts of 150-170 tokens on 3 shared system prompts (several chunks of
# 64 keys, rows of a step sharing them), logprobs so that bits show: the
# split mode's own bytes, the same whatever the workers, the cache and
# cascade, different from the exact mode's, and refdecode's tokens
python3 "$(dirname "$0")/gen_prefix.py" --n 60 --seed "$SEED" --vocab 300 --sampling \
	--systems 3 --system-len 150 --suffix-len 20 --max-tokens 24 --max-n 4 |
	sed 's/^{/{"logprobs":2,/' > "$E2E_TMP/split.jsonl"
split_run() {
	local tag=$1 spec=$2
	shift 2
	timeout 120 "$BIN/dynbatch" run --model "llama:$CK$spec" --input "$E2E_TMP/split.jsonl" \
		--output "$E2E_TMP/split.$tag" --batch 16 "$@" 2> "$E2E_TMP/split.err"
	expect_eq "split $tag: exit 0" $? 0
	sort "$E2E_TMP/split.$tag" > "$E2E_TMP/split.$tag.sorted"
}
split_run w0.on ",attention=split" --workers 0 --prefix-cache on
check_results "split, in-process" "llama:$CK" "$E2E_TMP/split.jsonl" "$E2E_TMP/split.w0.on"
for tag in w0.off w2.on w2.off w2.nocascade; do
	case $tag in
	w0.off) split_run $tag ",attention=split" --workers 0 --prefix-cache off ;;
	w2.on) split_run $tag ",attention=split" --workers 2 --prefix-cache on ;;
	w2.off) split_run $tag ",attention=split" --workers 2 --prefix-cache off ;;
	w2.nocascade) split_run $tag ",attention=split,cascade=off" --workers 2 ;;
	esac
	cmp -s "$E2E_TMP/split.w0.on.sorted" "$E2E_TMP/split.$tag.sorted" &&
		pass "split $tag: the same bytes as in-process with the cache on" ||
		fail "split $tag: output differs from in-process with the cache on"
done
split_run exact "" --workers 2
cmp -s "$E2E_TMP/split.w0.on.sorted" "$E2E_TMP/split.exact.sorted" &&
	fail "split: the same bytes as attention=exact (is the option ignored?)" ||
	pass "split: its own logprob bits, not attention=exact's"
timeout 60 "$BIN/dynbatch" run --model "llama:$CK,attention=fast" --workers 0 \
	--input "$E2E_TMP/split.jsonl" --output "$E2E_TMP/split.bad" 2> "$E2E_TMP/split.err"
expect_eq "attention=fast: exit 2" $? 2
grep -q "unknown option 'attention=fast'" "$E2E_TMP/split.err" &&
	pass "attention=fast: the error names the option" ||
	fail "attention=fast: $(head -2 "$E2E_TMP/split.err")"

echo "== other shapes and the ak42 format"
"$BIN/make_checkpoint" --out "$E2E_TMP/sep.bin" --dim 48 --hidden 80 --layers 3 \
	--heads 6 --kv-heads 3 --vocab 300 --seq-len 256 --separate-classifier \
	--format ak42 --seed "$SEED" > /dev/null
run "ak42, separate classifier, 6 heads over 3" "$E2E_TMP/sep.bin" --workers 2 --batch 16 \
	--step-tokens 8
# ak42 version 2: int8 Q8_0 weights, checked by refdecode's dequantized math
"$BIN/make_checkpoint" --out "$E2E_TMP/q8.bin" --dim 64 --hidden 128 --layers 2 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 256 --separate-classifier \
	--format ak42v2 --group-size 32 --seed "$SEED" > /dev/null
run "ak42 version 2 (Q8_0), separate classifier" "$E2E_TMP/q8.bin" --workers 2 --batch 16 \
	--step-tokens 8
head -c 2000 "$E2E_TMP/q8.bin" > "$E2E_TMP/q8trunc.bin"

echo "== faults: re-prefill gives the same tokens"
# a larger model and longer requests, so that the run lasts for kills
"$BIN/make_checkpoint" --out "$E2E_TMP/k.bin" --dim 128 --hidden 256 --layers 4 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/gen_workload" --n 300 --seed "$SEED" --vocab 300 --max-prompt 100 \
	--max-tokens 100 --max-context 256 > "$E2E_TMP/k.jsonl"
"$BIN/fault_inject" --seed "$SEED" --first-kill-ms 50 --kill-rate 25 --stop-rate 8 -- \
	"$BIN/dynbatch" run --model "llama:$E2E_TMP/k.bin" --workers 3 --batch 6 \
	--step-tokens 2 --step-timeout 2000 --input "$E2E_TMP/k.jsonl" \
	--output "$E2E_TMP/out.jsonl" 2> "$E2E_TMP/kill.err"
expect_eq "kill -9 and SIGSTOP: exit 0" $? 0
check_results "kill -9 and SIGSTOP" "llama:$E2E_TMP/k.bin" "$E2E_TMP/k.jsonl" \
	"$E2E_TMP/out.jsonl"
grep -q "kills=[1-9]" "$E2E_TMP/kill.err" && pass "workers were killed" ||
	fail "no worker was killed: $(tail -1 "$E2E_TMP/kill.err")"
run "garbled results (resets)" "$CK" --workers 2 --batch 16 --garbage-every 5

echo "== a checkpoint replaced under a running engine is not served"
# workers start again after the file is replaced (here: killed); each
# refuses the new file, so no answer mixes two models
cp "$E2E_TMP/k.bin" "$E2E_TMP/live.bin"
"$BIN/make_checkpoint" --out "$E2E_TMP/other.bin" --dim 128 --hidden 256 --layers 4 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 256 --seed "$((SEED + 1))" > /dev/null
"$BIN/dynbatch" run --model "llama:$E2E_TMP/live.bin" --workers 2 --batch 2 \
	--step-tokens 1 --input "$E2E_TMP/k.jsonl" --output "$E2E_TMP/out.jsonl" \
	2> "$E2E_TMP/live.err" &
CO=$!
for _ in $(seq 100); do
	[ "$(worker_pids $CO | wc -w)" = 2 ] && break
	sleep 0.05
done
cp "$E2E_TMP/other.bin" "$E2E_TMP/live.new" && mv "$E2E_TMP/live.new" "$E2E_TMP/live.bin"
kill -9 $(worker_pids $CO) 2>/dev/null || fail "no workers to kill: the run ended early"
wait $CO
expect_eq "replaced checkpoint: exit 1 (no worker can serve it)" $? 1
check_results "replaced checkpoint: every answer is the old model's or an error" \
	"llama:$E2E_TMP/k.bin" "$E2E_TMP/k.jsonl" "$E2E_TMP/out.jsonl" --allow-errors
grep -q "is not the file the engine started with" "$E2E_TMP/live.err" &&
	pass "the workers say why" || fail "no message about the replaced file"

echo "== a header's seq_len of 2^24 costs nothing up front"
# ak42 files carry no RoPE tables, so the header may claim any seq_len;
# the default --max-context follows it, and nothing may be sized by it
"$BIN/make_checkpoint" --out "$E2E_TMP/longseq.bin" --dim 64 --hidden 96 --layers 2 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 16777216 --format ak42 \
	--seed "$SEED" > /dev/null
echo '{"id":"a","prompt":[1,2,3],"max_tokens":3}' > "$E2E_TMP/one.jsonl"
timeout 60 "$BIN/dynbatch" run --model "llama:$E2E_TMP/longseq.bin" --workers 0 \
	--input "$E2E_TMP/one.jsonl" --output /dev/null --stats "$E2E_TMP/longseq.json" 2>/dev/null
rss=$(stats_field "$E2E_TMP/longseq.json" coordinator_max_rss_kb)
[ -n "$rss" ] && [ "$rss" -lt 100000 ] && pass "seq_len 2^24, in-process: peak RSS $rss kB" ||
	fail "seq_len 2^24, in-process: peak RSS '$rss' kB (the scratch was sized by seq_len)"

echo "== bad checkpoints: exit 2, naming the problem"
bad() {	# NAME FILE WANT
	timeout 30 "$BIN/dynbatch" run --model "llama:$2" --workers 1 \
		--input "$E2E_TMP/in.jsonl" --output /dev/null 2> "$E2E_TMP/bad.err"
	local rc=$?
	if [ $rc = 2 ] && grep -q "$3" "$E2E_TMP/bad.err"; then pass "$1: exit 2"
	else fail "$1: exit $rc: $(head -c 300 "$E2E_TMP/bad.err")"; fi
}
head -c 1000 "$CK" > "$E2E_TMP/trunc.bin"
bad "truncated" "$E2E_TMP/trunc.bin" "$E2E_TMP/trunc.bin"
head -c 10 "$CK" > "$E2E_TMP/short.bin"
bad "shorter than a header" "$E2E_TMP/short.bin" "$E2E_TMP/short.bin"
{ cat "$CK"; printf 'xxxx'; } > "$E2E_TMP/long.bin"
bad "trailing bytes" "$E2E_TMP/long.bin" "$E2E_TMP/long.bin"
bad "missing file" "$E2E_TMP/none.bin" "none.bin"
mkfifo "$E2E_TMP/fifo.bin"
bad "a FIFO (no hang waiting for a writer)" "$E2E_TMP/fifo.bin" "not a regular file"
bad "a directory" "$E2E_TMP" "not a regular file"
bad "ak42 version 2 truncated" "$E2E_TMP/q8trunc.bin" "q8trunc.bin.*version 2.*truncated"
timeout 30 "$BIN/dynbatch" run --model "llama:$CK" --max-context 257 --workers 1 \
	--input "$E2E_TMP/in.jsonl" --output /dev/null 2> "$E2E_TMP/bad.err"
expect_eq "--max-context past seq_len: exit 2" $? 2
echo '{"id":"big","prompt":[1,300],"max_tokens":2}' > "$E2E_TMP/tok.jsonl"
timeout 30 "$BIN/dynbatch" run --model "llama:$CK" --workers 1 \
	--input "$E2E_TMP/tok.jsonl" --output "$E2E_TMP/out.jsonl" 2>/dev/null
grep -q '"finish_reason":"error".*300' "$E2E_TMP/out.jsonl" &&
	pass "a prompt token outside the vocabulary: an error result naming it" ||
	fail "token outside the vocabulary: $(cat "$E2E_TMP/out.jsonl")"

echo "== serve: a stream paused for backpressure resumes by re-prefill"
if command -v python3 >/dev/null; then
	serve_start slow --workers 2 --batch 8 --step-tokens 16 --model "llama:$CK" \
		--conn-buffer 4096 --write-timeout 20000
	python3 "$(dirname "$0")/slow_stream.py" "$PORT" 40 200 60 > "$E2E_TMP/slow.tokens"
	printf '{"id":"slow","prompt":%s,"max_tokens":200}\n' \
		"$(python3 -c 'print(list(range(1,41)))' | tr -d ' ')" > "$E2E_TMP/slow_q.jsonl"
	printf '{"id":"slow","tokens":%s,"finish_reason":"length"}\n' \
		"$(tr -d ' \n' < "$E2E_TMP/slow.tokens")" > "$E2E_TMP/slow_r.jsonl"
	check_results "the resumed stream" "llama:$CK" "$E2E_TMP/slow_q.jsonl" "$E2E_TMP/slow_r.jsonl"
	pauses=$(curl -s "$URL/metrics" | awk '$1 == "dynbatch_http_pauses_total" { print $2 }')
	expect_gt "it was paused" "${pauses:-0}" 0
	serve_stop
	expect_eq "serve exit 0" "$SRV_RC" 0
else
	echo "skipped: no python3"
fi

echo "== NaN logits: the request that makes them fails alone; in-process, /health says so"
"$BIN/make_checkpoint" --out "$E2E_TMP/nan.bin" --dim 64 --hidden 96 --layers 2 --heads 4 \
	--kv-heads 2 --vocab 300 --seq-len 256 --separate-classifier --seed "$SEED" > /dev/null
# token 17's embedding row (right after the 28-byte legacy header) is NaN
python3 -c 'import struct, sys
f = open(sys.argv[1], "r+b"); f.seek(28 + 17 * 64 * 4); f.write(struct.pack("<f", float("nan")) * 64)' \
	"$E2E_TMP/nan.bin"
for i in $(seq 0 19); do
	# max_tokens 1: a generated token is never fed back, so only a
	# prompt with token 17 meets the NaN row, whatever the build computes
	echo "{\"id\":\"n$i\",\"prompt\":[$((i + 10)),3],\"max_tokens\":1}"
done > "$E2E_TMP/nan.jsonl"
timeout 60 "$BIN/dynbatch" run --model "llama:$E2E_TMP/nan.bin" --workers 2 --batch 8 \
	--input "$E2E_TMP/nan.jsonl" --output "$E2E_TMP/out.jsonl" 2>/dev/null
expect_eq "NaN logits, 2 workers: exit 0" $? 0
expect_eq "only the request with token 17 failed" \
	"$(grep '"finish_reason":"error"' "$E2E_TMP/out.jsonl" | grep -o '"id":"n[0-9]*"')" '"id":"n7"'
grep '"id":"n7"' "$E2E_TMP/out.jsonl" | grep -q "the model's logits were NaN" &&
	pass "its error says the logits were NaN" || fail "NaN error: $(grep '"id":"n7"' "$E2E_TMP/out.jsonl")"
# the same through the sampler (temperature, logprobs): NaN fails the
# step there too, never a draw from undefined weights
sed 's/"max_tokens":1}/"max_tokens":1,"temperature":1,"seed":5,"logprobs":2}/' \
	"$E2E_TMP/nan.jsonl" > "$E2E_TMP/nan-s.jsonl"
timeout 60 "$BIN/dynbatch" run --model "llama:$E2E_TMP/nan.bin" --workers 2 --batch 8 \
	--input "$E2E_TMP/nan-s.jsonl" --output "$E2E_TMP/out.jsonl" 2>/dev/null
expect_eq "NaN logits while sampling: exit 0, only n7 failed, with the NaN error" \
	"$?:$(grep '"finish_reason":"error"' "$E2E_TMP/out.jsonl" | grep -o '"id":"n[0-9]*"'):$(
	grep -c "the model's logits were NaN" "$E2E_TMP/out.jsonl")" '0:"id":"n7":1'
serve_start nanserve --workers 0 --model "llama:$E2E_TMP/nan.bin"
h0=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")
c=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" \
	-d '{"prompt":[17,3],"max_tokens":2}')
h1=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")
expect_eq "in-process: /health 200, the NaN request fails (500), then /health 503" \
	"$h0 $c $h1" "200 500 503"
serve_stop

echo "== 4 workers share one copy of the weights"
"$BIN/make_checkpoint" --out "$E2E_TMP/mid.bin" --dim 256 --hidden 512 --layers 4 \
	--heads 4 --kv-heads 4 --vocab 2000 --seq-len 128 --seed "$SEED" > /dev/null
mb=$(( $(stat -c %s "$E2E_TMP/mid.bin") / 1048576 ))
"$BIN/gen_workload" --n 400 --seed "$SEED" --vocab 2000 --max-prompt 8 \
	--max-tokens 100 --max-context 128 > "$E2E_TMP/mid.jsonl"
"$BIN/dynbatch" run --model "llama:$E2E_TMP/mid.bin" --workers 4 --batch 16 \
	--input "$E2E_TMP/mid.jsonl" --output /dev/null 2>/dev/null &
CO=$!
shared=""
for _ in $(seq 100); do
	sleep 0.1
	pids=$(worker_pids $CO)
	[ "$(echo $pids | wc -w)" = 4 ] || continue
	# Pss counts a shared page once across the processes that map it
	pss=0; rss=0
	for p in $pids; do
		pss=$((pss + $(awk '/^Pss:/ { s += $2 } END { print s }' /proc/$p/smaps_rollup)))
		rss=$((rss + $(awk '/^Rss:/ { s += $2 } END { print s }' /proc/$p/smaps_rollup)))
	done
	[ $rss -gt $((3 * mb * 1024)) ] && { shared="$rss $pss"; break; }
done
wait $CO
set -- $shared
if [ -n "$shared" ] && [ "$2" -lt $(( $1 / 2 )) ]; then
	pass "weights of $mb MiB: 4 workers' RSS $(($1 / 1024)) MiB, PSS $(($2 / 1024)) MiB"
else
	fail "sharing: rss/pss '$shared' (weights $mb MiB)"
fi

finish
