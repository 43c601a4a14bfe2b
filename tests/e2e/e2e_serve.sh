#!/bin/bash
# e2e_serve.sh - dynbatch serve end to end: the HTTP API's answers and
# errors, configuration errors, HTTP strictness, admission limits,
# timeouts, draining, thousands of random disconnects, clients that
# pipeline without reading, half-close or reset (tests/e2e/hostile_http.py),
# and a client that stops reading, against the real binaries.
# Answers are checked with the independent reference decoder (refdecode).
set -u
. "$(dirname "$0")/e2e_lib.sh"

VOCAB=64
MODEL="sim:vocab=$VOCAB"
SLOW="sim:vocab=$VOCAB,mode=sleep,call_us=2000"

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
# the misbehaving clients (tests/e2e/hostile_http.py) and JSON checks
command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 0; }

echo "== configuration errors exit 2 with a message"
# refused NAME ENV ARGS...: the server must exit 2 at once, saying why.
refused() {
	local name=$1 env=$2 rc
	shift 2
	env $env timeout 5 "$BIN/dynbatch" serve --workers 1 "$@" \
		> /dev/null 2> "$E2E_TMP/refused.err"
	rc=$?
	if [ "$rc" = 2 ] && [ -s "$E2E_TMP/refused.err" ]; then
		pass "$name: exit 2 ($(head -1 "$E2E_TMP/refused.err"))"
	else
		fail "$name: exit $rc, '$(head -1 "$E2E_TMP/refused.err")'"
	fi
}
for port in 65536 99999 -1 +80 ' 80' 8o 00000000000000000000065536; do
	refused "--listen 127.0.0.1:'$port'" "" --listen "127.0.0.1:$port"
done
refused "an empty DYNBATCH_API_KEY" "DYNBATCH_API_KEY=" --listen 127.0.0.1:0
refused "--api-key ''" "" --listen 127.0.0.1:0 --api-key ''
refused "--model-name with a tab" "" --listen 127.0.0.1:0 --model-name $'a\tb'
refused "--model-name with a newline" "" --listen 127.0.0.1:0 --model-name $'a\nb'
# A name with quotes and a backslash is escaped: GET /v1/models stays JSON.
serve_start name --workers 1 --batch 2 --model "$MODEL" --model-name 'my "m" \ 1'
status GET /v1/models > /dev/null
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(d["data"][0]["id"] != sys.argv[2])' "$E2E_TMP/body" 'my "m" \ 1' &&
	pass "a model name with quotes and a backslash: /v1/models is JSON naming it" ||
	fail "/v1/models: $(cat "$E2E_TMP/body")"
serve_stop

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
# max_tokens 0: answered without a slot, through the one admission path
# (engine_submit): counted like any request, and as a stream it ends with
# its last event and [DONE]
n_length=$(metric 'dynbatch_requests_total{finish_reason="length"}')
code=$(status POST /v1/completions "${AUTH[@]}" -d '{"prompt":[1,2],"max_tokens":0}')
grep -q '"token_ids":\[\],"finish_reason":"length"' "$E2E_TMP/body" && [ "$code" = 200 ] &&
	pass "max_tokens 0: length, no tokens" || fail "max_tokens 0: $code $(cat "$E2E_TMP/body")"
code=$(status POST /v1/completions "${AUTH[@]}" -d '{"prompt":[1,2],"max_tokens":0,"stream":true}')
grep -q '"token_ids":\[\],"finish_reason":"length"' "$E2E_TMP/body" &&
	grep -q '^data: \[DONE\]' "$E2E_TMP/body" && [ "$code" = 200 ] &&
	pass "max_tokens 0 streamed: length, no tokens, [DONE]" ||
	fail "max_tokens 0 streamed: $code $(cat "$E2E_TMP/body")"
expect_eq "max_tokens 0 counted with the finished requests" \
	"$(metric 'dynbatch_requests_total{finish_reason="length"}')" $((n_length + 2))

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

# HTTP strictness (RFC 9112) over raw sockets: what could be framed two
# ways is refused; whitespace counts against --max-header-bytes.
raw() {	# BYTES (printf format): send, read to the close; the status line
	exec 3<>"/dev/tcp/127.0.0.1/$PORT"
	printf "$1" >&3
	timeout 3 cat <&3 > "$E2E_TMP/raw"
	exec 3<&-
	head -1 "$E2E_TMP/raw" | tr -d '\r'
}
expect_eq "whitespace before a header colon: 400" \
	"$(raw 'GET /health HTTP/1.1\r\nHost : x\r\n\r\n')" "HTTP/1.1 400 Bad Request"
expect_eq "obs-fold: 400" \
	"$(raw 'GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n')" "HTTP/1.1 400 Bad Request"
