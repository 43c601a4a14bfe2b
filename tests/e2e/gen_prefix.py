#!/usr/bin/env python3
"""gen_prefix.py - JSON Lines workloads made of shared prefixes, for the
paged KV cache's tests and benchmark (docs/DESIGN.md 11).

Kinds, mixed at random (seeded, so a run can be replayed):
  system  one of --systems system prompts, then a short user suffix
  turns   a multi-turn conversation: each turn's prompt is the previous
          turn's prompt plus new tokens (earlier turns are a prefix)
  choices n > 1 choices of one prompt (seeded sampling when --sampling)
  unique  a prompt shared with nothing

usage: gen_prefix.py --n N --seed S --vocab V [--systems K]
       [--system-len L] [--suffix-len L] [--max-tokens M] [--max-n N]
       [--sampling] [--kinds system,turns,choices,unique] [--ids PREFIX]
       [--fixed] [--n-choices N] [--temperature T]

gen_prefix.py --ideal FILE --block-tokens B [--shards W] prints
"prompt_tokens ideal ideal_W": the prefix hit tokens a cache of B-token
blocks would give FILE's requests at best, each the longest prefix, in
whole blocks and at most its prompt's length - 1, of an earlier
request's prompt; and the same when W shards with caches of their own
share the load, each computing each block once (a block hit h times
loses min(W - 1, h) of its hits).

--fixed: every suffix exactly --suffix-len tokens, every max_tokens exactly
--max-tokens, every unique prompt --system-len + --suffix-len (a benchmark
wants the same work per request); --n-choices N: choices requests ask for
exactly N (else 2..--max-n); --temperature T: every request samples at T
with its own seed (else greedy unless --sampling).
"""
import argparse
import json
import random
import sys


def ideal(path, bt, shards):
    seen = set()
    hits = {}
    total = best = 0
    for line in open(path):
        p = json.loads(line)["prompt"]
        total += len(p)
        k = (len(p) - 1) // bt
        while k and tuple(p[:k * bt]) not in seen:
            k -= 1
        best += k * bt
        for j in range(1, k + 1):
            key = tuple(p[:j * bt])
            hits[key] = hits.get(key, 0) + 1
        for j in range(1, len(p) // bt + 1):
            seen.add(tuple(p[:j * bt]))
    lost = sum(min(shards - 1, h) for h in hits.values()) * bt
    print(total, best, best - lost)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ideal", default=None)
    ap.add_argument("--block-tokens", type=int, default=16)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=500)
    ap.add_argument("--systems", type=int, default=4)
    ap.add_argument("--system-len", type=int, default=100)
    ap.add_argument("--suffix-len", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--max-n", type=int, default=16)
    ap.add_argument("--sampling", action="store_true")
    ap.add_argument("--kinds", default="system,turns,choices,unique")
    ap.add_argument("--ids", default="p")
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--n-choices", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=None)
    a = ap.parse_args()
    if a.ideal:
        ideal(a.ideal, a.block_tokens, a.shards)
        return
    rng = random.Random(a.seed)
    kinds = a.kinds.split(",")

    def toks(n):
        return [rng.randrange(a.vocab) for _ in range(n)]

    def suffix():
        return a.suffix_len if a.fixed else rng.randint(1, a.suffix_len)

    systems = [toks(a.system_len) for _ in range(a.systems)]
    convs = []
    out = sys.stdout
    for i in range(a.n):
        kind = rng.choice(kinds)
        req = {"id": "%s%d" % (a.ids, i)}
        if kind == "system":
            prompt = rng.choice(systems) + toks(suffix())
        elif kind == "turns":
            if convs and rng.random() < 0.7:
                c = rng.randrange(len(convs))
                convs[c] = convs[c] + toks(suffix())
                prompt = convs[c]
            else:
                convs.append(rng.choice(systems) + toks(suffix()))
                prompt = convs[-1]
        elif kind == "choices":
            prompt = rng.choice(systems) + toks(suffix())
            req["n"] = a.n_choices or rng.randint(2, a.max_n)
        else:
            prompt = toks(a.system_len + a.suffix_len if a.fixed else
                          rng.randint(1, a.system_len + a.suffix_len))
        req["prompt"] = prompt
        req["max_tokens"] = a.max_tokens if a.fixed else rng.randint(1, a.max_tokens)
        if a.temperature is not None:
            req["temperature"] = a.temperature
            req["seed"] = rng.randrange(1 << 31)
        elif a.sampling and (kind == "choices" or rng.random() < 0.5):
            req["temperature"] = round(rng.uniform(0.3, 1.5), 3)
            req["seed"] = rng.randrange(1 << 31)
            if rng.random() < 0.5:
                req["top_p"] = round(rng.uniform(0.5, 1.0), 3)
        out.write(json.dumps(req, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
