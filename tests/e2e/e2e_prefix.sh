#!/bin/bash
# e2e_prefix.sh - the paged KV cache end to end (docs/DESIGN.md 11), with
# simkv: a paged model that gives the sim's tokens but computes them only
# from what its blocks hold, so a block table that hands a row anyone
# else's positions (a wrong hit, a fork that aliases a writable tail, a
# block reused too early) gives a wrong token, and refdecode's sim, which
# knows nothing of blocks, catches it.
#
# The promise: output with the prefix cache on equals output with it off,
# bit for bit (tokens, logprobs, seeded samples), and both equal the
# reference; at workers 0/1/2/4, several batch and block sizes, n up to
# 16, a pool so small that requests are preempted, colliding hashes,
# kill -9 chaos and garbled results.
. "$(dirname "$0")/e2e_lib.sh"

VOCAB=500
MODEL="simkv:vocab=$VOCAB"
REF="sim:vocab=$VOCAB"
GEN="$(dirname "$0")/gen_prefix.py"
python3 "$GEN" --n 240 --seed "$SEED" --vocab $VOCAB --sampling --systems 4 \
	--system-len 100 --suffix-len 20 --max-tokens 24 --max-n 16 \
	> "$E2E_TMP/in.jsonl"

# run TAG ARGS...: decode in.jsonl into out.TAG (stats in stats.TAG),
# exit 0 and exact against the reference
run() {
	local tag=$1
	shift
	timeout 300 "$BIN/dynbatch" run --model "$MODEL" --input "$E2E_TMP/in.jsonl" \
		--output "$E2E_TMP/out.$tag" --stats "$E2E_TMP/stats.$tag" "$@" \
		2> "$E2E_TMP/err.$tag"
	expect_eq "$tag: exit 0" $? 0
	check_results "$tag" "$REF" "$E2E_TMP/in.jsonl" "$E2E_TMP/out.$tag"
}

# kv_field TAG NAME: a number of the run's "kv" object
kv_field() { grep -o '"kv":{[^}]*}' "$E2E_TMP/stats.$1" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }

# on_off NAME ARGS...: the same run with the cache on and off: both exact,
# the same bytes once sorted, hits only when on
on_off() {
	local name=$1 tag
	shift
	tag=$(echo "$name" | tr -c 'a-z0-9\n' _)
	run "$tag.on" --prefix-cache on "$@"
	run "$tag.off" --prefix-cache off "$@"
	if cmp -s <(sort "$E2E_TMP/out.$tag.on") <(sort "$E2E_TMP/out.$tag.off"); then
		pass "$name: cache on == cache off, byte for byte"
	else
		fail "$name: cache on and off differ"
	fi
	expect_gt "$name: prompt tokens from the cache" "$(kv_field "$tag.on" prefix_hit_tokens)" 0
	expect_eq "$name: no hits with the cache off" "$(kv_field "$tag.off" prefix_hit_tokens)" 0
}

echo "== cache on == off, workers 0/1/2/4, batch and block sizes"
on_off "in-process" --workers 0 --batch 16 --step-tokens 32
on_off "1 worker, batch 8" --workers 1 --batch 8 --step-tokens 16
on_off "2 workers, batch 64" --workers 2 --batch 64 --step-tokens 0
on_off "4 workers, batch 32" --workers 4 --batch 32 --step-tokens 24
on_off "2 workers, 1-token blocks" --workers 2 --batch 16 --block-tokens 1
on_off "2 workers, 7-token blocks" --workers 2 --batch 16 --block-tokens 7 --step-tokens 5
on_off "3 workers, 64-token blocks" --workers 3 --batch 24 --block-tokens 64

echo "== forks: n choices share the prompt, each copies the tail once"
# (short answers too: choice 0 waits after its first token until the
# others have forked it)
python3 "$GEN" --n 40 --seed "$SEED" --vocab $VOCAB --sampling --kinds choices \
	--system-len 100 --suffix-len 20 --max-tokens 12 --max-n 16 > "$E2E_TMP/n.jsonl"
cp "$E2E_TMP/in.jsonl" "$E2E_TMP/in.saved"
cp "$E2E_TMP/n.jsonl" "$E2E_TMP/in.jsonl"
on_off "n up to 16" --workers 2 --batch 32
expect_gt "n up to 16: copies on write" "$(kv_field n_up_to_16.on cow_copies)" 0
cp "$E2E_TMP/in.saved" "$E2E_TMP/in.jsonl"

echo "== a pool so small that requests are preempted"
# short prompts, long answers: tables grow while they run.  12 KiB of KV
# over 2 shards is 48 blocks of simkv's 16 x 8 bytes a shard, for 16
# slots of up to 11 blocks each; every request still fits a pool alone
python3 "$GEN" --n 120 --seed "$SEED" --vocab $VOCAB --sampling --systems 4 \
	--system-len 30 --suffix-len 10 --max-tokens 120 --max-n 4 > "$E2E_TMP/in.jsonl"
