// llamacpp_logits.mjs - llama.cpp's side of the comparison (issue 25):
// load a GGUF file with node-llama-cpp (the prebuilt libllama, CPU),
// and for each request of a JSONL file feed its prompt and then OUR
// continuation (teacher forcing), recording at every step llama.cpp's
// log-softmax over the whole vocabulary, its argmax and top-2 margin.
// Feeding our tokens, not llama.cpp's own, keeps every step comparable
// even past a near-tie where the two greedy paths would part.
//
//   node llamacpp_logits.mjs MODEL.gguf OURS.jsonl THREADS > OUT.json
//
// OURS.jsonl: dynbatch's results ({"id","tokens":[...]}) joined with
// the prompts: {"id","prompt":[...],"tokens":[...]} a line.
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [model_path, ours_path, threads] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never",
			       logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: model_path });
// an F32 KV cache and no flash attention: llama.cpp's default F16
// cache would round every key and value, which dynbatch does not
const ctx = await model.createContext({ contextSize: 512, sequences: 1,
					threads: Number(threads) || 1,
					flashAttention: false,
					experimentalKvCacheKeyType: "F32",
					experimentalKvCacheValueType: "F32" });
const seq = ctx.getSequence();
const out = [];

// One step's logits Map as a dense log-softmax array, its argmax and
// the top-2 logit margin.
function step_of(logits) {
	let max = -Infinity, arg = -1, second = -Infinity, min = Infinity, n = 0;
	for (const [t, v] of logits) {
		if (t + 1 > n) n = t + 1;
		if (v > max) { second = max; max = v; arg = t; }
		else if (v > second) second = v;
		if (v < min) min = v;
	}
	let sum = 0;
	for (const v of logits.values()) sum += Math.exp(v - max);
	const lse = max + Math.log(sum);
	const lp = new Array(n).fill(null);
	for (const [t, v] of logits) lp[t] = v - lse;
	return { argmax: arg, margin: max - second, range: max - min, logprobs: lp };
}

for (const line of fs.readFileSync(ours_path, "utf8").split("\n")) {
	if (!line.trim()) continue;
	const r = JSON.parse(line);
	await seq.clearHistory();	/* each prompt from position 0 */
	const toks = r.prompt.concat(r.tokens);
	// logits after the prompt's last token and after each of ours but
	// the last: one step per token we generated
	const items = toks.map((t, i) =>
		i >= r.prompt.length - 1 && i < toks.length - 1 ?
			[t, { generateNext: { logits: true } }] : t);
	const res = await seq.controlledEvaluate(items);
	const steps = [];
	for (let i = r.prompt.length - 1; i < toks.length - 1; i++)
		steps.push(step_of(res[i].next.logits));
	out.push({ id: r.id, steps });
}
process.stdout.write(JSON.stringify(out));
await ctx.dispose();
await model.dispose();
