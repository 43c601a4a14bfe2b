// gguf_check.mjs - check a bin/make_gguf file with an independent GGUF
// parser, the @huggingface/gguf npm package (tests/e2e/e2e_gguf.sh).
//
//   node gguf_check.mjs FILE.gguf SPEC.json
//
// SPEC: { shape: {dim, hidden, layers, heads, kv_heads, vocab, seq_len},
//         type: "f32"|"f16", separate: bool, alignment: N,
//         checkpoint: PATH (a legacy llama2.c file, or null),
//         tokenizer: PATH (a llama2.c tokenizer.bin, or null) }
// What the file must hold is worked out here from the spec and the GGUF
// and llama.cpp conventions, not from make_gguf: the keys and their
// values, every tensor's name, dims, type and offset (packed in order,
// each aligned), the file's size, the checkpoint's weights (F16 as its
// fp32 values rounded to nearest even here), the tokenizer's pieces
// (spaces as U+2581), scores and token types.  Prints one line per check
// failed and "gguf_check: ok N checks" when all pass; exit 1 on failure.
import { gguf } from "@huggingface/gguf";
import fs from "node:fs";

const [file, specPath] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(specPath, "utf8"));
const s = spec.shape;
let failed = 0, checks = 0;
function expect(what, got, want) {
	checks++;
	const g = typeof got === "bigint" ? Number(got) : got;
	if (JSON.stringify(g) !== JSON.stringify(want)) {
		failed++;
		console.log(`gguf_check: ${what}: got ${JSON.stringify(g)}, want ${JSON.stringify(want)}`);
	}
}

const r = await gguf(file, { allowLocalFile: true });
const md = r.metadata;
const bytes = fs.readFileSync(file);
const headSize = s.dim / s.heads;

// --- keys -----------------------------------------------------------------
expect("version", md.version, 3);
expect("general.architecture", md["general.architecture"], "llama");
expect("general.file_type", md["general.file_type"], spec.type === "f16" ? 1 : 0);
expect("general.alignment", md["general.alignment"],
	spec.alignment === 32 ? undefined : spec.alignment);
const want = {
	"llama.context_length": s.seq_len, "llama.embedding_length": s.dim,
	"llama.block_count": s.layers, "llama.feed_forward_length": s.hidden,
	"llama.attention.head_count": s.heads,
	"llama.attention.head_count_kv": s.kv_heads,
	"llama.rope.dimension_count": headSize, "llama.rope.freq_base": 10000,
	"llama.vocab_size": s.vocab,
};
for (const [k, v] of Object.entries(want))
	expect(k, md[k], v);
expect("llama.attention.layer_norm_rms_epsilon",
	md["llama.attention.layer_norm_rms_epsilon"], Math.fround(1e-5));

// --- tensors: names, dims, types, offsets -------------------------------------
const kvDim = s.kv_heads * headSize;
const f16 = spec.type === "f16";
const mat = (name, rows, cols) => ({ name, dims: [cols, rows], type: f16 ? 1 : 0 });
const vec = (name, n) => ({ name, dims: [n], type: 0 });
const list = [mat("token_embd.weight", s.vocab, s.dim)];
for (let l = 0; l < s.layers; l++) {
	const b = `blk.${l}.`;
	list.push(vec(b + "attn_norm.weight", s.dim), mat(b + "attn_q.weight", s.dim, s.dim),
		mat(b + "attn_k.weight", kvDim, s.dim), mat(b + "attn_v.weight", kvDim, s.dim),
		mat(b + "attn_output.weight", s.dim, s.dim), vec(b + "ffn_norm.weight", s.dim),
		mat(b + "ffn_gate.weight", s.hidden, s.dim), mat(b + "ffn_down.weight", s.dim, s.hidden),
		mat(b + "ffn_up.weight", s.hidden, s.dim));
}
list.push(vec("output_norm.weight", s.dim));
if (spec.separate)
	list.push(mat("output.weight", s.vocab, s.dim));
expect("tensor count", r.tensorInfos.length, list.length);
const align = (n) => Math.ceil(n / spec.alignment) * spec.alignment;
const start = Number(r.tensorDataOffset);
expect("data section aligned", start % spec.alignment, 0);
let off = 0;
const at = {};
for (let i = 0; i < list.length && i < r.tensorInfos.length; i++) {
	const t = r.tensorInfos[i], w = list[i];
	const n = w.dims.reduce((a, b) => a * b, 1), size = n * (w.type === 1 ? 2 : 4);
	expect(`tensor ${i} name`, t.name, w.name);
	expect(`${w.name} dims`, t.shape.map(Number), w.dims);
	expect(`${w.name} type`, t.dtype, w.type);
	expect(`${w.name} offset`, Number(t.offset), off);
	at[w.name] = { pos: start + off, n, type: w.type };
	off = align(off + size);
}
expect("file size", bytes.length, start + off);

