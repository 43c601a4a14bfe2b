#!/usr/bin/env python3
# openai_logprobs.py - e2e_openai.sh's check of the logprobs shapes and of
# the stream chunks' usage, against a running `dynbatch serve` with a
# tokenizer: usage BASE_URL KEY.  The references are independent of the
# server's code: a token's text is /detokenize of the tokens up to it
# minus those before it (where both are whole characters: /detokenize
# writes U+FFFD for a cut one), the tokens' bytes put together are the
# answer's text, text_offset is recomputed by summing their lengths, and
# the streamed logprobs must be the non-streamed ones of the same seed.
# Then echo: the answer with echo is the prompt's text and the answer
# without it (same seed), plain and streamed, for a string prompt and its
# /tokenize ids; echo with logprobs is a 400 naming echo.  Prints one line; exit 1 on
# the first difference.
import json
import sys
import urllib.error
import urllib.request

BASE, KEY = sys.argv[1], sys.argv[2]


def post(path, body, stream=False):
    req = urllib.request.Request(BASE + path, json.dumps(body).encode(),
                                 {"Authorization": "Bearer " + KEY,
                                  "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as r:
        raw = r.read()
    if not stream:
        return json.loads(raw)
    events = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[6:]))
    return events


def fail(msg):
    print("openai_logprobs: " + msg)
    sys.exit(1)


def detok(ids):
    return post("/detokenize", {"tokens": ids})["content"].encode()


def bytes_of(name):
    # a name's bytes: the inverse of name_of
    if name.startswith("bytes:"):
        return bytes(int(h, 16) for h in name[6:].split("\\x")[1:])
    return name.encode()


def name_of(piece):
    # OpenAI's name for a token: its text, or bytes:\xNN.. when it is none
    try:
        s = piece.decode("utf-8")
        if "\0" not in s:
            return s
    except UnicodeDecodeError:
        pass
    return "bytes:" + "".join("\\x%02x" % b for b in piece)


checked = 0
for seed in (1, 2, 3):
    body = {"prompt": "The quick brown fox", "max_tokens": 16, "seed": seed,
            "temperature": 1.0, "logprobs": 2, "ignore_eos": True}
    a = post("/v1/completions", body)["choices"][0]
    ids, lp = a["token_ids"], a["logprobs"]
    if len(lp["tokens"]) != len(ids) or len(lp["text_offset"]) != len(ids):
        fail("seed %d: %d tokens, logprobs lists %d and %d" %
             (seed, len(ids), len(lp["tokens"]), len(lp["text_offset"])))
    off = 0
    prompt = post("/tokenize", {"content": body["prompt"],
                                "add_special": True})["tokens"]
    text = b""
    for i, t in enumerate(ids):
        before, upto = detok(prompt + ids[:i]), detok(prompt + ids[:i + 1])
        piece = bytes_of(lp["tokens"][i])
        whole = "\ufffd".encode() not in before + upto
        if whole and piece != upto[len(before):]:
            fail("seed %d token %d (id %d): %r, /detokenize says %r" %
                 (seed, i, t, lp["tokens"][i], upto[len(before):]))
        if lp["tokens"][i] != name_of(piece):
            fail("seed %d token %d (id %d): %r is not written as %r" %
                 (seed, i, t, lp["tokens"][i], name_of(piece)))
        if lp["text_offset"][i] != off:
            fail("seed %d token %d: text_offset %d, want %d" %
                 (seed, i, lp["text_offset"][i], off))
        if len(lp["top_logprobs"][i]) < 1:
            fail("seed %d token %d: no top_logprobs" % (seed, i))
        off += len(piece)
        text += piece
        checked += 1
    if text.decode("utf-8", "replace") != a["text"]:
        fail("seed %d: the tokens' bytes %r are not the text %r" %
             (seed, text, a["text"]))
    # the stream: the same tokens and offsets, "usage": null but last
    ev = post("/v1/completions", dict(body, stream=True,
                                      stream_options={"include_usage": True}),
              stream=True)
    s_tok, s_off = [], []
    for e in ev[:-1]:
        if "usage" not in e or e["usage"] is not None:
            fail("seed %d: a chunk before the last has usage %r" %
                 (seed, e.get("usage", "(none)")))
        if e["choices"] and e["choices"][0]["logprobs"]:
            s_tok += e["choices"][0]["logprobs"]["tokens"]
            s_off += e["choices"][0]["logprobs"]["text_offset"]
    if ev[-1]["choices"] != [] or not ev[-1]["usage"]:
        fail("seed %d: the last chunk is %r" % (seed, ev[-1]))
    if s_tok != lp["tokens"] or s_off != lp["text_offset"]:
        fail("seed %d: streamed logprobs %r %r != %r %r" %
             (seed, s_tok, s_off, lp["tokens"], lp["text_offset"]))
    # chat: content[] with bytes, whose concatenation is the content
    c = post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12,
        "seed": seed, "logprobs": True, "top_logprobs": 2,
        "ignore_eos": True})["choices"][0]
    content = c["logprobs"]["content"]
    got = b"".join(bytes(e["bytes"]) for e in content)
    if got.decode("utf-8", "replace") != c["message"]["content"]:
        fail("seed %d: chat bytes %r != content %r" %
             (seed, got, c["message"]["content"]))
    for e in content:
        if e["token"] != name_of(bytes(e["bytes"])) or \
                len(e["top_logprobs"]) != 2 or \
                any(t["token"] != name_of(bytes(t["bytes"]))
                    for t in e["top_logprobs"]):
            fail("seed %d: chat entry %r" % (seed, e))
echoed = 0
for seed in (4, 5):
    prompt = "Once upon a time"
    ids = post("/tokenize", {"content": prompt, "add_special": True})["tokens"]
    base = {"max_tokens": 8, "seed": seed, "temperature": 1.0, "n": 2}
    plain = post("/v1/completions", dict(base, prompt=prompt))["choices"]
    for p in (prompt, ids):
        e = post("/v1/completions", dict(base, prompt=p, echo=True))["choices"]
        ev = post("/v1/completions", dict(base, prompt=p, echo=True,
                                           stream=True), stream=True)
        streamed = {}
        for x in ev:
            for ch in x["choices"]:
                streamed[ch["index"]] = streamed.get(ch["index"], "") + ch["text"]
        for i, ch in enumerate(plain):
            want = prompt + ch["text"]
            if e[i]["text"] != want or streamed.get(i) != want:
                fail("echo seed %d choice %d: %r / streamed %r, want %r" %
                     (seed, i, e[i]["text"], streamed.get(i), want))
            echoed += 1
try:
    post("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1})
    fail("echo with logprobs answered 200")
except urllib.error.HTTPError as err:
    body = json.loads(err.read())
    if err.code != 400 or body["error"]["param"] != "echo":
        fail("echo with logprobs: %d %r" % (err.code, body))
print("echo: %d choices (string and ids, plain and streamed) are prompt + "
      "answer; echo + logprobs 400" % echoed)
print("logprobs: %d tokens named as /detokenize decodes them, offsets, "
      "streams (usage null) and chat bytes agree" % checked)
