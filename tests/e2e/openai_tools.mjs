// openai_tools.mjs - function tools through the official openai npm
// client (v4), as an application runs them:
//
//   node openai_tools.mjs BASE_URL MODEL
//
//   - client.beta.chat.completions.runTools() with a named tool_choice:
//     the server's call reaches the JavaScript function with arguments
//     that validate (checked here, not by the server), the runner sends
//     the result back as a role "tool" message;
//   - runTools() streamed with tool_choice "required" (one call a round:
//     a random model rarely stops calling, so parallel calls could run
//     into max_tokens) for three rounds:
//     each round's request carries the earlier calls and tool results
//     (assistant tool_calls and tool messages rendered by the template);
//   - a plain create() after them with tool_choice "none" answers text;
//   - the same seeded request streamed and not: the same calls (their
//     ids differ: they are made from each request's own id).
// Exit 0 when everything held, 1 otherwise.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0 });
let failures = 0;
const fail = (msg) => { failures++; console.log("FAIL " + msg); };

const weatherParams = {
	type: "object",
	properties: {
		city: { type: "string", maxLength: 12 },
		days: { type: "integer" },
		units: { enum: ["c", "f"] },
	},
	required: ["city", "units"],
	additionalProperties: false,
};
const lookupParams = {
	type: "object",
	properties: { q: { type: "string", maxLength: 8 }, exact: { type: "boolean" } },
	required: ["q"],
};
// the schemas' meaning, checked here
const validWeather = (a) => a && typeof a === "object" && !Array.isArray(a) &&
	Object.keys(a).every((k) => k in weatherParams.properties) &&
	typeof a.city === "string" && [...a.city].length <= 12 &&
	(a.days === undefined || Number.isInteger(a.days)) && ["c", "f"].includes(a.units);
const validLookup = (a) => a && typeof a === "object" && !Array.isArray(a) &&
	Object.keys(a).every((k) => k in lookupParams.properties) &&
	typeof a.q === "string" && [...a.q].length <= 8 &&
	(a.exact === undefined || typeof a.exact === "boolean");

const calls = [];
const tools = [
	{ type: "function", function: { name: "get_weather", description: "Weather by city",
	  parameters: weatherParams, parse: JSON.parse,
	  function: (a) => { calls.push(["get_weather", a]);
		  if (!validWeather(a)) fail("get_weather args " + JSON.stringify(a));
		  return { temp: 21, city: a.city }; } } },
	{ type: "function", function: { name: "lookup", description: "Look it up",
	  parameters: lookupParams, parse: JSON.parse,
	  function: (a) => { calls.push(["lookup", a]);
		  if (!validLookup(a)) fail("lookup args " + JSON.stringify(a));
		  return "found " + a.q; } } },
];
const user = [{ role: "user", content: "What is the weather in Oslo?" }];

// Each part says when it starts, so a run cut off by the caller's
// timeout (a sanitizer build is several times slower) tells where.
const part = (name) => console.log(`${new Date().toISOString()} part ${name}`);

// 1. named: one call, then the runner stops
part("named");
for (let seed = 1; seed <= 3; seed++) {
	calls.length = 0;
	const runner = client.beta.chat.completions.runTools({
		model, messages: user, tools, seed, temperature: 1, max_tokens: 400,
		tool_choice: { type: "function", function: { name: "get_weather" } },
	});
	await runner.done();
	const msgs = runner.messages;
	const asst = msgs.find((m) => m.role === "assistant");
	const tool = msgs.find((m) => m.role === "tool");
	if (calls.length !== 1 || calls[0][0] !== "get_weather")
		fail(`named seed ${seed}: calls ${JSON.stringify(calls)}`);
	if (!asst || asst.content !== null || asst.tool_calls?.length !== 1 ||
	    !/^call_[A-Za-z0-9]{24}$/.test(asst.tool_calls[0].id))
		fail(`named seed ${seed}: assistant ${JSON.stringify(asst)}`);
	if (!tool || tool.tool_call_id !== asst?.tool_calls?.[0]?.id)
		fail(`named seed ${seed}: tool message ${JSON.stringify(tool)}`);
	const done = await runner.finalChatCompletion();
	if (done.choices[0].finish_reason !== "tool_calls")
		fail(`named seed ${seed}: finish ${done.choices[0].finish_reason}`);
}

// 2. required, streamed, three rounds: history with calls and results
part("required streamed");
calls.length = 0;
const streamed = client.beta.chat.completions.runTools({
	model, messages: user, tools, seed: 7, temperature: 1, max_tokens: 400,
	tool_choice: "required", parallel_tool_calls: false, stream: true,
}, { maxChatCompletions: 3 });
await streamed.done();
const rounds = streamed.allChatCompletions().length;
if (rounds !== 3 || calls.length !== 3)
	fail(`required stream: ${rounds} completions, ${calls.length} calls`);
const history = streamed.messages;
if (history.filter((m) => m.role === "tool").length !== calls.length)
	fail("required stream: a tool message per call");

// 3. the history answered with text
part("history");
const plain = await client.chat.completions.create({
	model, messages: history, tools, tool_choice: "none", max_tokens: 8, seed: 3,
});
if (typeof plain.choices[0].message.content !== "string" || plain.choices[0].message.tool_calls)
	fail("tool_choice none after the history: " + JSON.stringify(plain.choices[0]));

// 4. streamed and not: the same calls
part("stream equals");
for (let seed = 11; seed <= 13; seed++) {
	const req = { model, messages: user, tools: tools.map((t) => ({ type: "function",
		function: { name: t.function.name, parameters: t.function.parameters } })),
		tool_choice: "required", seed, temperature: 1, max_tokens: 1500 };
	const one = await client.chat.completions.create(req);
	const s = await client.chat.completions.create({ ...req, stream: true });
	const got = [];
	let finish = null;
	for await (const chunk of s) {
		const d = chunk.choices[0]?.delta;
		for (const tc of d?.tool_calls ?? []) {
			got[tc.index] ??= { name: "", args: "" };
			got[tc.index].name += tc.function?.name ?? "";
			got[tc.index].args += tc.function?.arguments ?? "";
		}
		finish = chunk.choices[0]?.finish_reason ?? finish;
	}
	const want = one.choices[0].message.tool_calls.map((c) =>
		({ name: c.function.name, args: c.function.arguments }));
	if (JSON.stringify(got) !== JSON.stringify(want) || finish !== "tool_calls")
		fail(`seed ${seed}: stream ${JSON.stringify(got)} ${finish} vs ${JSON.stringify(want)}`);
}

console.log(failures ? `${failures} failures` :
	    `openai ${(await import("openai/version")).VERSION}: runTools named x3, required ` +
	    `streamed x3 rounds (${calls.length} calls), history answered, 3 streams equal`);
process.exit(failures ? 1 : 0);
