#!/bin/bash
# e2e_nginx.sh - two `dynbatch serve` replicas behind nginx, configured
# from examples/nginx-dynbatch.conf.  1. bin/loadgen through nginx gets every
# answer once and exactly right (bin/refdecode) and both replicas serve.
# 2. A rolling restart: one replica SIGTERMed in the middle of a run
# drains without a single client error (nginx retries what the draining
# replica refuses), exits 0, and once restarted on its port is used
# again.  3. One replica SIGKILLed in the middle of a run: every request
# still ends with a correct answer or a clear error (a stream cut short
# without its terminating chunk, or nginx's JSON 502), nothing else, and
# the survivor goes on serving.  4. nginx and the survivor stop cleanly
# and no replica leaves a worker or a shared segment behind.
#
# Skipped (exit 0) only when nginx is not installed.
set -u
. "$(dirname "$0")/e2e_lib.sh"

NGINX=${NGINX:-$(PATH="$PATH:/usr/sbin:/sbin" command -v nginx || true)}
if [ -z "$NGINX" ] || [ ! -x "$NGINX" ]; then
	echo "  skip: nginx is not installed (apt-get install nginx-light), nothing tested"
	echo "0 passed, 0 failed"
	exit 0
fi

VOCAB=64
MODEL="sim:vocab=$VOCAB"
TEMPLATE="$(dirname "$0")/../../examples/nginx-dynbatch.conf"
NG="$E2E_TMP/nginx"
REPLICA_PID=()
REPLICA_PORT=()
NGINX_PID=""

# Whatever happens, leave no server running; keep the logs of a failure.
cleanup() {
	local p
	[ -n "$NGINX_PID" ] && kill -TERM "$NGINX_PID" 2>/dev/null
	for p in "${REPLICA_PID[@]}"; do kill -TERM "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ "$E2E_FAILED" -gt 0 ]; then
		echo "  kept the servers' logs for a look: $E2E_TMP"
	else
		rm -rf "$E2E_TMP"
	fi
}
trap cleanup EXIT

# http_get PORT PATH: the whole answer (head and body) on stdout, over a
# plain bash /dev/tcp socket, so the test needs no curl.
http_get() {
	timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
		printf "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" "$1" >&3
		cat <&3' "$1" "$2" 2>/dev/null
}
# http_status PORT PATH: the status code, or nothing.
http_status() { http_get "$1" "$2" | head -n 1 | awk '{ print $2 }'; }
# served PORT: the sum of dynbatch_requests_total (every finish reason).
served() {
	http_get "$1" /metrics |
		awk '/^dynbatch_requests_total[{ ]/ { n += $2 } END { print n + 0 }'
}
# wait_health PORT: until GET /health answers 200 (10 s at most).
wait_health() {
	local _
	for _ in $(seq 200); do
		[ "$(http_status "$1" /health)" = 200 ] && return 0
		sleep 0.05
	done
	return 1
}
# free_port: a loopback port nobody listens on right now (nginx may still
# lose it to a race: nginx_start retries).
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $(( 20000 + RANDOM % 40000 ))
}
# field FILE NAME: a key=value figure from loadgen's stdout.
field() { sed -n "s/^$2=//p" "$1" | tail -n 1; }

# replica_start I [PORT]: start replica I on PORT (default 0: any) and
# read its port off stderr.
replica_start() {
	local i=$1 port="" _
	"$BIN/dynbatch" serve --listen "127.0.0.1:${2:-0}" --workers 2 --batch 16 \
		--model "$MODEL" 2> "$E2E_TMP/replica$i.err" &
	REPLICA_PID[i]=$!
	for _ in $(seq 200); do
		port=$(sed -n 's|^dynbatch serve: listening on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' \
			"$E2E_TMP/replica$i.err")
		[ -n "$port" ] && break
		sleep 0.05
	done
	REPLICA_PORT[i]=$port
	if [ -n "$port" ] && wait_health "$port"; then
		pass "replica $i (pid ${REPLICA_PID[i]}) serves on port $port"
	else
		fail "replica $i did not come up: $(tail -n 3 "$E2E_TMP/replica$i.err")"
		finish
		exit 1
	fi
}