// --- the checkpoint's weights -------------------------------------------------
// fp32 to IEEE half bits, round to nearest even, subnormals kept.
function halfBits(x) {
	const u = new Uint32Array(new Float32Array([x]).buffer)[0];
	const sign = (u >>> 16) & 0x8000, exp = (u >>> 23) & 0xff;
	let mant = u & 0x7fffff;
	if (exp === 0xff)
		return sign | 0x7c00 | (mant ? 0x200 : 0);
	const e = exp - 127 + 15;
	if (e >= 0x1f)
		return sign | 0x7c00;
	if (e <= 0) {
		if (e < -10)
			return sign;
		mant |= 0x800000;
		const shift = 14 - e, rem = mant & ((1 << shift) - 1), half = 1 << (shift - 1);
		let h = mant >>> shift;
		if (rem > half || (rem === half && (h & 1)))
			h++;
		return sign | h;
	}
	let h = (e << 10) | (mant >>> 13);
	const rem = mant & 0x1fff;
	if (rem > 0x1000 || (rem === 0x1000 && (h & 1)))
		h++;
	return sign | h;
}
function compareTensor(name, ck, ckPos) {
	const t = at[name];
	if (!t)
		return;
	let bad = 0;
	for (let i = 0; i < t.n; i++) {
		const v = ck.readFloatLE(ckPos + 4 * i);
		if (t.type === 0 ? bytes.readUInt32LE(t.pos + 4 * i) !== ck.readUInt32LE(ckPos + 4 * i)
			: bytes.readUInt16LE(t.pos + 2 * i) !== halfBits(v))
			bad++;
	}
	expect(`${name} values against the checkpoint`, bad, 0);
}
if (spec.checkpoint) {
	// legacy layout: 7 int32, token_embedding, rms_att, wq, wk, wv, wo, ...
	const ck = fs.readFileSync(spec.checkpoint);
	const L = s.layers, d = s.dim;
	let p = 28;
	compareTensor("token_embd.weight", ck, p);
	p += 4 * s.vocab * d;
	compareTensor("blk.0.attn_norm.weight", ck, p);
	p += 4 * L * d;
	compareTensor(`blk.${L - 1}.attn_q.weight`, ck, p + 4 * (L - 1) * d * d);
	p += 4 * L * d * d;
	compareTensor("blk.0.attn_k.weight", ck, p);
}

// --- the tokenizer ---------------------------------------------------------
if (spec.tokenizer) {
	const tb = fs.readFileSync(spec.tokenizer);
	const tokens = md["tokenizer.ggml.tokens"], scores = md["tokenizer.ggml.scores"];
	const types = md["tokenizer.ggml.token_type"];
	expect("tokenizer.ggml.model", md["tokenizer.ggml.model"], "llama");
	expect("tokens", tokens.length, s.vocab);
	expect("bos/eos/unk", [md["tokenizer.ggml.bos_token_id"], md["tokenizer.ggml.eos_token_id"],
		md["tokenizer.ggml.unknown_token_id"]], [1, 2, 0]);
	let p = 4, badPiece = 0, badScore = 0, badType = 0;
	for (let i = 0; i < s.vocab; i++) {
		const score = tb.readFloatLE(p), len = tb.readInt32LE(p + 4);
		let piece = tb.subarray(p + 8, p + 8 + len).toString("utf8");
		p += 8 + len;
		if (i < 3)
			piece = ["<unk>", "<s>", "</s>"][i];
		else if (i >= 259)
			piece = piece.replaceAll(" ", "\u2581");
		const type = i === 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
		badPiece += tokens[i] !== piece;
		badScore += scores[i] !== score;
		badType += Number(types[i]) !== type;
	}
	expect("pieces", badPiece, 0);
	expect("scores", badScore, 0);
	expect("token types", badType, 0);
}

if (failed) {
	console.log(`gguf_check: ${failed} of ${checks} checks failed`);
	process.exit(1);
}
console.log(`gguf_check: ok ${checks} checks`);
