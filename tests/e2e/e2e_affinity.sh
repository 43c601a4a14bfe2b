#!/bin/bash
# e2e_affinity.sh - the paged KV cache when serving (docs/DESIGN.md 11,
# docs/serving.md "Several replicas: cache affinity"), with simkv, whose
# tokens come only from its KV blocks, so any wrong block is a wrong token
# that bin/refdecode's sim (which knows nothing of blocks) catches.
#
# 1. Cache affinity: two replicas behind nginx with examples/nginx-dynbatch.conf
#    and `hash $http_x_session_id consistent`.  Conversations, one request
#    at a time, turn k's prompt = turn k-1's prompt + its answer + new
#    tokens, each with its X-Session-Id.  Every request of a session lands
#    on one replica (the replicas' dynbatch_requests_total around each
#    request), each later turn takes at least the earlier turn's whole
#    blocks from that replica's cache (dynbatch_kv_prefix_hit_tokens_total),
#    both replicas get sessions, and every answer is exact.  The control:
#    the same through the template's round robin (an odd number of
#    sessions, so a session's turns alternate replicas) takes fewer tokens
#    from the caches, still exact; so do requests without the header
#    through the hashing nginx (an empty key is balanced round robin).
# 2. Cancellation and id reuse with the cache on: streams sharing a system
#    prompt cut off by their clients at random moments, their ids reused
#    at once with the same or other prompts; every completed answer exact,
#    cancellations counted, /health 200, and once idle no KV block is
#    referenced (dynbatch_kv_used_blocks 0: no block leaked by a cancelled
#    request); the server drains and exits 0.
#
# Skipped (exit 0) when nginx, curl or python3 is missing (make test-deps).
set -u
. "$(dirname "$0")/e2e_lib.sh"

NGINX=${NGINX:-$(PATH="$PATH:/usr/sbin:/sbin" command -v nginx || true)}
if [ -z "$NGINX" ] || [ ! -x "$NGINX" ] || ! command -v curl > /dev/null ||
   ! command -v python3 > /dev/null; then
	echo "  skip: needs nginx (apt-get install nginx-light), curl and python3"
	echo "0 passed, 0 failed"
	exit 0
fi

VOCAB=500
MODEL="simkv:vocab=$VOCAB"
REF="sim:vocab=$VOCAB"
CLIENT="python3 $(dirname "$0")/affinity_client.py"
TEMPLATE="$(dirname "$0")/../../examples/nginx-dynbatch.conf"
# the affinity line of the upstream block (an empty AFFINITY: round robin)
AFFINITY=${AFFINITY-'hash $http_x_session_id consistent;'}
REPLICA_PID=()
REPLICA_PORT=()
NGINX_PIDS=()

cleanup() {
	local p
	for p in "${NGINX_PIDS[@]}" "${REPLICA_PID[@]}"; do kill -TERM "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ "$E2E_FAILED" -gt 0 ]; then
		echo "  kept the logs for a look: $E2E_TMP"
	else
		rm -rf "$E2E_TMP"
	fi
}
trap cleanup EXIT

# metric PORT NAME: a sample's value from GET /metrics
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# nginx_start NAME UPSTREAM-LINES: the template with these upstream lines,
# on a free port (sets NGINX_PORT), once /health answers 200 through it.
nginx_start() {
	local name=$1 ups=$2 dir="$E2E_TMP/$1" try _
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chmod 0711 "$E2E_TMP"
	for try in 1 2 3 4 5; do
		NGINX_PORT=$(free_port)
		sed -e "s|@PREFIX@|$dir|g" -e "s|@PIDFILE@|$dir/nginx.pid|g" \
			-e "s|@LISTEN@|127.0.0.1:$NGINX_PORT|g" \
			-e "s|@UPSTREAMS@|$ups|g" "$TEMPLATE" > "$dir/nginx.conf"
		"$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" &
		NGINX_PIDS+=($!)
		for _ in $(seq 100); do
			if [ "$(curl -s -o /dev/null -w '%{http_code}' \
				"http://127.0.0.1:$NGINX_PORT/health")" = 200 ]; then
				pass "nginx $name on port $NGINX_PORT (try $try)"
				return 0
			fi
			sleep 0.05
		done
		grep -q 'in use' "$dir/error.log" || break
	done
	fail "nginx $name did not come up: $(tail -n 3 "$dir/error.log")"
	return 1
}

echo "== two replicas, simkv, cache on"
for i in 0 1; do
	serve_start "replica$i" --model "$MODEL" --workers 2 --batch 8 --prefix-cache on
	REPLICA_PID[i]=$SRV_PID
	REPLICA_PORT[i]=$PORT
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] &&
		pass "replica $i serves on port $PORT" ||
		{ fail "replica $i did not come up: $(tail -n 3 "$E2E_TMP/replica$i.err")"; finish; exit 1; }
done
SERVERS="server 127.0.0.1:${REPLICA_PORT[0]} max_fails=1 fail_timeout=2s; server 127.0.0.1:${REPLICA_PORT[1]} max_fails=1 fail_timeout=2s;"
nginx_start hash "$AFFINITY $SERVERS" || { finish; exit 1; }
HASH_PORT=$NGINX_PORT
nginx_start rr "$SERVERS" || { finish; exit 1; }
RR_PORT=$NGINX_PORT

