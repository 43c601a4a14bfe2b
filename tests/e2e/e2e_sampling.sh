#!/bin/bash
# e2e_sampling.sh - sampling end to end (lib/sampling/sampler.h SEMANTICS): every
# sampled result equals refdecode's naive decode (its own sim logits, the
# naive sampler of tools/refdecode/ref_sampler.c) token for token and logprob for
# logprob; the same seeded requests give bit-identical answers at workers
# 0/1/3 x batch 1/7/64, on sim and simkv, under kill -9 and SIGSTOP of
# workers, and through a stream paused for backpressure; HTTP choices equal
# the JSON Lines run; a llama model's draws follow from the naive
# forward's logits; the logprobs of the whole vocabulary sum to 1; an
# unseeded request replays exactly from the seed it reports; presence,
# frequency and repetition penalties match the naive sampler and agree at
# workers 0/1/2, and a frequency penalty spreads a repetitive greedy walk;
# bad sampling fields get errors that name them.
set -u
. "$(dirname "$0")/e2e_lib.sh"

VOCAB=2000
MSEED=$((SEED % 1000))
SIM="sim:vocab=$VOCAB,seed=$MSEED"
KV="simkv:vocab=$VOCAB,seed=$MSEED"
T=$E2E_TMP

run() { timeout -k 5 60 "$BIN/dynbatch" run --no-progress "$@"; }

# without_unseeded OUT: OUT's lines sorted, less those of sampled requests
# that gave no seed (the engine picks theirs: they differ run to run).
without_unseeded() { grep -v -F -f "$T/unseeded.pat" "$1" | sort; }

# same_as_clean NAME OUT: OUT has the clean run's answers, byte for byte.
same_as_clean() {
	if without_unseeded "$2" | cmp -s - "$T/clean.sorted"; then
		pass "$1: bit-identical to the clean run ($(wc -l < "$T/clean.sorted") lines)"
	else
		fail "$1: differs from the clean run:"
		without_unseeded "$2" | diff - "$T/clean.sorted" | head -n 6 | sed 's/^/       /'
	fi
}

# A sampled workload; simkv refuses empty prompts, so none here.
"$BIN/gen_workload" --n 300 --seed "$SEED" --model "$SIM" --max-prompt 48 \
	--max-tokens 40 --sampling | grep -v '"prompt":\[\]' > "$T/w.jsonl"
# two requests whose bias bans every token of a tiny vocabulary are added
# by hand below (vocab 2000 would need more than 300 bias entries)
jq -r 'select(.seed == null and (.temperature // 0) > 0) | "\"id\":\"\(.id)\","' \
	"$T/w.jsonl" > "$T/unseeded.pat"
echo "  workload: $(wc -l < "$T/w.jsonl") requests, $(wc -l < "$T/unseeded.pat") sampled without a seed"

echo "== workers 0/1/3 x batch 1/7/64, sim and simkv: exact, and all alike"
run --workers 1 --batch 7 --model "$SIM" --input "$T/w.jsonl" --output "$T/clean.out" 2> "$T/err"
check_results "clean run (sim, 1 worker, batch 7)" "$SIM" "$T/w.jsonl" "$T/clean.out"
without_unseeded "$T/clean.out" > "$T/clean.sorted"
for model in "$SIM" "$KV"; do
	for workers in 0 1 3; do
		for batch in 1 7 64; do
			name="${model%%:*} workers $workers batch $batch"
			out="$T/out-${model%%:*}-$workers-$batch.jsonl"
			if run --workers $workers --batch $batch --model "$model" \
				--input "$T/w.jsonl" --output "$out" 2> "$T/err"; then
				check_results "$name" "$SIM" "$T/w.jsonl" "$out"
				same_as_clean "$name" "$out"
			else
				fail "$name: exit $?"; tail -n 5 "$T/err"
			fi
		done
	done
done

