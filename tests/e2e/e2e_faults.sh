#!/bin/bash
# e2e_faults.sh - docs/DESIGN.md 9: under random worker kills and stops
# (bin/fault_inject) every request still ends with exactly the reference
# tokens, also when stops outlast the step timeout; poison requests (crash
# and hang) alone are failed; a SIGKILLed coordinator takes its workers
# along and leaves nothing in /dev/shm; a second SIGTERM ends at once with
# nothing lost or duplicated; garbled worker results are rejected; a shard
# that cannot keep a worker alive hands its requests to the others.
set -u
. "$(dirname "$0")/e2e_lib.sh"

# injected TAG INJECTOR-OPTIONS... -- DYNBATCH-OPTIONS...: run the engine
# under bin/fault_inject and a timeout, stderr to $E2E_TMP/TAG.err.  Sets
# RUN_RC, RUN_PID (the coordinator, from the injector's log) and records
# any segment that coordinator left behind in LEFT_BEHIND.
LEFT_BEHIND=""
injected() {
	local tag=$1 fi=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do fi+=("$1"); shift; done
	shift
	timeout -k 5 60 "$BIN/fault_inject" --verbose --seed "$SEED" "${fi[@]}" -- \
		"$BIN/dynbatch" run --no-progress "$@" 2> "$E2E_TMP/$tag.err"
	RUN_RC=$?
	RUN_PID=$(sed -n "s/^fault_inject: .* started .* as pid \([0-9]*\)$/\1/p" \
		"$E2E_TMP/$tag.err")
	LEFT_BEHIND="$LEFT_BEHIND$(segments_of "${RUN_PID:-none}")"
}
# quiet TAG DYNBATCH-OPTIONS...: the same with no faults injected.
quiet() {
	local tag=$1
	shift
	injected "$tag" --kill-rate 0 --stop-rate 0 -- "$@"
}

# fi_field ERRFILE NAME: a number from fault_inject's summary line.
fi_field() {
	sed -n "s/^fault_inject: seed=.* $2=\([0-9]*\).*/\1/p" "$1" | tail -n 1
}

# --- 1. random kills and stops ------------------------------------------
MODEL="sim:vocab=5000,seed=$((SEED % 1000))"
"$BIN/gen_workload" --n 4000 --seed "$SEED" --model "$MODEL" --max-tokens 64 \
	> "$E2E_TMP/f.jsonl"

# fault_run TAG ROW_US INJECTOR-OPTIONS... -- DYNBATCH-OPTIONS...: 4
# workers, 32 slots, ROW_US us per row, under the injector.
fault_run() {
	local tag=$1 row_us=$2 fi=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do fi+=("$1"); shift; done
	shift
	injected "$tag" "${fi[@]}" -- --workers 4 --batch 32 \
		--model "$MODEL,row_us=$row_us" --input "$E2E_TMP/f.jsonl" \
		--output "$E2E_TMP/$tag.out" --stats "$E2E_TMP/$tag.stats" "$@"
	echo "       injected: $(grep '^fault_inject: seed=.*kills=' "$E2E_TMP/$tag.err")"
	echo "       engine:   $(grep -o '"stale_results_rejected.*"poisoned":[0-9]*' \
		"$E2E_TMP/$tag.stats" 2>/dev/null)"
}

fault_run short 20 --kill-rate 20 --stop-rate 5 --stop-max-ms 300 -- --step-timeout 400
expect_eq "kills + short stops: exit 0" "$RUN_RC" 0
check_results "kills + short stops: nothing lost, nothing duplicated" "$MODEL" \
	"$E2E_TMP/f.jsonl" "$E2E_TMP/short.out"
expect_gt "kills + short stops: workers killed" "$(fi_field "$E2E_TMP/short.err" kills)" 0

# Stops past the step timeout look like hangs: the coordinator kills the
# worker and suspects the step's requests, so poison is switched off.
# Fewer kills, more stops and slower steps, so that a fair number of stops
# outlast the timeout before a kill ends them (about 10 hang kills); the
# first stop, 50 ms in, lasts the whole 1500 ms, since a short run may
# draw only short ones (and a kill of the stopped worker only sometimes
# comes first: 5 a second over 4 workers in the 200 ms timeout).
fault_run long 50 --kill-rate 5 --first-stop-ms 50 --stop-rate 10 --stop-max-ms 1500 -- \
	--step-timeout 200 --poison-attempts 1000
