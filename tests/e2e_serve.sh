#!/bin/bash
# e2e_serve.sh - dynbatch serve end to end: the HTTP API's answers and
# errors, admission limits, timeouts, draining, thousands of random
# disconnects, and a client that stops reading, against the real binaries.
# Answers are checked with the independent reference decoder (refdecode).
set -u
. "$(dirname "$0")/e2e_lib.sh"

VOCAB=64
MODEL="sim:vocab=$VOCAB"
SLOW="sim:vocab=$VOCAB,mode=sleep,call_us=2000"

# serve_start NAME ARGS...: start a server on a free port; sets SRV_PID,
# PORT and URL (the address is read off its first stderr line).
serve_start() {
	local name=$1
	shift
	"$BIN/dynbatch" serve --listen 127.0.0.1:0 "$@" \
		2> "$E2E_TMP/$name.err" &
	SRV_PID=$!
	for _ in $(seq 100); do
		PORT=$(grep -o 'listening on http://[^ ]*' "$E2E_TMP/$name.err" 2>/dev/null |
		       sed 's/.*://')
		[ -n "$PORT" ] && break
		sleep 0.05
	done
	URL="http://127.0.0.1:$PORT"
	# ready when a worker is (GET /health 200)
	for _ in $(seq 100); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && break
		sleep 0.05
	done
}

# serve_stop: SIGTERM, wait; leaves the exit status in SRV_RC.
serve_stop() {
	kill -TERM "$SRV_PID" 2>/dev/null
	wait "$SRV_PID"
	SRV_RC=$?
}

# status METHOD PATH [curl args...]: the HTTP status code only.
status() {
	local m=$1 p=$2
	shift 2
	curl -s -o "$E2E_TMP/body" -w '%{http_code}' -X "$m" "$URL$p" "$@"
}

# metric NAME: a sample's value from GET /metrics (labels included in NAME).
metric() {
	curl -s -H "Authorization: Bearer ${KEY:-}" "$URL/metrics" |
		awk -v n="$1" '$1 == n { print $2 }'
}

# load_check NAME LOADGEN-ARGS...: run loadgen against $PORT (seeded, vocab
# $VOCAB), then check every completed answer against the reference.
load_check() {
	local name=$1
	shift
	if "$BIN/loadgen" --port "$PORT" --vocab $VOCAB --seed "$SEED" "$@" \
		--requests-out "$E2E_TMP/q.jsonl" --results-out "$E2E_TMP/r.jsonl" \
		--quiet > "$E2E_TMP/load.out" 2>&1; then
		pass "loadgen: $(grep -E '^(completed|disconnected|failed|protocol_errors)=' \
			"$E2E_TMP/load.out" | tr '\n' ' ')"
	else
		fail "loadgen"
		tail -5 "$E2E_TMP/load.out"
	fi
	check_results "$name" "$MODEL" "$E2E_TMP/q.jsonl" "$E2E_TMP/r.jsonl"
}

command -v curl >/dev/null || { echo "skipped: curl is not installed"; exit 0; }

echo "== the API and its errors"
KEY=k3y
serve_start api --workers 2 --batch 8 --model "$MODEL" --api-key "$KEY" \
	--max-body 4096 --max-header-bytes 2048 --max-headers 16 \
	--read-timeout 500 --idle-timeout 1500
AUTH=(-H "Authorization: Bearer $KEY")
expect_eq "GET /health needs no key" "$(status GET /health)" 200
expect_eq "GET /v1/models without the key: 401" "$(status GET /v1/models)" 401
expect_eq "a wrong key: 401" "$(status GET /v1/models -H 'Authorization: Bearer nope')" 401
expect_eq "GET /v1/models" "$(status GET /v1/models "${AUTH[@]}")" 200
grep -q '"id":"sim"' "$E2E_TMP/body" && pass "models lists sim" || fail "models: $(cat "$E2E_TMP/body")"
expect_eq "GET /metrics" "$(status GET /metrics "${AUTH[@]}")" 200
grep -q '^dynbatch_step_seconds_bucket{le="+Inf"}' "$E2E_TMP/body" &&
	pass "metrics has the step histogram" || fail "metrics: no step histogram"