echo "== kill -9 and SIGSTOP/SIGCONT of workers"
for model in "$SIM" "$KV"; do
	name="${model%%:*}: kill -9 and SIGSTOP"
	timeout -k 5 60 "$BIN/fault_inject" --seed "$SEED" --first-kill-ms 50 --kill-rate 20 --stop-rate 5 -- \
		"$BIN/dynbatch" run --no-progress --model "$model,call_us=300" --workers 3 \
		--batch 7 --step-timeout 2000 --input "$T/w.jsonl" \
		--output "$T/fault.out" 2> "$T/fault.err"
	expect_eq "$name: exit 0" $? 0
	check_results "$name" "$SIM" "$T/w.jsonl" "$T/fault.out"
	same_as_clean "$name" "$T/fault.out"
	grep -q "kills=[1-9]" "$T/fault.err" && pass "$name: workers were killed" ||
		fail "$name: no worker was killed: $(tail -n 1 "$T/fault.err")"
done

echo "== replay: an unseeded request run again with the seed it reported"
# every unseeded sampled request, now with "seed" set to the one its
# result reported: the same tokens and logprobs, every choice
# (text, not jq: jq reads numbers as doubles and would round the seeds)
grep -F -f "$T/unseeded.pat" "$T/w.jsonl" |
	awk 'NR == FNR {
		if (match($0, /"seed":[0-9]+/)) {
			seed = substr($0, RSTART, RLENGTH)
			match($0, /"id":"[^"]*"/)
			seeds[substr($0, RSTART, RLENGTH)] = seed
		}
		next
	}
	{
		match($0, /"id":"[^"]*"/)
		id = substr($0, RSTART, RLENGTH)
		if (id in seeds) { sub(/}$/, "," seeds[id] "}"); print }
	}' "$T/clean.out" - > "$T/replay.jsonl"
run --workers 3 --batch 64 --model "$SIM" --input "$T/replay.jsonl" \
	--output "$T/replay.out" 2> "$T/err"
# (less the "line" field: the replay's input has only these lines)
grep -F -f "$T/unseeded.pat" "$T/clean.out" | sed 's/,"line":[0-9]*//' |
	sort > "$T/unseeded.first"
sed 's/,"line":[0-9]*//' "$T/replay.out" | sort > "$T/unseeded.again"
if [ -s "$T/unseeded.first" ] && cmp -s "$T/unseeded.first" "$T/unseeded.again"; then
	pass "$(wc -l < "$T/unseeded.first") results of unseeded requests replayed bit-identically"
else
	fail "replay differs (or nothing to replay):"
	diff "$T/unseeded.first" "$T/unseeded.again" | head -n 4 | sed 's/^/       /'
fi
check_results "replayed run" "$SIM" "$T/replay.jsonl" "$T/replay.out"

echo "== tiny vocabulary: bans, and logprobs of the whole vocabulary sum to 1"
ALL16=$(seq 0 15 | sed 's/.*/"&":-100/' | paste -sd,)
{
	echo "{\"id\":\"ban\",\"prompt\":[1,2],\"max_tokens\":4,\"temperature\":1,\"seed\":5,\"n\":2,\"logprobs\":true,\"logit_bias\":{$ALL16}}"
	echo "{\"id\":\"ban0\",\"prompt\":[1,2],\"max_tokens\":4,\"logit_bias\":{$ALL16}}"
	echo "{\"id\":\"ban15\",\"prompt\":[1,2],\"max_tokens\":6,\"temperature\":1,\"seed\":5,\"logprobs\":15,\"logit_bias\":{${ALL16%,\"15\":-100}}}"
	for i in $(seq 0 19); do
		t=$(echo "1 1.5 0.7 2" | cut -d' ' -f$((i % 4 + 1)))
		echo "{\"id\":\"all$i\",\"prompt\":[$((i % 16)),3],\"max_tokens\":8,\"temperature\":$t,\"seed\":$((SEED + i)),\"logprobs\":true,\"top_logprobs\":16,\"top_k\":$((i % 5)),\"logit_bias\":{\"$((i % 16))\":2.5}}"
	done
} > "$T/tiny.jsonl"
run --workers 1 --batch 7 --model sim:vocab=16 --input "$T/tiny.jsonl" \
	--output "$T/tiny.out" 2> "$T/err"
