#!/bin/bash
# bench_cascade.sh - split-KV and cascade attention (issue 24 section 6)
# on the 110M shape, one decode step of 64 rows at 1000 tokens of
# context: attention=exact, attention=split,cascade=off and
# attention=split, with every row sharing the prefix's blocks and with
# none shared (bin/bench_attention, which says how it measures), beside
# this machine's one-core FMA peak and read bandwidth (bin/machine_limits).
#
#   bench/bench_cascade.sh [OUTDIR]         (default build/bench)
#
# Knobs (environment): BIN (bin), ROWS (64), CONTEXT (1000), BLOCK (16),
# REPS (5).  The checkpoint (random weights, the stories110M shape with
# seq_len 1024) is made once in OUTDIR.  A benchmark does not judge: it
# prints what it measured and the ratios, and fails only when something
# could not run or cascade on and off give different logits.
set -euo pipefail
BIN=${BIN:-bin}
OUT=${1:-build/bench}
ROWS=${ROWS:-64} CONTEXT=${CONTEXT:-1000} BLOCK=${BLOCK:-16} REPS=${REPS:-5}
CK="$OUT/cascade-110M.bin"
mkdir -p "$OUT"
[ -f "$CK" ] || "$BIN/make_checkpoint" --out "$CK" --dim 768 --hidden 2048 \
	--layers 12 --heads 12 --kv-heads 12 --vocab 32000 --seq-len 1024 --seed 1 > /dev/null
echo "== machine: $("$BIN/machine_limits" | head -1)"
res=$("$BIN/bench_attention" --checkpoint "$CK" --rows "$ROWS" --context "$CONTEXT" \
	--block-tokens "$BLOCK" --reps "$REPS")
echo "$res"
# field MODE KEY: a number of the mode's line
field() { echo "$res" | grep "^mode=$1 " | grep -o "$2=[-0-9.]*" | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo "== ratios (below 1: faster than the denominator)"
for k in attn_ms_shared step_ms_shared attn_ms_unique step_ms_unique; do
	e=$(field exact $k) s=$(field split $k) c=$(field split+cascade $k)
	echo "$k: split/exact $(ratio "$s" "$e")  split+cascade/exact $(ratio "$c" "$e")  split+cascade/split $(ratio "$c" "$s")"
done
