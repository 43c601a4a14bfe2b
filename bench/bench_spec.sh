#!/bin/bash
# bench_spec.sh - speculative decoding's speed (make bench-spec;
# docs/performance.md).
#
#   bench/bench_spec.sh [OUTDIR]          (default build/bench)
#
# Knobs (environment): BIN (bin), SHAPE (stories110M; SMALL=1 takes
# stories15M), N (requests per run, 4 per slot), MAX_TOKENS (96),
# ROUNDS (2: off and ngram alternate, so drift hits both alike).
#
# Workloads, greedy, on two random-weight checkpoints of SHAPE:
#   good: make_checkpoint --plain-scales, whose greedy text falls into
#         runs of one repeated token, as random-weight models do (the
#         best case of prompt lookup; a real model rewriting a given text
#         guesses well too, but less often);
#   bad:  make_checkpoint's default scales, whose greedy text is about as
#         unique as its vocabulary allows: nearly every guess fails, and
#         the pacing must turn speculation down.
# For batch 1 (one worker, one slot) and batch 4 (one worker, four
# slots): tokens/s with --speculate off and ngram in the same run, their
# ratio, the acceptance rate, the tokens per verifying step and the share
# of time spent guessing; read bandwidth from bin/machine_limits in the
# same run, with the batch-1 bandwidth bound of a plain decode step for
# scale.  It prints a markdown table (also OUTDIR/spec.md).  A benchmark
# does not judge: it fails only when something could not run.
set -euo pipefail
BIN=${BIN:-bin}
OUT=${1:-build/bench}
SHAPE=${SHAPE:-stories110M}
[ "${SMALL:-0}" = 1 ] && SHAPE=stories15M
MAX_TOKENS=${MAX_TOKENS:-96}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT/spec"
TMP="$OUT/spec"
die() { echo "bench_spec: $*" >&2; exit 1; }
for b in dynbatch dynbatch-worker make_checkpoint machine_limits; do
	[ -x "$BIN/$b" ] || die "$BIN/$b is missing: build first (make)"
done

# checkpoint FILE ARGS...: make it once (kept for later runs)
checkpoint() {
	local f=$1
	shift
	if [ ! -s "$f" ]; then
		echo "bench_spec: making $f (once; kept for later runs)" >&2
		"$BIN/make_checkpoint" --out "$f.tmp" --shape "$SHAPE" --format legacy \
			--seed 1 "$@" >&2
		mv "$f.tmp" "$f"
	fi
}
CK_BAD="$OUT/$SHAPE.bin"
CK_GOOD="$OUT/$SHAPE-plain.bin"
checkpoint "$CK_BAD"
checkpoint "$CK_GOOD" --plain-scales
CK=$CK_BAD
read_gbs=$("$BIN/machine_limits" | sed -n 's/.*read_gbs=\([0-9.]*\).*/\1/p')
ck_bytes=$(stat -c %s "$CK")

# workload KIND N: short random prompts over the low 1000 ids
workload() {
	awk -v n="$2" -v m="$MAX_TOKENS" -v kind="$1" 'BEGIN { srand(7);
		for (i = 0; i < n; i++) {
			s = "";
			for (j = 0; j < 8; j++)
				s = s (j ? "," : "") int(1 + rand() * 999);
			print "{\"id\":\"" kind i "\",\"prompt\":[" s "],\"max_tokens\":" m "}";
		}
	}'
}

# one MODE BATCH KIND: prints "tokens_per_s drafted accepted verify_rows draft_ms wall_s"
one() {
	local mode=$1 batch=$2 kind=$3 st="$TMP/stats.json" ck=$CK_BAD
	[ "$kind" = good ] && ck=$CK_GOOD
	workload "$kind" $((batch * 4)) > "$TMP/in.jsonl"
	"$BIN/dynbatch" run --no-progress --model "llama:$ck" --workers 1 \
		--batch "$batch" --speculate "$mode" --input "$TMP/in.jsonl" \
		--output "$TMP/out-$mode.jsonl" --stats "$st" 2> "$TMP/run.err" ||
		die "dynbatch failed: $(tail -2 "$TMP/run.err")"
	python3 - "$st" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
sp = s.get("spec", {})
print(s["tokens_per_s"], sp.get("drafted", 0), sp.get("accepted", 0),
      sp.get("verify_rows", 0), sp.get("emitted", 0), sp.get("draft_ms", 0.0),
      s["wall_s"])
PY
}

{
echo "## Speculative decoding ($SHAPE, random weights, 1 worker)"
echo
echo "read bandwidth ${read_gbs} GB/s; a plain batch-1 step streams the"
echo "$((ck_bytes / 1000000)) MB of weights: bound $(python3 -c "print(f'{$read_gbs * 1e9 / $ck_bytes:.1f}')") tokens/s"
echo
echo "| workload | batch | off tok/s | ngram tok/s | ngram / off | accepted | tokens per checking row-step | guessing share |"
echo "|---|---|---|---|---|---|---|---|"
for kind in good bad; do
	for batch in 1 4; do
		off_sum=0; on_sum=0; line=""
		for r in $(seq "$ROUNDS"); do
			read -r t_off _ _ _ _ _ _ < <(one off "$batch" "$kind")
			read -r t_on dr ac vr em dms wall < <(one ngram "$batch" "$kind")
			cmp -s <(sort "$TMP/out-off.jsonl") <(sort "$TMP/out-ngram.jsonl") ||
				die "$kind batch $batch: ngram's answers differ from off's"
			off_sum=$(python3 -c "print($off_sum + $t_off)")
			on_sum=$(python3 -c "print($on_sum + $t_on)")
			line="$dr $ac $vr $em $dms $wall"
		done
		read -r dr ac vr em dms wall <<< "$line"
		python3 - "$kind" "$batch" "$off_sum" "$on_sum" "$ROUNDS" "$dr" "$ac" "$vr" "$em" "$dms" "$wall" <<'PY'
import sys
k, b, off, on, n, dr, ac, vr, em, dms, wall = sys.argv[1:]
off, on, n = float(off) / int(n), float(on) / int(n), int(n)
dr, ac, vr, em = int(dr), int(ac), int(vr), int(em)
print(f"| {k} | {b} | {off:.1f} | {on:.1f} | {on / off:.2f} | "
      f"{(100 * ac / dr if dr else 0):.0f}% of {dr} | "
      f"{(em / vr if vr else 0):.2f} | {100 * float(dms) / 1000 / float(wall):.2f}% |")
PY
	done
done
echo
echo "Answers with speculation equal those without, byte for byte, in every run above."
} | tee "$TMP/../spec.md"
