#!/bin/bash
# e2e_batch.sh - batch prompts and best_of on /v1/completions, against a
# served simkv model (paged: a batch's choices fork their own prompt's
# blocks) with a tokenizer: batch_client.py checks a batch against its
# prompts alone (plain, streamed, echo, usage), a bad prompt's 400, and
# best_of against its own ranking of the n = best_of answer.  Then a
# tenant's reservation counts every prompt of a batch and best_of's
# candidates (a 400 naming the numbers when it never fits).
set -u
. "$(dirname "$0")/e2e_lib.sh"

TESTS=$(cd "$(dirname "$0")" && pwd)
VOCAB=512
MODEL="simkv:vocab=$VOCAB,seed=$((SEED % 1000))"

if ! "$BIN/make_tokenizer" --vocab $VOCAB --out "$E2E_TMP/tok.bin" > "$E2E_TMP/tok.log" 2>&1; then
	fail "make_tokenizer --vocab $VOCAB"
	finish
	exit
fi

# ---- batches and best_of (batch_client.py) --------------------------------
serve_start batch --workers 2 --batch 8 --model "$MODEL" \
	--tokenizer "$E2E_TMP/tok.bin" --max-context 512
if timeout -k 5 120 python3 "$TESTS/batch_client.py" "$URL" "$SEED" \
	> "$E2E_TMP/client.out" 2>&1; then
	while read -r line; do pass "$line"; done < "$E2E_TMP/client.out"
else
	# what passed before the difference, then the difference
	grep -v '^batch_client: ' "$E2E_TMP/client.out" |
		while read -r line; do echo "  ok   $line"; done
	fail "$(grep -v '^batch_client: ' -c "$E2E_TMP/client.out") groups passed, then: $(grep -m 1 -A 3 '^batch_client: \|Traceback' "$E2E_TMP/client.out")"
	sed 's/^/       /' "$E2E_TMP/batch.err" | tail -n 10
fi
serve_stop
expect_eq "batch server: drained, exit 0" "$SRV_RC" 0

# ---- tenants reserve for every prompt and every candidate -----------------
# A burst of 100 refilled at 100000 tokens a second: what never fits is
# the burst's to say, and a request that fits gets in at once.
cat > "$E2E_TMP/t.json" <<'JSON'
{"tenants": [{"name": "a", "api_keys": ["ka"], "tokens_per_minute": 6000000,
  "burst_tokens": 100}]}
JSON
serve_start tenant --workers 1 --batch 4 --model "$MODEL" --tenants "$E2E_TMP/t.json"
post() {
	curl -s -o "$E2E_TMP/body" -w '%{http_code}' -m 20 -H 'Authorization: Bearer ka' \
		"$URL/v1/completions" -d "$1"
}
expect_eq "one prompt of 3 tokens + 31: fits" "$(post '{"prompt":[1,2,3],"max_tokens":31}')" 200
expect_eq "three such prompts never fit: 400" \
	"$(post '{"prompt":[[1,2,3],[4,5,6],[7,8,9]],"max_tokens":31}')" 400
grep -q "reserves 102 tokens (9 prompt + max_tokens 31 x n 1 (best_of where given) x 3 prompts).*burst_tokens 100" \
	"$E2E_TMP/body" && pass "the batch's 400 names its reservation and the burst" ||
	fail "batch 400 body: $(cat "$E2E_TMP/body")"
sleep 0.1	# the first one's tokens back in the bucket
expect_eq "best_of 3 x 30 + 3: fits" \
	"$(post '{"prompt":[1,2,3],"max_tokens":30,"best_of":3,"temperature":1}')" 200
expect_eq "best_of 4 x 30 + 3 never fits: 400" \
	"$(post '{"prompt":[1,2,3],"max_tokens":30,"best_of":4,"temperature":1}')" 400
grep -q "reserves 123 tokens" "$E2E_TMP/body" &&
	pass "best_of's 400 counts its candidates" || fail "best_of 400 body: $(cat "$E2E_TMP/body")"
serve_stop
expect_eq "tenant server: drained, exit 0" "$SRV_RC" 0

finish
