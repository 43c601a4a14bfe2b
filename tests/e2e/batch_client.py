#!/usr/bin/env python3
# batch_client.py - e2e_batch.sh's checks of batch prompts and best_of
# against a running `dynbatch serve` with a tokenizer: usage BASE_URL SEED.
#
# The references are the server's answers to simpler requests, checked
# by rules written here from OpenAI's definitions:
# - a batch ("prompt": a list of strings or of token lists) answers, at
#   index p * n + j, what prompt p alone answers at index j (same seed);
#   usage sums the prompts' usages; a stream gives the same tokens under
#   the same indexes; echo puts each prompt's own text first;
# - one bad prompt is a 400 naming its index (param "prompt");
# - best_of B with n: the n of the answer are, in order, the choices of
#   the same request with n = B and logprobs, ranked here by the sum of
#   their token_logprobs (as float32 values summed in double in token
#   order; the higher first, the lower index on a tie); completion_tokens
#   counts all B; no logprobs unless asked.
# Prints one line per check group; exit 1 on the first difference.
import json
import random
import struct
import sys
import urllib.error
import urllib.request

BASE, SEED = sys.argv[1], int(sys.argv[2])
rng = random.Random(SEED)
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog",
         "and", "then", "some", "more", "text", "of", "its", "own"]


def post(body, stream=False):
    req = urllib.request.Request(BASE + "/v1/completions",
                                 json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    if not stream:
        return code, json.loads(raw)
    events = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[6:]))
    return code, events


def ok(body, stream=False):
    code, a = post(body, stream)
    if code != 200:
        fail("%s: %d %s" % (json.dumps(body), code, a))
    return a


def fail(msg):
    print("batch_client: " + msg)
    sys.exit(1)


def text_prompt():
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))


def id_prompt():
    return [rng.randrange(1, 512) for _ in range(rng.randint(1, 8))]


def f32(x):
    # the float the server summed: JSON's %.9g reads back to it exactly
    return struct.unpack("f", struct.pack("f", x))[0]


def cumulative(choice):
    s = 0.0
    for lp in choice["logprobs"]["token_logprobs"]:
        s += f32(lp)
    return s


# --- a batch is its prompts alone, plain and streamed ----------------------
checked = 0
for rnd in range(12):
    k, n = rng.randint(1, 4), rng.randint(1, 3)
    texts = rnd % 2 == 0
    prompts = [text_prompt() if texts else id_prompt() for _ in range(k)]
    common = {"max_tokens": rng.randint(1, 12), "n": n, "seed": SEED + rnd,
              "temperature": 1.0, "ignore_eos": True}
    echo = rnd % 3 == 0
    if echo:
        common["echo"] = True
    a = ok(dict(common, prompt=prompts))
    if [c["index"] for c in a["choices"]] != list(range(k * n)):
        fail("round %d: indexes %s" % (rnd, [c["index"] for c in a["choices"]]))
    pt = ct = 0
    for p, prompt in enumerate(prompts):
        alone = ok(dict(common, prompt=prompt))
        pt += alone["usage"]["prompt_tokens"]
        ct += alone["usage"]["completion_tokens"]
        for j in range(n):
            got, want = a["choices"][p * n + j], alone["choices"][j]
            if (got["text"], got["token_ids"]) != (want["text"], want["token_ids"]):
                fail("round %d: prompt %d choice %d: %r, alone %r" %
                     (rnd, p, j, got["text"], want["text"]))
            if echo and texts and not got["text"].startswith(prompt):
                fail("round %d: prompt %d: echo %r lacks its prompt %r" %
                     (rnd, p, got["text"], prompt))
            checked += 1
    if (a["usage"]["prompt_tokens"], a["usage"]["completion_tokens"]) != (pt, ct):
        fail("round %d: usage %s, the prompts alone sum to %d, %d" %
             (rnd, a["usage"], pt, ct))
    ev = ok(dict(common, prompt=prompts, stream=True,
                 stream_options={"include_usage": True}), stream=True)
    toks = {}
    for e in ev:
        for c in e["choices"]:
            if not 0 <= c["index"] < k * n:
                fail("round %d: streamed index %d" % (rnd, c["index"]))
            toks.setdefault(c["index"], []).extend(c["token_ids"])
    for c in a["choices"]:
        if toks.get(c["index"], []) != c["token_ids"]:
            fail("round %d: streamed choice %d: %s, plain %s" %
                 (rnd, c["index"], toks.get(c["index"]), c["token_ids"]))
    if ev[-1]["choices"] or ev[-1]["usage"] != a["usage"]:
        fail("round %d: the stream's usage chunk %s, plain %s" %
             (rnd, ev[-1], a["usage"]))