# nginx_start: fill in the template, start nginx in the foreground on a
# free port (sets NGINX_PID and NGINX_PORT), wait for /health through it.
nginx_start() {
	local ups="" p try
	for p in "${REPLICA_PORT[@]}"; do
		ups="${ups}server 127.0.0.1:$p max_fails=1 fail_timeout=2s; "
	done
	mkdir -p "$NG"
	# As root nginx's workers drop to an unprivileged user, which must
	# reach its temp directories under our private (0700) $E2E_TMP.
	[ "$(id -u)" = 0 ] && chmod 0711 "$E2E_TMP"
	for try in 1 2 3 4 5; do
		NGINX_PORT=$(free_port)
		sed -e "s|@PREFIX@|$NG|g" -e "s|@PIDFILE@|$NG/nginx.pid|g" \
			-e "s|@LISTEN@|127.0.0.1:$NGINX_PORT|g" \
			-e "s|@UPSTREAMS@|$ups|g" "$TEMPLATE" > "$NG/nginx.conf"
		if ! "$NGINX" -t -q -p "$NG" -c "$NG/nginx.conf" -e "$NG/error.log"; then
			fail "nginx -t rejects the configuration: $(tail -n 3 "$NG/error.log")"
			return 1
		fi
		"$NGINX" -p "$NG" -c "$NG/nginx.conf" -e "$NG/error.log" &
		NGINX_PID=$!
		if wait_health "$NGINX_PORT"; then
			pass "nginx (pid $NGINX_PID) on port $NGINX_PORT: GET /health 200 (try $try)"
			return 0
		fi
		kill -TERM "$NGINX_PID" 2>/dev/null
		wait "$NGINX_PID" 2>/dev/null
		NGINX_PID=""
		grep -q 'in use' "$NG/error.log" || break
	done
	fail "nginx did not serve /health: $(tail -n 3 "$NG/error.log")"
	return 1
}

# loadgen TAG ARGS...: bin/loadgen through nginx; figures in TAG.out, its
# complaints in TAG.err, exit status in LG_RC.
loadgen() {
	local tag=$1
	shift
	timeout -k 5 60 "$BIN/loadgen" --port "$NGINX_PORT" --vocab $VOCAB \
		--seed "$SEED" --timeout-s 20 --requests-out "$E2E_TMP/$tag.req" \
		--results-out "$E2E_TMP/$tag.res" "$@" \
		> "$E2E_TMP/$tag.out" 2> "$E2E_TMP/$tag.err"
	LG_RC=$?
	sed -n 's/^loadgen: [0-9]* started/       &/p' "$E2E_TMP/$tag.out"
}

if [ ! -x "$BIN/loadgen" ]; then
	fail "$BIN/loadgen is missing (make all)"
	finish
	exit 1
fi

echo "== two replicas behind nginx"
replica_start 0
replica_start 1
nginx_start || { finish; exit 1; }

# --- 1. every answer once and exact, both replicas used ------------------
echo "== 400 requests through nginx, half streaming"
loadgen run1 --requests 400 --concurrency 32 --stream-frac 0.5
expect_eq "loadgen: exit 0" "$LG_RC" 0
expect_eq "completed" "$(field "$E2E_TMP/run1.out" completed)" 400
expect_eq "protocol errors" "$(field "$E2E_TMP/run1.out" protocol_errors)" 0
expect_eq "failed" "$(field "$E2E_TMP/run1.out" failed)" 0
[ "$LG_RC" = 0 ] || sed 's/^/       /' "$E2E_TMP/run1.err" | head -n 10
check_results "every answer equals the reference" "$MODEL" \
	"$E2E_TMP/run1.req" "$E2E_TMP/run1.res"