expect_eq "unknown path: 404" "$(status GET /v1/nothing "${AUTH[@]}")" 404
expect_eq "GET /v1/completions: 405" "$(status GET /v1/completions "${AUTH[@]}")" 405
# bad bodies: 400 naming the field
bad_body() {	# NAME BODY PARAM
	local code
	code=$(status POST /v1/completions "${AUTH[@]}" -d "$2")
	if [ "$code" = 400 ] && grep -q "\"param\":$3" "$E2E_TMP/body"; then
		pass "$1: 400, param $3"
	else
		fail "$1: got $code $(cat "$E2E_TMP/body")"
	fi
}
bad_body "not JSON" '{"prompt":[1,' null
bad_body "wrong type" '{"prompt":[1],"max_tokens":"8"}' '"max_tokens"'
bad_body "token out of range" '{"prompt":[1,64]}' '"prompt"'
bad_body "text prompt" '{"prompt":"hello"}' '"prompt"'
bad_body "empty stop sequence" '{"prompt":[1],"stop_sequences":[[]]}' '"stop_sequences"'
bad_body "stream not a bool" '{"prompt":[1],"stream":1}' '"stream"'
bad_body "over the context" '{"prompt":[1],"max_tokens":5000}' '"prompt"'
head -c 5000 /dev/zero | tr '\0' ' ' > "$E2E_TMP/big"
expect_eq "body over --max-body: 413" \
	"$(status POST /v1/completions "${AUTH[@]}" --data-binary @"$E2E_TMP/big")" 413
expect_eq "headers over --max-header-bytes: 431" \
	"$(status GET /health -H "X-Big: $(head -c 3000 /dev/zero | tr '\0' a)")" 431
hdrs=()
for i in $(seq 20); do hdrs+=(-H "X-H$i: v"); done
expect_eq "more than --max-headers: 431" "$(status GET /health "${hdrs[@]}")" 431
# max_tokens 0 never reaches the engine
code=$(status POST /v1/completions "${AUTH[@]}" -d '{"prompt":[1,2],"max_tokens":0}')
grep -q '"token_ids":\[\],"finish_reason":"length"' "$E2E_TMP/body" && [ "$code" = 200 ] &&
	pass "max_tokens 0: length, no tokens" || fail "max_tokens 0: $code $(cat "$E2E_TMP/body")"

# Raw sockets (bash /dev/tcp): a request that never completes gets 408,
# an idle keep-alive connection is closed.
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pro' >&3
resp=$(timeout 3 cat <&3)
exec 3<&-
case "$resp" in "HTTP/1.1 408"*) pass "a stalled request gets 408 and is closed";;
	*) fail "stalled request: '${resp:0:80}'";; esac
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
t0=$(date +%s%N)
timeout 5 cat <&3 >/dev/null
t1=$(date +%s%N)
exec 3<&-
ms=$(( (t1 - t0) / 1000000 ))
[ "$ms" -ge 1000 ] && [ "$ms" -lt 4500 ] && pass "an idle connection is closed after ${ms} ms (--idle-timeout 1500)" ||
	fail "idle connection closed after ${ms} ms"
# Pipelined requests on one connection are answered in order.
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
resp=$(timeout 3 cat <&3 | grep -o 'HTTP/1.1 [0-9]*' | tr '\n' ' ')
exec 3<&-
expect_eq "two pipelined requests" "$resp" "HTTP/1.1 200 HTTP/1.1 401 "

# Every answer, plain and streamed, against the reference decoder.
load_check "600 answers, half streamed" --api-key "$KEY" --requests 600 \
	--concurrency 32 --stream-frac 0.5 --stop-frac 0.6 --max-tokens 48
serve_stop
expect_eq "SIGTERM: exit 0" "$SRV_RC" 0
expect_eq "no segment left" "$(segments_of "$SRV_PID")" ""

echo "== admission: a full queue answers 429 at once"
serve_start q429 --workers 1 --batch 1 --queue 1 --model "$SLOW"
for i in $(seq 8); do
	curl -s -o /dev/null -D "$E2E_TMP/h$i" -w '%{http_code} %{time_total}\n' \
		"$URL/v1/completions" -d '{"prompt":[1],"max_tokens":100}' > "$E2E_TMP/c$i" &
done
wait_pids=$(jobs -p | grep -v "^$SRV_PID$")
wait $wait_pids 2>/dev/null
n429=$(cat "$E2E_TMP"/c* | awk '$1 == 429' | wc -l)
n200=$(cat "$E2E_TMP"/c* | awk '$1 == 200' | wc -l)
slow429=$(cat "$E2E_TMP"/c* | awk '$1 == 429 && $2 > 0.5' | wc -l)
[ "$n429" -ge 1 ] && [ "$n200" -ge 2 ] && [ $((n429 + n200)) = 8 ] &&
	pass "8 requests on 1 slot + 1 queue place: $n200 answered, $n429 got 429" ||
	fail "429: $(cat "$E2E_TMP"/c* | tr '\n' ' ')"
