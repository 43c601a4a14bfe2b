#!/bin/bash
# e2e_engine.sh - the engine end to end: every request's output equals the
# reference decode across batch sizes and worker counts; bad input; the
# model plugin; incremental input on a pipe; exit codes; the shared
# segment is gone after a normal exit, SIGTERM and a startup error.
set -u
. "$(dirname "$0")/e2e_lib.sh"

run() { timeout -k 5 60 "$BIN/dynbatch" run --no-progress "$@"; }

# run_checked ARGS...: run the engine in the background (to learn its pid)
# and record any segment it left behind in LEFT_BEHIND.
LEFT_BEHIND=""
run_checked() {
	tracked "$BIN/dynbatch" run --no-progress "$@"
	LEFT_BEHIND="$LEFT_BEHIND$(segments_of $LAST_PID)"
	return $LAST_RC
}

# --- 1. batch sizes x worker counts, against the reference -------------
MODEL="sim:vocab=2000,seed=$((SEED % 1000))"
"$BIN/gen_workload" --n 400 --seed "$SEED" --model "$MODEL" --max-prompt 64 \
	--max-tokens 48 > "$E2E_TMP/w.jsonl"
for batch in 1 2 7 64 256; do
	for workers in 0 1 2 3 8; do
		out="$E2E_TMP/out-$batch-$workers.jsonl"
		if run_checked --workers $workers --batch $batch --model "$MODEL" \
			--input "$E2E_TMP/w.jsonl" --output "$out" 2> "$E2E_TMP/err"; then
			check_results "batch $batch workers $workers" "$MODEL" \
				"$E2E_TMP/w.jsonl" "$out"
		else
			fail "batch $batch workers $workers: exit $?"; tail -5 "$E2E_TMP/err"
		fi
	done
done
expect_eq "no segment left after 25 normal exits" "$LEFT_BEHIND" ""

# More slots than requests, more workers than slots.
"$BIN/gen_workload" --n 20 --seed "$((SEED + 1))" --model "$MODEL" > "$E2E_TMP/few.jsonl"
run --workers 3 --batch 256 --model "$MODEL" --input "$E2E_TMP/few.jsonl" \
	--output "$E2E_TMP/few.out" 2>/dev/null
check_results "20 requests on 256 slots" "$MODEL" "$E2E_TMP/few.jsonl" "$E2E_TMP/few.out"
run --workers 8 --batch 3 --model "$MODEL" --input "$E2E_TMP/few.jsonl" \
	--output "$E2E_TMP/few2.out" 2>/dev/null
check_results "8 workers on 3 slots" "$MODEL" "$E2E_TMP/few.jsonl" "$E2E_TMP/few2.out"

# Default vocabulary, longer generations, a small queue (admission gating).
"$BIN/gen_workload" --n 300 --seed "$((SEED + 2))" --max-tokens 200 > "$E2E_TMP/big.jsonl"
run --workers 2 --batch 16 --queue 4 --input "$E2E_TMP/big.jsonl" \
	--output "$E2E_TMP/big.out" 2>/dev/null
check_results "queue of 4, vocab 32000" sim "$E2E_TMP/big.jsonl" "$E2E_TMP/big.out"

# Steps of over a millisecond: the coordinator dozes on a timer instead of
# spinning (SHM_COORD_DOZING), and stops still end each request exactly
# where the reference does; with steps under a millisecond it never dozes.
"$BIN/gen_workload" --n 120 --seed "$((SEED + 3))" --model "$MODEL" \
	--max-tokens 40 > "$E2E_TMP/doze.jsonl"
run --workers 3 --batch 24 --model "$MODEL,mode=sleep,call_us=1200" \
	--input "$E2E_TMP/doze.jsonl" --output "$E2E_TMP/doze.out" \
	--stats "$E2E_TMP/doze.stats" 2>/dev/null
check_results "1.2 ms steps, 3 workers (dozing)" "$MODEL" "$E2E_TMP/doze.jsonl" \
	"$E2E_TMP/doze.out"
expect_gt "1.2 ms steps: the coordinator dozed" \
	"$(stats_field "$E2E_TMP/doze.stats" coordinator_dozes)" 0
