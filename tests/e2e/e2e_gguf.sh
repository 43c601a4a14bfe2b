#!/bin/bash
# e2e_gguf.sh - bin/make_gguf's files read by an independent GGUF parser,
# the @huggingface/gguf npm package (tests/e2e/gguf_check.mjs): a
# checkpoint converted to F32 with its tokenizer and to F16 (weights,
# pieces, scores checked against the checkpoint and tokenizer.bin),
# random weights with a separate classifier and a 64-byte alignment; and
# make_gguf's refusals of bad arguments (exit 2, no file left).
#
# Needs node; the package is installed once into $BUILD/node-gguf (from
# the npm registry).  Without node, or without a way to install the
# package, the checks by the parser say they are skipped.
set -u
. "$(dirname "$0")/e2e_lib.sh"

TESTS=$(cd "$(dirname "$0")" && pwd)
T=$E2E_TMP
PKG=@huggingface/gguf@0.4.6

# --- make_gguf's refusals ---------------------------------------------------
"$BIN/make_checkpoint" --out "$T/ck.bin" --dim 64 --hidden 160 --layers 2 \
	--heads 4 --kv-heads 2 --vocab 300 --seq-len 64 --seed "$SEED" > /dev/null
"$BIN/make_tokenizer" --vocab 300 --out "$T/tok.bin" > /dev/null
"$BIN/make_tokenizer" --vocab 290 --out "$T/tok290.bin" > /dev/null
refuse() {
	local name=$1 want=$2
	shift 2
	rm -f "$T/bad.gguf"
	"$BIN/make_gguf" --out "$T/bad.gguf" "$@" > /dev/null 2> "$T/err"
	local rc=$?
	if [ $rc = 2 ] && [ ! -e "$T/bad.gguf" ] && grep -q -- "$want" "$T/err"; then
		pass "refused: $name"
	else
		fail "refused: $name: exit $rc, want 2 and '$want' in: $(cat "$T/err")"
	fi
}
refuse "no shape" "--dim is missing" --layers 2
refuse "odd head size" "even head size" --dim 12 --hidden 8 --layers 1 \
	--heads 4 --kv-heads 1 --vocab 8 --seq-len 4
refuse "shape with --checkpoint" "takes its shape from the file" \
	--checkpoint "$T/ck.bin" --dim 64
refuse "unknown --type" "unknown --type 'q2_k'" --checkpoint "$T/ck.bin" --type q2_k
refuse "--alignment 48" "bad --alignment" --checkpoint "$T/ck.bin" --alignment 48
refuse "tokenizer of another vocabulary" "tok290.bin" --checkpoint "$T/ck.bin" \
	--tokenizer "$T/tok290.bin"
refuse "missing checkpoint" "$T/none.bin" --checkpoint "$T/none.bin"

# --- the files --------------------------------------------------------------
SHAPE='{"dim":64,"hidden":160,"layers":2,"heads":4,"kv_heads":2,"vocab":300,"seq_len":64}'
RSHAPE='{"dim":96,"hidden":256,"layers":3,"heads":6,"kv_heads":2,"vocab":512,"seq_len":128}'
make_one() {	# NAME SPEC make_gguf-options...
	local name=$1 spec=$2
	shift 2
	echo "$spec" > "$T/$name.json"
	if "$BIN/make_gguf" --out "$T/$name.gguf" "$@" > "$T/make.log" 2>&1; then
		pass "make_gguf $name: $(cat "$T/make.log")"
	else
		fail "make_gguf $name"
		sed 's/^/       /' "$T/make.log"
	fi
}
make_one ck_f32 "{\"shape\":$SHAPE,\"type\":\"f32\",\"separate\":false,\"alignment\":32,\"checkpoint\":\"$T/ck.bin\",\"tokenizer\":\"$T/tok.bin\"}" \
	--checkpoint "$T/ck.bin" --tokenizer "$T/tok.bin"
make_one ck_f16 "{\"shape\":$SHAPE,\"type\":\"f16\",\"separate\":false,\"alignment\":32,\"checkpoint\":\"$T/ck.bin\",\"tokenizer\":null}" \
	--checkpoint "$T/ck.bin" --type f16
make_one random "{\"shape\":$RSHAPE,\"type\":\"f16\",\"separate\":true,\"alignment\":64,\"checkpoint\":null,\"tokenizer\":null}" \
	--dim 96 --hidden 256 --layers 3 --heads 6 --kv-heads 2 --vocab 512 \
	--seq-len 128 --separate-classifier --alignment 64 --type f16 --seed "$SEED"
"$BIN/make_gguf" --out "$T/again.gguf" --dim 96 --hidden 256 --layers 3 --heads 6 \
	--kv-heads 2 --vocab 512 --seq-len 128 --separate-classifier --alignment 64 \
	--type f16 --seed "$SEED" > /dev/null
if cmp -s "$T/random.gguf" "$T/again.gguf"; then
	pass "the same seed writes the same file"
else
	fail "the same seed wrote two different files"
fi

# --- the independent parser -------------------------------------------------
NODE_DIR="$BUILD/node-gguf"
have_pkg() { [ -f "$NODE_DIR/node_modules/@huggingface/gguf/package.json" ]; }
if ! command -v node > /dev/null 2>&1; then
	echo "  skipped: the @huggingface/gguf checks (no node)"
elif ! have_pkg && ! command -v npm > /dev/null 2>&1; then
	echo "  skipped: the @huggingface/gguf checks (no npm)"
else
	if ! have_pkg; then
		# into a folder of our own, then renamed: a test beside us never
		# sees half a package
		mkdir -p "$BUILD"
		timeout -k 5 120 npm install --prefix "$NODE_DIR.$$" "$PKG" --no-audit \
			--no-fund --loglevel=error --fetch-retries=1 --fetch-timeout=20000 \
			> "$T/npm.log" 2>&1 && { rm -rf "$NODE_DIR"; mv -T "$NODE_DIR.$$" "$NODE_DIR"; }
		rm -rf "$NODE_DIR.$$"
	fi
	if ! have_pkg; then
		echo "  skipped: the @huggingface/gguf checks (npm install $PKG failed)"
		sed 's/^/       /' "$T/npm.log" 2> /dev/null | tail -n 3
	else
		# the script resolves the package from its own folder upwards
		ln -s "$(cd "$NODE_DIR" && pwd)/node_modules" "$T/node_modules"
		cp "$TESTS/gguf_check.mjs" "$T/gguf_check.mjs"
		for name in ck_f32 ck_f16 random; do
			if node "$T/gguf_check.mjs" "$T/$name.gguf" "$T/$name.json" > "$T/check.log" 2>&1; then
				pass "@huggingface/gguf reads $name: $(tail -n 1 "$T/check.log")"
			else
				fail "@huggingface/gguf reads $name"
				sed 's/^/       /' "$T/check.log" | tail -n 20
			fi
		done
	fi
fi

finish