expect_eq "kills + long stops: exit 0" "$RUN_RC" 0
check_results "kills + long stops: nothing lost, nothing duplicated" "$MODEL" \
	"$E2E_TMP/f.jsonl" "$E2E_TMP/long.out"
expect_gt "kills + long stops: workers killed" "$(fi_field "$E2E_TMP/long.err" kills)" 0
expect_gt "kills + long stops: hang kills" "$(stats_field "$E2E_TMP/long.stats" hang_kills)" 0

# Steps of over a millisecond: the coordinator dozes between reads of the
# rings and only urgent results wake it (SHM_COORD_DOZING); kills and
# stops must change nothing there either.
# 2000 requests: about a second of 1.2 ms steps, so that at 10 kills a
# second no seed leaves the run without one (600 lasted 0.3 s, and about
# one seed in twelve drew its first kill after the end)
head -n 2000 "$E2E_TMP/f.jsonl" > "$E2E_TMP/fd.jsonl"
injected doze --kill-rate 10 --stop-rate 5 --stop-max-ms 300 -- --workers 4 \
	--batch 32 --model "$MODEL,mode=sleep,call_us=1200" --step-timeout 400 \
	--input "$E2E_TMP/fd.jsonl" --output "$E2E_TMP/doze.out" \
	--stats "$E2E_TMP/doze.stats"
expect_eq "kills + long steps: exit 0" "$RUN_RC" 0
check_results "kills + long steps (dozing): nothing lost, nothing duplicated" \
	"$MODEL" "$E2E_TMP/fd.jsonl" "$E2E_TMP/doze.out"
expect_gt "kills + long steps: workers killed" "$(fi_field "$E2E_TMP/doze.err" kills)" 0
expect_gt "kills + long steps: the coordinator dozed" \
	"$(stats_field "$E2E_TMP/doze.stats" coordinator_dozes)" 0
expect_eq "no segment left by the fault runs" "$LEFT_BEHIND" ""

# --- 2. poison requests: crash and hang ---------------------------------
"$BIN/gen_workload" --n 200 --seed "$((SEED + 3))" --max-tokens 64 > "$E2E_TMP/n.jsonl"
"$BIN/refdecode" --input "$E2E_TMP/n.jsonl" > "$E2E_TMP/n.ref"
# The poison token: the largest of 31000..31999 found nowhere in the normal
# requests or their reference output (a superset of every token a normal
# prefix can end in, stop sequences included).
T=$(cat "$E2E_TMP/n.jsonl" "$E2E_TMP/n.ref" | grep -o '[0-9]\+' | awk '
	{ seen[$1] = 1 }
	END { for (t = 31999; t >= 31000; t--) if (!(t in seen)) { print t; exit } }')
echo "       poison token $T"

# poison_mix N: the normal requests with N poison ones (prompt ending in
# $T) among them, ids poison0..poisonN-1.
poison_mix() {
	awk -v t="$T" -v n="$1" '{ print }
		NR % 60 == 30 && k < n {
			printf "{\"id\":\"poison%d\",\"prompt\":[%d,7,%d],\"max_tokens\":16}\n", k, k + 1, t
			k++
		}' "$E2E_TMP/n.jsonl"
}

# poison_check KIND N WHY: the run's verdicts.
poison_check() {
	local kind=$1 n=$2 why=$3 out="$E2E_TMP/$1.out" want got
	check_results "$kind poison: every other request exact" sim \
		"$E2E_TMP/$kind.jsonl" "$out" --allow-errors
	want=$(for ((i = 0; i < n; i++)); do echo "poison$i"; done)
	got=$(grep '"finish_reason":"error"' "$out" | grep -o '"id":"[^"]*"' | cut -d'"' -f4 | sort)
	expect_eq "$kind poison: exactly the poison requests failed" "$got" "$want"
	got=$(grep '"id":"poison' "$out" | grep -c "\"error\":\"line [0-9]*: request failed [0-9]* model steps on its own (last: worker $why")
	expect_eq "$kind poison: the error says why" "$got" "$n"
	expect_eq "$kind poison: stats count them" "$(stats_field "$E2E_TMP/$kind.stats" poisoned)" "$n"
	grep '"id":"poison0"' "$out" | grep -o '"error":.*' | sed 's/^/       /'
}

poison_mix 3 > "$E2E_TMP/crash.jsonl"
quiet crash --workers 2 --batch 8 --model "sim:crash_token=$T" --input "$E2E_TMP/crash.jsonl" \
	--output "$E2E_TMP/crash.out" --stats "$E2E_TMP/crash.stats"
expect_eq "crash poison: exit 0" $RUN_RC 0
poison_check crash 3 'killed by signal 6'

# Each hang costs a step timeout: one for the batch, one per lone attempt.
poison_mix 2 > "$E2E_TMP/hang.jsonl"
start=$(date +%s%N)
quiet hang --workers 2 --batch 8 --model "sim:hang_token=$T" --step-timeout 300 \
	--input "$E2E_TMP/hang.jsonl" --output "$E2E_TMP/hang.out" \
	--stats "$E2E_TMP/hang.stats"
expect_eq "hang poison: exit 0" $RUN_RC 0
echo "       $(( ($(date +%s%N) - start) / 1000000 )) ms," \
	"$(stats_field "$E2E_TMP/hang.stats" hang_kills) hang kills"
poison_check hang 2 'killed by signal 9'

# --- 3. the coordinator SIGKILLed ---------------------------------------
"$BIN/gen_workload" --n 3000 --seed "$SEED" --max-tokens 200 > "$E2E_TMP/slow.jsonl"
"$BIN/dynbatch" run --no-progress --workers 4 --batch 16 --model sim:row_us=300 \
	--input "$E2E_TMP/slow.jsonl" --output /dev/null 2>/dev/null &
cpid=$!
workers=""
for _ in $(seq 200); do
	workers=$(worker_pids $cpid)
	[ "$(echo $workers | wc -w)" -eq 4 ] && break
	sleep 0.02
done
expect_eq "coordinator started 4 workers" "$(echo $workers | wc -w)" 4
seg=$(segments_of $cpid)
kill -KILL $cpid
wait $cpid 2>/dev/null	# reap it, or its pid would still look alive
start=$(date +%s%N)
left=$workers
for _ in $(seq 50); do
	left=$(for p in $workers; do worker_alive "$p" && echo "$p"; done)
	[ -z "$left" ] && break
	sleep 0.02
done
gone_ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ -z "$left" ] && [ "$gone_ms" -le 1000 ]; then
	pass "workers gone ${gone_ms} ms after the coordinator's SIGKILL"