expect_eq "Transfer-Encoding: gzip, chunked: 400" \
	"$(raw 'POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n')" \
	"HTTP/1.1 400 Bad Request"
expect_eq "HTTP/2.0 on the request line: 505" \
	"$(raw 'GET /health HTTP/2.0\r\n\r\n')" "HTTP/1.1 505 HTTP Version Not Supported"
pad=$(head -c 3000 /dev/zero | tr '\0' ' ')
expect_eq "3000 bytes of whitespace in a header (--max-header-bytes 2048): 431" \
	"$(raw "GET /health HTTP/1.1\\r\\nX-Pad:${pad}a\\r\\n\\r\\n")" \
	"HTTP/1.1 431 Request Header Fields Too Large"
# HEAD is GET without the body: a pipelined GET after it reads its own answer.
expect_eq "HEAD /health" \
	"$(raw 'HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nConnection: close\r\n\r\n')" \
	"HTTP/1.1 200 OK"
[ "$(grep -c '^HTTP/1.1 200' "$E2E_TMP/raw")" = 2 ] &&
	[ "$(grep -o '{"status":"ok"}' "$E2E_TMP/raw" | wc -l)" = 1 ] &&
	grep -q '^Content-Length: 15' "$E2E_TMP/raw" &&
	pass "HEAD: GET's headers, no body, then the GET's whole answer" ||
	fail "HEAD then GET: $(tr '\r\n' '  ' < "$E2E_TMP/raw")"
expect_eq "HEAD without the key: 401" \
	"$(raw 'HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n')" "HTTP/1.1 401 Unauthorized"
grep -q 'error' "$E2E_TMP/raw" && fail "the 401 to HEAD has a body" || pass "with no body"

# Every answer, plain and streamed, against the reference decoder.
load_check "600 answers, half streamed" --api-key "$KEY" --requests 600 \
	--concurrency 32 --stream-frac 0.5 --stop-frac 0.6 --max-tokens 48
serve_stop
expect_eq "SIGTERM: exit 0" "$SRV_RC" 0
expect_eq "no segment left" "$(segments_of "$SRV_PID")" ""

echo "== generated ids never collide with client ids"
serve_start ids --workers 1 --batch 4 --model "$SLOW"
status POST /v1/completions -d '{"prompt":[1],"max_tokens":1}' > /dev/null
first=$(grep -o '"id":"cmpl-[0-9a-f]*-[0-9]*"' "$E2E_TMP/body" | cut -d'"' -f4)
next="${first%-*}-$(( ${first##*-} + 1 ))"	# the id the server gives next
curl -s -o "$E2E_TMP/taken" -w '%{http_code}' "$URL/v1/completions" \
	-d "{\"id\":\"$next\",\"prompt\":[2],\"max_tokens\":300}" > "$E2E_TMP/taken_code" &
sleep 0.2
code=$(status POST /v1/completions -d '{"prompt":[3],"max_tokens":2}')
wait $!
[ -n "$first" ] && [ "$code" = 200 ] &&
	pass "a request without an id gets 200 after a client sent '$next'" ||
	fail "a request without an id: $code $(cat "$E2E_TMP/body") (first id '$first')"
[ "$(cat "$E2E_TMP/taken_code")" = 400 ] && grep -q '"param":"id"' "$E2E_TMP/taken" &&
	pass "a client id starting with 'cmpl-' is refused: 400, param id" ||
	fail "client id '$next': $(cat "$E2E_TMP/taken_code") $(head -c 200 "$E2E_TMP/taken")"
serve_stop

echo "== hostile clients: pipelining without reading, half-closes, resets"
HOSTILE="$(dirname "$0")/hostile_http.py"
serve_start hostile --workers 1 --batch 4 --model "$SLOW"
# A client that pipelines 2 MB of GETs (a third of them /metrics, ~6 KB
# each) and reads nothing: the server stops parsing at --conn-buffer of
# unsent answers, so its peak RSS stays flat; then everything is read.
if python3 "$HOSTILE" flood "$PORT" "$SRV_PID" 2000000 > "$E2E_TMP/flood.out"; then
	growth=$(awk -F= '$1 == "rss_growth_end_kb" { print $2 }' "$E2E_TMP/flood.out")
	n=$(awk -F= '$1 == "answers" { print $2 }' "$E2E_TMP/flood.out")
	[ "$growth" -lt 16384 ] &&
		pass "2 MB pipelined unread: peak RSS grew ${growth} KB (< 16 MB), then $n answers whole and in order" ||
		fail "2 MB pipelined unread: peak RSS grew ${growth} KB"
else
	fail "pipelining client: $(tail -1 "$E2E_TMP/flood.out")"
