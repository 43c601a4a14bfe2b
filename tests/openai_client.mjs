// openai_client.mjs - drive `dynbatch serve` with the official openai npm
// client (v4), as a user of an OpenAI-compatible server would.
//
//   node openai_client.mjs BASE_URL API_KEY REQUESTS.jsonl RESULTS.jsonl
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
import { readFileSync, writeFileSync } from "node:fs";
import OpenAI from "openai";
import { VERSION } from "openai/version";

const CONCURRENCY = Number(process.env.OPENAI_E2E_CONCURRENCY) || 8;
const MODEL = "sim";

const [baseURL, apiKey, requestsPath, resultsPath] = process.argv.slice(2);
if (!resultsPath) {
	console.error("usage: node openai_client.mjs BASE_URL API_KEY REQUESTS.jsonl RESULTS.jsonl");
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

async function streamed(req) {
	const where = `${req.id} stream`;
	const stream = await client.completions.create({ ...bodyOf(req), stream: true });
	const tokens = [];
	let finish = null, usage = null, n = 0, bad = false;

	for await (const chunk of stream) {
		n++;
		const choice = chunk?.choices?.[0];
		if (!choice || !Array.isArray(choice.token_ids) || chunk.id !== req.id ||
		    chunk.object !== "text_completion" || chunk.model !== MODEL) {
			if (!bad)
				problem(`${where}: unexpected event ${JSON.stringify(chunk)}`);
			bad = true;
			continue;
		}
		if (finish !== null && !bad) {
			problem(`${where}: event after the one with finish_reason: ${JSON.stringify(chunk)}`);
			bad = true;
		}
		tokens.push(...choice.token_ids);
		if (choice.finish_reason !== null && choice.finish_reason !== undefined) {
			finish = choice.finish_reason;
			usage = chunk.usage;
		}
	}
	if (finish === null) {
		problem(`${where}: stream ended after ${n} events without a finish_reason`);
		return null;
	}
	checkUsage(where, req, usage, tokens.length);
	return { tokens, finish_reason: finish, usage, events: n };
}

async function one(req, results) {
	let p, s;
	try {
		p = await plain(req);
	} catch (err) {
		problem(`${req.id} plain: ${describe(err)}`);
		return;
	}
	try {
		s = await streamed(req);
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
	if (!same(s.usage, p.usage))
		problem(`${req.id}: streamed usage ${JSON.stringify(s.usage)} != plain ${JSON.stringify(p.usage)}`);
	return s.events;
}

async function completions(requests) {
	const results = [];
	let next = 0, events = 0;
	async function lane() {
		while (next < requests.length) {
			const n = await one(requests[next++], results);
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

async function models() {
	try {
		const ids = [];
		for await (const m of client.models.list())
			ids.push(m.id);
		if (!ids.includes(MODEL))
			problem(`models.list(): ${JSON.stringify(ids)} has no "${MODEL}"`);
	} catch (err) {
		problem(`models.list(): ${describe(err)}`);
	}
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
	];
	for (const [what, fields, param] of bad) {
		const body = { ...ok, ...fields };
		await expectError(what, OpenAI.BadRequestError, 400,
				  () => client.completions.create(body), param);
		await expectError(`${what}, stream`, OpenAI.BadRequestError, 400,
				  () => client.completions.create({ ...body, stream: true }), param);
	}
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
	await abandonedStreams();
	const secs = ((performance.now() - t0) / 1000).toFixed(2);
	const n_tokens = results.reduce((n, r) => n + r.tokens.length, 0);
	console.log(`openai_client: ${requests.length} requests x (plain + stream), ` +
		    `${results.length} results, ${n_tokens} tokens, ${events} stream events; ` +
		    `models, 3 x 401, 8 x 400, 4 abandoned streams; openai ${VERSION}, ${secs} s`);
	if (problems.length) {
		console.error(`openai_client: ${problems.length} problem(s)`);
		process.exit(1);
	}
}

main().catch((err) => {
	console.error(`openai_client: ${describe(err)}`);
	process.exit(1);
});