else
	fail "workers $(echo $left) still run ${gone_ms} ms after the coordinator's SIGKILL"
fi
# Unnamed memory (memfd): nothing in /dev/shm to leave behind, to reap,
# or for another pid namespace's reaper to delete under a live run.
expect_eq "the running coordinator had no /dev/shm name" "$seg" ""
"$BIN/gen_workload" --n 300 --seed "$((SEED + 4))" > "$E2E_TMP/after.jsonl"
quiet after --workers 2 --batch 16 --input "$E2E_TMP/after.jsonl" \
	--output "$E2E_TMP/after.out"
expect_eq "the next run: exit 0" $RUN_RC 0
check_results "the next run is exact" sim "$E2E_TMP/after.jsonl" "$E2E_TMP/after.out"

# --- 4. a second SIGTERM ends at once -------------------------------------
# Long requests, so the first SIGTERM's drain is still running when the
# second one comes (each active request needs seconds).
awk 'BEGIN { for (i = 0; i < 400; i++)
	printf "{\"id\":\"t%d\",\"prompt\":[%d,%d],\"max_tokens\":1000}\n", i, i, i * 7 % 32000 }' \
	> "$E2E_TMP/term.jsonl"
"$BIN/dynbatch" run --no-progress --workers 2 --batch 4 --model sim:row_us=2000 \
	--input "$E2E_TMP/term.jsonl" --output "$E2E_TMP/term.out" 2>/dev/null &
pid=$!
sleep 0.5
workers=$(worker_pids $pid)
kill -TERM $pid
sleep 0.2
start=$(date +%s%N)
kill -TERM $pid 2>/dev/null && pass "second SIGTERM reached the draining engine" \
	|| fail "the engine was gone before the second SIGTERM"
wait $pid
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_eq "second SIGTERM: exit 0" $rc 0
expect_eq "second SIGTERM: no worker left" \
	"$(for p in $workers; do worker_alive "$p" && echo "$p"; done)" ""
[ "$ms" -le 2000 ] && pass "second SIGTERM: ended ${ms} ms later" \
	|| fail "second SIGTERM: ended only ${ms} ms later"
check_results "second SIGTERM: each result exact or cancelled" sim \
	"$E2E_TMP/term.jsonl" "$E2E_TMP/term.out" --allow-cancelled --allow-missing
