#!/bin/bash
# e2e_input.sh - `dynbatch run` against careless operators and hostile
# input (issue 13 A): lines of any length up to --max-line are decoded
# exactly, longer ones get an error line naming their length and the
# limit, and an endless line costs bounded memory (from a file, a pipe,
# /dev/zero, with 0, 1 and 2 workers); a run whose workers cannot be kept
# alive ends with exit 1 and an error line for every request, whatever the
# worker count; configuration errors exit 2 naming the path, an unwritable
# --stats file fails the run; a request id is never written raw into a
# log line.
set -u
. "$(dirname "$0")/e2e_lib.sh"

run() { timeout -k 5 60 "$BIN/dynbatch" run --no-progress "$@"; }

# spaces N: N spaces (JSON whitespace, to pad a line to a length).
spaces() { head -c "$1" /dev/zero | tr '\0' ' '; }

# good_line ID LEN: a valid request of exactly LEN bytes (LEN >= 60).
good_line() {
	local head="{\"id\":\"$1\",\"prompt\":[3,1,4]," tail='"max_tokens":6}'
	printf '%s%s%s\n' "$head" "$(spaces $(($2 - ${#head} - ${#tail})))" "$tail"
}
# idless_line LEN: a line of exactly LEN bytes without an id: an error for
# refdecode (no id), and for the engine too (no id, or too long).
idless_line() {
	local head='{"prompt":[1],' tail='"max_tokens":1}'
	printf '%s%s%s\n' "$head" "$(spaces $(($1 - ${#head} - ${#tail})))" "$tail"
}

# overlong_error OUT LINE LEN LIMIT: OUT has the error line for it.
overlong_error() {
	grep -qF "\"line\":$2,\"error\":\"line $2: $3 bytes, longer than the limit of $4 bytes (--max-line)\"" "$1"
}

# --- 1. long lines ------------------------------------------------------------
# The issue's repro: a valid 300 kB line first (it hung at 0% CPU).
good_line big 300030 > "$E2E_TMP/big.jsonl"
good_line small 80 >> "$E2E_TMP/big.jsonl"
for workers in 0 1 2; do
	run --workers $workers --input "$E2E_TMP/big.jsonl" --output "$E2E_TMP/big.out" 2>/dev/null
	expect_eq "300 kB line first, $workers workers, from a file: exit 0" $? 0
	check_results "300 kB line first, $workers workers, from a file" sim \
		"$E2E_TMP/big.jsonl" "$E2E_TMP/big.out"
	cat "$E2E_TMP/big.jsonl" | run --workers $workers > "$E2E_TMP/bigp.out" 2>/dev/null
	expect_eq "300 kB line first, $workers workers, from a pipe: exit 0" $? 0
	check_results "300 kB line first, $workers workers, from a pipe" sim \
		"$E2E_TMP/big.jsonl" "$E2E_TMP/bigp.out"
done

# Random lengths around the limit and around the engine's read size
# (256 KiB): every line within the limit decoded exactly, every longer one
# an error naming its length, each line in its place.
LIMIT=300000
RANDOM=$SEED
: > "$E2E_TMP/mix.jsonl"
: > "$E2E_TMP/mix.want"
for i in $(seq 1 24); do
	case $((RANDOM % 5)) in
	0) len=$((LIMIT - 2 + RANDOM % 5)) ;;
	1) len=$((262144 - 2 + RANDOM % 5)) ;;
	2) len=$((LIMIT * 2 + RANDOM % 1000)) ;;
	3) len=$((60 + RANDOM % 200)) ;;
	*) len=$((100 + RANDOM * 13 % 600000)) ;;
	esac
	# refdecode has no limit and matches an error with a null id (ours
	# for an over-long line) only to an input line without an id
	if [ $len -gt $LIMIT ]; then
		idless_line $len >> "$E2E_TMP/mix.jsonl"
		echo "$i $len" >> "$E2E_TMP/mix.want"
	else
		good_line "m$i" $len >> "$E2E_TMP/mix.jsonl"
	fi
