# e2e_lib.sh - shared helpers for the end-to-end tests (sourced).
#
# Every test runs the real binaries under a timeout and compares with the
# independent single-process reference decoder (bin/refdecode).  Output
# ends with the plain "N passed, N failed" line CI reads.

BIN=${BIN:-bin}
BUILD=${BUILD:-build}
E2E_TMP=$(mktemp -d "${TMPDIR:-/tmp}/dynbatch-e2e.XXXXXX")
E2E_PASSED=0
E2E_FAILED=0
SEED=${SEED:-$(( (RANDOM << 15) | RANDOM ))}
echo "$(basename "$0"): seed=$SEED (replay with SEED=$SEED)"

trap 'rm -rf "$E2E_TMP"' EXIT

pass() { E2E_PASSED=$((E2E_PASSED + 1)); echo "  ok   $*"; }
fail() { E2E_FAILED=$((E2E_FAILED + 1)); echo "  FAIL $*"; }

# shm_names: our segments currently in /dev/shm, one per line.
shm_names() { ls /dev/shm 2>/dev/null | grep '^dynbatch-' || true; }

# segments_of PID: segments a coordinator with that pid left behind
# (other tests may run beside us, so never compare the whole directory).
segments_of() { ls /dev/shm 2>/dev/null | grep "^dynbatch-$1-" || true; }

# tracked CMD...: run CMD in the background and wait for it, leaving its
# exit status in LAST_RC and its pid in LAST_PID.
tracked() {
	"$@" &
	LAST_PID=$!
	wait $LAST_PID
	LAST_RC=$?
}

# check_results NAME MODEL INPUT OUTPUT [refdecode options]: compare with
# the reference and record the verdict.
check_results() {
	local name=$1 model=$2 input=$3 output=$4
	shift 4
	if "$BIN/refdecode" --model "$model" --input "$input" --check "$output" \
		"$@" > "$E2E_TMP/check.log" 2>&1; then
		pass "$name: $(tail -n 1 "$E2E_TMP/check.log")"
	else
		fail "$name"
		sed 's/^/       /' "$E2E_TMP/check.log" | tail -n 20
	fi
}

# expect_eq NAME GOT WANT
expect_eq() {
	if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: got '$2', want '$3'"; fi
}

# worker_pids PID: the dynbatch-worker children of coordinator PID.
worker_pids() {
	local p
	for p in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
		tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline" | grep -q '^dynbatch-worker' \
			&& echo "$p"
	done
}
# worker_alive PID: PID still runs dynbatch-worker (a zombie has no cmdline).
worker_alive() {
	tr '\0' ' ' 2>/dev/null < "/proc/$1/cmdline" | grep -q '^dynbatch-worker'
}
# expect_gt NAME GOT MIN: GOT > MIN
expect_gt() {
	if [ -n "$2" ] && [ "$2" -gt "$3" ]; then pass "$1 ($2)"
	else fail "$1: got '$2', want > $3"; fi
}

# stats_field STATSFILE NAME: a number from the --stats JSON.
# make_lost_worker: $E2E_TMP/lost-worker, a DYNBATCH_WORKER that runs the
# real worker, except for shard 1 once $E2E_TMP/lost-now exists: then it
# exits at once (a shard whose worker cannot be replaced).
make_lost_worker() {
	cat > "$E2E_TMP/lost-worker" <<EOF
#!/bin/bash
case " \$* " in
*" --shard 1 "*) [ -e "$E2E_TMP/lost-now" ] && exit 1 ;;
esac
exec -a dynbatch-worker "$(cd "$BIN" && pwd)/dynbatch-worker" "\$@"
EOF
	chmod +x "$E2E_TMP/lost-worker"
}

# serve_start NAME ARGS...: start `dynbatch serve` on a free port, its
# stderr in $E2E_TMP/NAME.err; sets SRV_PID, PORT and URL (the address is
# read off its first stderr line); returns once /health says 200 (or
# after 5 s).
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

stats_field() { grep -o "\"$2\":[0-9]*" "$1" 2>/dev/null | cut -d: -f2; }

# openai_setup: the official openai npm package (v4), installed once into
# $BUILD/node (from the npm registry), for the tests that drive the
# server with it.  Sets NODE_DIR and OPENAI_VERSION.  Returns 0 when it
# is there, 1 when the test is to be skipped (no node, no network: said
# so), 2 when installing it failed (recorded).
openai_setup() {
	if ! command -v node >/dev/null 2>&1; then
		echo "  skipped: node/npm not available"
		return 1
	fi


	NODE_DIR="$BUILD/node"
	openai_version() {
		[ -f "$NODE_DIR/node_modules/openai/package.json" ] &&
			node -e 'console.log(require(process.argv[1]).version)' \
				"$(cd "$NODE_DIR" && pwd)/node_modules/openai/package.json" 2>/dev/null
	}
	OPENAI_VERSION=$(openai_version)
	case "$OPENAI_VERSION" in
	4.*) ;;
	*)
		if ! command -v npm >/dev/null 2>&1; then
			echo "  skipped: cannot install the openai npm package (no npm)"
			return 1
		fi
		# Into a folder of our own, then renamed: a test running beside us
		# never sees half a package.
		mkdir -p "$BUILD"
		rc=0
		timeout -k 5 120 npm install --prefix "$NODE_DIR.$$" openai@4 --no-audit \
			--no-fund --loglevel=error --fetch-retries=1 --fetch-timeout=20000 \
			> "$E2E_TMP/npm.log" 2>&1 || rc=$?
		if [ $rc = 0 ]; then
			rm -rf "$NODE_DIR"
			mv -T "$NODE_DIR.$$" "$NODE_DIR" 2>/dev/null
		fi
		rm -rf "$NODE_DIR.$$"
		if [ $rc != 0 ]; then
			if [ $rc = 124 ] || grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network' \
				"$E2E_TMP/npm.log"; then
				echo "  skipped: cannot install the openai npm package (no network)"
				grep -E 'npm error (code|errno|network|request)' "$E2E_TMP/npm.log" |
					head -n 3 | sed 's/^/       /'
				return 1
			fi
			fail "npm install openai@4: exit $rc"
			sed 's/^/       /' "$E2E_TMP/npm.log" | tail -n 20
			return 2
		fi
		OPENAI_VERSION=$(openai_version)
		;;
	esac
	case "$OPENAI_VERSION" in
	4.*) pass "openai npm package $OPENAI_VERSION in $NODE_DIR/node_modules" ;;
	*) fail "openai npm package: got version '$OPENAI_VERSION', want 4.x"; return 2 ;;
	esac
	return 0
}

finish() {
	echo "$E2E_PASSED passed, $E2E_FAILED failed"
	[ "$E2E_FAILED" -eq 0 ]
}