on_off "tiny pool" --workers 2 --batch 32 --kv-memory 12K --step-tokens 16
expect_gt "tiny pool: preemptions" "$(kv_field tiny_pool.on preemptions)" 0
expect_gt "tiny pool: evictions" "$(kv_field tiny_pool.on evictions)" 0
on_off "tiny pool, in-process" --workers 0 --batch 16 --kv-memory 4K
expect_gt "tiny pool, in-process: preemptions" \
	"$(kv_field tiny_pool__in_process.on preemptions)" 0
cp "$E2E_TMP/in.saved" "$E2E_TMP/in.jsonl"

echo "== requests that arrive together: each prefix computed once a shard"
# 8 system prompts of 100 tokens (6 whole blocks) in front of 240
# requests read at once: a request whose prefix another is computing is
# held until that one commits (docs/DESIGN.md 11.2), so with one shard
# the hits are the workload's ideal; with two, each shard computes each
# system prompt at most once
python3 "$GEN" --n 240 --seed "$SEED" --vocab $VOCAB --kinds system --fixed --systems 8 \
	--system-len 100 --suffix-len 20 --max-tokens 16 > "$E2E_TMP/in.jsonl"
read -r _ best _ <<< "$(python3 "$GEN" --ideal "$E2E_TMP/in.jsonl" --block-tokens 16)"
read -r _ _ best2 <<< "$(python3 "$GEN" --ideal "$E2E_TMP/in.jsonl" --block-tokens 16 --shards 2)"
on_off "together, 1 worker" --workers 1 --batch 64
expect_eq "together, 1 worker: every hit the workload allows" \
	"$(kv_field together__1_worker.on prefix_hit_tokens)" "$best"
on_off "together, 2 workers" --workers 2 --batch 64
expect_gt "together, 2 workers: each system prompt computed once a shard at most" \
	"$(kv_field together__2_workers.on prefix_hit_tokens)" $((best2 - 1))
on_off "together, in-process" --workers 0 --batch 64 --step-tokens 32
expect_eq "together, in-process: every hit the workload allows" \
	"$(kv_field together__in_process.on prefix_hit_tokens)" "$best"
cp "$E2E_TMP/in.saved" "$E2E_TMP/in.jsonl"

echo "== colliding hashes: a hit is taken only when its tokens match"
DYNBATCH_KV_HASH_BITS=2 run weak.on --workers 2 --batch 16 --prefix-cache on
expect_gt "2-bit hashes: still hits" "$(kv_field weak.on prefix_hit_tokens)" 0
if cmp -s <(sort "$E2E_TMP/out.weak.on") <(sort "$E2E_TMP/out.in_process.off"); then
	pass "2-bit hashes: the same bytes as without the cache"
else
	fail "2-bit hashes: output differs from the cache-off run"
fi

echo "== faults: kill -9, SIGSTOP and garbled results, cache on"
"$BIN/fault_inject" --seed "$SEED" --first-kill-ms 50 --kill-rate 20 --stop-rate 5 -- \
	"$BIN/dynbatch" run --model "$MODEL,call_us=200" --workers 3 --batch 24 \
	--step-tokens 8 --step-timeout 2000 --kv-memory 48K \
	--input "$E2E_TMP/in.jsonl" --output "$E2E_TMP/out.kill" 2> "$E2E_TMP/kill.err"
expect_eq "kill -9 and SIGSTOP: exit 0" $? 0
check_results "kill -9 and SIGSTOP, cache on" "$REF" "$E2E_TMP/in.jsonl" "$E2E_TMP/out.kill"
grep -q "kills=[1-9]" "$E2E_TMP/kill.err" && pass "workers were killed" ||
	fail "no worker was killed: $(tail -1 "$E2E_TMP/kill.err")"
run garbled --workers 2 --batch 16 --garbage-every 5 --kv-memory 16K

echo "== a request that can never fit its shard's pool fails at admission"
printf '{"id":"big","prompt":[%s],"max_tokens":200}\n{"id":"small","prompt":[1,2,3],"max_tokens":3}\n' \
	"$(seq -s, 1 100)" > "$E2E_TMP/big.jsonl"
timeout 60 "$BIN/dynbatch" run --model "$MODEL" --workers 1 --batch 4 \
	--kv-memory 1K --input "$E2E_TMP/big.jsonl" --output "$E2E_TMP/out.big" \
	2> "$E2E_TMP/err.big"
expect_eq "too big: exit 0" $? 0
grep '"id":"big"' "$E2E_TMP/out.big" | grep -q 'need [0-9]* KV blocks of 16 tokens, more than a shard.s pool of [0-9]* blocks' &&
	pass "too big: the error names its need and the pool" ||
	fail "too big: $(grep '"id":"big"' "$E2E_TMP/out.big")"
grep '"id":"small"' "$E2E_TMP/out.big" | grep -q '"finish_reason":"length"' &&
	pass "too big: the next request is served" || fail "too big: small not served"
grep -q 'dynbatch: kv: 1 shard pool of [0-9]* blocks of 16 tokens' "$E2E_TMP/err.big" &&
	pass "the run prints the pool it chose" || fail "no kv line: $(head -3 "$E2E_TMP/err.big")"

finish
