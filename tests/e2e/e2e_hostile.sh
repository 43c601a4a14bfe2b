#!/bin/bash
# e2e_hostile.sh - untrusted workers (issue 13 B): one shard's worker is
# bin/dynbatch-hostile-worker attacking the coordinator in one way
# (tests/plugins/hostile_worker.c lists the modes); the others are honest.  For
# every mode: the coordinator survives and exits on time (exit 0 inside
# the timeout), every request is answered exactly once, every answer is
# exact against bin/refdecode, and no request is failed (no `error`
# result: the hostile worker's faults are never blamed on a request).
# A worker that scribbles its own KV block tables (mode kv-tables, paged
# simkv, cache on) spoils at most the answers it computed itself (3).
# Also: with a worker that attacks forever, SIGINT still drains, and the
# log stays small; a fault-free run counts 0 stale results (the rows its
# run-ahead discarded are counted apart).
#
# The channel-level modes (scribble, steal-wakeups, write-fds, mprotect)
# write what the worker can reach in shared memory, read or write every
# descriptor it holds, and try to make its read-only views writable; they
# are harmless because the coordinator gives a worker nothing it may not
# use (docs/DESIGN.md 12): each run also fails if the attack stole a byte,
# made a mapping writable or reopened shared memory for writing.
set -u
. "$(dirname "$0")/e2e_lib.sh"

HOSTILE_MODES=${HOSTILE_MODES-wrong-generation empty bad-dispatch-id seq-jump flood prefill-forever \
	scribble steal-wakeups write-fds mprotect}
HOSTILE_WORKER=${HOSTILE_WORKER:-$BIN/dynbatch-hostile-worker}
RUN_LIMIT_S=${RUN_LIMIT_S:-60}	# a run taking longer has stalled
LOG_LIMIT_BYTES=200000	# a run's whole stderr; flooding logs grew to GBs

MODEL="sim:vocab=8000,seed=$((SEED % 1000)),row_us=20"
"$BIN/gen_workload" --n 1500 --seed "$SEED" --model "$MODEL" --max-tokens 48 \
	> "$E2E_TMP/w.jsonl"
# The sampling modes run a sampled workload (temperature, logit_bias,
# logprobs, n choices): WORKLOAD names the one a run reads.
"$BIN/gen_workload" --n 600 --seed "$SEED" --model "$MODEL" --max-tokens 48 \
	--sampling > "$E2E_TMP/ws.jsonl"
FIRST_ID=$(head -n 1 "$E2E_TMP/w.jsonl" | grep -o '"id":"[^"]*"' | cut -d'"' -f4)

# want_keys WORKLOAD: "id#choice" for every answer it should get, sorted
# (a request with "n":K has K, each line with its "index").
want_keys() {
	sed -E 's/^\{"id":"([^"]*)".*("n":([0-9]+)).*/\1 \3/; t; s/^\{"id":"([^"]*)".*/\1 1/' "$1" |
		awk '{ for (i = 0; i < $2; i++) print $1 "#" i }' | sort
}
# result_keys OUTPUT: "id#index" of every result line, sorted.
result_keys() {
	sed -nE -e '/"index":/{s/^\{"id":"([^"]*)".*"index":([0-9]+).*/\1#\2/p;d;}' \
		-e 's/^\{"id":"([^"]*)".*/\1#0/p' "$1" | sort
}
want_keys "$E2E_TMP/w.jsonl" > "$E2E_TMP/w.want"
want_keys "$E2E_TMP/ws.jsonl" > "$E2E_TMP/ws.want"

