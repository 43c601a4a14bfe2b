// openai_client.mjs - drive `dynbatch serve` with the official openai npm
// client (v4), as a user of an OpenAI-compatible server would.
//
//   node openai_client.mjs BASE_URL API_KEY REQUESTS.jsonl RESULTS.jsonl
//   node openai_client.mjs --text BASE_URL API_KEY TEMPLATE DYNBATCH TOKENIZER MODEL
//
// The second form (a server with --tokenizer and --chat-template TEMPLATE):
// see textMain() below.
//
// BASE_URL ends in /v1; REQUESTS hold docs/DESIGN.md 3.1 lines; every one is
// sent twice, as a plain completion and as a stream, and the two must agree
// (tokens, finish_reason, usage).  RESULTS gets one docs/DESIGN.md 3.2 line per
// request ({"id","tokens","finish_reason"}) for refdecode --check.  Also the
// model list, a wrong API key (401), out-of-range tokens (400) and streams
// the reader abandons.  OPENAI_E2E_CONCURRENCY: requests in flight (8).
//
// Each request sends its id, which the answer (and every event) must echo.
// The script must be run from where `import "openai"` resolves (e2e_openai.sh
// copies it next to a link to the node_modules it installs).  Exit 0 when everything
// agreed, 1 with a message per disagreement otherwise, 2 on bad arguments.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { VERSION } from "openai/version";

const CONCURRENCY = Number(process.env.OPENAI_E2E_CONCURRENCY) || 8;
// e2e_openai.sh starts the text servers with --max-context 512
const TEXT_CONTEXT = 512;
const MODEL = "sim";

const args = process.argv.slice(2);
const TEXT_MODE = args[0] === "--text";
const [baseURL, apiKey, requestsPath, resultsPath] = TEXT_MODE ? args.slice(1, 3) : args;
const [TEMPLATE, DYNBATCH, TOKENIZER, TEXT_MODEL] = TEXT_MODE ? args.slice(3) : [];
if (TEXT_MODE ? !TEXT_MODEL || !["llama2", "chatml"].includes(TEMPLATE) : !resultsPath) {
	console.error("usage: node openai_client.mjs BASE_URL API_KEY REQUESTS.jsonl RESULTS.jsonl\n" +
		      "       node openai_client.mjs --text BASE_URL API_KEY llama2|chatml DYNBATCH TOKENIZER MODEL");
	process.exit(2);
}

// No retries: a retried 5xx or reset connection would hide a server fault.
// The timeout turns a hung answer into a failure that names its request.
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 20000 });