done
echo "       $(wc -l < "$E2E_TMP/mix.want") of 24 lines over the limit of $LIMIT"
for workers in 0 1 2; do
	cat "$E2E_TMP/mix.jsonl" | run --workers $workers --max-line $LIMIT \
		> "$E2E_TMP/mix.out" 2>/dev/null
	expect_eq "lines around --max-line, $workers workers: exit 0" $? 0
	expect_eq "... one result per line" "$(wc -l < "$E2E_TMP/mix.out")" 24
	check_results "... lines within the limit exact" sim "$E2E_TMP/mix.jsonl" \
		"$E2E_TMP/mix.out"
	got_ok=$(grep -c '"finish_reason":"length"' "$E2E_TMP/mix.out")
	expect_eq "... every line within the limit decoded" "$got_ok" \
		$((24 - $(wc -l < "$E2E_TMP/mix.want")))
	bad=0
	while read -r line len; do
		overlong_error "$E2E_TMP/mix.out" "$line" "$len" $LIMIT || bad=$((bad + 1))
	done < "$E2E_TMP/mix.want"
	expect_eq "... every longer line: an error naming its length and the limit" $bad 0
done

# Exactly the limit is fine, one byte more is not; \r\n counts the \r.
{
	good_line exact 4096
	good_line over 4097
	good_line after 100
} > "$E2E_TMP/edge.jsonl"
run --workers 1 --max-line 4096 --input "$E2E_TMP/edge.jsonl" --output "$E2E_TMP/edge.out" \
	2>/dev/null
grep -q '"id":"exact".*"finish_reason":"length"' "$E2E_TMP/edge.out" \
	&& pass "a line of exactly --max-line bytes is decoded" || fail "a line of exactly --max-line"
overlong_error "$E2E_TMP/edge.out" 2 4097 4096 \
	&& pass "one byte more: error line 2: 4097 bytes, limit 4096" \
	|| { fail "--max-line + 1"; cat "$E2E_TMP/edge.out"; }
grep -q '"id":"after".*"finish_reason":"length"' "$E2E_TMP/edge.out" \
	&& pass "the line after it is decoded" || fail "the line after an over-long one"
run --max-line 0 < /dev/null 2>/dev/null
expect_eq "--max-line 0 is a usage error" $? 2
"$BIN/dynbatch" serve --max-line 10 2>/dev/null
expect_eq "--max-line is for run, not serve" $? 2

# A 64 MiB line through a pipe, then a good line: the good line is
# answered, and the coordinator never held the long line.
printf '%s\n' '{"prompt":[1]}' > "$E2E_TMP/huge.ref"
good_line after 100 >> "$E2E_TMP/huge.ref"
for workers in 0 2; do
	{ head -c $((64 << 20)) /dev/zero | tr '\0' 'x'; echo; good_line after 100; } |
		run --workers $workers --stats "$E2E_TMP/huge.stats" > "$E2E_TMP/huge.out" \
		2>/dev/null
	expect_eq "64 MiB line, $workers workers: exit 0" $? 0
	overlong_error "$E2E_TMP/huge.out" 1 $((64 << 20)) 1048576 \
		&& pass "... error line naming 67108864 bytes and the default limit" \
		|| { fail "... error line"; cut -c1-300 "$E2E_TMP/huge.out"; }
	check_results "... the good line after it exact" sim "$E2E_TMP/huge.ref" \
		"$E2E_TMP/huge.out"
	rss=$(stats_field "$E2E_TMP/huge.stats" coordinator_max_rss_kb)
	if [ -n "$rss" ] && [ "$rss" -lt 24576 ]; then
		pass "... coordinator peak RSS ${rss} KiB (< 24 MiB)"
	else
		fail "... coordinator peak RSS '${rss}' KiB, want < 24 MiB"
	fi
done

# /dev/zero: one endless line.  Reading on costs no memory; SIGINT drains.
timeout --preserve-status -s INT 2 "$BIN/dynbatch" run --no-progress --workers 1 --input /dev/zero \
	--stats "$E2E_TMP/zero.stats" > "$E2E_TMP/zero.out" 2>/dev/null
