#!/bin/bash
# e2e_gguf_model.sh - --model gguf:FILE end to end (lib/model/
# llama_read_gguf.c): a llama2.c checkpoint written as a GGUF file by
# bin/make_gguf (F32) decodes to the same bytes as the checkpoint itself,
# at workers 0 and 2, and refdecode's naive forward (which reads only the
# checkpoint) agrees; an F16 file loads and runs; a file that lacks a
# tensor, names another architecture or is cut short is refused at start
# with exit 2 and a message naming the file and what is wrong.
# F16, Q8_0 and Q4_K_M files (the checkpoint's shape, where Q4_K_M falls
# back to Q5_0/Q8_0, and a random 256-wide one that holds Q4_K and Q6_K)
# decode every request, and identically at workers 0 and 2, batch 1 and
# 16, and with the prefix cache on and off (requests sharing prefixes).
set -u
. "$(dirname "$0")/e2e_lib.sh"

T=$E2E_TMP
"$BIN/make_checkpoint" --out "$T/ck.bin" --dim 96 --hidden 192 --layers 3 \
	--heads 6 --kv-heads 2 --vocab 512 --seq-len 256 --seed "$SEED" > /dev/null
"$BIN/make_gguf" --out "$T/f32.gguf" --checkpoint "$T/ck.bin" > /dev/null
"$BIN/make_gguf" --out "$T/f16.gguf" --checkpoint "$T/ck.bin" --type f16 > /dev/null
"$BIN/gen_workload" --n 120 --seed "$SEED" --vocab 512 --max-prompt 64 > "$T/in.jsonl"

decode() {	# TAG MODEL ARGS...
	local tag=$1 model=$2
	shift 2
	timeout 300 "$BIN/dynbatch" run --model "$model" --input "$T/in.jsonl" \
		--output "$T/out.$tag" "$@" 2> "$T/err.$tag"
	expect_eq "$tag: exit 0" $? 0
}

echo "== a GGUF F32 file is its checkpoint, bit for bit"
for w in 0 2; do
	decode "ck.w$w" "llama:$T/ck.bin" --workers $w
	decode "gguf.w$w" "gguf:$T/f32.gguf" --workers $w
	if cmp -s <(sort "$T/out.ck.w$w") <(sort "$T/out.gguf.w$w"); then
		pass "workers $w: gguf:f32.gguf == llama:ck.bin, byte for byte"
	else
		fail "workers $w: gguf:f32.gguf and llama:ck.bin differ"
	fi
done
check_results "gguf.w2" "llama:$T/ck.bin" "$T/in.jsonl" "$T/out.gguf.w2"

echo "== an F16 file loads and decodes every request"
decode "f16" "gguf:$T/f16.gguf" --workers 2
expect_eq "f16: a result for each request" "$(wc -l < "$T/out.f16")" 120

echo "== quantized files: batch invariant, prefix cache on == off"
"$BIN/make_gguf" --out "$T/q8_0.gguf" --checkpoint "$T/ck.bin" --type q8_0 > /dev/null
"$BIN/make_gguf" --out "$T/q4_k_m.gguf" --checkpoint "$T/ck.bin" --type q4_k_m > /dev/null
"$BIN/make_gguf" --out "$T/q4_k_m_256.gguf" --dim 256 --hidden 768 --layers 8 \
	--heads 4 --kv-heads 2 --vocab 512 --seq-len 256 --separate-classifier \
	--seed "$SEED" --type q4_k_m > /dev/null
# half the requests put a shared 40-token prefix before their prompt
python3 - "$T/in.jsonl" "$T/in.prefix.jsonl" "$SEED" <<'PY'
import json, random, sys
rng = random.Random(int(sys.argv[3]))
pre = [rng.randrange(3, 512) for _ in range(40)]
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as o:
	for i, line in enumerate(f):
		r = json.loads(line)
		if i % 2 == 0 and isinstance(r.get("prompt"), list):
			r["prompt"] = (pre + r["prompt"])[:200]
			r["max_tokens"] = min(r.get("max_tokens", 16), 40)
		o.write(json.dumps(r) + "\n")