# hostile_run TAG SPEC WORKERS [DYNBATCH-OPTIONS...]: the workload through
# stdin and stdout (so a worker holding either could steal or forge), with
# DYNBATCH_HOSTILE=SPEC, the model RUN_MODEL (default MODEL).  Sets
# RUN_RC and RUN_MS.
hostile_run() {
	local tag=$1 spec=$2 workers=$3 start model=${RUN_MODEL:-$MODEL}
	local input=${WORKLOAD:-$E2E_TMP/w.jsonl}
	shift 3
	mkdir -p "$E2E_TMP/$tag.dir"
	start=$(date +%s%N)
	DYNBATCH_HOSTILE="$spec" DYNBATCH_WORKER="$HOSTILE_WORKER" \
	DYNBATCH_HOSTILE_DIR="$E2E_TMP/$tag.dir" DYNBATCH_HOSTILE_FORGE_ID="$FIRST_ID" \
		timeout -k 5 "$RUN_LIMIT_S" "$BIN/dynbatch" run --no-progress \
		--workers "$workers" --batch 24 --model "$model" --step-timeout 500 \
		--stats "$E2E_TMP/$tag.stats" --input - --output - "$@" \
		< "$input" > "$E2E_TMP/$tag.out" 2> "$E2E_TMP/$tag.err"
	RUN_RC=$?
	RUN_MS=$(( ($(date +%s%N) - start) / 1000000 ))
}

# hostile_problems TAG: what is wrong with run TAG, one line each (none:
# it passed).
hostile_problems() {
	local tag=$1 n_err bytes input=${WORKLOAD:-$E2E_TMP/w.jsonl}
	[ "$RUN_RC" -eq 0 ] || echo "exit $RUN_RC after $RUN_MS ms (124: no exit within ${RUN_LIMIT_S} s)"
	grep -c attacking "$E2E_TMP/$tag.err" > /dev/null || echo "the worker never attacked"
	result_keys "$E2E_TMP/$tag.out" > "$E2E_TMP/$tag.ids"
	cmp -s "$E2E_TMP/$tag.ids" "${input%.jsonl}.want" ||
		echo "not every request answered exactly once: $(diff "${input%.jsonl}.want" \
			"$E2E_TMP/$tag.ids" | grep -c '^[<>]') ids differ"
	n_err=$(grep -c '"finish_reason":"error"' "$E2E_TMP/$tag.out")
	[ "$n_err" -eq 0 ] || echo "$n_err requests failed with an error"
	"$BIN/refdecode" --model "$MODEL" --input "$input" \
		--check "$E2E_TMP/$tag.out" --allow-errors > "$E2E_TMP/$tag.check" 2>&1 ||
		echo "not exact: $(tail -n 1 "$E2E_TMP/$tag.check")"
	bytes=$(wc -c < "$E2E_TMP/$tag.err")
	[ "$bytes" -le "$LOG_LIMIT_BYTES" ] || echo "log of $bytes bytes"
	# what the channel-level attacks achieved, harm seen or not
	cat "$E2E_TMP/$tag.dir"/report-* 2>/dev/null | awk -F'[ =]' '
		{ stolen += $2; writable += $4; reopened += $6 }
		END {
			if (stolen) print "it stole " stolen " bytes from its descriptors"
			if (writable) print "it made " writable " read-only mappings writable"
			if (reopened) print "it reopened shared memory for writing " reopened " times"
		}'
}

# hostile_case TAG SPEC WORKERS: run and judge.
hostile_case() {
	local tag=$1 spec=$2 workers=$3 problems
	hostile_run "$tag" "$spec" "$workers"
	problems=$(hostile_problems "$tag")
	local what="$spec, $workers workers: $(grep -c attacking "$E2E_TMP/$tag.err") attacking lives, $RUN_MS ms, $(stats_field "$E2E_TMP/$tag.stats" fruitless_kills) fruitless kills, $(stats_field "$E2E_TMP/$tag.stats" hang_kills) hang kills"
	if [ -z "$problems" ]; then
		pass "$what"
	else
		fail "$what"
		echo "$problems" | sed 's/^/       /'
		grep -v attacking "$E2E_TMP/$tag.err" | head -n 8 | sed 's/^/       | /'
	fi
}

# --- 1. every mode, hostile on shard 0 of 3, and on shard 1 of 2 ---------
# Five attacking lives: more than --poison-attempts (2) lone blames, so
# that a request blamed for the attacks would be failed (garbled dispatch
# ids failed requests as poison that way).
for mode in $HOSTILE_MODES; do
	hostile_case "$mode-3" "$mode,lives=5" 3
	hostile_case "$mode-2" "$mode,shard=1,lives=5" 2