fi
# shutdown(SHUT_WR) after a request is no disconnect: answered, then closed.
echo '{"id":"h","prompt":[5,6],"max_tokens":40}' > "$E2E_TMP/h_q.jsonl"
want=$("$BIN/refdecode" --model "$MODEL" --input "$E2E_TMP/h_q.jsonl" |
	grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens":\[//; s/\]//')
for mode in plain stream; do
	python3 "$HOSTILE" halfclose "$PORT" "$mode" > "$E2E_TMP/half.out"
	got=$(awk -F= '$1 == "tokens" { print $2 }' "$E2E_TMP/half.out")
	[ -n "$want" ] && [ "$got" = "$want" ] &&
		pass "half-close after a $mode request: answered in full, then closed" ||
		fail "half-close, $mode: $(tail -1 "$E2E_TMP/half.out") (want $want)"
done
# A reset behind a full receive buffer of pipelined requests cancels the
# running request (it used to hold its slot to the end: 6 s here).
cancels_seen() {	# N: wait up to 2 s for N disconnect cancels, 0 busy slots
	for _ in $(seq 40); do
		[ "$(metric dynbatch_http_disconnect_cancels_total)" = "$1" ] &&
			[ "$(metric dynbatch_slots_busy)" = 0 ] && return 0
		sleep 0.05
	done
	return 1
}
python3 "$HOSTILE" reset_behind "$PORT" > "$E2E_TMP/reset.out"
cancels_seen 1 && pass "a reset behind $(cut -d= -f2 "$E2E_TMP/reset.out") pipelined bytes cancels within 2 s" ||
	fail "reset behind a full buffer: $(metric dynbatch_http_disconnect_cancels_total) cancels, $(metric dynbatch_slots_busy) busy"
# A close (FIN) while a plain request runs is found by the interim 100
# Continue it is sent: the closed socket answers it with a reset.
python3 "$HOSTILE" close_running "$PORT"
cancels_seen 2 && pass "a close while a plain request runs cancels it within 2 s" ||
	fail "close while running: $(metric dynbatch_http_disconnect_cancels_total) cancels, $(metric dynbatch_slots_busy) busy"
serve_stop
expect_eq "exit 0" "$SRV_RC" 0

# Every connection of the table answered in the same loop round: the
# server's list of connections to look at used to overflow then (a heap
# overflow any client could cause; SIGABRT or SIGSEGV at 1024).
serve_start burst --workers 1 --batch 2 --model "$MODEL"
python3 "$HOSTILE" burst "$PORT" 1024 > "$E2E_TMP/burst.out" 2>&1
expect_eq "1024 connections (the table) answered in one round, twice: each gets its answer" \
	"$(grep -o 'answered=[0-9]*' "$E2E_TMP/burst.out")" "answered=1024"
kill -0 "$SRV_PID" 2>/dev/null && pass "... and the server is alive" ||
	fail "... the server died: $(tail -n 2 "$E2E_TMP/burst.err")"
serve_stop
expect_eq "exit 0" "$SRV_RC" 0

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

echo "== a shard that cannot keep a worker alive: /health 503, the others serve"
# Issue 13 B11: shard 1's worker is killed and cannot be replaced
# (regression: /health said ok while the shard's requests waited forever).
make_lost_worker
DYNBATCH_WORKER="$E2E_TMP/lost-worker" serve_start lost --workers 2 --batch 4 --model "$MODEL"
expect_eq "GET /health before: 200" "$(status GET /health)" 200
victim=""
for w in $(worker_pids "$SRV_PID"); do
	tr '\0' ' ' < "/proc/$w/cmdline" 2>/dev/null | grep -q -- '--shard 1 ' && victim=$w
done
touch "$E2E_TMP/lost-now"
[ -n "$victim" ] && kill -KILL "$victim"
for _ in $(seq 100); do
	[ "$(status GET /health)" = 503 ] && break
	sleep 0.1
done
expect_eq "GET /health once shard 1 gave up: 503" "$(status GET /health)" 503
echo '{"id":"l","prompt":[3,4],"max_tokens":12}' > "$E2E_TMP/lost_q.jsonl"
ok=0
for i in 1 2 3 4 5 6; do
	got=$(curl -s -m 10 "$URL/v1/completions" -d '{"prompt":[3,4],"max_tokens":12}' |
	      grep -o '"token_ids":\[[0-9,]*\]' | sed 's/"token_ids"://')
	want=$("$BIN/refdecode" --model "$MODEL" --input "$E2E_TMP/lost_q.jsonl" |
	       grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens"://')
	[ -n "$got" ] && [ "$got" = "$want" ] && ok=$((ok + 1))
done
expect_eq "6 completions answered exactly by the live shard" "$ok" 6
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