expect_eq "/dev/zero as input: SIGINT ends it, exit 0" $? 0
rss=$(stats_field "$E2E_TMP/zero.stats" coordinator_max_rss_kb)
if [ -n "$rss" ] && [ "$rss" -lt 24576 ]; then
	pass "... coordinator peak RSS ${rss} KiB after 2 s of /dev/zero"
else
	fail "... coordinator peak RSS '${rss}' KiB, want < 24 MiB"
fi

# --- 2. no worker can be kept alive -------------------------------------------
"$BIN/gen_workload" --n 5 --seed "$SEED" > "$E2E_TMP/five.jsonl"
# Enough lines that most are still unread when the run gives up: each
# must still get its line.  A request with max_tokens 0 needs no worker
# and is answered "length"; every other one is an error.
"$BIN/gen_workload" --n 3000 --seed "$SEED" > "$E2E_TMP/many.jsonl"
n_need_worker=$(grep -vc '"max_tokens":0[,}]' "$E2E_TMP/many.jsonl")
printf '#!/bin/sh\nexit 1\n' > "$E2E_TMP/exit1-worker"
chmod +x "$E2E_TMP/exit1-worker"
mkdir -p "$E2E_TMP/a-directory"
for workers in 1 2 3; do
	for how in spawn exit1; do
		if [ $how = spawn ]; then
			DYNBATCH_FAULT=spawn run --workers $workers --input "$E2E_TMP/many.jsonl" \
				--output "$E2E_TMP/lost.out" 2>/dev/null
		else
			DYNBATCH_WORKER="$E2E_TMP/exit1-worker" run --workers $workers \
				--input "$E2E_TMP/many.jsonl" --output "$E2E_TMP/lost.out" 2>/dev/null
		fi
		expect_eq "workers that $how fail, $workers workers: exit 1 (not a hang)" $? 1
		expect_eq "... a line for each of the 3000 requests" \
			"$(wc -l < "$E2E_TMP/lost.out")" 3000
		expect_eq "... an error line for each that needs a worker" \
			"$(grep -c '"finish_reason":"error".*no worker can be kept alive' "$E2E_TMP/lost.out")" \
			"$n_need_worker"
	done
	msg=$(DYNBATCH_WORKER="$E2E_TMP/a-directory" run --workers $workers \
		--input "$E2E_TMP/five.jsonl" --output /dev/null 2>&1)
	expect_eq "DYNBATCH_WORKER a directory, $workers workers: refused at start, exit 1" $? 1
	expect_eq "... the message names it" "$msg" \
		"dynbatch: cannot find dynbatch-worker at $E2E_TMP/a-directory: Is a directory (set DYNBATCH_WORKER to its path)"
done
msg=$(DYNBATCH_WORKER=/dev/null run --workers 1 --input "$E2E_TMP/five.jsonl" \
	--output /dev/null 2>&1)
expect_eq "DYNBATCH_WORKER not a regular file: refused, exit 1" $? 1

# --- 3. configuration errors and the stats file ---------------------------------
msg=$(run --input "$E2E_TMP/a-directory" 2>&1 >/dev/null)
expect_eq "--input a directory: exit 2" $? 2
expect_eq "... the message names it" "$msg" "dynbatch: --input $E2E_TMP/a-directory: Is a directory"
run --input "$E2E_TMP/a-directory/nothing-here" 2>/dev/null
expect_eq "--input missing: exit 2" $? 2
msg=$(run --workers 0 < "$E2E_TMP/a-directory" 2>&1 >/dev/null)
expect_eq "standard input a directory: exit 2" $? 2
msg=$(run --input "$E2E_TMP/five.jsonl" --output "$E2E_TMP/a-directory" 2>&1)
expect_eq "--output a directory: exit 2" $? 2
expect_eq "... the message names it" "$msg" "dynbatch: --output $E2E_TMP/a-directory: Is a directory"
run --input "$E2E_TMP/five.jsonl" --output "$E2E_TMP/no/such/dir" 2>/dev/null
expect_eq "--output in a missing directory: exit 2" $? 2
for stats in /dev/full "$E2E_TMP/a-directory"; do
	run --workers 1 --input "$E2E_TMP/five.jsonl" --output "$E2E_TMP/st.out" \
		--stats "$stats" 2> "$E2E_TMP/st.err"
	expect_eq "--stats $stats cannot be written: exit 1" $? 1
	grep -q "^dynbatch: --stats $stats: cannot write the summary: " "$E2E_TMP/st.err" \
		&& pass "... the message names it" || { fail "... message"; cat "$E2E_TMP/st.err"; }
	check_results "... the results are all there all the same" sim \
		"$E2E_TMP/five.jsonl" "$E2E_TMP/st.out"