check_results "vocab 16: bans, top_logprobs 16" sim:vocab=16 "$T/tiny.jsonl" "$T/tiny.out"
expect_eq "a bias that bans every token: an error per choice" \
	"$(jq -r 'select(.id == "ban" or .id == "ban0") | .error' "$T/tiny.out" | sort -u)" \
	"no token can be sampled: logit_bias (or the model) bans every token"
expect_eq "all but one banned: always that token" \
	"$(jq -c 'select(.id == "ban15") | .tokens' "$T/tiny.out")" "[15,15,15,15,15,15]"
# per position: the sum of exp(logprob) over all 16 alternatives
worst=$(jq -r 'select(.id | startswith("all")) | .logprobs[] |
	[.top_logprobs | length, (map(.logprob | exp) | add)] | @tsv' "$T/tiny.out" |
	awk '$1 != 16 { print "missing"; exit } { d = $2 - 1; if (d < 0) d = -d;
	     if (d > w) w = d } END { if (NR != 160) print "rows " NR; else printf "%.3g\n", w }')
awk -v w="$worst" 'BEGIN { exit !(w ~ /^[0-9.e+-]+$/ && w < 1e-5) }' &&
	pass "160 positions: sum of exp(logprobs) over the vocabulary within $worst of 1" ||
	fail "logprobs of the whole vocabulary: $worst (want < 1e-5 off 1)"

echo "== a 128K vocabulary: no fixed arrays, the same draws as the reference"
for i in $(seq 0 5); do
	echo "{\"id\":\"big$i\",\"prompt\":[$((i * 20000 + 7)),131071],\"max_tokens\":6,\"temperature\":$((i % 3 + 1)),\"top_p\":0.9$i,\"top_k\":$((i * 1000)),\"seed\":$((SEED + i)),\"logprobs\":5,\"n\":2,\"logit_bias\":{\"131071\":-100,\"$((i * 7))\":5}}"
done > "$T/big.jsonl"
for w in 0 2; do
	run --workers $w --batch 7 --model sim:vocab=131072 --input "$T/big.jsonl" \
		--output "$T/big$w.out" 2> "$T/err"
	check_results "vocab 131072, workers $w" sim:vocab=131072 "$T/big.jsonl" "$T/big$w.out"
done
expect_eq "vocab 131072: workers 0 and 2 alike" \
	"$(sort "$T/big0.out" | md5sum)" "$(sort "$T/big2.out" | md5sum)"

echo "== penalties: the naive sampler's tokens, alike at workers 0/1/2"
# the sampled workload with presence/frequency on a third of the lines and
# repetition (+ a negative frequency) on another; every sampled line seeded
jq -c --argjson s "$SEED" '(.id | ltrimstr("r") | tonumber? // 0) as $i |
	(if $i % 3 == 0 then . + {presence_penalty: 0.7, frequency_penalty: 0.4}
	 elif $i % 3 == 1 then . + {repetition_penalty: 1.3, frequency_penalty: -0.5}
	 else . end) | if .seed == null then . + {seed: ($s + $i)} else . end' \
	"$T/w.jsonl" > "$T/pen.jsonl"
for model in "$SIM" "$KV"; do
	for w in 0 1 2; do
		run --workers $w --batch 7 --model "$model" --input "$T/pen.jsonl" \
			--output "$T/pen$w.out" 2> "$T/err" || fail "penalties ${model%%:*} workers $w: exit $?"
		check_results "penalties, ${model%%:*} workers $w" "$SIM" "$T/pen.jsonl" "$T/pen$w.out"
	done
	expect_eq "penalties, ${model%%:*}: workers 0 and 1 alike" \
		"$(sort "$T/pen0.out" | md5sum)" "$(sort "$T/pen1.out" | md5sum)"
	expect_eq "penalties, ${model%%:*}: workers 0 and 2 alike" \
		"$(sort "$T/pen0.out" | md5sum)" "$(sort "$T/pen2.out" | md5sum)"
done
# a greedy walk over 16 tokens repeats itself; frequency 2 spreads it
for f in 0 2; do
	echo "{\"id\":\"g$f\",\"prompt\":[5,6,7],\"max_tokens\":120,\"frequency_penalty\":$f}"