expect_eq "second SIGTERM: no id twice" \
	"$(grep -o '"id":"[^"]*"' "$E2E_TMP/term.out" | sort | uniq -d)" ""
echo "       $(wc -l < "$E2E_TMP/term.out") results," \
	"$(grep -c '"finish_reason":"cancelled"' "$E2E_TMP/term.out") cancelled"
expect_eq "second SIGTERM: no segment left" "$(segments_of $pid)" ""

# --- 5. garbled results from the workers -----------------------------------
quiet garbage --workers 3 --batch 16 --garbage-every 3 --model "$MODEL" \
	--input "$E2E_TMP/f.jsonl" --output "$E2E_TMP/garbage.out" \
	--stats "$E2E_TMP/garbage.stats"
expect_eq "garbage every 3rd result: exit 0" $RUN_RC 0
check_results "garbage every 3rd result: all exact" "$MODEL" "$E2E_TMP/f.jsonl" \
	"$E2E_TMP/garbage.out"
expect_gt "garbage rejected as stale" \
	"$(stats_field "$E2E_TMP/garbage.stats" stale_results_rejected)" 0
# Among the garbage: dispatch ids never sent and sequence numbers for
# other positions (regression: such a result was dropped without a reset,
# the shard stalled until the step timeout and innocent requests were
# failed as poison).  Each is a garbled result: a reset, nobody blamed.
expect_eq "garbage every 3rd result: no hang kills" \
	"$(stats_field "$E2E_TMP/garbage.stats" hang_kills)" 0
expect_eq "garbage every 3rd result: nobody poisoned" \
	"$(stats_field "$E2E_TMP/garbage.stats" poisoned)" 0
# Its good results commit rows: it is never taken for a worker whose
# results commit nothing.
expect_eq "garbage every 3rd result: no fruitless kills" \
	"$(stats_field "$E2E_TMP/garbage.stats" fruitless_kills)" 0
# Short requests on a CPU-bound model: rows reach their limit while the
# worker has yet to adopt the reset that a rejected result asked for
# (regression: the slot was refilled at once, and the reset sent the worker
# back to extend the old row over the new request's prompt).  Then one
# worker garbling every 2nd or 3rd result (regressions: a row whose last
# result was garbled was never extended again, and every 2nd result garbled
# hit every first result after a reset): exact, and no worker killed for
# hanging.
GMODEL="sim:vocab=1000,seed=$((SEED % 1000)),row_us=55,mode=spin"
"$BIN/gen_workload" --n 436 --seed "$((SEED + 5))" --model "$GMODEL" \
	--max-tokens 21 --max-prompt 185 > "$E2E_TMP/g.jsonl"
g_bad=0; g_hangs=0; g_fruitless=0
for shape in "6 16 5" "6 16 5" "6 16 5" "1 38 2" "1 38 3"; do
	set -- $shape
	quiet garbage-short --workers $1 --batch $2 --garbage-every $3 \
		--model "$GMODEL" --input "$E2E_TMP/g.jsonl" \
		--output "$E2E_TMP/garbage-short.out" --stats "$E2E_TMP/gs.stats"
	"$BIN/refdecode" --model "$GMODEL" --input "$E2E_TMP/g.jsonl" \
		--check "$E2E_TMP/garbage-short.out" > "$E2E_TMP/gcheck.log" 2>&1 ||
		{ g_bad=$((g_bad + 1)); echo "       $shape:"; tail -n 3 "$E2E_TMP/gcheck.log"; }
	g_hangs=$((g_hangs + $(stats_field "$E2E_TMP/gs.stats" hang_kills)))
	g_fruitless=$((g_fruitless + $(stats_field "$E2E_TMP/gs.stats" fruitless_kills)))
done
expect_eq "garbled results, short requests: 5 runs all exact" $g_bad 0
expect_eq "garbled results, short requests: no hang kills" $g_hangs 0
expect_eq "garbled results, short requests: no fruitless kills" $g_fruitless 0
expect_eq "no segment left by the other runs" "$LEFT_BEHIND" ""

# --- 6. workers that fail before they are ready ------------------------------
# A worker that exits before it is ready never ran a step, so nobody may
# be blamed (regression: the step dispatched to a starting worker was
# blamed, so a worker binary that failed to start twice, say replaced by a
# rebuild, failed a request as poison).
cat > "$E2E_TMP/flaky-worker" <<EOF
#!/bin/bash
n=\$(cat "$E2E_TMP/flaky-count" 2>/dev/null || echo 0)
echo \$((n + 1)) > "$E2E_TMP/flaky-count"
[ "\$n" -lt 3 ] && { sleep 0.1; exit 127; }
exec -a dynbatch-worker "$(cd "$BIN" && pwd)/dynbatch-worker" "\$@"
EOF
chmod +x "$E2E_TMP/flaky-worker"
echo '{"id":"a","prompt":[1,2,3],"max_tokens":5}' > "$E2E_TMP/one.jsonl"
DYNBATCH_WORKER="$E2E_TMP/flaky-worker" quiet flaky --workers 1 --batch 1 \
	--input "$E2E_TMP/one.jsonl" --output "$E2E_TMP/flaky.out"
grep -q '"id":"a","tokens":\[26355,5658,24635,10745,23270\],"finish_reason":"length"' \
	"$E2E_TMP/flaky.out" && pass "workers failing before ready blame no request" \
	|| { fail "workers failing before ready blame no request"; cat "$E2E_TMP/flaky.out"; }

# A replacement worker that hangs while starting is killed at the start
# timeout (regression: its step's deadline was never armed and the
# coordinator slept forever).  Every start hangs here, so the engine must
# give up with exit 1 and an error result.
cat > "$E2E_TMP/hung-worker" <<'EOF'
#!/bin/bash
exec -a dynbatch-worker sleep 1000
EOF
chmod +x "$E2E_TMP/hung-worker"
start=$(date +%s%N)
DYNBATCH_WORKER="$E2E_TMP/hung-worker" timeout -k 1 20 "$BIN/dynbatch" run --no-progress \
	--workers 1 --batch 1 --step-timeout 100 --start-timeout 100 \
	--input "$E2E_TMP/one.jsonl" --output "$E2E_TMP/hung.out" 2>/dev/null
rc=$?
echo "       exit $rc after $(( ($(date +%s%N) - start) / 1000000 )) ms"
expect_eq "workers hanging at startup: killed at the start timeout, engine gives up" "$rc" 1
grep -q '"id":"a".*"finish_reason":"error"' "$E2E_TMP/hung.out" \
	&& pass "its request still gets an error result" || fail "no result for 'a'"

# A slow model (a call taking most of the step timeout) is never killed.
echo '{"id":"slow","prompt":[1,2,3],"max_tokens":3}' > "$E2E_TMP/slow.jsonl"
quiet slow --workers 1 --batch 1 --model sim:mode=sleep,call_us=350000 \
	--step-timeout 500 --input "$E2E_TMP/slow.jsonl" --output "$E2E_TMP/slow.out" \
	--stats "$E2E_TMP/slow.stats"
expect_eq "slow model: no hang kill" "$(stats_field "$E2E_TMP/slow.stats" hang_kills)" 0
grep -q '"id":"slow","tokens":\[26355,5658,24635\],"finish_reason":"length"' \
	"$E2E_TMP/slow.out" && pass "slow model: exact tokens" || fail "slow model tokens"


# --- 7. a shard that cannot keep a worker alive -----------------------------
# Issue 13 B11: shard 1's worker is killed and every replacement fails to
# start; its requests move to shard 0 (regression: they waited forever).
make_lost_worker
"$BIN/gen_workload" --n 120 --seed "$((SEED + 7))" --max-tokens 40 > "$E2E_TMP/lost.jsonl"
DYNBATCH_WORKER="$E2E_TMP/lost-worker" timeout -k 5 60 "$BIN/dynbatch" run --no-progress \
	--workers 2 --batch 8 --model sim:row_us=3000 --input "$E2E_TMP/lost.jsonl" \
	--output "$E2E_TMP/lost.out" 2> "$E2E_TMP/lost.err" &
lpid=$!
lost_workers=""
for _ in $(seq 200); do
	lost_workers=$(worker_pids "$(pgrep -P $lpid -x dynbatch)")
	[ "$(echo $lost_workers | wc -w)" -eq 2 ] && break
	sleep 0.02
done
sleep 0.3
victim=""
for w in $lost_workers; do
	tr '\0' ' ' < "/proc/$w/cmdline" 2>/dev/null | grep -q -- '--shard 1 ' && victim=$w
done
touch "$E2E_TMP/lost-now"
[ -n "$victim" ] && kill -KILL "$victim"
wait $lpid
rc=$?
expect_eq "shard 1 cannot restart: the run still ends, exit 0" "$rc" 0
check_results "its requests moved to shard 0 and finished exactly" sim \
	"$E2E_TMP/lost.jsonl" "$E2E_TMP/lost.out"
grep -q 'move to the other shards' "$E2E_TMP/lost.err" &&
	pass "the log says shard 1's requests moved" ||
	fail "no 'move to the other shards' in the log: $(tail -n 3 "$E2E_TMP/lost.err")"

finish
