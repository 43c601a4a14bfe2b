#!/bin/bash
# e2e_probe.sh - with --workers N > 0 a plugin's code never runs in the
# coordinator: its vocabulary comes from a sandboxed probe process
# (engine/model_probe.h).  Shown with build/probe_plugin.so
# (tests/plugins/probe_plugin.c), whose constructor and create() record the pid
# and parent pid that ran them: no record is the coordinator's, every
# record is a child's; with --workers 0 (the coordinator runs the model
# by design) the coordinator's pid does appear, so the check can fail.
# A plugin that hangs, crashes, fails with a hostile reason, reports a
# vocabulary of 0 or 2^32 - 1, writes garbage or nothing to the answer
# pipe, or closes it and hangs: exit 2 on time with a clear, escaped
# message, and no process left behind.  With workers, the results of the
# probe plugin and of the example plugin equal those of --workers 0.
# The probe's answer says whether the model gives logits ("vocab N
# context M logits L"), and only that exact form is accepted.
set -u
. "$(dirname "$0")/e2e_lib.sh"

PROBE_PLUGIN="$BUILD/probe_plugin.so"
MARKER="$E2E_TMP/marker"

# run_pid PIDFILE ARGS...: dynbatch run ARGS under a timeout, its own pid
# (the coordinator's) written to PIDFILE; the exit status is dynbatch's.
run_pid() {
	local pidfile=$1
	shift
	timeout -k 5 60 bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" \
		"$BIN/dynbatch" run --no-progress "$@"
}

"$BIN/gen_workload" --n 200 --seed "$SEED" --vocab 1000 --max-tokens 12 \
	> "$E2E_TMP/in.jsonl"

# same_results NAME GOT WANT: both outputs hold the same result lines
# (in any order), and every request of the input is answered.
same_results() {
	if [ "$(wc -l < "$2")" = "$(wc -l < "$E2E_TMP/in.jsonl")" ] &&
	   diff <(sort "$2") <(sort "$3") > /dev/null; then
		pass "$1 ($(wc -l < "$2") results)"
	else
		fail "$1"
	fi
}

# --- 1. no plugin code in the coordinator ---------------------------------
# --workers 0 first: the coordinator runs the model itself, by design, so
# the marker shows its pid (the check below can fail), and its results
# are the reference for the runs with workers.
rm -f "$MARKER"
DYNBATCH_TEST_MARKER="$MARKER" run_pid "$E2E_TMP/pid" --workers 0 \
	--model "$PROBE_PLUGIN" --input "$E2E_TMP/in.jsonl" \
	--output "$E2E_TMP/w0.out" 2> /dev/null
expect_eq "probe plugin, --workers 0: exit 0" $? 0
coord=$(cat "$E2E_TMP/pid")
expect_eq "--workers 0 runs the plugin in the coordinator (the marker sees it)" \
	"$(awk -v c="$coord" '$2 == c { print $1 }' "$MARKER" | sort | tr '\n' ' ')" \
	"create ctor "
for workers in 1 3; do
	rm -f "$MARKER"
	DYNBATCH_TEST_MARKER="$MARKER" run_pid "$E2E_TMP/pid" --workers $workers \
		--batch 16 --model "$PROBE_PLUGIN" --input "$E2E_TMP/in.jsonl" \
		--output "$E2E_TMP/w$workers.out" 2> "$E2E_TMP/w$workers.err"
	expect_eq "probe plugin, $workers workers: exit 0" $? 0
	same_results "probe plugin: $workers workers give what --workers 0 gives" \
		"$E2E_TMP/w$workers.out" "$E2E_TMP/w0.out"
	coord=$(cat "$E2E_TMP/pid")
	# the probe and each worker ran the constructor and create()
	expect_gt "$workers workers: create() ran in children" \
		"$(grep -c '^create ' "$MARKER")" $workers
	expect_eq "$workers workers: no plugin code ran in the coordinator ($coord)" \
		"$(awk -v c="$coord" '$2 == c' "$MARKER")" ""
	expect_eq "$workers workers: every record is a child of the coordinator" \
		"$(awk -v c="$coord" '$3 != c' "$MARKER")" ""