run --workers 3 --batch 24 --model "$MODEL" --input "$E2E_TMP/doze.jsonl" \
	--output /dev/null --stats "$E2E_TMP/nodoze.stats" 2>/dev/null
# Dozing follows measured step times, so a worker descheduled for a
# millisecond on a loaded machine (or under ASan) may make a few steps
# look long: at most one doze per 100 steps, against one or more per step
# in the 1.2 ms run.
nodoze=$(stats_field "$E2E_TMP/nodoze.stats" coordinator_dozes)
nodoze_steps=$(stats_field "$E2E_TMP/nodoze.stats" steps)
if [ -n "$nodoze" ] && [ -n "$nodoze_steps" ] && [ $((nodoze * 100)) -le "$nodoze_steps" ]; then
	pass "steps of microseconds: the coordinator (almost) never dozed ($nodoze in $nodoze_steps steps)"
else
	fail "steps of microseconds: the coordinator dozed $nodoze times in $nodoze_steps steps"
fi

# --- 2. bad input: each bad line gets its error, the rest go on -----------
cat > "$E2E_TMP/bad.jsonl" <<'JSONL'
{"id":"good1","prompt":[1,2,3],"max_tokens":8}
this is not json
{"id":"tok","prompt":[1,99999],"max_tokens":4}
{"id":"emptystop","prompt":[1],"stop_sequences":[[]]}
{"id":"ctx","prompt":[1,2],"max_tokens":5000}
{"prompt":[1,2]}
{"id":"typed","prompt":"1,2"}
{"id":"neg","prompt":[1],"max_tokens":-1}
{"id":"zero","prompt":[4,5],"max_tokens":0}
[1,2,3]
{"id":"good2","prompt":[],"max_tokens":5,"stop_token":26355}
{"id":"good1","prompt":[7],"max_tokens":3}

{"id":"good3","prompt":[1,2,3],"max_tokens":8,"stop_sequence":[5658,24635],"include_stop":true}
JSONL
run --workers 2 --batch 4 --input "$E2E_TMP/bad.jsonl" --output "$E2E_TMP/bad.out" 2>/dev/null
expect_eq "bad input: exit 0" "$?" 0
# The duplicate "good1" (line 12) may or may not overlap the first one, so
# the reference check leaves lines 12-14 out.
check_results "bad lines answered with errors, good ones decoded" sim \
	<(sed '12d' "$E2E_TMP/bad.jsonl") <(grep -v '"line":1[2-4][,}]' "$E2E_TMP/bad.out") \
	--allow-missing
for want in '"line":2,' '"line":3,' '"line":4,' '"line":5,' '"line":6,' '"line":7,' \
	    '"line":8,' '"line":10,' '"line":13,'; do
	if grep -F "$want" "$E2E_TMP/bad.out" | grep -q '"finish_reason":"error"'; then
		pass "error result for input $want"
	else
		fail "no error result for input $want"
	fi
done
grep -q '"id":"tok".*99999' "$E2E_TMP/bad.out" && pass "error names the bad token" \
	|| fail "error for line 3 does not name token 99999"
expect_eq "results for all 14 lines" "$(wc -l < "$E2E_TMP/bad.out")" 14
grep -q '"id":"zero","tokens":\[\],"finish_reason":"length"' "$E2E_TMP/bad.out" \
	&& pass "max_tokens 0 finishes at once with length" || fail "max_tokens 0"

# A duplicate of a live id is an error; the original is untouched.
{
	echo '{"id":"dup","prompt":[1,2,3],"max_tokens":2000}'
	echo '{"id":"dup","prompt":[9],"max_tokens":2}'
} > "$E2E_TMP/dup.jsonl"
run --workers 1 --batch 2 --model sim:row_us=200 --input "$E2E_TMP/dup.jsonl" \
	--output "$E2E_TMP/dup.out" 2>/dev/null
grep -q '"line":2,.*duplicate id' "$E2E_TMP/dup.out" && \
	grep -q '"id":"dup","tokens":\[[0-9,]*\],"finish_reason":"length".*"completion_tokens":2000' \
	"$E2E_TMP/dup.out" && pass "duplicate live id rejected, original decoded" \
	|| { fail "duplicate live id"; cat "$E2E_TMP/dup.out" | cut -c1-200; }