served0=$(served "${REPLICA_PORT[0]}")
served1=$(served "${REPLICA_PORT[1]}")
echo "       replica 0 served $served0, replica 1 served $served1"
expect_gt "replica 0 served requests" "$served0" 0
expect_gt "replica 1 served requests" "$served1" 0
expect_eq "the replicas served 400 in all (none twice)" \
	"$((served0 + served1))" 400

# --- 2. a rolling restart: SIGTERM drains a replica, nginx goes round it -
echo "== replica 1 SIGTERMed 1 s into a 3 s run, then restarted on its port"
drained=${REPLICA_PID[1]}
drained_workers=$(worker_pids "$drained")
(sleep 1; kill -TERM "$drained") &
killer=$!
loadgen drain --requests 1000000 --duration-s 3 --concurrency 32 --stream-frac 0.5
wait "$killer"
wait "$drained"
expect_eq "the drained replica: exit 0" $? 0
retried=$(grep -c 'upstream=[^ ]*, ' "$NG/access.log")
echo "       requests nginx passed on to the other replica: $retried"
expect_eq "drain: loadgen exit 0" "$LG_RC" 0
expect_eq "drain: no protocol error" "$(field "$E2E_TMP/drain.out" protocol_errors)" 0
expect_eq "drain: none failed" "$(field "$E2E_TMP/drain.out" failed)" 0
expect_eq "drain: every request completed" \
	"$(field "$E2E_TMP/drain.out" completed)" \
	"$(field "$E2E_TMP/drain.out" requests_started)"
[ "$LG_RC" = 0 ] || sed 's/^/       /' "$E2E_TMP/drain.err" | head -n 10
check_results "drain: every answer equals the reference" "$MODEL" \
	"$E2E_TMP/drain.req" "$E2E_TMP/drain.res"
expect_eq "the drained replica's workers are gone" \
	"$(for p in $drained_workers; do worker_alive "$p" && echo "$p"; done)" ""
expect_eq "the drained replica left no segment" "$(segments_of "$drained")" ""
replica_start 1 "${REPLICA_PORT[1]}"
# nginx tries a failed replica again after fail_timeout (2 s).
back=0
for try in $(seq 12); do
	loadgen back --requests 50 --concurrency 4 --stream-frac 0.5 > /dev/null
	[ "$LG_RC" = 0 ] || break
	back=$(served "${REPLICA_PORT[1]}")
	[ "$back" -gt 0 ] && break
	sleep 0.5
done
expect_eq "requests while it comes back: loadgen exit 0" "$LG_RC" 0
expect_gt "nginx uses the restarted replica again (after $try rounds of 50)" \
	"$back" 0

# --- 3. one replica SIGKILLed in the middle of a run ---------------------
echo "== replica 0 SIGKILLed 1 s into a 3 s run"
victim=${REPLICA_PID[0]}
victim_workers=$(worker_pids "$victim")
victim_seg=$(segments_of "$victim")
disown "$victim"	# no "Killed" job notice; bash still reaps it
(
	sleep 1
	kill -KILL "$victim"
	served "${REPLICA_PORT[1]}" > "$E2E_TMP/survivor_at_kill"
) &
killer=$!
loadgen run2 --requests 1000000 --duration-s 3 --concurrency 32 --stream-frac 0.5
wait "$killer"
REPLICA_PID[0]=""
started=$(field "$E2E_TMP/run2.out" requests_started)
completed=$(field "$E2E_TMP/run2.out" completed)
failed=$(field "$E2E_TMP/run2.out" failed)
perr=$(field "$E2E_TMP/run2.out" protocol_errors)
# The clear errors a client sees when its replica dies: nginx cuts a
# stream whose head already went out (no terminating chunk, no [DONE]),
# or answers 502 when it could not try another replica.  Anything else
# (a bad body, a hang, a wrong answer) is a failure.
cut=$(grep -c '^loadgen: protocol error: .*closed by the server in the middle of the answer' "$E2E_TMP/run2.err")
e502=$(grep -c '^loadgen: protocol error: [^ ]*: status 502: ' "$E2E_TMP/run2.err")
other=$(grep '^loadgen: protocol error: ' "$E2E_TMP/run2.err" |
	grep -v -e 'closed by the server in the middle of the answer' \
		-e ': status 502: ')