done
# The plugin's formula, checked independently on one request:
# next = (7 * last + 3 * len + 1) % 1000: 5 -> 39 -> 280 -> 970.
echo '{"id":"x","prompt":[5],"max_tokens":3}' > "$E2E_TMP/one.jsonl"
run_pid "$E2E_TMP/pid" --workers 2 --model "$PROBE_PLUGIN" \
	--input "$E2E_TMP/one.jsonl" --output "$E2E_TMP/one.out" 2> /dev/null
grep -q '"tokens":\[39,280,970\]' "$E2E_TMP/one.out" \
	&& pass "probe plugin tokens follow its formula" \
	|| fail "probe plugin tokens: $(cat "$E2E_TMP/one.out")"

# --- 2. the example plugin: the same results with and without workers ------
PLUGIN="$BUILD/example_plugin.so:vocab=1000,a=7,b=3"
for workers in 0 2; do
	run_pid "$E2E_TMP/pid" --workers $workers --model "$PLUGIN" \
		--input "$E2E_TMP/in.jsonl" --output "$E2E_TMP/ex$workers.out" 2> /dev/null
	expect_eq "example plugin, $workers workers: exit 0" $? 0
done
same_results "example plugin: 2 workers give what --workers 0 gives" \
	"$E2E_TMP/ex2.out" "$E2E_TMP/ex0.out"

# --- 3. the probe's answer: vocabulary, context limit, logits -------------
# The coordinator's probe is this build's worker, so its answer is
# checked here word for word: "logits 1" for a model that gives logits
# (the sim's logits() hook; a stateful model's step()), "logits 0" for a
# token model without the hook (the example plugin), and "kv K" a paged
# model's KV bytes per position (0: not paged).
probe_answer() {
	timeout -k 5 30 "$BIN/dynbatch-worker" --probe-fd 3 --model "$1" \
		3>&1 > /dev/null 2> "$E2E_TMP/probe.err"
}
expect_eq "probe answer: sim" "$(probe_answer sim:vocab=77)" \
	"vocab 77 context 0 logits 1 kv 0"
expect_eq "probe answer: simkv" "$(probe_answer simkv:context=64)" \
	"vocab 32000 context 64 logits 1 kv 8"
expect_eq "probe answer: the example plugin (no logits hook)" \
	"$(probe_answer "$PLUGIN")" "vocab 1000 context 0 logits 0 kv 0"

# --- 4. plugins that misbehave while they are probed -----------------------
# bad_plugin ARGS WANT [TIMEOUT_MS]: the run with the plugin's create()
# given ARGS refuses it with exit 2 and a message holding WANT, on time
# (the start timeout is TIMEOUT_MS, 500 by default), with every process
# that ran the plugin gone and nothing raw from the plugin in the message.
bad_plugin() {
	local args=$1 want=$2 timeout=${3:-500} start end coord msg p left="" name
	name=$(printf '%s' "${args:0:40}" | tr -c '[:print:]' '?')
	rm -f "$MARKER" "$E2E_TMP/bad.out"
	start=$(date +%s%N)
	DYNBATCH_TEST_MARKER="$MARKER" run_pid "$E2E_TMP/pid" --workers 2 \
		--start-timeout "$timeout" --model "$PROBE_PLUGIN:$args" \
		--input "$E2E_TMP/in.jsonl" --output "$E2E_TMP/bad.out" \
		2> "$E2E_TMP/bad.err"
	expect_eq "$name: exit 2" $? 2
	end=$(date +%s%N)
	coord=$(cat "$E2E_TMP/pid")
	msg=$(cat "$E2E_TMP/bad.err")
	case "$msg" in
	"dynbatch: --model $PROBE_PLUGIN:"*": the model cannot be opened: "*"$want"*)
		pass "$name: the message says why (${want:0:120})" ;;
	*)	fail "$name: message '$msg', want '$want'" ;;
	esac
	expect_eq "$name: one line, nothing raw" \
		"$(wc -l < "$E2E_TMP/bad.err") $(tr -d '\n[:print:]' < "$E2E_TMP/bad.err" | wc -c)" \
		"1 0"
	[ -s "$E2E_TMP/bad.out" ] && fail "$name: output written" \
		|| pass "$name: no output"
	if [ $(( (end - start) / 1000000 )) -lt 10000 ]; then
		pass "$name: on time ($(( (end - start) / 1000000 )) ms)"
	else
		fail "$name: took $(( (end - start) / 1000000 )) ms"
	fi
	expect_eq "$name: no plugin code in the coordinator" \
		"$(awk -v c="$coord" '$2 == c' "$MARKER" 2>/dev/null)" ""
	for p in $(awk '{ print $2 }' "$MARKER" 2>/dev/null | sort -u); do
		kill -0 "$p" 2>/dev/null && left="$left $p"
	done
	expect_eq "$name: no process that ran the plugin is left" "$left" ""
	expect_eq "$name: no segment left" "$(segments_of "$coord")" ""
}
bad_plugin mode=hang "the probe gave no answer within 500 ms (--start-timeout) and was killed"
bad_plugin mode=closehang "the probe gave no answer within 500 ms"
# A crash is seen as it happens; the timeout only bounds it.  Under ASan
# (make asan) the crash report alone took over 500 ms on a busy machine,
# and the probe was killed for the timeout instead.
bad_plugin mode=crash "the probe was killed by signal" 5000
bad_plugin mode=silent "the probe exited with status 0 without an answer"
bad_plugin mode=fail 'no weights here forged line \x1b[31m'
bad_plugin mode=vocab0 "reports a vocabulary of 0 tokens"
bad_plugin mode=vocabmax "reports a vocabulary of 4294967295 tokens"
bad_plugin mode=garbage "the probe answered 'vocab 12x\\x1b[2J\\n"
bad_plugin mode=flood "the probe gave no answer within 500 ms (--start-timeout) and was killed; its stderr ended with '"
grep -qF "flood\nflood\n'" "$E2E_TMP/bad.err" && pass "mode=flood: the tail of its stderr, escaped" \
	|| fail "mode=flood: no stderr tail in '$(cat "$E2E_TMP/bad.err")'"
