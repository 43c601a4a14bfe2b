#!/bin/bash
# e2e_sandbox.sh - the worker sandbox (worker/sandbox.h) end to end: a
# hostile plugin (build/escape_plugin.so) cannot open a file, make a
# socket, signal or trace the coordinator, start a program or a process,
# map executable memory or write a descriptor it was not given, while it
# can still read the file it opened in create(), start a thread, allocate
# and sleep; the same plugin unsandboxed (DYNBATCH_NO_SANDBOX=1, or
# in-process) shows every attempt getting through, so the check can
# fail; the workers run filtered and without new privileges; ordinary
# runs (sim model sleeping and spinning, the example plugin, 0, 1 and 3
# workers, idle workers asleep) are exact with the sandbox on.
set -u
. "$(dirname "$0")/e2e_lib.sh"

run() { timeout -k 5 60 "$BIN/dynbatch" run --no-progress "$@"; }

# The escape plugin's token (tests/plugins/escape_plugin.c): bits 0-8 are escapes
# that reached the kernel, bits 10-13 what a model needs that worked.
ESCAPE_NAMES=(open socket kill-parent ptrace process_vm_readv execve fork
	exec-mapping write-stdout "" read-own-file thread malloc nanosleep)
ESCAPE_WORKS=15360	# bits 10-13
ESCAPE_ALL=15871	# bits 0-8 and 10-13

