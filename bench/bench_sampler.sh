#!/bin/bash
# bench_sampler.sh - the sampler per row at vocabularies of 32K and 128K,
# and its share of a stories15M-shaped batch-64 decode step timed in the
# same process (make bench-sampler).
#
#   bench/bench_sampler.sh [OUTDIR]        (default build/bench)
#
# Knobs (environment): BIN (bin), BATCH (64), MIN_MS (200: CPU ms each
# timing runs, best of three).
#
# Makes a stories15M-shaped checkpoint with random weights once in OUTDIR
# (the same file bench/bench_llama.sh makes and keeps: 60 MB, not
# committed) and runs bin/bench_sampler --model on it, which prints the
# step time, then per case the engine's, its portable path's and the
# naive full-sort sampler's microseconds per row, their ratios, and for
# the checkpoint's vocabulary the share of the step that sampling the
# batch's rows takes.  The output is also written to OUTDIR/sampler.txt.
# A benchmark does not judge: it fails only when something could not run.
set -euo pipefail
BIN=${BIN:-bin}
OUT=${1:-build/bench}
BATCH=${BATCH:-64}
MIN_MS=${MIN_MS:-200}

die() { echo "bench_sampler: $*" >&2; exit 1; }

for tool in bench_sampler make_checkpoint; do
	[ -x "$BIN/$tool" ] || die "$BIN/$tool is missing: build first (make)"
done
mkdir -p "$OUT"
ck="$OUT/stories15M.bin"
if [ ! -s "$ck" ]; then
	echo "bench_sampler: making $ck (once; kept for later runs)" >&2
	"$BIN/make_checkpoint" --out "$ck.tmp" --shape stories15M --format legacy --seed 1 >&2 ||
		die "make_checkpoint --shape stories15M failed"
	mv "$ck.tmp" "$ck"
fi
"$BIN/bench_sampler" --model "$ck" --batch "$BATCH" --min-ms "$MIN_MS" | tee "$OUT/sampler.txt"