const problems = [];
function problem(msg) {
	problems.push(msg);
	console.error(`openai_client: FAIL ${msg}`);
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function describe(err) {
	if (err instanceof OpenAI.APIError) {
		// A connection error's cause says what the socket saw (ECONNRESET...).
		let cause = err.cause, why = "";
		for (let i = 0; cause && i < 3; cause = cause.cause, i++)
			why += ` cause=${cause.code ?? cause.name}: ${cause.message}`;
		return `${err.constructor.name} status=${err.status} param=${err.param} ` +
			`message=${JSON.stringify(err.message)}${why}`;
	}
	return String(err && err.stack ? err.stack : err);
}

// A request line's body fields in the OpenAI spelling: the docs/DESIGN.md 3.1
// shorthands stop_token and stop_sequence become stop_token_ids and
// stop_sequences, so refdecode (which reads the original line) also checks
// that the two spellings mean the same.  The openai client sends body fields
// it does not know as they are (Completions.create posts `body` unchanged).
function bodyOf(req) {
	const body = { model: MODEL, prompt: req.prompt, id: req.id };
	if (req.max_tokens !== undefined)
		body.max_tokens = req.max_tokens;
	const stopIds = [...(req.stop_token_ids ?? [])];
	if (req.stop_token !== undefined && req.stop_token !== null)
		stopIds.push(req.stop_token);
	if (stopIds.length)
		body.stop_token_ids = stopIds;
	const stopSeqs = [...(req.stop_sequences ?? [])];
	if (req.stop_sequence)
		stopSeqs.push(req.stop_sequence);
	if (stopSeqs.length)
		body.stop_sequences = stopSeqs;
	if (req.include_stop !== undefined)
		body.include_stop = req.include_stop;
	return body;
}

// Shape every answer must have, plain or the last stream event.
function checkUsage(where, req, usage, nTokens) {
	if (!usage || typeof usage !== "object") {
		problem(`${where}: no usage object`);
		return;
	}
	if (usage.prompt_tokens !== req.prompt.length)
		problem(`${where}: usage.prompt_tokens ${usage.prompt_tokens}, prompt has ${req.prompt.length}`);
	if (usage.total_tokens !== usage.prompt_tokens + usage.completion_tokens)
		problem(`${where}: usage.total_tokens ${usage.total_tokens} != prompt + completion`);
	const max = req.max_tokens ?? 16;
	if (!(usage.completion_tokens >= nTokens && usage.completion_tokens <= max))
		problem(`${where}: usage.completion_tokens ${usage.completion_tokens} outside [${nTokens}, ${max}]`);
}

async function plain(req) {
	const where = `${req.id} plain`;
	const res = await client.completions.create(bodyOf(req));
	const choice = res?.choices?.[0];
	if (res.object !== "text_completion" || res.model !== MODEL || res.id !== req.id ||
	    typeof res.created !== "number" || res.choices.length !== 1 || !choice ||
	    choice.index !== 0 || choice.text !== "" || !Array.isArray(choice.token_ids)) {
		problem(`${where}: unexpected answer shape ${JSON.stringify(res)}`);
		return null;
	}
	if (choice.finish_reason !== "stop" && choice.finish_reason !== "length")
		problem(`${where}: finish_reason ${JSON.stringify(choice.finish_reason)}`);
	checkUsage(where, req, res.usage, choice.token_ids.length);
	return { tokens: choice.token_ids, finish_reason: choice.finish_reason, usage: res.usage };
}

// A stream, with stream_options.include_usage for every other request:
// with it, OpenAI's shape (the usage in a last chunk of its own, with
// "choices": [], and nowhere else); without it, no usage at all.
async function streamed(req, includeUsage) {
	const where = `${req.id} stream${includeUsage ? " (include_usage)" : ""}`;
	const body = { ...bodyOf(req), stream: true };
	if (includeUsage)
		body.stream_options = { include_usage: true };
	const stream = await client.completions.create(body);
	const tokens = [];
	let finish = null, usage = null, n = 0, bad = false;

	for await (const chunk of stream) {
		n++;
		if (usage !== null && !bad) {
			problem(`${where}: event after the usage: ${JSON.stringify(chunk)}`);
			bad = true;
		}
		if (includeUsage && Array.isArray(chunk?.choices) && chunk.choices.length === 0 &&
		    chunk.usage && chunk.id === req.id && finish !== null) {
			usage = chunk.usage;
			continue;
		}
		const choice = chunk?.choices?.[0];
		if (!choice || !Array.isArray(choice.token_ids) || chunk.id !== req.id ||
		    chunk.object !== "text_completion" || chunk.model !== MODEL) {
			if (!bad)
				problem(`${where}: unexpected event ${JSON.stringify(chunk)}`);
			bad = true;
			continue;
		}
		if (chunk.usage !== undefined && chunk.usage !== null && !bad) {
			problem(`${where}: usage in a choice's event: ${JSON.stringify(chunk)}`);
			bad = true;
		}
		if (finish !== null && !bad) {
			problem(`${where}: event after the one with finish_reason: ${JSON.stringify(chunk)}`);
			bad = true;
		}
		tokens.push(...choice.token_ids);
		if (choice.finish_reason !== null && choice.finish_reason !== undefined)
			finish = choice.finish_reason;
	}
	if (finish === null) {
		problem(`${where}: stream ended after ${n} events without a finish_reason`);
		return null;
	}
	if (includeUsage)
		checkUsage(where, req, usage, tokens.length);
	return { tokens, finish_reason: finish, usage, events: n };
}

async function one(req, results, includeUsage) {
	let p, s;
	try {
		p = await plain(req);
	} catch (err) {
		problem(`${req.id} plain: ${describe(err)}`);
		return;
	}
	try {
		s = await streamed(req, includeUsage);
	} catch (err) {
		problem(`${req.id} stream: ${describe(err)}`);
	}
	if (!p)
		return;
	results.push({ id: req.id, tokens: p.tokens, finish_reason: p.finish_reason });
	if (!s)
		return;
	if (!same(s.tokens, p.tokens))
		problem(`${req.id}: streamed tokens ${JSON.stringify(s.tokens)} != plain ${JSON.stringify(p.tokens)}`);
	if (s.finish_reason !== p.finish_reason)
		problem(`${req.id}: streamed finish_reason ${s.finish_reason} != plain ${p.finish_reason}`);
	if (includeUsage && !same(s.usage, p.usage))
		problem(`${req.id}: streamed usage ${JSON.stringify(s.usage)} != plain ${JSON.stringify(p.usage)}`);
	return s.events;
}

async function completions(requests) {
	const results = [];
	let next = 0, events = 0;
	async function lane() {
		while (next < requests.length) {
			const i = next++;
			const n = await one(requests[i], results, i % 2 === 0);
			events += n ?? 0;	// not `events += await`: that reads events first
		}
	}
	await Promise.all(Array.from({ length: CONCURRENCY }, lane));
	// Input order, so the file reads like the workload.
	const order = new Map(requests.map((r, i) => [r.id, i]));
	results.sort((a, b) => order.get(a.id) - order.get(b.id));
	writeFileSync(resultsPath, results.map((r) => JSON.stringify(r) + "\n").join(""));
	return { results, events };
}

// e2e_openai.sh serves MODEL as --served-model-name sim,alias-a
// --served-model-name alias-b: every name is listed and retrieved, answers
// name the first, another name is a 404 (vLLM's rule), no name is fine.
const SERVED = [MODEL, "alias-a", "alias-b"];
async function models() {
	try {
		const ids = [];
		for await (const m of client.models.list())
			ids.push(m.id);
		if (!same(ids, SERVED))
			problem(`models.list(): ${JSON.stringify(ids)}, want ${JSON.stringify(SERVED)}`);
		for (const name of SERVED) {
			const m = await client.models.retrieve(name);
			if (m.id !== name || m.object !== "model")
				problem(`models.retrieve(${name}): ${JSON.stringify(m)}`);
		}
		const body = { prompt: [1, 2, 3], max_tokens: 3 };
		const ref = await client.completions.create({ ...body, model: MODEL });
		for (const model of ["alias-b", undefined]) {
			const res = await client.completions.create({ ...body, model });
			if (res.model !== MODEL || !same(res.choices[0].token_ids, ref.choices[0].token_ids))
				problem(`model ${model}: ${JSON.stringify(res)}`);
		}
	} catch (err) {
		problem(`models: ${describe(err)}`);
	}
	await expectError("models.retrieve(another name)", OpenAI.NotFoundError, 404,
			  () => client.models.retrieve("gpt-4o"));
	await expectError("completion for another model", OpenAI.NotFoundError, 404,
			  () => client.completions.create({ model: "gpt-4o", prompt: [1], max_tokens: 2 }),
			  "model");
	await expectError("stream for another model", OpenAI.NotFoundError, 404,
			  () => client.completions.create({ model: "alias", prompt: [1], stream: true }),
			  "model");
}

// expectError(what, ErrorClass, status, fn, param): fn must throw exactly
// that error; when param is given, the message and err.param must name it.
async function expectError(what, ErrorClass, status, fn, param) {
	try {
		const got = await fn();
		// A stream that opened: drain it, it should never have started.
		if (got && typeof got[Symbol.asyncIterator] === "function")
			for await (const _ of got);
		problem(`${what}: no error, want ${ErrorClass.name} (${status})`);
	} catch (err) {
		if (!(err instanceof ErrorClass) || err.status !== status) {
			problem(`${what}: got ${describe(err)}, want ${ErrorClass.name} (${status})`);
			return;
		}
		if (param && !(new RegExp(`\\b${param}\\b`).test(err.message) && err.param === param))
			problem(`${what}: ${describe(err)} does not name '${param}'`);
	}
}

async function errors() {
	const wrong = new OpenAI({ baseURL, apiKey: apiKey + "-wrong", maxRetries: 0, timeout: 20000 });
	const ok = { model: MODEL, prompt: [1, 2, 3], max_tokens: 4 };
	await expectError("wrong API key, completions", OpenAI.AuthenticationError, 401,
			  () => wrong.completions.create(ok));
	await expectError("wrong API key, stream", OpenAI.AuthenticationError, 401,
			  () => wrong.completions.create({ ...ok, stream: true }));
	await expectError("wrong API key, models", OpenAI.AuthenticationError, 401,
			  () => wrong.models.list());

	const bad = [
		["prompt token out of range", { prompt: [1, 64] }, "prompt"],
		["negative prompt token", { prompt: [-1] }, "prompt"],
		["stop_token_ids token out of range", { stop_token_ids: [3, 1000] }, "stop_token_ids"],
		["stop_sequences token out of range", { stop_sequences: [[1], [2, 64]] }, "stop_sequences"],
		// a 400, not a 500 a client would retry
		["empty prompt", { prompt: [] }, "prompt"],
		["best_of over OpenAI's 20", { best_of: 21 }, "best_of"],
		["a batch with an empty prompt", { prompt: [[1], []] }, "prompt"],
		["a penalty out of range", { presence_penalty: 2.5 }, "presence_penalty"],
		["an unknown field", { max_token: 4 }, "max_token"],
	];
	for (const [what, fields, param] of bad) {
		const body = { ...ok, ...fields };
		await expectError(what, OpenAI.BadRequestError, 400,
				  () => client.completions.create(body), param);
		await expectError(`${what}, stream`, OpenAI.BadRequestError, 400,
				  () => client.completions.create({ ...body, stream: true }), param);
	}
	// This server has neither a tokenizer nor a chat template.
	const chat = { model: MODEL, messages: [{ role: "user", content: "hi" }] };
	for (const stream of [false, true]) {
		const what = `chat without --chat-template${stream ? ", stream" : ""}`;
		try {
			await client.chat.completions.create({ ...chat, stream });
			problem(`${what}: no error, want 400`);
		} catch (err) {
			if (!(err instanceof OpenAI.BadRequestError) || !/--chat-template/.test(err.message))
				problem(`${what}: got ${describe(err)}, want 400 naming --chat-template`);
		}
	}
}

// Seeds the engine picks are below 2^53: the client (doubles) reads them
// exactly, and sending one back replays the answer.
async function pickedSeeds() {
	const body = { model: MODEL, prompt: [5, 6, 7], max_tokens: 12, temperature: 1 };
	let n = 0;
	try {
		for (let i = 0; i < 16; i++) {
			const res = await client.completions.create({ ...body, prompt: [5, 6, i] });
			if (!Number.isSafeInteger(res.seed) || res.seed < 0) {
				problem(`picked seed ${res.seed}: not an integer below 2^53`);
				continue;
			}
			const again = await client.completions.create({ ...body, prompt: [5, 6, i], seed: res.seed });
			if (!same(again.choices[0].token_ids, res.choices[0].token_ids) || again.seed !== res.seed)
				problem(`seed ${res.seed} replayed: ${JSON.stringify(again.choices[0].token_ids)} ` +
					`!= ${JSON.stringify(res.choices[0].token_ids)}`);
			n++;
		}
	} catch (err) {
		problem(`picked seeds: ${describe(err)}`);
	}
	return n;
}

// Batch prompts and best_of through the client's own types: a batch's
// choice p * n + j is prompt p's choice j alone; best_of's choice is the
// n = best_of answer's of the highest cumulative logprob (float32 sums,
// the lower index on a tie).
async function batchAndBestOf() {
	const body = { model: MODEL, max_tokens: 6, n: 2, temperature: 1, seed: 11 };
	let n = 0;
	try {
		const prompts = [[1, 2, 3], [4, 5], [6]];
		const res = await client.completions.create({ ...body, prompt: prompts });
		if (res.choices.length !== 6 || res.choices.some((c, i) => c.index !== i))
			problem(`batch: indexes ${JSON.stringify(res.choices.map((c) => c.index))}`);
		for (let p = 0; p < prompts.length; p++) {
			const alone = await client.completions.create({ ...body, prompt: prompts[p] });
			for (let j = 0; j < 2; j++, n++)
				if (!same(res.choices[p * 2 + j].token_ids, alone.choices[j].token_ids))
					problem(`batch prompt ${p} choice ${j}: not its answer alone`);
		}
		const one = { model: MODEL, prompt: [7, 8], max_tokens: 6, temperature: 1, seed: 12 };
		const best = await client.completions.create({ ...one, best_of: 4 });
		const all = await client.completions.create({ ...one, n: 4, logprobs: 0 });
		const sum = (c) => c.logprobs.token_logprobs.reduce((a, x) => a + Math.fround(x), 0);
		let top = 0;
		for (let i = 1; i < 4; i++)
			if (sum(all.choices[i]) > sum(all.choices[top]))
				top = i;
		if (best.choices.length !== 1 || best.choices[0].logprobs !== null ||
		    !same(best.choices[0].token_ids, all.choices[top].token_ids))
			problem(`best_of 4: ${JSON.stringify(best.choices)}, want candidate ${top}`);
		n++;
	} catch (err) {
		problem(`batch and best_of: ${describe(err)}`);
	}
	return n;
}

// A user who stops reading (`break` out of the loop) aborts the request; the
// server must cancel it and go on answering on other connections.
async function abandonedStreams() {
	const body = { model: MODEL, prompt: [1, 2, 3], max_tokens: 3000, stream: true };
	try {
		for (let i = 0; i < 4; i++) {
			const stream = await client.completions.create({ ...body, prompt: [1, 2, i] });
			let n = 0;
			for await (const _ of stream)
				if (++n === 2)
					break;
		}
		const res = await client.completions.create({ model: MODEL, prompt: [1, 2, 3], max_tokens: 5 });
		if (res.choices[0].token_ids.length !== 5)
			problem(`after abandoned streams: ${JSON.stringify(res)}`);
	} catch (err) {
		problem(`abandoned streams: ${describe(err)}`);
	}
}

async function main() {
	const requests = readFileSync(requestsPath, "utf8").split("\n")
		.filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
	const t0 = performance.now();
	await models();
	const { results, events } = await completions(requests);
	await errors();
	const seeds = await pickedSeeds();
	const batched = await batchAndBestOf();
	await abandonedStreams();
	const secs = ((performance.now() - t0) / 1000).toFixed(2);
	const n_tokens = results.reduce((n, r) => n + r.tokens.length, 0);
	console.log(`openai_client: ${requests.length} requests x (plain + stream), ` +
		    `${results.length} results, ${n_tokens} tokens, ${events} stream events; ` +
		    `models (${SERVED.length} names, 3 x 404), 3 x 401, 18 x 400, ${seeds} picked seeds replayed, ${batched} batch and best_of choices, 4 abandoned streams; openai ${VERSION}, ${secs} s`);
	if (problems.length) {
		console.error(`openai_client: ${problems.length} problem(s)`);
		process.exit(1);
	}
}

// ---------------------------------------------------------------------------
// Text mode (--text): a server with --tokenizer and --chat-template TEMPLATE.
// Every answer is held to what `dynbatch run` (JSON Lines, the same model and
// tokenizer) gives for the same request, DYNBATCH run by this script:
//   - /v1/completions with a string prompt: text and finish_reason;
//   - "stop" strings: a stop taken from the middle of the unstopped text
//     cuts the answer right before it (finish_reason "stop");
//   - streams: the chunks' texts, concatenated, are the plain answer;
//   - seeds: the same seed twice gives the same sampled text;
//   - chat, plain and streamed, n = 2 included: the content is the JSON
//     Lines text of the prompt that this script renders with its own
//     implementation of the template (below), so a server that renders
//     differently fails.  A llama2 conversation of several turns is a token
//     sequence no string prompt gives (BOS/EOS between turns, chat_api.h):
//     its prompt_tokens must be the sum of its turns' (each a string
//     prompt) plus one EOS per closed turn.
// ---------------------------------------------------------------------------

// The templates, written from Meta's llama-2 chat_completion() and the
// ChatML description, independently of server/http/chat_api.c.
const stripAscii = (s) => s.replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, "");