done

# The sampling modes, on the sampled workload: garbage logprob blocks
# (NaN, +-inf, positive, n_top too large, alternatives out of the
# vocabulary) are rejected like any garbled row, and a worker that
# scribbled its sampling table leaves none of it to the next worker.
for mode in ${HOSTILE_SAMPLING_MODES-logprobs sampling}; do
	WORKLOAD="$E2E_TMP/ws.jsonl" hostile_case "$mode-3" "$mode,lives=5" 3
	WORKLOAD="$E2E_TMP/ws.jsonl" hostile_case "$mode-2" "$mode,shard=1,lives=5" 2
done

# --- 2. attackers that never give up ---------------------------------------
# Results that commit nothing, forever (every replacement attacks too):
# each worker is killed after a bounded run of them, blaming nobody, and
# its requests finish on the honest shards.  Slower steps, so that the
# shard is restarted and attacks several times.
for mode in wrong-generation empty prefill-forever; do
	RUN_MODEL="$MODEL,row_us=150" hostile_case "$mode-forever" "$mode,lives=1000000" 3
done
# Garbage logprob blocks for ever: only the rows that asked for logprobs
# are rejected, the others commit, yet the worker is still replaced and
# the garbled requests finish elsewhere.
WORKLOAD="$E2E_TMP/ws.jsonl" RUN_MODEL="$MODEL,row_us=150" \
	hostile_case logprobs-forever "logprobs,lives=1000000" 3

# A worker that refuses every row (a stateful model may refuse a row,
# docs/DESIGN.md 2.3): the requests of its shard end with the
# coordinator's own "refused" message (whatever reason number it sent),
# every other request is exact, nothing else fails.
hostile_run refuse "refuse,lives=5" 3
n_ref=$(grep -c '"finish_reason":"error".*the model refused the request' "$E2E_TMP/refuse.out")
n_err=$(grep -c '"finish_reason":"error"' "$E2E_TMP/refuse.out")
n_lines=$(wc -l < "$E2E_TMP/refuse.out")
if [ "$RUN_RC" -eq 0 ] && [ "$n_lines" -eq 1500 ] && [ "$n_ref" -gt 0 ] &&
   [ "$n_ref" -eq "$n_err" ] && "$BIN/refdecode" --model "$MODEL" --input "$E2E_TMP/w.jsonl" \
	--check "$E2E_TMP/refuse.out" --allow-errors > "$E2E_TMP/refuse.check" 2>&1; then
	pass "refuse: $n_ref requests refused on its shard, the rest exact"
else
	fail "refuse: exit $RUN_RC, $n_lines lines, $n_ref refused of $n_err errors: $(tail -n 1 "$E2E_TMP/refuse.check" 2>/dev/null)"
fi

# The only worker attacks for ever: after WORKER_MAX_FAILED_STARTS (8)
# such workers in a row the shard is lost like one whose workers cannot
# start, so the run ends (exit 1) with a line for every request, an error
# for each that was not done (it ran until the timeout: its requests
# "moved to the other shards", of which there were none).
for mode in empty wrong-generation flood; do
	hostile_run "$mode-alone" "$mode,lives=1000000" 1
	n_lines=$(wc -l < "$E2E_TMP/$mode-alone.out")
	n_err=$(grep -c '"finish_reason":"error".*no worker can be kept alive' "$E2E_TMP/$mode-alone.out")
	if [ "$RUN_RC" -eq 1 ] && [ "$n_lines" -eq 1500 ] && [ "$n_err" -gt 0 ] &&
	   "$BIN/refdecode" --model "$MODEL" --input "$E2E_TMP/w.jsonl" \
		--check "$E2E_TMP/$mode-alone.out" --allow-errors > "$E2E_TMP/$mode-alone.check" 2>&1; then
		pass "$mode for ever, the only worker: exit 1 after $RUN_MS ms, 1500 lines, $n_err errors, the rest exact"
	else
		fail "$mode for ever, the only worker: exit $RUN_RC after $RUN_MS ms, $n_lines lines, $n_err errors: $(tail -n 1 "$E2E_TMP/$mode-alone.check" 2>/dev/null)"
	fi
