#!/bin/bash
# e2e_tp.sh - --tensor-parallel P (DESIGN 2.10, issue 28). Only P = 1 is
# built: it must decode exactly as without the option (checked by
# refdecode), and every P > 1 is refused with exit 2 and a reason, with
# a workers count that is not a multiple of P named as such, leaving no
# shared memory behind.
. "$(dirname "$0")/e2e_lib.sh"

CK="$E2E_TMP/tiny.bin"
"$BIN/make_checkpoint" --out "$CK" --dim 64 --hidden 96 --layers 2 --heads 4 \
	--kv-heads 2 --vocab 300 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/gen_workload" --n 40 --seed "$SEED" --vocab 300 --max-prompt 30 \
	--max-tokens 30 --max-context 256 > "$E2E_TMP/in.jsonl"

echo "== --tensor-parallel 1 is today's engine"
for b in 1 4; do
	timeout 120 "$BIN/dynbatch" run --model "llama:$CK" --workers 2 \
		--batch $b --tensor-parallel 1 --input "$E2E_TMP/in.jsonl" \
		--output "$E2E_TMP/out.jsonl" 2> "$E2E_TMP/run.err"
	expect_eq "P=1, workers 2, batch $b: exit 0" $? 0
	check_results "P=1, workers 2, batch $b" "llama:$CK" "$E2E_TMP/in.jsonl" \
		"$E2E_TMP/out.jsonl"
done

echo "== refusals"
# refused ARGS... MESSAGE: exit 2 naming why, no segment left
refused() {
	local msg=${*: -1}
	tracked timeout 60 "$BIN/dynbatch" run --model "llama:$CK" \
		--input "$E2E_TMP/in.jsonl" --output "$E2E_TMP/out.jsonl" \
		"${@:1:$#-1}" 2> "$E2E_TMP/run.err"
	expect_eq "${*:1:$#-1}: exit 2" "$LAST_RC" 2
	if grep -q -- "$msg" "$E2E_TMP/run.err"; then
		pass "${*:1:$#-1}: says '$msg'"
	else
		fail "${*:1:$#-1}: no '$msg' in: $(head -c 300 "$E2E_TMP/run.err")"
	fi
	expect_eq "${*:1:$#-1}: no segment left" "$(segments_of "$LAST_PID")" ""
}
refused --workers 3 --tensor-parallel 2 "needs --workers a multiple of 2"
refused --workers 0 --tensor-parallel 2 "needs --workers a multiple of 2"
refused --workers 2 --tensor-parallel 2 "not built yet"
refused --workers 2 --tensor-parallel 0 "tensor-parallel"

finish