# --- 3. the model plugin ------------------------------------------------
PLUGIN="$BUILD/example_plugin.so:vocab=1000,a=7,b=3"
"$BIN/gen_workload" --n 150 --seed "$SEED" --vocab 1000 > "$E2E_TMP/p.jsonl"
run --workers 0 --batch 8 --model "$PLUGIN" --input "$E2E_TMP/p.jsonl" \
	--output "$E2E_TMP/p0.out" 2>/dev/null
run --workers 3 --batch 8 --model "$PLUGIN" --input "$E2E_TMP/p.jsonl" \
	--output "$E2E_TMP/p3.out" 2>/dev/null
if [ -s "$E2E_TMP/p0.out" ] && diff <(sort "$E2E_TMP/p0.out") <(sort "$E2E_TMP/p3.out") >/dev/null; then
	pass "plugin: 3 workers equal the in-process engine ($(wc -l < "$E2E_TMP/p3.out") results)"
else
	fail "plugin: 3 workers differ from the in-process engine"
fi
# The plugin's formula, checked independently on one request.
echo '{"id":"x","prompt":[5],"max_tokens":3}' > "$E2E_TMP/p1.jsonl"
run --workers 1 --batch 1 --model "$PLUGIN" --input "$E2E_TMP/p1.jsonl" \
	--output "$E2E_TMP/p1.out" 2>/dev/null
# next = (7 * last + 3 + len) % 1000: 5 -> 7*5+3+1=39 -> 7*39+3+2=278 -> 7*278+3+3=1952%1000=952
grep -q '"tokens":\[39,278,952\]' "$E2E_TMP/p1.out" && pass "plugin tokens follow its formula" \
	|| { fail "plugin tokens"; cat "$E2E_TMP/p1.out"; }

# --- 4. incremental input on a pipe ---------------------------------------
mkfifo "$E2E_TMP/fifo"
run --workers 2 --batch 4 --input "$E2E_TMP/fifo" --output "$E2E_TMP/fifo.out" 2>/dev/null &
pid=$!
exec 9> "$E2E_TMP/fifo"
echo '{"id":"first","prompt":[1,2,3],"max_tokens":8}' >&9
answered=no
for _ in $(seq 100); do
	grep -q '"id":"first"' "$E2E_TMP/fifo.out" 2>/dev/null && { answered=yes; break; }
	sleep 0.05
done
expect_eq "a request on an open pipe is answered before input ends" "$answered" yes
echo '{"id":"second","prompt":[1,2,3],"max_tokens":8}' >&9
exec 9>&-
wait $pid
expect_eq "pipe run exits 0" "$?" 0
grep -q '"id":"first","tokens":\[26355,5658,24635,10745,23270,31656,10417,8625\]' \
	"$E2E_TMP/fifo.out" && pass "the decode vector of docs/DESIGN.md 2.1" \
	|| fail "docs/DESIGN.md 2.1 decode vector"

# --- 5. exit codes and usage ----------------------------------------------
"$BIN/dynbatch" run --batch 0 2>/dev/null; expect_eq "--batch 0 is a usage error" $? 2
"$BIN/dynbatch" run --bogus 2>/dev/null; expect_eq "unknown option is a usage error" $? 2
"$BIN/dynbatch" run --model nosuch </dev/null 2>/dev/null; expect_eq "unknown model exits 2" $? 2
"$BIN/dynbatch" run --model sim:vocab=x </dev/null 2>/dev/null; expect_eq "bad sim key exits 2" $? 2
"$BIN/dynbatch" run --input /nonexistent 2>/dev/null; expect_eq "missing input exits 2" $? 2
msg=$("$BIN/dynbatch" run --workers x 2>&1); expect_eq "bad value message" "$msg" \
	"dynbatch: bad value 'x' for --workers (see --help)"
msg=$(DYNBATCH_WORKER=/nonexistent/dynbatch-worker "$BIN/dynbatch" run --workers 1 \
	--input "$E2E_TMP/few.jsonl" --output /dev/null 2>&1)
expect_eq "DYNBATCH_WORKER that is not there: exit 1" $? 1
expect_eq "... and the message names it" "$msg" \
	"dynbatch: cannot find dynbatch-worker at /nonexistent/dynbatch-worker: No such file or directory (set DYNBATCH_WORKER to its path)"
