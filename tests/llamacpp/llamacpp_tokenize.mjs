// llamacpp_tokenize.mjs - llama.cpp's tokenizer on the texts of a
// tok_compare cases file (tests/tokenizers/export_vocab.js's format):
// loads the GGUF file's vocabulary only (node-llama-cpp, the prebuilt
// libllama) and writes the same cases with llama.cpp's ids, special
// tokens parsed (as the cases ask) and no BOS/EOS added, for
// bin/tok_compare to check lib/text's tokenizer against.
//
//   node llamacpp_tokenize.mjs MODEL.gguf IN.cases > OUT.cases
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [model_path, cases_path] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never",
			       logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: model_path, vocabOnly: true });
const lines = fs.readFileSync(cases_path, "utf8").split("\n");
const out = [];
for (let i = 0; i + 1 < lines.length; i += 2) {
	const [tag, hex, special] = lines[i].split(" ");
	if (tag !== "case")
		continue;
	const text = hex === "-" ? "" : Buffer.from(hex, "hex").toString("utf8");
	const ids = model.tokenize(text, special === "1");
	out.push(lines[i], Array.from(ids).join(" "));
}
process.stdout.write(out.join("\n") + "\n");
await model.dispose();
