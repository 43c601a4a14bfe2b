#!/bin/bash
# soak.sh - run dynbatch under bin/fault_inject for a while, in rounds,
# each with a fresh seed, workload and fault mix, and check every round
# against the reference decoder (docs/DESIGN.md 9: nothing lost, nothing
# duplicated, nothing mixed up).
#
#   tools/soak.sh [SECONDS]        default 300; SEED=S replays a soak
#
# A round is one of three kinds:
#   short    kills, and stops shorter than the step timeout: nobody is
#            blamed, so every request must match the reference;
#   long     kills, and stops longer than the step timeout: the coordinator
#            kills stopped workers as hung and suspects their requests
#            (--poison-attempts 1000 keeps them from being failed);
#   garbage  kills and short stops, and workers garbling every Nth result.
# Every round must exit 0 with 0 mismatches and no missing or extra
# results.  A failing round's files are kept and its reproducer printed.
# Exit 0 when every round passed, 1 otherwise, 2 for a usage error.
set -u
DURATION_S=${1:-300}
BIN=${BIN:-bin}
SEED=${SEED:-$(( (RANDOM << 15) | RANDOM ))}
ROUND_TIMEOUT_S=${ROUND_TIMEOUT_S:-180}

case $DURATION_S in
''|*[!0-9]*) echo "usage: tools/soak.sh [SECONDS]" >&2; exit 2 ;;
esac
for b in dynbatch dynbatch-worker fault_inject gen_workload refdecode; do
	[ -x "$BIN/$b" ] || { echo "soak: $BIN/$b missing: run make" >&2; exit 2; }
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dynbatch-soak.XXXXXX")
KEEP=${KEEP:-$(dirname "$TMP")/dynbatch-soak-failed-$SEED}
trap 'rm -rf "$TMP"' EXIT
# Run private copies: a rebuild during the soak must not swap the worker
# binary under a running coordinator (an exec that fails is not a fault
# we mean to inject).
mkdir "$TMP/bin"
for b in dynbatch dynbatch-worker fault_inject gen_workload refdecode; do
	cp "$BIN/$b" "$TMP/bin/" || exit 2
done
SRC_BIN=$BIN
BIN=$TMP/bin
echo "soak: seed=$SEED for ${DURATION_S} s (replay with SEED=$SEED)"
RANDOM=$SEED

# pick A B: a random integer in [A, B] from the soak's seeded stream.
pick() { echo $(( $1 + ((RANDOM << 15) | RANDOM) % ($2 - $1 + 1) )); }
# one_of WORDS...: one of them.
one_of() { local a=("$@"); echo "${a[$(pick 0 $(($# - 1)))]}"; }
# field FILE NAME: a number from the --stats JSON.
stats_field() { grep -o "\"$2\":[0-9]*" "$1" 2>/dev/null | cut -d: -f2; }
fi_field() {
	sed -n "s/^fault_inject: seed=.* $2=\([0-9]*\).*/\1/p" "$1" | tail -n 1
}

n_rounds=0 n_failed=0 n_requests=0 n_kills=0 n_stops=0 n_mismatches=0
n_hang_kills=0 n_stale=0
start_s=$(date +%s)

# keep_round R WHY: save round R's files and print how to replay it.
keep_round() {
	local dir="$KEEP/round-$1"
	mkdir -p "$dir"
	cp "$TMP"/w.jsonl "$TMP"/out.jsonl "$TMP"/err "$TMP"/stats.json \
		"$TMP"/check "$dir"/ 2>/dev/null
	{
		echo "$SRC_BIN/gen_workload $GEN_ARGS > w.jsonl"
		echo "$SRC_BIN/fault_inject $FI_ARGS -- $SRC_BIN/dynbatch run $DB_ARGS" \
			"--input w.jsonl --output out.jsonl --stats stats.json"
		echo "$SRC_BIN/refdecode --model $SPEC --input w.jsonl --check out.jsonl"
	} > "$dir/repro.sh"
	echo "soak: round $1 FAILED: $2; files in $dir; reproduce with:"
	sed 's/^/  /' "$dir/repro.sh"
	tail -n 5 "$TMP/check" 2>/dev/null | sed 's/^/    /'
	grep -v 'killed by signal 9 (Killed)\|isolating' "$TMP/err" | tail -n 8 | sed 's/^/    /'
}

