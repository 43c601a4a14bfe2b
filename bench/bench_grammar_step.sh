#!/bin/bash
# bench_grammar_step.sh - a constrained decode step against a plain one on
# a model people run: a stories15M-shaped GGUF (f32) with the published
# Llama 2 vocabulary (32000 tokens; build/node-tok/llama2.vocab, which
# e2e_gguf_text.sh exports), batch 64, 192 requests of 64 tokens, seeded
# at temperature 1: plain, then each held to a JSON schema of four
# properties.  Runs the pair twice, alternating (the machine is shared),
# and prints each run's model time per step (the mask is computed inside
# the step) and the ratio constrained / plain.
set -eu
BIN=${BIN:-bin}
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/bench}
VOCAB=$BUILD/node-tok/llama2.vocab
mkdir -p "$OUT"
if [ ! -f "$VOCAB" ]; then
	echo "bench_grammar_step: no $VOCAB (run tests/e2e/e2e_gguf_text.sh once)"
	exit 0
fi
"$BIN/make_gguf" --out "$OUT/s15-llama2.gguf" --shape stories15M --vocab-file "$VOCAB" \
	--type f32 --seed 1 > /dev/null
python3 - "$OUT" <<'PY'
import json, sys
schema = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
    "ok": {"type": "boolean"}}, "required": ["name", "age", "tags", "ok"],
    "additionalProperties": False}
with open(sys.argv[1] + "/gs-c.jsonl", "w") as c, open(sys.argv[1] + "/gs-u.jsonl", "w") as u:
    for i in range(192):
        q = {"id": "r%d" % i, "prompt": "Once upon a time", "max_tokens": 64,
             "temperature": 1.0, "seed": i}
        u.write(json.dumps(dict(q, ignore_eos=True)) + "\n")
        c.write(json.dumps(dict(q, response_format={"type": "json_schema",
                "json_schema": {"name": "p", "schema": schema}})) + "\n")
PY
step_ms() {
	"$BIN/dynbatch" run --no-progress --model "gguf:$OUT/s15-llama2.gguf" --workers 1 \
		--batch 64 --input "$OUT/gs-$1.jsonl" --output "$OUT/gs-$1.out" \
		--stats "$OUT/gs-$1.stats" 2> /dev/null
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("%.2f" % (1000 * d["model_s"] / d["steps"]))' "$OUT/gs-$1.stats"
}
for round in 1 2; do
	u=$(step_ms u)
	c=$(step_ms c)
	echo "round $round: plain $u ms/step, JSON schema $c ms/step, ratio $(python3 -c "print('%.3f' % ($c / $u))")"
done
