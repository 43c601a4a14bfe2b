#!/bin/bash
# e2e_redteam.sh - hostile clients of the sampling, text and chat front
# ends (docs/DESIGN.md 12: clients may send anything; nothing crashes,
# hangs or grows without bound, and every other request stays exact).
#
#   1. serve: a ~150-byte request must not make the server hold hundreds
#      of MB (n 64 x max_tokens 1000 x 20 top logprobs, not streamed):
#      it is refused (400) or costs little (KNOWN TO FAIL until the front
#      end bounds what one answer may hold; see the red-team report).
#   2. serve: streamed text is the plain text, choice by choice, with the
#      same finish_reason; "stop" strings cut the text before the first
#      stop, as an independent cut of the stop-less text says.
#   3. serve: clients that leave an n > 1 request (streamed or not)
#      mid-way cancel every choice (requests_live back to 0).
#   4. run: n choices and the waiting queue (--queue smaller than n is an
#      error line, not a hang); SIGINT while an n > 1 request waits for
#      room drains at once, every line exact or cancelled, none twice.
#   5. a tokenizer.bin beside a checkpoint that is a FIFO or a directory:
#      a clear error at once (no hang on the open).
set -u
. "$(dirname "$0")/e2e_lib.sh"

TOK="$E2E_TMP/tok.bin"
"$BIN/make_tokenizer" --vocab 512 --out "$TOK" > /dev/null 2>&1
SIM="sim:vocab=512"
HTTP="python3 $(dirname "$0")/hostile_http.py"
SRV_PID=
# a run cut short (a closed pipe, ^C) leaves no server behind
trap '[ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null; rm -rf "$E2E_TMP"' EXIT

# --- 1. one request, one huge answer (KNOWN TO FAIL) -----------------------
AMPLIFY_MAX_KB=${AMPLIFY_MAX_KB:-65536}
for path in /v1/chat/completions /v1/completions; do
	# a fresh server each: the peak of one must not hide the other's
	serve_start amplify --workers 2 --batch 128 --model "$SIM" --tokenizer "$TOK" \
		--chat-template chatml
	if out=$($HTTP amplify "$PORT" "$SRV_PID" "$path" "$AMPLIFY_MAX_KB" 2>&1); then
		pass "$path n=64 x 1000 tokens x 20 logprobs: $out"
	else
		fail "$path n=64 x 1000 tokens x 20 logprobs: $(echo "$out" | tr '\n' ' ')"
	fi
	serve_stop
done

# --- 2. streamed = plain; stops cut where they should ----------------------
serve_start text --workers 2 --model "$SIM" --tokenizer "$TOK" --chat-template chatml
out=$($HTTP same_text "$PORT" "$SEED" 60 2>&1) &&
	pass "streamed text joins to the plain text (n 1..3, stops): $out" ||
	fail "streamed vs plain: $out"
out=$($HTTP stop_cut "$PORT" "$SEED" 80 2>&1) &&
	pass "stop strings cut the text before the first stop: $out" ||
	fail "stop strings: $out"

# --- 3. leaving an n > 1 request cancels every choice ----------------------
for kind in plain stream; do
	[ "$kind" = stream ] && s=true || s=false
	curl -s -m 0.5 "$URL/v1/completions" -d "{\"prompt\":\"Hi\",\"max_tokens\":3000,\
\"n\":16,\"temperature\":1,\"ignore_eos\":true,\"stream\":$s}" > /dev/null
	curl -s -m 0.5 "$URL/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\
\"content\":\"x\"}],\"max_tokens\":3000,\"n\":16,\"ignore_eos\":true,\"stream\":$s}" > /dev/null
done
live=x
for _ in $(seq 40); do
	live=$(curl -s "$URL/metrics" | awk '/^dynbatch_requests_live /{ print $2 }')
	[ "$live" = 0 ] && break
	sleep 0.05
done
expect_eq "clients that leave n=16 requests: requests_live back to 0" "$live" 0
serve_stop
expect_eq "serve: exit 0 after SIGTERM" "$SRV_RC" 0

# --- 4. run: n and the waiting queue ---------------------------------------
printf '%s\n' '{"id":"q1","prompt":[1,2,3],"max_tokens":5,"n":4,"temperature":1}' \
	'{"id":"q2","prompt":[1,2,3],"max_tokens":5,"n":64,"temperature":1}' \
	'{"id":"ok","prompt":[1,2,3],"max_tokens":5,"n":2,"temperature":1,"seed":3}' |
	timeout 10 "$BIN/dynbatch" run --workers 1 --queue 2 --no-progress --model "$SIM" \
	> "$E2E_TMP/queue.out" 2> "$E2E_TMP/queue.err"
rc=$?
expect_eq "run --queue 2: exit 0 (no hang)" "$rc" 0
expect_eq "run --queue 2: n=4 and n=64 are error lines naming --queue" \
	"$(grep -c '"finish_reason":"error".*raise --queue' "$E2E_TMP/queue.out")" 2