while [ $(( $(date +%s) - start_s )) -lt "$DURATION_S" ]; do
	r=$n_rounds
	n_rounds=$((n_rounds + 1))
	rseed=$((SEED + r))
	kind=$(one_of short short long garbage)
	vocab=$(one_of 1000 5000 32000)
	SPEC="sim:vocab=$vocab,seed=$((rseed % 977))"
	GEN_ARGS="--n $(pick 300 3000) --seed $rseed --model $SPEC --max-tokens $(pick 8 128)"
	GEN_ARGS+=" --max-prompt $(pick 1 256)"
	workers=$(pick 1 6)
	row_us=$(pick 20 150)
	kill_rate=$(pick 2 30)
	stop_rate=$(pick 1 12)
	DB_ARGS="--no-progress --workers $workers --batch $(pick 1 64)"
	DB_ARGS+=" --model $SPEC,row_us=$row_us,mode=$(one_of spin sleep)"
	case $kind in
	long)
		timeout_ms=$(pick 100 400)
		stop_max=$(( timeout_ms * $(pick 2 6) ))
		DB_ARGS+=" --step-timeout $timeout_ms --poison-attempts 1000"
		;;
	*)
		stop_max=$(pick 1 300)
		# generous: on a loaded machine a step also waits for a CPU
		DB_ARGS+=" --step-timeout $((stop_max + 1000))"
		;;
	esac
	# every result garbled would mean no step ever completes: from 2
	[ "$kind" = garbage ] && DB_ARGS+=" --garbage-every $(pick 2 7)"
	FI_ARGS="--seed $rseed --kill-rate $kill_rate --stop-rate $stop_rate"
	FI_ARGS+=" --stop-max-ms $stop_max --duration-ms $(pick 1000 20000)"

	"$BIN/gen_workload" $GEN_ARGS > "$TMP/w.jsonl"
	t0=$(date +%s%N)
	# word splitting of the argument strings is intended: none has spaces
	timeout -k 5 "$ROUND_TIMEOUT_S" "$BIN/fault_inject" $FI_ARGS -- \
		"$BIN/dynbatch" run $DB_ARGS --input "$TMP/w.jsonl" \
		--output "$TMP/out.jsonl" --stats "$TMP/stats.json" 2> "$TMP/err"
	rc=$?
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	"$BIN/refdecode" --model "$SPEC" --input "$TMP/w.jsonl" \
		--check "$TMP/out.jsonl" > "$TMP/check" 2>&1
	check_rc=$?
	checked=$(sed -n 's/^refdecode: checked \([0-9]*\) requests: \([0-9]*\) mismatches.*/\1/p' "$TMP/check")
	mism=$(sed -n 's/^refdecode: checked \([0-9]*\) requests: \([0-9]*\) mismatches.*/\2/p' "$TMP/check")
	kills=$(fi_field "$TMP/err" kills)
	stops=$(fi_field "$TMP/err" stops)
	hk=$(stats_field "$TMP/stats.json" hang_kills)
	stale=$(stats_field "$TMP/stats.json" stale_results_rejected)
	n_requests=$((n_requests + ${checked:-0}))
	n_kills=$((n_kills + ${kills:-0}))
	n_stops=$((n_stops + ${stops:-0}))
	n_mismatches=$((n_mismatches + ${mism:-0}))
	n_hang_kills=$((n_hang_kills + ${hk:-0}))
	n_stale=$((n_stale + ${stale:-0}))
	printf 'soak: round %d %-7s %5s requests, %d workers: kills=%s stops=%s hang_kills=%s stale=%s, %s mismatches, exit %d (%d ms)\n' \
		"$r" "$kind" "${checked:-?}" "$workers" "${kills:-?}" "${stops:-?}" \
		"${hk:-?}" "${stale:-?}" "${mism:-?}" "$rc" "$ms"
	if [ "$rc" -ne 0 ]; then
		n_failed=$((n_failed + 1))
		[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${ROUND_TIMEOUT_S} s" \
			|| why="exit $rc"
		keep_round "$r" "$why"
	elif [ "$check_rc" -ne 0 ]; then
		n_failed=$((n_failed + 1))
		keep_round "$r" "refdecode: ${mism:-?} mismatches (exit $check_rc)"
	fi
done

echo "soak: seed=$SEED $n_rounds rounds in $(( $(date +%s) - start_s )) s," \
	"$n_requests requests checked, $n_kills kills, $n_stops stops," \
	"$n_hang_kills hang kills, $n_stale stale results rejected," \
	"$n_mismatches mismatches, $n_failed rounds failed"
[ "$n_failed" -eq 0 ]
