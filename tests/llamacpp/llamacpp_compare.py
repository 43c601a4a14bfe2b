#!/usr/bin/env python3
"""llamacpp_compare.py - the dynbatch side's helpers of test_llamacpp.sh:

  tokenizer OUT V       a llama2.c tokenizer.bin of V pieces (<unk> <s>
                        </s>, the 256 byte pieces, then "p259".."pV-1"),
                        so make_gguf files carry the vocabulary llama.cpp
                        needs to load them (the prompts are ids anyway)
  requests OUT SEED N   N greedy requests of random prompts (1..48 ids
                        in 3..V-1), 16 tokens each, top-20 logprobs
  join REQ OURS OUT     prompts joined with dynbatch's results
  compare JOINED LL TAG our top-20 logprobs against llama.cpp's
                        log-softmax at every step; prints one figures line;
                        exit 1 when the logits differ by more than the
                        type's bound or a greedy token differs where our
                        top-2 margin is not a near-tie (< 2 x the file's
                        largest logprob difference: no bigger flip is
                        possible when every logit moved by less)
"""
import json
import random
import struct
import sys

V = 512

# max |our logprob - llama.cpp's| / llama.cpp's logit range, per type:
# F32 differs only by summation order; F16 llama.cpp multiplies with
# activations rounded to F16; the block types with activations rounded
# to Q8_0/Q8_K on both sides, but not identically.
BOUND = {"f32": 1e-4, "f16": 2e-3}
BOUND_QUANT = 2e-2


def tokenizer(out, v):
	pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"]
	pieces += [b"<0x%02X>" % i for i in range(256)]
	# a space piece: a GGUF "llama" vocabulary needs U+2581, which
	# make_gguf writes for it
	pieces += [b" "]
	pieces += [b"p%d" % i for i in range(len(pieces), v)]
	with open(out, "wb") as f:
		f.write(struct.pack("<i", max(len(p) for p in pieces)))
		for i, p in enumerate(pieces):
			f.write(struct.pack("<fi", -float(i), len(p)) + p)


def requests(out, seed, n):
	rng = random.Random(seed)
	with open(out, "w") as f:
		for i in range(n):
			p = [rng.randrange(3, V) for _ in range(rng.randrange(1, 49))]
			f.write(json.dumps({"id": "c%d" % i, "prompt": p,
					    "max_tokens": 16, "logprobs": 20,
					    "ignore_eos": True}) + "\n")


def join(req, ours, out):
	res = {}
	for line in open(ours):
		r = json.loads(line)
		res[r["id"]] = r
	with open(out, "w") as f:
		for line in open(req):
			q = json.loads(line)
			r = res[q["id"]]
			f.write(json.dumps({"id": q["id"], "prompt": q["prompt"],
					    "tokens": r["tokens"],
					    "logprobs": r["logprobs"]}) + "\n")


def compare(joined, ll, tag):
	ours = [json.loads(x) for x in open(joined) if x.strip()]
	theirs = {r["id"]: r["steps"] for r in json.load(open(ll))}
	worst = worst_first = 0.0
	steps = 0
	flips = []
	for r in ours:
		st = theirs[r["id"]]
		assert len(st) == len(r["tokens"]), r["id"]
		for k, (lp, s) in enumerate(zip(r["logprobs"], st)):
			d = max(abs(a["logprob"] - s["logprobs"][a["token"]])
				for a in lp["top_logprobs"]) / s["range"]
			worst = max(worst, d)
			if k == 0:
				worst_first = max(worst_first, d)
			top = lp["top_logprobs"]
			margin = top[0]["logprob"] - top[1]["logprob"]
			if s["argmax"] != r["tokens"][k]:
				flips.append((r["id"], k, margin, s["range"]))
			steps += 1
	bound = BOUND.get(tag.split("/")[0], BOUND_QUANT)
	# a flip is a near-tie when our margin is below twice the largest
	# logprob difference seen (in nats: worst is relative to the range)
	bad = [f for f in flips if f[2] >= 2 * worst * f[3]]
	ok = worst <= bound and not bad
	print("  %-4s %-16s prompts %d steps %d: max |dlogit|/range first %.2e all %.2e (bound %.0e); greedy differs at %d (near-ties), %d (not) %s"
	      % ("ok" if ok else "FAIL", tag, len(ours), steps, worst_first,
		 worst, bound, len(flips) - len(bad), len(bad),
		 "" if not bad else "first: %s" % (bad[0],)))
	return 0 if ok else 1


if __name__ == "__main__":
	a = sys.argv[1:]
	if a[0] == "tokenizer":
		tokenizer(a[1], int(a[2]))
	elif a[0] == "requests":
		requests(a[1], int(a[2]), int(a[3]))
	elif a[0] == "join":
		join(a[1], a[2], a[3])
	elif a[0] == "compare":
		sys.exit(compare(a[1], a[2], a[3]))
