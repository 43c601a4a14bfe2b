// llamacpp_speed.mjs - llama.cpp's decode speed on a GGUF file for
// bench_gguf.sh: node-llama-cpp's prebuilt CPU libllama, one sequence,
// greedy, its default context settings (what a user of it gets).
//
//   node llamacpp_speed.mjs MODEL.gguf THREADS TOKENS REPS
//
// Prints one line: the best of REPS runs' tokens/s (generated tokens
// over the wall time of prompt and generation).
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [path, threads, tokens, reps] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never",
			       logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: path });
const ctx = await model.createContext({ contextSize: 256, sequences: 1,
					threads: Number(threads) });
const seq = ctx.getSequence();
const prompt = [1, 400, 500, 600, 700, 800, 900, 1000];
let best = 0;

for (let r = 0; r < Number(reps); r++) {
	await seq.clearHistory();
	let n = 0;
	const t0 = performance.now();
	for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
		void t;
		if (++n >= Number(tokens))
			break;
	}
	const s = (performance.now() - t0) / 1000;
	best = Math.max(best, n / s);
}
console.log(best.toFixed(1));
await ctx.dispose();
await model.dispose();
