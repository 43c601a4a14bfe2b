#!/bin/bash
# ab_compare.sh - two builds against each other, interleaved in one run:
# the llama transformer (stories15M-shaped random checkpoints, float32
# and Q8_0, 2 workers, batch 64) and the zero-cost sim (engine alone,
# --workers 0 and 2, batch 256), REPS rounds of old then new.  Prints
# each run's tokens/s, the medians, the best and new/old ratios, with the
# machine's FMA peak and read bandwidth measured in the same run.  Used to
# show that a change which should not move speed did not (docs/performance.md).
#
#   bench/ab_compare.sh OLD_BIN NEW_BIN [WORKDIR]    (REPS, default 5)
set -u
OLD=${1:?usage: bench/ab_compare.sh OLD_BIN NEW_BIN [WORKDIR]}
NEW=${2:?usage: bench/ab_compare.sh OLD_BIN NEW_BIN [WORKDIR]}
D=${3:-build/ab}
REPS=${REPS:-5}
mkdir -p "$D"
[ -f "$D/s15.bin" ] || "$NEW/make_checkpoint" --out "$D/s15.bin" --shape stories15M --seed 1 > /dev/null
[ -f "$D/s15q.bin" ] || "$NEW/make_checkpoint" --out "$D/s15q.bin" --shape stories15M \
	--format ak42v2 --seed 1 > /dev/null
"$NEW/gen_workload" --n 192 --seed 3 --vocab 32000 --max-prompt 16 --max-tokens 48 \
	--stop-frac 0 --max-context 256 > "$D/llama.jsonl"
"$NEW/gen_workload" --n 40000 --seed 3 --max-prompt 8 --max-tokens 64 > "$D/sim.jsonl"
"$NEW/machine_limits" --mib 256 | head -n 1

# one BIN ARGS...: tokens/s of one run (FAIL when it did not exit 0).
one() {
	local bin=$1
	shift
	"$bin/dynbatch" run "$@" --output /dev/null --stats "$D/st.json" 2> /dev/null ||
		{ echo FAIL; return; }
	grep -o '"tokens_per_s":[0-9.e+-]*' "$D/st.json" | cut -d: -f2
}
compare() {
	local name=$1 old="" new="" r
	shift
	for r in $(seq "$REPS"); do
		old="$old $(one "$OLD" "$@")"
		new="$new $(one "$NEW" "$@")"
	done
	python3 - "$name" "$old" "$new" <<'PY'
import statistics, sys
name, old, new = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
if "FAIL" in old + new:
    print(f"{name}: a run failed: old {old} new {new}")
    sys.exit(0)
a, b = [float(x) for x in old], [float(x) for x in new]
print(f"{name}: tokens/s old {' '.join(old)} | new {' '.join(new)}")
print(f"{name}: median {statistics.median(a):.0f} -> {statistics.median(b):.0f} "
      f"({statistics.median(b) / statistics.median(a):.3f}), best {max(a):.0f} -> "
      f"{max(b):.0f} ({max(b) / max(a):.3f})")
PY
}
compare llama-f32 --workers 2 --batch 64 --model "llama:$D/s15.bin" --input "$D/llama.jsonl"
compare llama-q8 --workers 2 --batch 64 --model "llama:$D/s15q.bin" --input "$D/llama.jsonl"
compare sim-workers0 --workers 0 --batch 256 --model sim --input "$D/sim.jsonl"
compare sim-workers2 --workers 2 --batch 256 --model sim --input "$D/sim.jsonl"