expect_eq "every 429 came at once (< 0.5 s)" "$slow429" 0
grep -qi '^Retry-After: 1' $(grep -l ' 429' "$E2E_TMP"/h* | head -1) &&
	pass "429 carries Retry-After" || fail "429 without Retry-After"

echo "== past --max-connections: 503, and the others still served"
serve_stop
serve_start maxconn --workers 1 --batch 2 --model "$MODEL" --max-connections 2
exec 4<>"/dev/tcp/127.0.0.1/$PORT"
exec 5<>"/dev/tcp/127.0.0.1/$PORT"
sleep 0.2
code=$(curl -s -o "$E2E_TMP/body" -w '%{http_code}' "$URL/health")
expect_eq "a third connection: 503" "$code" 503
grep -q '"too many connections"' "$E2E_TMP/body" && pass "with an error body curl can read whole" ||
	fail "503 body: '$(cat "$E2E_TMP/body")'"
printf 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&4
resp=$(timeout 3 cat <&4)
case "$resp" in "HTTP/1.1 200"*) pass "an open connection is still served";;
	*) fail "open connection: '${resp:0:60}'";; esac
exec 4<&- 5<&-

echo "== draining: SIGTERM finishes every accepted request"
serve_stop
serve_start drain --workers 2 --batch 4 --model "$SLOW"
for i in $(seq 6); do	# 4 running, 2 waiting when the signal comes
	curl -s -o "$E2E_TMP/d$i" -w '%{http_code}' "$URL/v1/completions" \
		-d "{\"id\":\"d$i\",\"prompt\":[$i],\"max_tokens\":250}" > "$E2E_TMP/dc$i" &
done
sleep 0.3
kill -TERM "$SRV_PID"
sleep 0.1
refused=$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")
wait $(jobs -p | grep -v "^$SRV_PID$") 2>/dev/null
wait "$SRV_PID"
SRV_RC=$?
expect_eq "no new connections while draining" "$refused" 000
ok=0
for i in $(seq 6); do
	[ "$(cat "$E2E_TMP/dc$i")" = 200 ] &&
		grep -q '"finish_reason":"length","logprobs":null}\],"usage":{"prompt_tokens":1,"completion_tokens":250' "$E2E_TMP/d$i" &&
		ok=$((ok + 1))
done
expect_eq "all 6 accepted requests answered in full" "$ok" 6
expect_eq "drained: exit 0" "$SRV_RC" 0
expect_eq "no segment left" "$(segments_of "$SRV_PID")" ""

echo "== no worker can start: /health says 503, completions 503"
DYNBATCH_WORKER=/bin/false serve_start noworker --workers 1 --batch 4 --model "$MODEL"
for _ in $(seq 100); do
	[ "$(status POST /v1/completions -d '{"prompt":[1]}')" = 503 ] && break
	sleep 0.1
done
expect_eq "GET /health: 503" "$(status GET /health)" 503
expect_eq "POST /v1/completions: 503" "$(status POST /v1/completions -d '{"prompt":[1]}')" 503
serve_stop
expect_eq "exit 0 after SIGTERM" "$SRV_RC" 0

echo "== thousands of random disconnects"
serve_start disc --workers 2 --batch 16 --model "$SLOW"
load_check "every completed answer" --requests 4000 --concurrency 64 \
	--disconnect-frac 0.6 --max-tokens 32
sleep 0.2
busy=$(metric dynbatch_slots_busy)
free=$(metric dynbatch_slots_free)
expect_eq "slots: busy + free = batch (busy $busy, free $free)" "$((busy + free))" 16
expect_eq "no request left live" "$(metric dynbatch_requests_live)" 0
expect_eq "waiting queue empty" "$(metric dynbatch_queue_depth)" 0
cancels=$(metric dynbatch_http_disconnect_cancels_total)
[ "${cancels:-0}" -gt 100 ] && pass "$cancels requests cancelled by their client going away" ||
	fail "only '${cancels}' disconnect cancels"
stale=$(metric dynbatch_runahead_rows_discarded_total)
[ "${stale:-0}" -gt 0 ] && pass "$stale rows of cancelled requests discarded" ||
	fail "no run-ahead row discarded after $cancels cancels"
serve_stop
expect_eq "exit 0 (the engine's invariants hold at exit)" "$SRV_RC" 0
expect_eq "no segment left" "$(segments_of "$SRV_PID")" ""

echo "== an id reused after a disconnect never gets the old request's tokens"
serve_start reuse --workers 2 --batch 4 --model "$SLOW"
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
body='{"id":"re","prompt":[5,6,7],"max_tokens":500,"stream":true}'
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s' \
	"${#body}" "$body" >&3