bad_plugin sayraw="vocab 10" "no answer within 500 ms (--start-timeout) and was killed (it wrote 'vocab 10' and no newline)"
# answers a plugin may forge on the pipe before the probe's own: each is
# refused, and the probe, still running, is killed
# (the old two-field answer among them: the probe is always this build)
for answer in "vocab 0" "vocab 2147483649" "vocab 99999999999" "vocab 0010" \
	"vocab +10" "vocab -1" "vocab 10 " "vocab  10" "vocab 1e3" "VOCAB 10" \
	"vocab" "vocab 10"$'\r' "$(printf 'x%.0s' {1..3000})" \
	"vocab 10 context 0" "vocab 10 context 0 logits 2" \
	"vocab 10 context 0 logits 01" "vocab 10 context 0 logits " \
	"vocab 10 context 0 logits 1 " "vocab 10 logits 1 context 0" \
	"vocab 10 context 0 logits 0 logits 1" "vocab 10 context 0 logits 1" \
	"vocab 10 context 0 logits 1 kv" "vocab 10 context 0 logits 1 kv -4" \
	"vocab 10 context 0 logits 1 kv 1073741825" "vocab 10 context 0 logits 1 kv 4 kv 4"; do
	want=$(printf '%s\n' "$answer" | head -c 1024 | tr -d '\r')
	[ ${#answer} -gt 1000 ] && want=$(printf 'x%.0s' {1..100})
	bad_plugin say="$answer" "the probe answered '$want"
done

# a plugin that is not there: the same exit 2, naming the file
run_pid "$E2E_TMP/pid" --workers 2 --model "$E2E_TMP/nothere.so" \
	--input "$E2E_TMP/in.jsonl" --output /dev/null 2> "$E2E_TMP/bad.err"
expect_eq "missing plugin: exit 2" $? 2
grep -q "cannot load model plugin '$E2E_TMP/nothere.so'" "$E2E_TMP/bad.err" \
	&& pass "missing plugin: the message names it" \
	|| fail "missing plugin: $(cat "$E2E_TMP/bad.err")"

# a probe that cannot be started: exit 1 (not the model's fault), no
# descriptor or process left, the message says so
DYNBATCH_FAULT=spawn_probe run_pid "$E2E_TMP/pid" --workers 2 \
	--model "$PROBE_PLUGIN" --input "$E2E_TMP/in.jsonl" --output /dev/null \
	2> "$E2E_TMP/bad.err"
expect_eq "probe that cannot start: exit 1" $? 1
grep -q "^dynbatch: --model $PROBE_PLUGIN: cannot run a probe of .*dynbatch-worker: Resource temporarily unavailable$" \
	"$E2E_TMP/bad.err" && pass "probe that cannot start: the message says so" \
	|| fail "probe that cannot start: $(cat "$E2E_TMP/bad.err")"

finish