PY
# the Q4_K_M mix, restated from llama.cpp's quantizer: output (or the
# tied token_embd) Q6_K; attn_v and ffn_down Q6_K in the layers
# use_more_bits() picks, else Q4_K; a K type on a row 256 does not
# divide falls back (Q4_K to Q5_0, Q6_K to Q8_0); norms F32
python3 - "$T/q4_k_m_256.gguf" 8 1 "$T/q4_k_m.gguf" 3 0 <<'PY' > "$T/mix.txt"
import struct, sys
F32, Q5_0, Q8_0, Q4_K, Q6_K = 0, 6, 8, 12, 14
def tensors(path):
	b = open(path, "rb").read()
	o = 4
	def rd(fmt):
		nonlocal o
		v = struct.unpack_from("<" + fmt, b, o)
		o += struct.calcsize("<" + fmt)
		return v[0]
	def rs():
		nonlocal o
		n = rd("Q"); o += n
		return b[o - n:o].decode()
	size = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B",
		10: "Q", 11: "q", 12: "d"}
	def val(t):
		if t == 8: rs()
		elif t == 9:
			et, n = rd("I"), rd("Q")
			for _ in range(n): val(et)
		else: rd(size[t])
	rd("I"); nt, nk = rd("Q"), rd("Q")
	for _ in range(nk):
		rs(); val(rd("I"))
	out = {}
	for _ in range(nt):
		name = rs(); nd = rd("I")
		dims = [rd("Q") for _ in range(nd)]
		out[name] = (rd("I"), dims[0]); rd("Q")
	return out
def more_bits(i, n):
	return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2
a = sys.argv[1:]
bad = 0
for path, n, sep in zip(a[0::3], map(int, a[1::3]), map(int, a[2::3])):
	for name, (t, cols) in tensors(path).items():
		parts = name.split(".")
		if name.endswith("norm.weight"):
			want = F32
		elif name == "output.weight" or (name == "token_embd.weight" and not sep):
			want = Q6_K
		elif parts[-2] in ("attn_v", "ffn_down") and more_bits(int(parts[1]), n):
			want = Q6_K
		else:
			want = Q4_K
		if want != F32 and cols % 256:
			want = Q5_0 if want == Q4_K else Q8_0
		if t != want:
			print("%s: %s is type %d, want %d" % (path, name, t, want))
			bad += 1
print("mix bad=%d" % bad)
PY
expect_eq "q4_k_m files hold llama.cpp's Q4_K_M mix and fallback" \
	"$(tail -n 1 "$T/mix.txt")" "mix bad=0"
same() {	# WHAT TAG_A TAG_B
	if cmp -s <(sort "$T/out.$2") <(sort "$T/out.$3"); then
		pass "$1"
	else
		fail "$1: $2 and $3 differ"
	fi
}
for q in f16 q8_0 q4_k_m q4_k_m_256; do
	m="gguf:$T/$q.gguf"
	for v in "w0 --workers 0" "w2 --workers 2" "b1 --workers 2 --batch 1" \
		 "b16 --workers 2 --batch 16" "nopc --workers 2 --prefix-cache off"; do
		set -- $v
		tag=$1
		shift
		timeout 300 "$BIN/dynbatch" run --model "$m" --input "$T/in.prefix.jsonl" \
			--output "$T/out.$q.$tag" "$@" 2> "$T/err.$q.$tag"
		expect_eq "$q $tag: exit 0" $? 0
	done
	expect_eq "$q: a result for each request" "$(wc -l < "$T/out.$q.w2")" 120
	same "$q: workers 0 == workers 2" "$q.w0" "$q.w2"
	same "$q: batch 1 == batch 16" "$q.b1" "$q.b16"
	same "$q: batch 16 == batch 64" "$q.b16" "$q.w2"
	same "$q: prefix cache on == off" "$q.w2" "$q.nopc"
done

echo "== bad files are refused at start, naming what is wrong"
refused() {	# NAME FILE WANT
	timeout 60 "$BIN/dynbatch" run --model "gguf:$2" --input "$T/in.jsonl" \
		--output "$T/out.bad" --workers 1 2> "$T/err.bad"
	local rc=$?
	if [ $rc = 2 ] && grep -q -- "$3" "$T/err.bad"; then
		pass "refused: $1"
	else
		fail "refused: $1: exit $rc, want 2 and '$3' in: $(head -c 400 "$T/err.bad")"
	fi
}
python3 - "$T" <<'PY'
import struct, sys
t = sys.argv[1]
b = open(t + "/f32.gguf", "rb").read()
# a tensor renamed (same length: the layout stays valid)
n = b.replace(b"blk.1.ffn_up.weight", b"blk.1.ffn_up.weighX", 1)
assert n != b
open(t + "/no_tensor.gguf", "wb").write(n)
# general.architecture's value, a u64 length then the bytes
v = struct.pack("<Q", 5) + b"llama"
assert v in b
open(t + "/arch.gguf", "wb").write(b.replace(v, struct.pack("<Q", 5) + b"mamba", 1))
open(t + "/cut.gguf", "wb").write(b[: len(b) // 2])
PY
refused "a missing tensor" "$T/no_tensor.gguf" "tensor 'blk.1.ffn_up.weight' is missing"
refused "another architecture" "$T/arch.gguf" "architecture 'mamba' is not supported"
refused "a cut file" "$T/cut.gguf" "gguf '.*cut.gguf'"
finish