n_events=0
while read -r -t 5 line <&3; do	# read a few events, then walk away
	case "$line" in data:*) n_events=$((n_events + 1));; esac
	[ "$n_events" -ge 3 ] && break
done
exec 3<&-
curl -s "$URL/v1/completions" -d '{"id":"re","prompt":[9],"max_tokens":20}' > "$E2E_TMP/re.json"
echo '{"id":"re","prompt":[9],"max_tokens":20}' > "$E2E_TMP/re_q.jsonl"
got=$(grep -o '"token_ids":\[[0-9,]*\]' "$E2E_TMP/re.json" | sed 's/"token_ids"://')
want=$("$BIN/refdecode" --model "$MODEL" --input "$E2E_TMP/re_q.jsonl" |
	grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens"://')
[ "$n_events" -ge 3 ] && [ -n "$got" ] && [ "$got" = "$want" ] &&
	pass "the new 're' got its own 20 tokens after the old one was cut off mid-stream" ||
	fail "id reuse: events $n_events, got '$got', want '$want'"
sleep 0.1
expect_eq "the old one was cancelled" "$(metric 'dynbatch_requests_total{finish_reason="cancelled"}')" 1
serve_stop
expect_eq "exit 0" "$SRV_RC" 0

echo "== worker kills under load, with disconnects"
"$BIN/fault_inject" --seed "$SEED" --kill-rate 5 --stop-rate 0 -- \
	"$BIN/dynbatch" serve --listen 127.0.0.1:0 --workers 3 --batch 24 --model "$SLOW" \
	2> "$E2E_TMP/kills.err" &
FI_PID=$!
for _ in $(seq 100); do
	PORT=$(grep -o 'listening on http://[^ ]*' "$E2E_TMP/kills.err" | sed 's/.*://')
	[ -n "$PORT" ] && break
	sleep 0.05
done
URL="http://127.0.0.1:$PORT"
SRV_PID=$(pgrep -P "$FI_PID" -x dynbatch | head -1)
load_check "every completed answer despite the kills" --requests 1500 \
	--concurrency 64 --disconnect-frac 0.2 --max-tokens 48
restarts=$(metric dynbatch_worker_restarts_total)
[ "${restarts:-0}" -ge 1 ] && pass "$restarts workers restarted" || fail "no worker was killed"
kill -TERM "$SRV_PID"
wait "$FI_PID"
expect_eq "exit 0" "$?" 0
expect_eq "no segment left" "$(segments_of "$SRV_PID")" ""

echo "== a client that reads nothing does not slow 63 others"
serve_start stall --workers 2 --batch 64 --model "$SLOW" --conn-buffer 16384 --write-timeout 1000
for st in 0 1; do
	"$BIN/loadgen" --port "$PORT" --requests 126 --concurrency 63 --stream-frac 1 \
		--max-tokens 1000 --vocab $VOCAB --seed "$SEED" --stall $st --stall-wait-s 5 \
		--requests-out "$E2E_TMP/q$st.jsonl" --results-out "$E2E_TMP/r$st.jsonl" \
		--quiet > "$E2E_TMP/stall$st.out" 2>&1 || fail "loadgen --stall $st"
done
rate0=$(awk -F= '$1 == "stream_rate_p50_tps" { print $2 }' "$E2E_TMP/stall0.out")
rate1=$(awk -F= '$1 == "stream_rate_p50_tps" { print $2 }' "$E2E_TMP/stall1.out")
echo "  per-stream token rate p50: $rate0 tokens/s alone, $rate1 with a stalled client"
check_results "the 126 streams beside the stalled client" "$MODEL" "$E2E_TMP/q1.jsonl" "$E2E_TMP/r1.jsonl"
awk -v a="$rate0" -v b="$rate1" 'BEGIN { exit !(b >= 0.7 * a) }' &&
	pass "the others keep their rate ($rate1 vs $rate0 tokens/s)" ||
	fail "rate fell from $rate0 to $rate1 tokens/s"
expect_eq "the stalled request paused (gave up its slot)" \
	"$( [ "$(metric dynbatch_http_pauses_total)" -ge 1 ] && echo yes)" yes
expect_eq "and was cancelled after --write-timeout" "$(metric dynbatch_http_write_timeouts_total)" 1
grep -q '^stalled_closed=1' "$E2E_TMP/stall1.out" && pass "the server closed the stalled connection" ||
	fail "stalled connection: $(grep stalled "$E2E_TMP/stall1.out" | tr '\n' ' ')"
serve_stop
expect_eq "exit 0" "$SRV_RC" 0

finish