check_results "run --queue 2: the n=2 request exact" "$SIM" <(tail -n 1 \
	<(printf '%s\n' '{"id":"ok","prompt":[1,2,3],"max_tokens":5,"n":2,"temperature":1,"seed":3}')) \
	<(grep '"id":"ok"' "$E2E_TMP/queue.out")

for i in $(seq 0 39); do
	echo "{\"id\":\"h$i\",\"prompt\":[1,2,3],\"max_tokens\":300,\"n\":6,\"temperature\":1,\"seed\":$i}"
done > "$E2E_TMP/held.jsonl"
timeout -k 5 20 "$BIN/dynbatch" run --workers 1 --batch 4 --queue 8 --no-progress \
	--model "$SIM,row_us=200" --input "$E2E_TMP/held.jsonl" \
	--output "$E2E_TMP/held.out" 2> "$E2E_TMP/held.err" &
pid=$!
sleep 0.5
kill -INT $pid
start=$(date +%s%N)
wait $pid
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$rc" -eq 0 ] && [ "$ms" -le 5000 ] &&
	pass "SIGINT with n=6 requests waiting for room: exit 0 in $ms ms" ||
	fail "SIGINT with n=6 requests waiting for room: exit $rc after $ms ms"
check_results "SIGINT with n=6 waiting: each choice exact or cancelled" "$SIM" \
	"$E2E_TMP/held.jsonl" "$E2E_TMP/held.out" --allow-cancelled --allow-missing
expect_eq "SIGINT with n=6 waiting: no choice twice" \
	"$(sed -E 's/.*"id":"([^"]*)".*"index":([0-9]+).*/\1#\2/' "$E2E_TMP/held.out" | sort | uniq -d)" ""

# --- 5. a tokenizer.bin that is no file --------------------------------------
for kind in fifo dir; do
	d="$E2E_TMP/ck-$kind"
	mkdir -p "$d"
	"$BIN/make_checkpoint" --out "$d/model.bin" --dim 16 --hidden 32 --layers 1 \
		--heads 2 --kv-heads 2 --vocab 512 --seq-len 64 > /dev/null 2>&1
	[ "$kind" = fifo ] && mkfifo "$d/tokenizer.bin" || mkdir "$d/tokenizer.bin"
	echo '{"id":"a","prompt":[1],"max_tokens":2}' | timeout 10 "$BIN/dynbatch" run \
		--workers 1 --no-progress --model "llama:$d/model.bin" \
		> /dev/null 2> "$E2E_TMP/ck-$kind.err"
	rc=$?
	[ "$rc" -eq 2 ] && grep -q "tokenizer.bin.*not a regular file" "$E2E_TMP/ck-$kind.err" &&
		pass "tokenizer.bin beside the checkpoint is a $kind: exit 2, clear error" ||
		fail "tokenizer.bin is a $kind: exit $rc: $(head -n 2 "$E2E_TMP/ck-$kind.err")"
done

# --- 6. the answer budget: a reservation lives until the answer is sent ------
# --answer-budget 8 MiB: one unread answer reserving its bound (6.9 MB:
# 1500 tokens, each with 6 logprob entries' text and bytes at their worst;
# the answer itself is under 1 MB and stays in the server's buffers)
# leaves no room for a second (429); once read, room again.
serve_start budget --workers 1 --batch 8 --model "$SIM" --tokenizer "$TOK" \
	--max-answer-bytes 8388608 --answer-budget 8388608 --conn-buffer 4096
codes=$(python3 - "$PORT" <<'PY'
import json, socket, sys, time, urllib.request, urllib.error
port = int(sys.argv[1])
body = json.dumps({"prompt": "Hi", "max_tokens": 1500, "ignore_eos": True,
                   "logprobs": 5, "temperature": 1, "seed": 3}).encode()
def post():
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
# a client that sends the request and reads nothing for a while
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
time.sleep(1.5)              # its answer is built and stuck unsent
second = post()
got = b""                    # now read it all
s.settimeout(10)
while b"\r\n\r\n" not in got or len(got) < 200000:
    d = s.recv(65536)
    if not d:
        break
    got += d
    if got.endswith(b"}") and b"Content-Length" in got:
        head, _, rest = got.partition(b"\r\n\r\n")
        n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
        if len(rest) >= n:
            break
s.close()
time.sleep(0.3)
third = post()
print(second, third)
PY
)
expect_eq "answer budget: a second large answer waits (429) while one is unsent, then fits (200)" \
	"$codes" "429 200"
serve_stop

# --- 7. a stream of n > 1 whose choices fail says which ----------------------
# (a poison prompt: it ends in the crash token, so each choice fails on its
# own; an empty prompt, which a stateful model refuses, is a 400 now)
serve_start refuse --workers 1 --model sim:vocab=64,crash_token=9 --poison-attempts 1
idx=$(curl -sN "http://127.0.0.1:$PORT/v1/completions" \
	-d '{"prompt":[9],"max_tokens":3,"n":3,"stream":true}' |
	sed -n 's/^data: \({"error".*\)$/\1/p' | jq -r '.index' | sort | paste -sd,)
expect_eq "a failed choice's error event names its index (n=3)" "$idx" "0,1,2"
serve_stop

finish