# tokens_of OUTPUT: the distinct tokens of every result, one per line.
tokens_of() {
	grep -o '"tokens":\[[0-9,]*' "$1" | cut -d[ -f2 | tr ',' '\n' | grep . | sort -u
}

# describe TOKEN: the names of its bits.
describe() {
	local bit names=""
	for bit in "${!ESCAPE_NAMES[@]}"; do
		[ $(( $1 >> bit & 1 )) = 1 ] && names="$names ${ESCAPE_NAMES[$bit]}"
	done
	echo "${names# }"
}

# expect_token NAME OUTPUT WANT: every token of OUTPUT is WANT.
expect_token() {
	local got
	got=$(tokens_of "$2" | tr '\n' ' ')
	got=${got% }
	if [ "$got" = "$3" ]; then
		pass "$1 ($(describe "$3"))"
	else
		fail "$1: tokens '$got', want $3"
		for t in $got; do echo "       $t: $(describe "$t")"; done
	fi
}

# --- 1. the escape plugin, sandboxed and not -----------------------------
echo "a file the plugin opens in create()" > "$E2E_TMP/weights"
ESCAPE="$BUILD/escape_plugin.so:file=$E2E_TMP/weights"
"$BIN/gen_workload" --n 60 --seed "$SEED" --vocab 16384 --max-tokens 8 \
	> "$E2E_TMP/e.jsonl"
for workers in 1 3; do
	run --workers $workers --batch 8 --model "$ESCAPE" --input "$E2E_TMP/e.jsonl" \
		--output "$E2E_TMP/e$workers.out" 2> "$E2E_TMP/e$workers.err"
	expect_eq "escape plugin, $workers workers: exit 0" $? 0
	expect_token "sandboxed, $workers workers: every escape refused, the model's needs work" \
		"$E2E_TMP/e$workers.out" $ESCAPE_WORKS
done
DYNBATCH_NO_SANDBOX=1 run --workers 1 --batch 8 --model "$ESCAPE" \
	--input "$E2E_TMP/e.jsonl" --output "$E2E_TMP/off.out" 2> /dev/null
expect_token "DYNBATCH_NO_SANDBOX=1: every escape gets through" "$E2E_TMP/off.out" \
	$ESCAPE_ALL
run --workers 0 --batch 8 --model "$ESCAPE" --input "$E2E_TMP/e.jsonl" \
	--output "$E2E_TMP/e0.out" 2> /dev/null
expect_token "in-process (never sandboxed): every escape gets through" \
	"$E2E_TMP/e0.out" $ESCAPE_ALL

# --- 2. the workers run filtered, without new privileges -----------------
# sandbox_status ENV: "Seccomp NoNewPrivs" of the worker of a run with
# ENV (VAR=value) in its environment, read once it has answered a request
# (so it serves, past the point where it enters the sandbox), while its
# input stays open.
sandbox_status() {
	local pid fifo="$E2E_TMP/status.fifo" out="$E2E_TMP/status.out" status="" w i
	rm -f "$fifo" "$out"
	mkfifo "$fifo"
	env "$1" "$BIN/dynbatch" run --no-progress --workers 1 --model sim \
		--input "$fifo" --output "$out" 2> /dev/null &
	pid=$!
	exec 7> "$fifo"
	echo '{"id":"a","prompt":[1],"max_tokens":2}' >&7
	for i in $(seq 50); do
		[ -s "$out" ] && break
		sleep 0.1
	done
	for w in $(worker_pids $pid); do
		status="$status$(awk '/^Seccomp:|^NoNewPrivs:/ { printf "%s", $2 }' \
			"/proc/$w/status" 2>/dev/null)"
	done
	exec 7>&-
	wait $pid
	echo "$status"
}
# /proc lists NoNewPrivs, then Seccomp: 1 and 2 (filter mode) sandboxed;
# unsandboxed Seccomp is 0, and NoNewPrivs still 1: every worker sets it
# when it drops its capabilities, before it loads the model.
expect_eq "the worker runs under a seccomp filter without new privileges" \
	"$(sandbox_status DYNBATCH_NO_SANDBOX=0)" "12"
expect_eq "DYNBATCH_NO_SANDBOX=1: the worker runs unfiltered" \
	"$(sandbox_status DYNBATCH_NO_SANDBOX=1)" "10"

# A worker that cannot enter its sandbox does not serve: strace makes its
# prctl(PR_SET_NO_NEW_PRIVS) fail, the run fails with nothing answered.
if command -v strace > /dev/null && strace -qq -o /dev/null true 2> /dev/null; then
	timeout -k 5 60 strace -f -qq -o /dev/null -e trace=prctl \
		-e inject=prctl:error=EPERM "$BIN/dynbatch" run --no-progress \
		--workers 1 --model "$ESCAPE" --input "$E2E_TMP/e.jsonl" \
		--output "$E2E_TMP/closed.out" 2> "$E2E_TMP/closed.err"
	rc=$?
	if [ $rc -ne 0 ] && grep -q 'sandbox: prctl(PR_SET_NO_NEW_PRIVS)' "$E2E_TMP/closed.err" &&
	   ! grep -q '"tokens":\[[0-9]' "$E2E_TMP/closed.out"; then
		pass "no sandbox, no service: the run fails (exit $rc), no token answered"
	else
		fail "a worker that could not enter its sandbox served (exit $rc)"
		tail -n 3 "$E2E_TMP/closed.err" | sed 's/^/       /'
	fi
else
	echo "  skipped: a worker that cannot enter its sandbox (no usable strace)"
fi

# --- 3. ordinary runs with the sandbox on ---------------------------------
# every_ok TAG: no worker died and nothing was refused in TAG's run.
every_ok() {
	if grep -q ' 0 worker deaths' "$E2E_TMP/$1.err" &&
	   ! grep -qi 'operation not permitted\|EPERM' "$E2E_TMP/$1.err"; then
		pass "$1: no worker death, nothing refused"
	else
		fail "$1: worker deaths or refusals"
		grep -i 'worker\|permitted' "$E2E_TMP/$1.err" | tail -n 5 | sed 's/^/       /'
	fi
}
MODEL="sim:vocab=3000,seed=$((SEED % 1000))"
"$BIN/gen_workload" --n 300 --seed "$SEED" --model "$MODEL" --max-tokens 32 \
	> "$E2E_TMP/s.jsonl"
for workers in 0 1 3; do
	for mode in spin sleep; do
		tag="sim-$mode-$workers"
		run --workers $workers --batch 16 --model "$MODEL,mode=$mode,call_us=100" \
			--input "$E2E_TMP/s.jsonl" --output "$E2E_TMP/$tag.out" \
			2> "$E2E_TMP/$tag.err"
		check_results "sim $mode, $workers workers" "$MODEL" "$E2E_TMP/s.jsonl" \
			"$E2E_TMP/$tag.out"
		every_ok "$tag"
	done
done
# Idle workers sleep in the kernel (the wait loop's slow path) between
# requests trickling in on a pipe.
{ for i in 1 2 3; do sed -n "${i}p" "$E2E_TMP/s.jsonl"; sleep 0.5; done; } |
	run --workers 2 --batch 4 --model "$MODEL" --output "$E2E_TMP/idle.out" \
		2> "$E2E_TMP/idle.err"
head -n 3 "$E2E_TMP/s.jsonl" > "$E2E_TMP/s3.jsonl"
check_results "idle workers woken from sleep" "$MODEL" "$E2E_TMP/s3.jsonl" \
	"$E2E_TMP/idle.out"
every_ok idle

PLUGIN="$BUILD/example_plugin.so:vocab=1000,a=7,b=3"
"$BIN/gen_workload" --n 150 --seed "$SEED" --vocab 1000 > "$E2E_TMP/p.jsonl"
run --workers 0 --batch 8 --model "$PLUGIN" --input "$E2E_TMP/p.jsonl" \
	--output "$E2E_TMP/p0.out" 2> /dev/null
run --workers 3 --batch 8 --model "$PLUGIN" --input "$E2E_TMP/p.jsonl" \
	--output "$E2E_TMP/plugin.out" 2> "$E2E_TMP/plugin.err"
if [ -s "$E2E_TMP/p0.out" ] &&
   diff <(sort "$E2E_TMP/p0.out") <(sort "$E2E_TMP/plugin.out") > /dev/null; then
	pass "example plugin: 3 sandboxed workers equal the in-process engine"
else
	fail "example plugin: 3 sandboxed workers differ from the in-process engine"
fi
every_ok plugin

# Poison requests (abort() and pause() under the filter) and worker kills
# and stops with the sandbox on: tests/e2e/e2e_faults.sh.

finish