done > "$T/rep.jsonl"
run --workers 1 --model sim:vocab=16,seed=3 --input "$T/rep.jsonl" --output "$T/rep.out" 2> "$T/err"
check_results "greedy with frequency_penalty" sim:vocab=16,seed=3 "$T/rep.jsonl" "$T/rep.out"
most=$(jq -s -r 'sort_by(.id) | map(.tokens | group_by(.) | map(length) | max) |
	join(" ")' "$T/rep.out")
read -r plain penal <<< "$most"
if [ -n "$penal" ] && [ "$penal" -lt "$plain" ]; then
	pass "frequency_penalty 2: the most repeated token $plain -> $penal times in 120"
else
	fail "frequency_penalty 2 did not spread the greedy walk: '$most'"
fi
expect_eq "frequency_penalty 0 is the plain greedy walk" \
	"$(jq -c 'select(.id == "g0") | .tokens' "$T/rep.out")" \
	"$(echo '{"id":"g","prompt":[5,6,7],"max_tokens":120}' > "$T/plain.jsonl";
	   run --model sim:vocab=16,seed=3 --input "$T/plain.jsonl" --output - 2>/dev/null | jq -c '.tokens')"

echo "== bad sampling fields: an error that names the field"
cat > "$T/bad.jsonl" <<'JSONL'
{"id":"b1","prompt":[1],"temperature":-1}
{"id":"b2","prompt":[1],"top_p":0}
{"id":"b3","prompt":[1],"top_p":1.5}
{"id":"b4","prompt":[1],"top_k":-2}
{"id":"b5","prompt":[1],"n":0}
{"id":"b6","prompt":[1],"n":65}
{"id":"b7","prompt":[1],"logit_bias":{"16":1}}
{"id":"b8","prompt":[1],"logit_bias":{"3":101}}
{"id":"b9","prompt":[1],"logprobs":21}
{"id":"b10","prompt":[1],"seed":-1}
{"id":"b11","prompt":[1],"presence_penalty":2.5}
{"id":"b12","prompt":[1],"frequency_penalty":"x"}
{"id":"b13","prompt":[1],"repetition_penalty":0}
JSONL
run --workers 0 --model sim:vocab=16 --input "$T/bad.jsonl" --output "$T/bad.out" 2> "$T/err"
i=0
for field in temperature top_p top_p top_k "'n'" "'n'" logit_bias logit_bias logprobs seed \
	presence_penalty frequency_penalty repetition_penalty; do
	i=$((i + 1))
	line=$(jq -r "select(.id == \"b$i\") | [.finish_reason, .error] | @tsv" "$T/bad.out")
	case "$line" in
	error*"$field"*) pass "$(sed -n ${i}p "$T/bad.jsonl" | jq -c 'del(.id, .prompt)'): ${line#error	}" ;;
	*) fail "line $i: want an error naming $field, got '$line'" ;;
	esac
done
check_results "bad lines" sim:vocab=16 "$T/bad.jsonl" "$T/bad.out"

echo "== llama: draws on the naive forward's logits (near-boundary rule)"
# float kernels against a double reference: a token passes when the
# reference draws it, or (counted) when the draw is within 1e-4 of the
# kept mass of its share's edge; everything else is a mismatch
"$BIN/make_checkpoint" --out "$T/k.bin" --dim 64 --hidden 128 --layers 2 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/gen_workload" --n 150 --seed "$SEED" --vocab 300 --max-prompt 30 \
	--max-tokens 30 --max-context 256 --sampling | grep -v '"prompt":\[\]' > "$T/k.jsonl"
for workers in 0 3; do
	run --workers $workers --batch 16 --model "llama:$T/k.bin" --input "$T/k.jsonl" \
		--output "$T/k.out" 2> "$T/err"
	check_results "llama, workers $workers" "llama:$T/k.bin" "$T/k.jsonl" "$T/k.out"
done