done

# --- 4. client strings in log lines -------------------------------------------
# A request the model always crashes on is failed as poison, and the
# warning names its id: an id with a newline and an ESC sequence must not
# forge a log line or reach the terminal raw.
T=4242
printf '%s\n' "{\"id\":\"p\\ndynbatch[1] coordinator: error: forged\\u001b[2J\\u0085\",\"prompt\":[1,$T],\"max_tokens\":4}" \
	> "$E2E_TMP/evil.jsonl"
good_line fine 80 >> "$E2E_TMP/evil.jsonl"
run --workers 1 --model "sim:crash_token=$T" --input "$E2E_TMP/evil.jsonl" \
	--output "$E2E_TMP/evil.out" 2> "$E2E_TMP/evil.err"
expect_eq "poisoned request with a hostile id: exit 0" $? 0
grep -q 'poison request' "$E2E_TMP/evil.err" && pass "... the poison warning is logged" \
	|| fail "... no poison warning"
expect_eq "... no stderr line starts with the forged text" \
	"$(grep -c '^dynbatch\[1\] coordinator: error: forged' "$E2E_TMP/evil.err")" 0
expect_eq "... no raw ESC on stderr" "$(grep -c $'\x1b' "$E2E_TMP/evil.err")" 0
expect_eq "... no raw C1 control on stderr" "$(grep -c $'\xc2\x85' "$E2E_TMP/evil.err")" 0
grep -qF "poison request 'p\\ndynbatch[1] coordinator: error: forged\\x1b[2J\\xc2\\x85'" \
	"$E2E_TMP/evil.err" && pass "... the id is written escaped" \
	|| { fail "... the id is not escaped as expected"; cat -A "$E2E_TMP/evil.err" | head; }
check_results "... the other request exact" sim "$E2E_TMP/evil.jsonl" "$E2E_TMP/evil.out" \
	--allow-errors


# --- 5. started with a standard descriptor closed -----------------------------
# The next descriptor opened took its number: with stdin closed the run
# read its own eventfd as input and hung; with stdout closed it wrote
# result lines into an eventfd.  A closed one is /dev/null now.
"$BIN/gen_workload" --n 50 --seed "$SEED" > "$E2E_TMP/fifty.jsonl"
timeout -k 5 10 "$BIN/dynbatch" run --no-progress --workers 1 \
	--output "$E2E_TMP/closed_in.out" <&- 2> "$E2E_TMP/closed_in.err"
expect_eq "stdin closed, --input -: an empty input, exit 0 (not a hang)" "$?" 0
expect_eq "... no result" "$(wc -l < "$E2E_TMP/closed_in.out")" 0
timeout -k 5 10 "$BIN/dynbatch" run --no-progress --workers 1 \
	--input "$E2E_TMP/fifty.jsonl" >&- 2> "$E2E_TMP/closed_out.err"
expect_eq "stdout closed, --output -: results go nowhere, exit 0" "$?" 0
expect_eq "... and no write error" "$(grep -c 'writing output' "$E2E_TMP/closed_out.err")" 0