"$BIN/dynbatch" --help | grep -q -- '--max-context' && pass "--help documents options" \
	|| fail "--help"

# --- 6. the segment is removed on every exit path ---------------------------
LEFT_BEHIND=""
DYNBATCH_FAULT=io_uring_queue_init run_checked --workers 2 \
	--input "$E2E_TMP/few.jsonl" --output /dev/null 2>/dev/null
expect_eq "startup error exits 1" $? 1
expect_eq "no segment after a startup error" "$LEFT_BEHIND" ""
DYNBATCH_FAULT=spawn run_checked --workers 2 --input "$E2E_TMP/few.jsonl" \
	--output "$E2E_TMP/spawn.out" 2>/dev/null
expect_eq "workers that cannot start: exit 1" $? 1
expect_eq "every request still answered" "$(wc -l < "$E2E_TMP/spawn.out")" \
	"$(wc -l < "$E2E_TMP/few.jsonl")"
check_results "failed engine: error results, nothing duplicated" sim \
	"$E2E_TMP/few.jsonl" "$E2E_TMP/spawn.out" --allow-errors
expect_eq "no segment after failed worker starts" "$LEFT_BEHIND" ""

"$BIN/gen_workload" --n 2000 --seed "$SEED" --max-tokens 100 > "$E2E_TMP/long.jsonl"
"$BIN/dynbatch" run --no-progress --workers 2 --batch 8 --model sim:row_us=300 \
	--input "$E2E_TMP/long.jsonl" --output "$E2E_TMP/term.out" 2>/dev/null &
pid=$!
sleep 0.5
workers=$(cat /proc/$pid/task/$pid/children 2>/dev/null)
kill -TERM $pid
wait $pid
expect_eq "SIGTERM drain exits 0" $? 0
expect_eq "no segment after SIGTERM" "$(segments_of $pid)" ""
check_results "SIGTERM: finished ones exact, rest cancelled" sim "$E2E_TMP/long.jsonl" \
	"$E2E_TMP/term.out" --allow-cancelled --allow-missing
ncancel=$(grep -c '"finish_reason":"cancelled"' "$E2E_TMP/term.out")
[ "$ncancel" -gt 0 ] && pass "waiting requests cancelled ($ncancel)" \
	|| fail "no cancelled results after SIGTERM"
left=""
for w in $workers; do [ -d /proc/$w ] && left="$left $w"; done
[ -n "$workers" ] && [ -z "$left" ] && pass "its workers ($workers) are gone" \
	|| fail "workers left running: '$left' (of '$workers')"


echo "== what a worker holds (issue 13 B9, B10): --input - --output -"
# A worker gets /dev/null as stdin and stdout, the coordinator's stderr and
# the write end of its own notification pipe (the shared and shard objects
# it was given as 3 and 4 are closed once mapped); no descriptor of the
# coordinator's output (regression: dup(STDOUT_FILENO) was inherited), no
# writable mapping of the shared object, one of its own shard, and no name
# in /dev/shm.
# The input comes through a FIFO we hold open, so that the run lasts until
# the checks are done.
"$BIN/gen_workload" --n 60 --seed "$SEED" --max-tokens 100 > "$E2E_TMP/fds.jsonl"
mkfifo "$E2E_TMP/fds.fifo" "$E2E_TMP/fds2.fifo"
# fds_workers PID: wait until PID has 2 workers that have attached (closed
# what they were given to map) and set WORKERS
fds_workers() {
	local w settled
	WORKERS=""
	for _ in $(seq 250); do
		WORKERS=$(worker_pids $1)
		settled=yes
		for w in $WORKERS; do
			[ -e /proc/$w/fd/3 ] && settled=no
			grep -q 'NoNewPrivs:.1' /proc/$w/status 2>/dev/null || settled=no
		done
		[ "$(echo $WORKERS | wc -w)" -eq 2 ] && [ $settled = yes ] && break
		sleep 0.02
	done
}
"$BIN/dynbatch" run --no-progress --workers 2 --batch 8 --model sim:row_us=1000 \
	--input - --output - < "$E2E_TMP/fds.fifo" > "$E2E_TMP/fds.out" 2>/dev/null &