done

# SIGINT drains with such a worker: active requests finish or are
# cancelled, waiting ones are cancelled, within seconds (it spun at 95%
# CPU and never drained).  A slower model, so that the drain has work.
for mode in wrong-generation empty; do
	DYNBATCH_HOSTILE="$mode,lives=1000000" DYNBATCH_WORKER="$HOSTILE_WORKER" \
	DYNBATCH_HOSTILE_DIR="$E2E_TMP" \
		timeout -k 5 "$RUN_LIMIT_S" "$BIN/dynbatch" run --no-progress \
		--workers 3 --batch 24 --model "$MODEL,row_us=300" \
		--input "$E2E_TMP/w.jsonl" --output "$E2E_TMP/int-$mode.out" \
		2> "$E2E_TMP/int-$mode.err" &
	pid=$!
	sleep 0.7
	kill -INT $pid
	start=$(date +%s%N)
	wait $pid
	rc=$?
	ms=$(( ($(date +%s%N) - start) / 1000000 ))
	if [ "$rc" -eq 0 ] && [ "$ms" -le 5000 ]; then
		pass "$mode forever, SIGINT: drained in $ms ms"
	else
		fail "$mode forever, SIGINT: exit $rc after $ms ms"
	fi
	check_results "$mode forever, SIGINT: each result exact or cancelled" "$MODEL" \
		"$E2E_TMP/w.jsonl" "$E2E_TMP/int-$mode.out" --allow-cancelled --allow-missing
	expect_eq "$mode forever, SIGINT: no id twice" \
		"$(grep -o '"id":"[^"]*"' "$E2E_TMP/int-$mode.out" | sort | uniq -d)" ""
done

# --- 3. a worker that scribbles its KV block tables ---------------------------
# Mode kv-tables on shard 1 of 2 (and of 3), paged model simkv (its tokens
# come only from its KV blocks), cache on: its tables and the kv fields of
# its dispatch rows rewritten before every result, otherwise honest.  Its
# own shard's answers may be wrong (it commits what its wrong blocks
# gave), but its pool is private memory: the coordinator survives and
# exits 0, every request is answered once, and every request it never
# ran (it names each one's prompt on stderr) is exact, errors included.
# The attack must also bite: some answer it computed is wrong, else this
# would test nothing.
KV_VOCAB=500
python3 "$(dirname "$0")/gen_prefix.py" --n 300 --seed "$SEED" --vocab $KV_VOCAB --sampling \
	--systems 4 --system-len 60 --suffix-len 20 --max-tokens 24 --max-n 4 > "$E2E_TMP/kv.jsonl"
want_keys "$E2E_TMP/kv.jsonl" > "$E2E_TMP/kv.want"
# kv_split TAG: TAG.honest.jsonl / .out, the requests (and their results)
# whose prompt the hostile worker never named; TAG.spoilt.jsonl / .out,
# the others
kv_split() {
	python3 - "$E2E_TMP/kv.jsonl" "$E2E_TMP/$1.out" "$E2E_TMP/$1.err" "$E2E_TMP/$1" <<'PY'
import json, re, sys
reqs, out, err, base = sys.argv[1:]
named = set(re.findall(r"hostile-kv: prompt ([0-9a-f]{16})", open(err).read()))
def fnv(tokens):
    h = 0xcbf29ce484222325
    for t in tokens:
        for b in range(4):
            h = ((h ^ ((t >> (8 * b)) & 0xff)) * 0x100000001b3) & (2**64 - 1)
    return "%016x" % h
spoilt = set()
files = {k: (open(base + "." + k + ".jsonl", "w"), open(base + "." + k + ".out", "w"))
         for k in ("honest", "spoilt")}
for line in open(reqs):
    r = json.loads(line)
    k = "spoilt" if fnv(r["prompt"]) in named else "honest"
    if k == "spoilt":
        spoilt.add(r["id"])
    files[k][0].write(line)
for line in open(out):
    files["spoilt" if json.loads(line)["id"] in spoilt else "honest"][1].write(line)
PY
}
# kv_case TAG WORKERS SPEC
kv_case() {
	local tag=$1 n_honest n_spoilt
	WORKLOAD="$E2E_TMP/kv.jsonl" RUN_MODEL="simkv:vocab=$KV_VOCAB,mode=sleep,call_us=1000" \
		hostile_run "$tag" "$3" "$2" --prefix-cache on
	kv_split "$tag"
	n_honest=$(wc -l < "$E2E_TMP/$tag.honest.jsonl")
	n_spoilt=$(wc -l < "$E2E_TMP/$tag.spoilt.jsonl")
	expect_eq "$tag ($3, $2 workers): exit 0 after $RUN_MS ms" "$RUN_RC" 0
	grep -q attacking "$E2E_TMP/$tag.err" && pass "$tag: attacked $(grep -c attacking "$E2E_TMP/$tag.err") times" ||
		fail "$tag: the worker never attacked"
	result_keys "$E2E_TMP/$tag.out" > "$E2E_TMP/$tag.ids"
	cmp -s "$E2E_TMP/$tag.ids" "$E2E_TMP/kv.want" && pass "$tag: every request answered once" ||
		fail "$tag: $(diff "$E2E_TMP/kv.want" "$E2E_TMP/$tag.ids" | grep -c '^[<>]') answers missing or twice"
	expect_gt "$tag: requests it ran" "$n_spoilt" 0
	expect_gt "$tag: requests it never ran" "$n_honest" 0
	check_results "$tag: the $n_honest requests it never ran exact" "sim:vocab=$KV_VOCAB" \
		"$E2E_TMP/$tag.honest.jsonl" "$E2E_TMP/$tag.honest.out"
	if "$BIN/refdecode" --model "sim:vocab=$KV_VOCAB" --input "$E2E_TMP/$tag.spoilt.jsonl" \
		--check "$E2E_TMP/$tag.spoilt.out" > "$E2E_TMP/$tag.spoilt.check" 2>&1; then
		fail "$tag: the attack bit nothing (all $n_spoilt requests it ran exact)"
	else
		pass "$tag: the attack bites its own shard: $(tail -n 1 "$E2E_TMP/$tag.spoilt.check")"
	fi
}
kv_case kv-tables-2 2 "kv-tables,shard=1,lives=1"
kv_case kv-tables-3 3 "kv-tables,shard=2,lives=2"

# --- 4. a fault-free run rejects nothing ------------------------------------
# The shape of `make run` (4 workers, 2 ms model calls): results of rows
# whose request ended while the worker ran ahead are counted as discarded,
# not as stale (it reported "744 stale results rejected").
"$BIN/gen_workload" --n 800 --seed "$SEED" > "$E2E_TMP/clean.jsonl"
timeout -k 5 "$RUN_LIMIT_S" "$BIN/dynbatch" run --no-progress --workers 4 \
	--model sim:mode=sleep,call_us=2000,row_us=10 --input "$E2E_TMP/clean.jsonl" \
	--output "$E2E_TMP/clean.out" --stats "$E2E_TMP/clean.stats" 2> "$E2E_TMP/clean.err"
expect_eq "fault-free run: exit 0" $? 0
check_results "fault-free run: exact" sim "$E2E_TMP/clean.jsonl" "$E2E_TMP/clean.out"
expect_eq "fault-free run: 0 stale results" \
	"$(stats_field "$E2E_TMP/clean.stats" stale_results_rejected)" 0
grep -q ' 0 stale results rejected, [0-9]* run-ahead rows discarded,' "$E2E_TMP/clean.err" &&
	pass "fault-free run: the summary says 0 stale, discarded apart" ||
	fail "fault-free run: summary line: $(grep 'stale' "$E2E_TMP/clean.err")"
expect_gt "fault-free run: run-ahead rows discarded counted" \
	"$(stats_field "$E2E_TMP/clean.stats" runahead_rows_discarded)" 0

finish
