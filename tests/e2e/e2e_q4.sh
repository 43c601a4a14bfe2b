#!/bin/bash
# e2e_q4.sh - llama:CKPT,quant=q4 end to end: a float checkpoint of odd
# dimensions (dim 72, hidden 100: partial groups of 32 in every matrix)
# quantized at load to Q4G; its outputs, logprobs included, the same
# bytes at workers 0, 1 and 2 and batch 1 and 16; its greedy tokens
# against the f32 model's; bad uses exit 2 naming the option.  (The Q4G
# twins agree bit for bit, test_q4.c; kernel=portable is not compared
# here, as the float kernels around the matmuls differ in last bits.)
. "$(dirname "$0")/e2e_lib.sh"

CK="$E2E_TMP/odd.bin"
"$BIN/make_checkpoint" --out "$CK" --dim 72 --hidden 100 --layers 2 --heads 6 \
	--kv-heads 3 --vocab 300 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/gen_workload" --n 100 --seed "$SEED" --vocab 300 --max-prompt 40 \
	--max-tokens 40 --max-context 256 --stop-frac 0 |
	sed 's/^{/{"logprobs":2,/' > "$E2E_TMP/in.jsonl"	# bits show, not just tokens

# q4 TAG SPEC ARGS...: decode in.jsonl with llama:$CK$SPEC, sorted output
q4() {
	local tag=$1 spec=$2
	shift 2
	timeout 60 "$BIN/dynbatch" run --model "llama:$CK$spec" --input "$E2E_TMP/in.jsonl" \
		--output "$E2E_TMP/out.$tag" "$@" 2> "$E2E_TMP/run.err"
	expect_eq "$tag: exit 0" $? 0
	sort "$E2E_TMP/out.$tag" > "$E2E_TMP/out.$tag.sorted"
}

echo "== quant=q4: the same bytes (logprobs included) whatever the workers and batch"
q4 w0.b16 ",quant=q4" --workers 0 --batch 16
for tag in w0.b1 w1.b1 w1.b16 w2.b1 w2.b16; do
	case $tag in
	w0.b1) q4 $tag ",quant=q4" --workers 0 --batch 1 ;;
	w1.b1) q4 $tag ",quant=q4" --workers 1 --batch 1 ;;
	w1.b16) q4 $tag ",quant=q4" --workers 1 --batch 16 ;;
	w2.b1) q4 $tag ",quant=q4" --workers 2 --batch 1 ;;
	w2.b16) q4 $tag ",quant=q4" --workers 2 --batch 16 --step-tokens 5 ;;
	esac
	cmp -s "$E2E_TMP/out.w0.b16.sorted" "$E2E_TMP/out.$tag.sorted" &&
		pass "q4 $tag: the same bytes as in-process, batch 16" ||
		fail "q4 $tag: output differs from in-process, batch 16"
done

echo "== quant=q4 against f32: greedy tokens"
q4 f32 "" --workers 2 --batch 16
cmp -s "$E2E_TMP/out.w0.b16.sorted" "$E2E_TMP/out.f32.sorted" &&
	fail "q4: the same bytes as f32 (is quant=q4 ignored?)" ||
	pass "q4: its own tokens, not f32's"
# Random checkpoints have near-tied logits and chaotic dynamics (Q8_0 of
# such weights keeps 96% of f32's first tokens but only ~64% of all
# positions), so agreement is measured, not assumed: over 30 seeds of
# this shape (SEED=101..130), the first token of a request agreed with
# f32 in 46-69% (mean 59%) and all positions in 11-21% (mean 16%);
# chance is 1/300.  The floors below sit under every run measured and
# far above chance.
python3 - "$E2E_TMP/out.w0.b16" "$E2E_TMP/out.f32" > "$E2E_TMP/agree.txt" <<'PY'
import json, sys
def load(p):
    return {o["id"]: o.get("tokens", []) for o in map(json.loads, open(p))}
q, f = load(sys.argv[1]), load(sys.argv[2])
first = n_first = same = total = 0
for k, a in q.items():
    b = f.get(k, [])
    total += max(len(a), len(b))
    same += sum(x == y for x, y in zip(a, b))
    if a and b:
        n_first += 1
        first += a[0] == b[0]
print(first, n_first, same, total)
PY
read first n_first same total < "$E2E_TMP/agree.txt"
echo "  q4 vs f32: first tokens $first/$n_first, all positions $same/$total"
[ $((first * 100)) -ge $((n_first * 35)) ] &&
	pass "q4: first tokens agree with f32 in >= 35% ($first/$n_first)" ||
	fail "q4: first tokens agree with f32 in $first/$n_first (< 35%)"
[ $((same * 100)) -ge $((total * 8)) ] &&
	pass "q4: positions agree with f32 in >= 8% ($same/$total)" ||
	fail "q4: positions agree with f32 in $same/$total (< 8%)"

echo "== bad uses exit 2 naming the option"
"$BIN/make_checkpoint" --out "$E2E_TMP/q8.bin" --dim 64 --hidden 128 --layers 2 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 256 --format ak42v2 \
	--group-size 32 --seed "$SEED" > /dev/null
"$BIN/make_gguf" --out "$E2E_TMP/f32.gguf" --checkpoint "$CK" > /dev/null
bad() {	# NAME SPEC WANT
	timeout 30 "$BIN/dynbatch" run --model "$2" --workers 1 \
		--input "$E2E_TMP/in.jsonl" --output /dev/null 2> "$E2E_TMP/bad.err"
	local rc=$?
	if [ $rc = 2 ] && grep -q "$3" "$E2E_TMP/bad.err"; then pass "$1: exit 2"
	else fail "$1: exit $rc: $(head -c 300 "$E2E_TMP/bad.err")"; fi
}
bad "quant=q8" "llama:$CK,quant=q8" "unknown quant=q8"
bad "quant=q4 on a Q8_0 file" "llama:$E2E_TMP/q8.bin,quant=q4" "quant=q4 applies to.*ak42 version 2"
bad "quant=q4 on a GGUF file" "gguf:$E2E_TMP/f32.gguf,quant=q4" "quant=q4 applies to.*GGUF"
bad "quant=q4 with a bad path" "llama:$E2E_TMP/none.bin,quant=q4" "none.bin"

finish
