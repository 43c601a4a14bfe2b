// llamacpp_speed.mjs - llama.cpp's speed on a GGUF file for
// bench_gguf.sh: node-llama-cpp's prebuilt CPU libllama, greedy, the
// given threads for both generation and prompt batches.
//
//   node llamacpp_speed.mjs decode MODEL.gguf THREADS SEQS TOKENS REPS
//   node llamacpp_speed.mjs prefill MODEL.gguf THREADS PROMPT REPS
//
// decode: SEQS context sequences of one context (node-llama-cpp puts
// the sequences that are evaluated at once into one llama_decode batch),
// each an 8-token prompt then TOKENS generated; prints the best of REPS
// runs' generated tokens of all sequences over the wall time (prompts
// included, as dynbatch's tokens_per_s counts them).
// prefill: one PROMPT-token prompt and one generated token; prints the
// best of REPS runs' prompt tokens over the time to that token.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [mode, path, threadsArg, nArg, ...rest] = process.argv.slice(2);
const threads = Number(threadsArg);
const llama = await getLlama({ gpu: false, build: "never",
			       logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: path });

// Generate up to tokens tokens on seq from prompt; how many came.
async function run(seq, prompt, tokens) {
	let n = 0;

	for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
		void t;
		if (++n >= tokens)
			break;
	}
	return n;
}

let best = 0;
if (mode === "decode") {
	const seqs = Number(nArg), tokens = Number(rest[0]), reps = Number(rest[1]);
	// each sequence's own cells: what it needs (llama.cpp's attention
	// spans the cells of the context, not only those in use)
	const ctx = await model.createContext({ contextSize: 16 + tokens,
		sequences: seqs, batchSize: Math.max(512, 8 * seqs), threads });
	const all = Array.from({ length: seqs }, () => ctx.getSequence());

	for (let r = 0; r < reps; r++) {
		await Promise.all(all.map((s) => s.clearHistory()));
		const t0 = performance.now();
		const got = await Promise.all(all.map((s, i) => run(s,
			[1, 400 + i, 500, 600, 700, 800, 900, 1000], tokens)));
		const s = (performance.now() - t0) / 1000;
		best = Math.max(best, got.reduce((a, b) => a + b, 0) / s);
	}
	await ctx.dispose();
} else if (mode === "prefill") {
	const len = Number(nArg), reps = Number(rest[0]);
	const ctx = await model.createContext({ contextSize: len + 16,
		sequences: 1, batchSize: len, threads });
	const seq = ctx.getSequence();
	const prompt = [1];

	for (let i = 1; i < len; i++)
		prompt.push(3 + (i * 7919) % 31000);
	for (let r = 0; r < reps; r++) {
		await seq.clearHistory();
		const t0 = performance.now();
		await run(seq, prompt, 1);
		best = Math.max(best, len / ((performance.now() - t0) / 1000));
	}
	await ctx.dispose();
} else {
	console.error("usage: llamacpp_speed.mjs decode|prefill MODEL ...");
	process.exit(2);
}
console.log(best.toFixed(1));
await model.dispose();