# --- 6. a model that fails a step --------------------------------------------
# With workers the failing request is isolated and failed alone; with
# --workers 0 there is nobody to isolate it in, so the run gives up, but
# every request still gets its line (the rest of the input got none).
python3 - "$SEED" > "$E2E_TMP/nextfail.jsonl" <<'PY'
import random, sys
random.seed(int(sys.argv[1]))
for i in range(300):
    p = [random.choice([1, 2, 3, 5, 8, 13]) for _ in range(random.randrange(1, 6))]
    if i == 150:
        p = [3, 7]	# the plugin's next() fails on a prefix ending in 7
    print('{"id":"n%d","prompt":%s,"max_tokens":%d}' % (i, p, random.randrange(1, 20)))
PY
run --workers 0 --batch 8 --model "$BUILD/probe_plugin.so:mode=nextfail" \
	--input "$E2E_TMP/nextfail.jsonl" --output "$E2E_TMP/nextfail0.out" 2>/dev/null
expect_eq "--workers 0, a model that fails a step: exit 1" "$?" 1
expect_eq "... a line for each of the 300 requests" "$(wc -l < "$E2E_TMP/nextfail0.out")" 300
run --workers 2 --batch 8 --model "$BUILD/probe_plugin.so:mode=nextfail" \
	--input "$E2E_TMP/nextfail.jsonl" --output "$E2E_TMP/nextfail2.out" 2>/dev/null
expect_eq "2 workers, the same model: exit 0" "$?" 0
expect_eq "... a line for each of the 300 requests" "$(wc -l < "$E2E_TMP/nextfail2.out")" 300
# the same model without the failure, in-process, is the reference: every
# request that did not fail has its tokens; n150 failed (so did any whose
# generated tokens end in 7)
run --workers 0 --batch 8 --model "$BUILD/probe_plugin.so" \
	--input "$E2E_TMP/nextfail.jsonl" --output "$E2E_TMP/nextfail_ref.out" 2>/dev/null
python3 - "$E2E_TMP/nextfail2.out" "$E2E_TMP/nextfail_ref.out" > "$E2E_TMP/nextfail.cmp" <<'PY'
import json, sys
got = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
ref = {r["id"]: r for r in map(json.loads, open(sys.argv[2]))}
bad = [i for i, r in got.items()
       if r["finish_reason"] != "error" and r["tokens"] != ref[i]["tokens"]]
print("n150 failed" if got["n150"]["finish_reason"] == "error" else "n150 did not fail",
      "%d wrong" % len(bad))
PY
expect_eq "... n150 failed (it is isolated), every other answer exact" \
	"$(cat "$E2E_TMP/nextfail.cmp")" "n150 failed 0 wrong"


# --- 7. an output nobody reads, then two signals ------------------------------
# A FIFO held open by a process that never reads: the run cannot finish
# writing, so a first SIGTERM drains for ever; after the second it gives
# the output a second and ends, exit 1, saying how much was lost (it
# ignored every signal and had to be killed).
"$BIN/gen_workload" --n 3000 --seed "$SEED" > "$E2E_TMP/unread.jsonl"
mkfifo "$E2E_TMP/unread.fifo"
exec 7<>"$E2E_TMP/unread.fifo"	# a holder that never reads
"$BIN/dynbatch" run --no-progress --workers 2 --input "$E2E_TMP/unread.jsonl" \
	--output "$E2E_TMP/unread.fifo" 2> "$E2E_TMP/unread.err" &
UNREAD_PID=$!
sleep 1
kill -TERM "$UNREAD_PID"
sleep 0.5
kill -TERM "$UNREAD_PID"
for _ in $(seq 100); do kill -0 "$UNREAD_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$UNREAD_PID" 2>/dev/null; then
	fail "output nobody reads, two SIGTERMs: still running 10 s later"
	kill -KILL "$UNREAD_PID"
	wait "$UNREAD_PID" 2>/dev/null
else
	wait "$UNREAD_PID"
	expect_eq "output nobody reads, two SIGTERMs: ends, exit 1" "$?" 1
	expect_eq "... and says how much it could not write" \
		"$(grep -c 'result lines could not be written' "$E2E_TMP/unread.err")" 1
fi
exec 7>&-

finish