echo "== HTTP: choices and streams equal the JSON Lines run"
REQ='{"id":"h","prompt":[5,6,7],"max_tokens":12,"temperature":0.9,"top_p":0.95,"seed":4242,"n":2,"logprobs":3}'
echo "$REQ" > "$T/h.jsonl"
run --workers 0 --model "$SIM" --input "$T/h.jsonl" --output "$T/h.out" 2> "$T/err"
check_results "the HTTP request as JSON Lines" "$SIM" "$T/h.jsonl" "$T/h.out"
# per choice: token ids and the chosen tokens' logprobs, as one line
jq -c -s 'sort_by(.index) | map([.tokens, (.logprobs | map(.logprob))])' "$T/h.out" > "$T/h.want"
serve_start http --workers 2 --batch 8 --model "$SIM"
curl -s "$URL/v1/completions" -d "$REQ" > "$T/h.json"
jq -c '.choices | sort_by(.index) | map([.token_ids, .logprobs.token_logprobs])' \
	"$T/h.json" > "$T/h.got" 2>/dev/null
# TODO(engine bug, reported): a non-streamed answer of n > 1 has only its
# last choice, as index 0 (http_on_finish() calls conn_detach(), which
# frees the kept choices, before conn_answer()); counted as a failure.
if cmp -s "$T/h.got" "$T/h.want"; then
	pass "non-streamed n=2: token_ids and logprobs equal the JSON Lines run"
else
	fail "non-streamed n=2: got $(cut -c1-120 "$T/h.got"), want $(cut -c1-120 "$T/h.want")"
fi
curl -sN "$URL/v1/completions" -d "${REQ%\}},\"stream\":true}" |
	sed -n 's/^data: {/{/p' > "$T/h.events"
jq -c -s 'map(.choices[]) | group_by(.index) |
	map([map(.token_ids[]), map(.logprobs.token_logprobs[])])' "$T/h.events" > "$T/h.streamed"
if cmp -s "$T/h.streamed" "$T/h.want"; then
	pass "streamed n=2: the events of each index add up to the JSON Lines run"
else
	fail "streamed n=2: got $(cut -c1-120 "$T/h.streamed"), want $(cut -c1-120 "$T/h.want")"
fi
serve_stop
expect_eq "serve exit 0" "$SRV_RC" 0

echo "== a sampled stream paused for backpressure resumes bit-identically"
serve_start slow --workers 2 --batch 8 --model "$KV,call_us=300" \
	--conn-buffer 4096 --write-timeout 20000
SLOW='{"id":"slow","prompt":[9,8,7],"max_tokens":500,"temperature":1.3,"top_k":40,"seed":77,"logprobs":2}'
echo "$SLOW" > "$T/slow.jsonl"
# read only after 2 s through a small receive buffer: the server's buffer
# fills, the request gives up its slot and later resumes by re-prefill
python3 - "$PORT" "$SLOW" > "$T/slow.events" <<'PY'
import json, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
body = json.dumps(dict(json.loads(sys.argv[2]), stream=True))
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
           % (len(body), body)).encode())
time.sleep(2)
data = b""
while b"data: [DONE]" not in data:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
for line in data.split(b"\n"):
    if line.startswith(b"data: {"):
        print(line[6:].decode())
PY
# both sides through jq, so the numbers are printed alike
jq -c -s '[map(.choices[0].token_ids[]), map(.choices[0].logprobs.token_logprobs[])]' \
	"$T/slow.events" > "$T/slow.got"
"$BIN/refdecode" --model "$SIM" --input "$T/slow.jsonl" |
	jq -c '[.tokens, (.logprobs | map(.logprob))]' > "$T/slow.want"
if [ -s "$T/slow.want" ] && cmp -s "$T/slow.got" "$T/slow.want"; then
	pass "the resumed sampled stream has exactly the reference's tokens and logprobs"
else
	fail "resumed stream: got $(cut -c1-100 "$T/slow.got"), want $(cut -c1-100 "$T/slow.want")"
fi
pauses=$(curl -s "$URL/metrics" | awk '$1 == "dynbatch_http_pauses_total" { print $2 }')
expect_gt "it was paused" "${pauses:-0}" 0
serve_stop
expect_eq "serve exit 0" "$SRV_RC" 0

finish