retried=$(( $(grep -c 'upstream=[^ ]*, ' "$NG/access.log") - retried ))
echo "       started $started, completed $completed, failed (5xx) $failed," \
	"streams cut $cut, 502 $e502, retried on the survivor by nginx $retried"
expect_gt "requests started" "${started:-0}" 0
expect_eq "no other protocol error" "$other" ""
expect_eq "every protocol error is a cut stream or a 502" \
	"${perr:-x}" "$((cut + e502))"
if [ -n "$started" ] && [ "$started" = "$((completed + failed + cut + e502))" ]; then
	pass "every request answered: $completed correct + $failed failed + $cut cut + $e502 502 = $started"
else
	fail "answers do not add up: started $started, completed $completed, failed $failed, cut $cut, 502 $e502"
fi
if [ "$((failed + cut + e502))" -le 32 ]; then
	pass "only requests in flight at the kill saw an error ($((failed + cut + e502)) <= 32)"
else
	fail "$((failed + cut + e502)) errors, more than the 32 requests in flight"
fi
expect_eq "loadgen exits 1 exactly when it saw a cut stream or a 502" "$LG_RC" \
	"$([ "${perr:-0}" -gt 0 ] && echo 1 || echo 0)"
sed 's/^/       /' "$E2E_TMP/run2.err" | grep -v -e 'middle of the answer' | head -n 5
check_results "every completed answer equals the reference" "$MODEL" \
	"$E2E_TMP/run2.req" "$E2E_TMP/run2.res"
at_kill=$(cat "$E2E_TMP/survivor_at_kill")
after=$(served "${REPLICA_PORT[1]}")
expect_gt "the survivor completed requests after the kill" \
	"$(( ${after:-0} - ${at_kill:-0} ))" 0
left=$victim_workers
for _ in $(seq 50); do
	left=$(for p in $victim_workers; do worker_alive "$p" && echo "$p"; done)
	[ -z "$left" ] && break
	sleep 0.02
done
expect_eq "the killed replica's workers are gone" "$(echo $left)" ""

echo "== after the kill: 50 requests through nginx"
loadgen run3 --requests 50 --concurrency 4 --stream-frac 0.5
expect_eq "loadgen: exit 0" "$LG_RC" 0
expect_eq "completed" "$(field "$E2E_TMP/run3.out" completed)" 50
check_results "the survivor's answers equal the reference" "$MODEL" \
	"$E2E_TMP/run3.req" "$E2E_TMP/run3.res"
expect_eq "GET /health through nginx" "$(http_status "$NGINX_PORT" /health)" 200

# --- 4. cleanup --------------------------------------------------------
echo "== stopping"
kill -TERM "$NGINX_PID"
wait "$NGINX_PID"
expect_eq "nginx: SIGTERM, exit 0" $? 0
NGINX_PID=""
survivor=${REPLICA_PID[1]}
survivor_workers=$(worker_pids "$survivor")
kill -TERM "$survivor"
wait "$survivor"
expect_eq "the survivor: SIGTERM, exit 0" $? 0
REPLICA_PID[1]=""
expect_eq "the survivor's workers are gone" \
	"$(for p in $survivor_workers; do worker_alive "$p" && echo "$p"; done)" ""
expect_eq "the survivor left no segment" "$(segments_of "$survivor")" ""
# A SIGKILLed coordinator leaves nothing behind: its memory had no name.
expect_eq "the killed replica had no /dev/shm name" "$victim_seg" ""

finish