pid=$!
exec 7> "$E2E_TMP/fds.fifo"
cat "$E2E_TMP/fds.jsonl" >&7
fds_workers $pid
workers=$WORKERS
expect_eq "two workers" "$(echo $workers | wc -w)" 2
expect_eq "no /dev/shm name while it runs" "$(segments_of $pid)" ""
shard_inodes=""
for w in $workers; do
	if ! fds=$(ls /proc/$w/fd 2>/dev/null | sort -n | tr '\n' ' '); then
		echo "  skip descriptors of worker $w: /proc/$w/fd not readable (not root)"
		continue
	fi
	expect_eq "worker $w: descriptors" "$fds" "0 1 2 5 "
	expect_eq "worker $w: stdin and stdout are /dev/null" \
		"$(readlink /proc/$w/fd/0) $(readlink /proc/$w/fd/1)" "/dev/null /dev/null"
	flags=$(awk '$1 == "flags:" { print $2 }' /proc/$w/fdinfo/5 2>/dev/null)
	[ -n "$flags" ] || flags=777	# no fd 5: fails below
	expect_eq "worker $w: fd 5 is a pipe's write end only" \
		"$(readlink /proc/$w/fd/5 | cut -d: -f1) $(( 8#$flags & 3 ))" "pipe 1"
	maps=$(grep memfd: /proc/$w/maps)
	expect_eq "worker $w: the shared object only read-only" \
		"$(echo "$maps" | grep dynbatch-shared | awk '{ print $2 }' | sort -u)" "r--s"
	expect_eq "worker $w: one writable mapping, of its shard" \
		"$(echo "$maps" | awk '$2 == "rw-s" { print $6 }')" "/memfd:dynbatch-shard"
	shard_inodes="$shard_inodes $(echo "$maps" | awk '$2 == "rw-s" { print $5 }')"
done
[ -n "$shard_inodes" ] && expect_eq "each worker maps a shard object of its own" \
	"$(echo $shard_inodes | tr ' ' '\n' | sort -u | wc -l)" 2
# A worker keeps no capability and cannot regain one (a worker of root
# could otherwise open the coordinator's descriptors or memory); and a
# process like it (same user, no capabilities) cannot reach the
# coordinator's output through /proc (the coordinator is not dumpable).
for w in $workers; do
	expect_eq "worker $w: no capabilities, no new privileges" \
		"$(awk '$1 == "CapEff:" || $1 == "CapBnd:" || $1 == "NoNewPrivs:" { printf "%s ", $2 }' \
		   /proc/$w/status)" "0000000000000000 0000000000000000 1 "
done
if command -v setpriv > /dev/null; then
	if setpriv --bounding-set -all --inh-caps -all --no-new-privs -- \
		sh -c "echo '{\"id\":\"forged\"}' >> /proc/$pid/fd/1" 2> /dev/null; then
		fail "a capability-less process wrote the coordinator's output through /proc"
	else
		pass "a capability-less process cannot write the coordinator's output through /proc"
	fi
fi
exec 7>&-
wait $pid
expect_eq "run with --output -: exit 0" $? 0
expect_eq "one result line per request, none forged" "$(wc -l < "$E2E_TMP/fds.out")" 60
check_results "run with --output -: exact" sim "$E2E_TMP/fds.jsonl" "$E2E_TMP/fds.out"

# With stderr and the output the same file (--output - 2>&1), a worker's
# stderr would be a way to write result lines: it gets /dev/null.
"$BIN/dynbatch" run --no-progress --workers 2 --batch 8 --model sim:row_us=1000 \
	--input - --output - < "$E2E_TMP/fds2.fifo" > "$E2E_TMP/fds2.out" 2>&1 &
pid=$!
exec 7> "$E2E_TMP/fds2.fifo"
cat "$E2E_TMP/fds.jsonl" >&7
fds_workers $pid
errs=""
for w in $WORKERS; do errs="$errs $(readlink /proc/$w/fd/2)"; done
exec 7>&-
wait $pid
expect_eq "--output - 2>&1: exit 0" $? 0
expect_eq "--output - 2>&1: workers' stderr is /dev/null" "$errs" " /dev/null /dev/null"
expect_eq "--output - 2>&1: one result line per request, and the warning" \
	"$(grep -c '^{' "$E2E_TMP/fds2.out") $(grep -c 'workers. messages are discarded' "$E2E_TMP/fds2.out")" "60 1"

finish