print("batch prompts: %d choices as their prompts alone, plain and streamed"
      % checked)

# --- one bad prompt: 400 naming it, nothing run ----------------------------
for rnd in range(6):
    k = rng.randint(2, 5)
    prompts = [id_prompt() for _ in range(k)]
    bad = rng.randrange(k)
    prompts[bad] = [] if rnd % 2 else [1, 100000]
    code, a = post({"prompt": prompts, "max_tokens": 4})
    e = a.get("error", {})
    if code != 400 or e.get("param") != "prompt" or \
            ("prompt %d of the batch" % bad) not in e.get("message", ""):
        fail("bad prompt %d of %d: %d %s" % (bad, k, code, a))
code, a = post({"prompt": [[1], "a"], "max_tokens": 4})
if code != 400 or a["error"]["param"] != "prompt":
    fail("a mixed batch: %d %s" % (code, a))
code, a = post({"prompt": [[1]] * 33, "n": 2, "max_tokens": 1})
if code != 400 or a["error"]["param"] != "prompt":
    fail("66 choices: %d %s" % (code, a))
print("batch prompts: a bad prompt is a 400 naming its index")

# --- best_of against the ranked n = best_of answer --------------------------
ranked = 0
for rnd in range(10):
    best_of = rng.randint(2, 8)
    n = rng.randint(1, best_of - 1)
    k = 1 if rnd < 6 else 2
    prompts = [text_prompt() for _ in range(k)]
    common = {"max_tokens": rng.randint(1, 10), "seed": 1000 + SEED + rnd,
              "temperature": rng.choice([0.7, 1.0, 1.5]), "ignore_eos": True}
    asked = rnd % 2 == 1
    body = dict(common, prompt=prompts if k > 1 else prompts[0], n=n,
                best_of=best_of)
    if asked:
        body["logprobs"] = 0
    a = ok(body)
    ref = ok(dict(common, prompt=prompts if k > 1 else prompts[0], n=best_of,
                  logprobs=0))
    if a["usage"] != ref["usage"]:
        fail("best_of round %d: usage %s, n = best_of's %s" %
             (rnd, a["usage"], ref["usage"]))
    if [c["index"] for c in a["choices"]] != list(range(k * n)):
        fail("best_of round %d: indexes" % rnd)
    for p in range(k):
        cands = ref["choices"][p * best_of:(p + 1) * best_of]
        order = sorted(range(best_of), key=lambda i: (-cumulative(cands[i]), i))
        for r in range(n):
            got, want = a["choices"][p * n + r], cands[order[r]]
            if got["token_ids"] != want["token_ids"] or got["text"] != want["text"]:
                fail("best_of round %d prompt %d rank %d: %r, want candidate "
                     "%d %r (sums %s)" % (rnd, p, r, got["text"], order[r],
                                          want["text"],
                                          [cumulative(c) for c in cands]))
            if asked and got["logprobs"] != want["logprobs"]:
                fail("best_of round %d: logprobs differ" % rnd)
            if not asked and got["logprobs"] is not None:
                fail("best_of round %d: logprobs not asked for, got some" % rnd)
            ranked += 1
code, a = post({"prompt": "x", "best_of": 2, "stream": True})
if code != 400 or a["error"]["param"] != "best_of":
    fail("best_of with stream: %d %s" % (code, a))
code, a = post({"prompt": "x", "best_of": 1, "n": 2})
if code != 400 or a["error"]["param"] != "best_of":
    fail("best_of < n: %d %s" % (code, a))
print("best_of: %d choices as ranked from n = best_of" % ranked)
