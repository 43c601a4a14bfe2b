// openai_grammar.mjs - structured output through the official openai npm
// client (v4), as an application asks for it:
//
//   node openai_grammar.mjs BASE_URL MODEL
//
// client.beta.chat.completions.parse() with a json_schema response_format
// (the client JSON.parses the answer into message.parsed, and throws on a
// "length" finish), json_object mode, the same request streamed (the
// deltas must add up to the plain answer, seeded), a completion with
// llama.cpp's "grammar" field, and a bad schema (400 naming
// response_format).  Exit 0 when everything held, 1 otherwise.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0 });
let failures = 0;
const fail = (msg) => { failures++; console.log("FAIL " + msg); };

const schema = {
	type: "object",
	properties: {
		name: { type: "string", maxLength: 6 },
		age: { type: "integer" },
		tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 },
		ok: { type: "boolean" },
	},
	required: ["name", "age", "tags"],
	additionalProperties: false,
};
// the schema's meaning, checked here (not by the server's compiler)
const valid = (v) => v && typeof v === "object" && !Array.isArray(v) &&
	Object.keys(v).every((k) => k in schema.properties) &&
	typeof v.name === "string" && [...v.name].length <= 6 &&
	Number.isInteger(v.age) && Array.isArray(v.tags) && v.tags.length <= 3 &&
	v.tags.every((t) => ["a", "b", "c"].includes(t)) &&
	(v.ok === undefined || typeof v.ok === "boolean");
const format = { type: "json_schema", json_schema: { name: "person", schema, strict: true } };

let parsed = 0;
for (let seed = 1; seed <= 12; seed++) {
	const req = { model, messages: [{ role: "user", content: `a person, please (${seed})` }],
		      max_tokens: 300, temperature: 1.0, seed, response_format: format };
	let c;
	try {
		c = await client.beta.chat.completions.parse(req);
	} catch (e) {
		fail(`parse() seed ${seed}: ${e.constructor.name}: ${e.message}`);
		continue;
	}
	const m = c.choices[0].message;
	if (!valid(m.parsed))
		fail(`seed ${seed}: parsed ${JSON.stringify(m.parsed)} breaks the schema`);
	else
		parsed++;
	// the same request streamed: the same text
	const stream = await client.chat.completions.create({ ...req, stream: true });
	let text = "", finish = null;
	for await (const ev of stream) {
		text += ev.choices[0]?.delta?.content ?? "";
		finish = ev.choices[0]?.finish_reason ?? finish;
	}
	if (text !== m.content || finish !== "stop")
		fail(`seed ${seed}: stream gave ${JSON.stringify(text)} (${finish}), plain ${JSON.stringify(m.content)}`);
}

const jo = await client.chat.completions.create({ model, max_tokens: 300, temperature: 1, seed: 5,
	messages: [{ role: "user", content: "json" }], response_format: { type: "json_object" } });
try {
	const v = JSON.parse(jo.choices[0].message.content);
	if (typeof v !== "object" || v === null || Array.isArray(v))
		fail(`json_object: ${jo.choices[0].message.content} is not an object`);
} catch (e) {
	if (jo.choices[0].finish_reason === "stop")
		fail(`json_object: not JSON: ${jo.choices[0].message.content}`);
}

// llama.cpp's field, through the client's pass-through of extra body fields
const g = await client.completions.create({ model, prompt: "x", max_tokens: 40, temperature: 1, seed: 9,
	grammar: 'root ::= ("yes" | "no") "!"' });
if (!/^(yes|no)!$/.test(g.choices[0].text) || g.choices[0].finish_reason !== "stop")
	fail(`grammar: ${JSON.stringify(g.choices[0])}`);

try {
	await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
		response_format: { type: "json_schema", json_schema: { name: "d", schema: { type: "string", format: "date" } } } });
	fail("an unsupported schema keyword was taken");
} catch (e) {
	if (!(e instanceof OpenAI.BadRequestError) || e.param !== "response_format" || !/format/.test(e.message))
		fail(`bad schema: ${e.constructor.name} param ${e.param}: ${e.message}`);
}

console.log(`openai client structured output: ${parsed} of 12 parsed and valid, ${failures} failures`);
process.exit(failures ? 1 : 0);