# conversations TAG PORT SEED [--header]: 15 sessions of 3 turns through
# nginx on PORT, random prompts from SEED; TAG.log has "session turn
# replica hits want" per request
conversations() {
	local tag=$1 port=$2 seed=$3
	shift 3
	if $CLIENT sessions --port "$port" --replicas "${REPLICA_PORT[0]},${REPLICA_PORT[1]}" \
		--tag "$tag" --seed "$seed" --vocab $VOCAB --sessions 15 --turns 3 "$@" \
		--requests-out "$E2E_TMP/$tag.req" --results-out "$E2E_TMP/$tag.res" \
		--log-out "$E2E_TMP/$tag.log" > "$E2E_TMP/$tag.out" 2>&1; then
		pass "$tag: 45 requests answered"
	else
		fail "$tag: $(tail -n 3 "$E2E_TMP/$tag.out")"
	fi
	check_results "$tag: every answer exact" "$REF" "$E2E_TMP/$tag.req" "$E2E_TMP/$tag.res"
}

# --- 1. cache affinity --------------------------------------------------
echo "== 15 conversations of 3 turns, X-Session-Id, hash consistent"
conversations affinity "$HASH_PORT" "$SEED" --header
LOG="$E2E_TMP/affinity.log"
expect_eq "each request served by exactly one replica" \
	"$(awk '$3 < 0' "$LOG" | wc -l)" 0
expect_eq "each session's requests all on one replica" \
	"$(awk '{ print $1, $3 }' "$LOG" | sort -u | awk '{ print $1 }' | uniq -d | wc -l)" 0
expect_eq "both replicas serve sessions" "$(awk '$3 >= 0 { print $3 }' "$LOG" | sort -u | wc -l)" 2
short=$(awk '$2 > 0 && $4 < $5' "$LOG")
expect_eq "every later turn hits at least the earlier turn's whole blocks" "$short" ""
AFF_HITS=$(awk '{ n += $4 } END { print n + 0 }' "$LOG")
AFF_WANT=$(awk '{ n += $5 } END { print n + 0 }' "$LOG")
echo "       $AFF_HITS prompt tokens from the caches (at least $AFF_WANT wanted)"

echo "== no header through the same nginx: an empty key goes round robin"
conversations noheader "$HASH_PORT" $((SEED + 2))
expect_gt "without X-Session-Id some session's turns on both replicas" \
	"$(awk '{ print $1, $3 }' "$E2E_TMP/noheader.log" | sort -u | awk '{ print $1 }' | uniq -d | wc -l)" 0

echo "== control: the same through round robin, no header"
# (other prompts: the first conversations' are in the caches)
conversations control "$RR_PORT" $((SEED + 1))
LOG="$E2E_TMP/control.log"
expect_gt "round robin: some session's turns on both replicas" \
	"$(awk '{ print $1, $3 }' "$LOG" | sort -u | awk '{ print $1 }' | uniq -d | wc -l)" 0
RR_HITS=$(awk '{ n += $4 } END { print n + 0 }' "$LOG")
expect_gt "affinity takes more tokens from the caches than round robin ($AFF_HITS vs $RR_HITS)" \
	"$AFF_HITS" "$RR_HITS"

# --- 2. cancellation and id reuse, cache on ------------------------------
echo "== streams cut off mid-way, ids reused at once, cache on"
serve_start cancel --model "$MODEL,mode=sleep,call_us=1000" --workers 2 --batch 8 \
	--prefix-cache on
REPLICA_PID[2]=$SRV_PID
hits0=$(metric "$PORT" dynbatch_kv_prefix_hit_tokens_total)
if timeout 60 $CLIENT cancel --port "$PORT" --seed "$SEED" --vocab $VOCAB \
	--clients 24 --rounds 5 --requests-out "$E2E_TMP/cancel.req" \
	--results-out "$E2E_TMP/cancel.res" > "$E2E_TMP/cancel.out" 2>&1; then
	pass "reused ids: $(tail -n 1 "$E2E_TMP/cancel.out")"
else
	fail "reused ids: $(tail -n 5 "$E2E_TMP/cancel.out")"
fi
check_results "reused ids: every completed answer exact" "$REF" \
	"$E2E_TMP/cancel.req" "$E2E_TMP/cancel.res"
expect_gt "cancelled requests counted" \
	"$(metric "$PORT" 'dynbatch_requests_total{finish_reason="cancelled"}')" 0
expect_gt "the system prompt came from the cache" \
	"$(( $(metric "$PORT" dynbatch_kv_prefix_hit_tokens_total) - hits0 ))" 0
expect_eq "/health 200 after the cancellations" \
	"$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" 200
used=""
for _ in $(seq 40); do
	used=$(metric "$PORT" dynbatch_kv_used_blocks)
	[ "$used" = 0 ] && [ "$(metric "$PORT" dynbatch_requests_live)" = 0 ] && break
	sleep 0.05
done
expect_eq "idle: no KV block referenced (none leaked)" "$used" 0
expect_gt "idle: blocks stay cached for the next request" \
	"$(metric "$PORT" dynbatch_kv_peak_used_blocks)" 0
serve_stop
expect_eq "the server drains and exits 0" "$SRV_RC" 0
expect_eq "no worker died" "$(grep -c 'worker [0-9]* (pid [0-9]*)' "$E2E_TMP/cancel.err")" 0

# the replicas still answer, and stop cleanly
for i in 0 1; do
	SRV_PID=${REPLICA_PID[i]}
	serve_stop
	expect_eq "replica $i exits 0" "$SRV_RC" 0
done
finish