function llama2Turns(messages) {
	let m = messages;
	if (m[0].role === "system")
		m = [{ role: m[1].role, content: `<<SYS>>\n${m[0].content}\n<</SYS>>\n\n${m[1].content}` },
		     ...m.slice(2)];
	const turns = [];
	for (let i = 0; i < m.length; i += 2)
		turns.push(i + 1 < m.length ?
			   `[INST] ${stripAscii(m[i].content)} [/INST] ${stripAscii(m[i + 1].content)} ` :
			   `[INST] ${stripAscii(m[i].content)} [/INST]`);
	return turns;
}

function chatmlText(messages) {
	return messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") +
		"<|im_start|>assistant\n";
}

// Run JSON Lines requests through `dynbatch run`; results by "id" (and
// "id#index" for a choice of n > 1).
function runReference(lines) {
	const dir = mkdtempSync(join(tmpdir(), "openai-ref-"));
	try {
		const input = join(dir, "in.jsonl"), output = join(dir, "out.jsonl");
		writeFileSync(input, lines.map((l) => JSON.stringify(l) + "\n").join(""));
		execFileSync(DYNBATCH, ["run", "--workers", "1", "--batch", "8", "--model", TEXT_MODEL,
					"--tokenizer", TOKENIZER, "--no-progress",
					"--input", input, "--output", output],
			     { stdio: ["ignore", "ignore", "pipe"], timeout: 30000 });
		const byId = new Map();
		for (const l of readFileSync(output, "utf8").split("\n")) {
			if (!l.trim())
				continue;
			const r = JSON.parse(l);
			byId.set(r.index === undefined ? r.id : `${r.id}#${r.index}`, r);
		}
		return byId;
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}

let checks = 0;
function expectSame(what, got, want) {
	checks++;
	if (!same(got, want))
		problem(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

// A stop string from the middle of text: two code points, no U+FFFD (an
// invalid byte's stand-in, not text the model made).  null if none.
function stopFrom(text) {
	const cps = Array.from(text);
	for (let i = Math.floor(cps.length / 2); i + 2 <= cps.length; i++) {
		const s = cps[i] + cps[i + 1];
		if (!s.includes("\ufffd") && s.trim() === s && s.length)
			return s;
	}
	return null;
}

async function streamCompletionText(body) {
	let text = "", finish = null;
	for await (const chunk of await client.completions.create({ ...body, stream: true })) {
		const c = chunk.choices[0];
		text += c.text ?? "";
		if (c.finish_reason)
			finish = c.finish_reason;
	}
	return { text, finish };
}

// A chat stream: per choice, the content and the finish_reason, checking
// the chunk shapes (role first, an empty delta with the finish_reason last).
// With stream_options.include_usage (unless body sets stream_options),
// the usage must come in a last chunk of its own with "choices": [];
// without it, in no chunk.
async function streamChat(what, body) {
	const per = new Map();
	const includeUsage = body.stream_options === undefined || body.stream_options?.include_usage;
	let usage = null;
	const opts = body.stream_options === undefined ? { stream_options: { include_usage: true } } : {};
	for await (const chunk of await client.chat.completions.create({ ...body, ...opts, stream: true })) {
		if (chunk.object !== "chat.completion.chunk" || !/^chatcmpl-/.test(chunk.id))
			problem(`${what}: chunk ${JSON.stringify(chunk)}`);
		if (usage)
			problem(`${what}: a chunk after the usage: ${JSON.stringify(chunk)}`);
		if (chunk.usage) {
			usage = chunk.usage;
			if (!includeUsage || chunk.choices.length)
				problem(`${what}: usage in ${JSON.stringify(chunk)}`);
		}
		for (const c of chunk.choices) {
			const st = per.get(c.index) ?? { content: "", role: false, finish: null };
			per.set(c.index, st);
			if (st.finish)
				problem(`${what}: choice ${c.index}: chunk after its finish_reason`);
			if (c.delta.role !== undefined) {
				if (st.role || st.content || c.delta.role !== "assistant")
					problem(`${what}: choice ${c.index}: role chunk ${JSON.stringify(c)}`);
				st.role = true;
			} else if (!st.role) {
				problem(`${what}: choice ${c.index}: content before the role chunk`);
			}
			st.content += c.delta.content ?? "";
			if (c.finish_reason) {
				if (Object.keys(c.delta).length)
					problem(`${what}: choice ${c.index}: finish chunk with delta ${JSON.stringify(c.delta)}`);
				st.finish = c.finish_reason;
			}
		}
	}
	return { per, usage };
}

async function textMain() {
	const t0 = performance.now();
	const stopExtra = TEMPLATE === "chatml" ? ["<|im_end|>"] : [];
	// The conversations: [messages, their reference prompt(s)].
	const convs = [
		[{ role: "user", content: "Hello there, who are you?" }],
		[{ role: "system", content: "You answer in one line." },
		 { role: "user", content: "  Tell me about the weather.\n" }],
		[{ role: "system", content: "Be brief." },
		 { role: "user", content: "hi" },
		 { role: "assistant", content: " Hello! " },
		 { role: "user", content: [{ type: "text", text: "what is " }, { type: "text", text: "2+2?" }] }],
	];
	const flat = (m) => m.map((x) => ({ role: x.role,
		content: typeof x.content === "string" ? x.content : x.content.map((p) => p.text).join("") }));
	const ref1 = [
		{ id: "plain", prompt: "The quick brown fox jumps over the lazy dog", max_tokens: 40 },
		{ id: "seeded", prompt: "Once upon a time", max_tokens: 24, temperature: 0.9, seed: 1234 },
	];
	convs.forEach((m, i) => {
		const fm = flat(m);
		if (TEMPLATE === "chatml") {
			ref1.push({ id: `chat${i}`, prompt: chatmlText(fm), max_tokens: 32, stop: stopExtra });
			ref1.push({ id: `chat${i}n2`, prompt: chatmlText(fm), max_tokens: 16, stop: stopExtra,
				    temperature: 0.8, seed: 7, n: 2 });
		} else {
			const turns = llama2Turns(fm);
			turns.forEach((t, j) => ref1.push({ id: `chat${i}turn${j}`, prompt: t, max_tokens: 32 }));
			if (turns.length === 1)
				ref1.push({ id: `chat${i}n2`, prompt: turns[0], max_tokens: 16,
					    temperature: 0.8, seed: 7, n: 2 });
		}
	});
	const ref = runReference(ref1);

	// --- completions: string prompt, stream, seed --------------------------
	const plainBody = { model: MODEL, prompt: ref1[0].prompt, max_tokens: 40 };
	const plain = await client.completions.create(plainBody);
	expectSame("string prompt: text", plain.choices[0].text, ref.get("plain").text);
	expectSame("string prompt: finish_reason", plain.choices[0].finish_reason,
		   ref.get("plain").finish_reason);
	expectSame("string prompt: prompt_tokens", plain.usage.prompt_tokens,
		   ref.get("plain").usage.prompt_tokens);
	const streamed = await streamCompletionText(plainBody);
	expectSame("string prompt, stream: text", streamed.text, plain.choices[0].text);
	expectSame("string prompt, stream: finish_reason", streamed.finish, plain.choices[0].finish_reason);

	const seededBody = { model: MODEL, prompt: ref1[1].prompt, max_tokens: 24, temperature: 0.9, seed: 1234 };
	const s1 = await client.completions.create(seededBody);
	const s2 = await client.completions.create(seededBody);
	expectSame("seed: same text twice", s2.choices[0].text, s1.choices[0].text);
	expectSame("seed: text", s1.choices[0].text, ref.get("seeded").text);
	expectSame("seed, stream: text", (await streamCompletionText(seededBody)).text, s1.choices[0].text);

	// --- stop strings: one taken from the unstopped text -------------------
	const full = ref.get("plain").text;
	const stop = stopFrom(full);
	if (!stop) {
		problem(`stop: no stop string can be taken from ${JSON.stringify(full)}`);
	} else {
		const want = full.slice(0, full.indexOf(stop));
		const stopped = await client.completions.create({ ...plainBody, stop: [stop, "never-said"] });
		expectSame(`stop ${JSON.stringify(stop)}: text`, stopped.choices[0].text, want);
		expectSame(`stop ${JSON.stringify(stop)}: finish_reason`, stopped.choices[0].finish_reason, "stop");
		checks++;
		if (stopped.choices[0].text.includes(stop))
			problem(`stop ${JSON.stringify(stop)}: the text holds the stop`);
		const st = await streamCompletionText({ ...plainBody, stop });
		expectSame(`stop ${JSON.stringify(stop)}, stream: text`, st.text, want);
		expectSame(`stop ${JSON.stringify(stop)}, stream: finish_reason`, st.finish, "stop");
	}

	// --- chat ---------------------------------------------------------------
	for (const [i, messages] of convs.entries()) {
		const what = `chat ${TEMPLATE} #${i}`;
		const body = { model: MODEL, messages, max_tokens: 32 };
		const res = await client.chat.completions.create(body);
		const c = res.choices[0];
		checks++;
		if (res.object !== "chat.completion" || !/^chatcmpl-/.test(res.id) || res.choices.length !== 1 ||
		    c.index !== 0 || c.message.role !== "assistant" || typeof c.message.content !== "string")
			problem(`${what}: answer shape ${JSON.stringify(res)}`);
		const turns = llama2Turns(flat(messages));
		if (TEMPLATE === "chatml" || turns.length === 1) {
			const r = ref.get(TEMPLATE === "chatml" ? `chat${i}` : `chat${i}turn0`);
			expectSame(`${what}: content`, c.message.content, r.text);
			expectSame(`${what}: finish_reason`, c.finish_reason, r.finish_reason);
			expectSame(`${what}: prompt_tokens`, res.usage.prompt_tokens, r.usage.prompt_tokens);
		} else {
			let n = turns.length - 1;	// an EOS after each closed turn
			turns.forEach((_, j) => { n += ref.get(`chat${i}turn${j}`).usage.prompt_tokens; });
			expectSame(`${what}: prompt_tokens (turns + EOS)`, res.usage.prompt_tokens, n);
		}
		const s = await streamChat(`${what}, stream`, body);
		expectSame(`${what}, stream: content`, s.per.get(0)?.content, c.message.content);
		for (const so of [null, { include_usage: false }]) {
			const q = await streamChat(`${what}, stream_options ${JSON.stringify(so)}`,
						   { ...body, stream_options: so });
			expectSame(`${what}, stream_options ${JSON.stringify(so)}: no usage`, q.usage, null);
			expectSame(`${what}, stream_options ${JSON.stringify(so)}: content`, q.per.get(0)?.content,
				   c.message.content);
		}
		expectSame(`${what}, stream: finish_reason`, s.per.get(0)?.finish, c.finish_reason);
		expectSame(`${what}, stream: usage`, s.usage, res.usage);

		// n = 2 sampled choices, seeded: each as the JSON Lines run's
		const r0 = ref.get(`chat${i}n2#0`), r1 = ref.get(`chat${i}n2#1`);
		if (!r0)
			continue;
		const nBody = { model: MODEL, messages, max_tokens: 16, temperature: 0.8, seed: 7, n: 2 };
		const two = await client.chat.completions.create(nBody);
		expectSame(`${what}, n=2: contents`, two.choices.map((x) => x.message.content), [r0.text, r1.text]);
		const again = await client.chat.completions.create(nBody);
		expectSame(`${what}, n=2: same seed, same contents`, again.choices.map((x) => x.message.content),
			   two.choices.map((x) => x.message.content));
		const s2n = await streamChat(`${what}, n=2 stream`, nBody);
		expectSame(`${what}, n=2 stream: contents`, [0, 1].map((k) => s2n.per.get(k)?.content),
			   [r0.text, r1.text]);
	}

	// --- chat max_tokens: absent is the context's rest; the newer name --------
	{
		const messages = convs[0];
		const open = await client.chat.completions.create({ model: MODEL, messages });
		const used = open.usage.prompt_tokens + open.usage.completion_tokens;
		checks++;
		if (open.choices[0].finish_reason === "length" ? used !== TEXT_CONTEXT :
		    used > TEXT_CONTEXT)
			problem(`chat without max_tokens: ${open.usage.prompt_tokens} + ` +
				`${open.usage.completion_tokens} tokens (${open.choices[0].finish_reason}), ` +
				`want up to the context ${TEXT_CONTEXT}`);
		const rest = TEXT_CONTEXT - open.usage.prompt_tokens;
		const explicit = await client.chat.completions.create({ model: MODEL, messages, max_tokens: rest });
		expectSame("chat without max_tokens = with the context's rest: content",
			   open.choices[0].message.content, explicit.choices[0].message.content);
		const s = await streamChat("chat without max_tokens, stream", { model: MODEL, messages });
		expectSame("chat without max_tokens, stream: content", s.per.get(0)?.content,
			   open.choices[0].message.content);
		const mct = await client.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 5 });
		const mt = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5 });
		expectSame("max_completion_tokens 5 = max_tokens 5: content", mct.choices[0].message.content,
			   mt.choices[0].message.content);
		expectSame("max_completion_tokens 5: usage", mct.usage, mt.usage);
		const both = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5,
								     max_completion_tokens: 5 });
		expectSame("max_tokens = max_completion_tokens 5: content", both.choices[0].message.content,
			   mt.choices[0].message.content);
		await expectError("max_tokens 5, max_completion_tokens 6", OpenAI.BadRequestError, 400,
				  () => client.chat.completions.create({ model: MODEL, messages, max_tokens: 5,
									 max_completion_tokens: 6 }),
				  "max_completion_tokens");
	}

	await expectError("chat for another model", OpenAI.NotFoundError, 404,
			  () => client.chat.completions.create({ model: "sim ", messages: convs[0] }), "model");
	const noName = await client.chat.completions.create({ messages: convs[0], max_tokens: 3 });
	expectSame("chat without a model: the answer names the served one", noName.model, MODEL);

	// --- chat errors ----------------------------------------------------------
	const badChats = [
		["role 'tool'", [{ role: "tool", content: "x" }]],
		["no messages", []],
		["image part", [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }]],
	];
	if (TEMPLATE === "llama2")
		badChats.push(["llama2: assistant last", [{ role: "user", content: "x" }, { role: "assistant", content: "y" }]]);
	for (const [what, messages] of badChats)
		for (const stream of [false, true])
			await expectError(`chat ${what}${stream ? ", stream" : ""}`, OpenAI.BadRequestError, 400,
					  () => client.chat.completions.create({ model: MODEL, messages, stream }),
					  "messages");

	const secs = ((performance.now() - t0) / 1000).toFixed(2);
	console.log(`openai_client --text ${TEMPLATE}: ${checks} checks against ${ref.size} JSON Lines ` +
		    `results (string prompt, stop, stream, seed, chat plain/stream/n=2), ` +
		    `${badChats.length * 2} x 400; openai ${VERSION}, ${secs} s`);
	if (problems.length) {
		console.error(`openai_client: ${problems.length} problem(s)`);
		process.exit(1);
	}
}

(TEXT_MODE ? textMain : main)().catch((err) => {
	console.error(`openai_client: ${describe(err)}`);
	process.exit(1);
});
