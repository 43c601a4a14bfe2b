#!/usr/bin/env python3
"""ref_llama.py - a second, independent llama reference in pure Python.

It exists to check the C reference (tools/refdecode/ref_llama.c, used by
`refdecode --model llama:PATH`) on tiny checkpoints, so it is written the
other way round: token by token with a KV cache (as an engine decodes),
Python floats (double) throughout, the checkpoint read with struct.

  ref_llama.py make --out FILE --dim D --hidden H --layers L --heads NH
                    --kv-heads NKV --vocab V --seq-len S [--separate]
                    [--format legacy|ak42] [--seed N]
      write a checkpoint with random weights (llama2.c legacy or export.py
      version 1 "ak42" format)
  ref_llama.py logits --ckpt FILE --tokens T1,T2,...
      print the logits after every position, one line each (the format of
      `refdecode --print-logits`)
  ref_llama.py decode --ckpt FILE --input REQUESTS.jsonl [--flip-near EPS]
      greedy-decode each request (prompt, max_tokens, stop_token(s),
      stop_token_ids, stop_sequence(s), include_stop) and print result
      lines like dynbatch's; --flip-near EPS takes the second-best token
      whenever it is within EPS of the best (to play an engine whose
      rounding breaks near-ties the other way)
  ref_llama.py workload --ckpt FILE --n N [--seed S] [--max-tokens M]
      N requests with random prompts (a few empty), max_tokens up to M and,
      for about half of them, stop tokens or sequences taken from their own
      greedy output so that they fire (some with include_stop)
  ref_llama.py compare FILE_A FILE_B [--tol T]
      compare two logits dumps; exit 1 when they differ by more than T
      (relative to the largest logit, default 1e-9)

Only the standard library: no numpy on the build machines.
"""
import argparse
import json
import math
import random
import struct
import sys

MAGIC = 0x616B3432


def write_checkpoint(a):
    rnd = random.Random(a.seed)
    dim, hid, L, kv_dim = a.dim, a.hidden, a.layers, a.dim // a.heads * a.kv_heads

    def mat(n, scale):
        return [rnd.gauss(0.0, scale) for _ in range(n)]

    def norm(n):
        return [1.0 + rnd.gauss(0.0, 0.2) for _ in range(n)]

    t = {
        "emb": mat(a.vocab * dim, 1.0),
        "rms_att": norm(L * dim),
        "wq": mat(L * dim * dim, dim ** -0.5),
        "wk": mat(L * kv_dim * dim, dim ** -0.5),
        "wv": mat(L * kv_dim * dim, dim ** -0.5),
        "wo": mat(L * dim * dim, dim ** -0.5),
        "rms_ffn": norm(L * dim),
        "w1": mat(L * hid * dim, dim ** -0.5),
        "w2": mat(L * dim * hid, hid ** -0.5),
        "w3": mat(L * hid * dim, dim ** -0.5),
        "rms_final": norm(dim),
        "wcls": mat(a.vocab * dim, dim ** -0.5) if a.separate else None,
    }
    hs = dim // a.heads
    with open(a.out, "wb") as f:
        def put(xs):
            f.write(struct.pack("<%df" % len(xs), *xs))
        vocab_field = -a.vocab if a.separate else a.vocab
        if a.format == "legacy":
            f.write(struct.pack("<7i", dim, hid, L, a.heads, a.kv_heads,
                                vocab_field, a.seq_len))
            for k in ("emb", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn",
                      "w1", "w2", "w3", "rms_final"):
                put(t[k])
            # freq_cis_real, freq_cis_imag: what llama2.c stored (unused).
            for fn in (math.cos, math.sin):
                put([fn(p * 10000.0 ** (-2.0 * i / hs))
                     for p in range(a.seq_len) for i in range(hs // 2)])
        else:
            f.write(struct.pack("<Ii7iB", MAGIC, 1, dim, hid, L, a.heads,
                                a.kv_heads, a.vocab, a.seq_len,
                                0 if a.separate else 1))
            f.write(b"\0" * (256 - f.tell()))
            for k in ("rms_att", "rms_ffn", "rms_final", "emb", "wq", "wk",
                      "wv", "wo", "w1", "w2", "w3"):
                put(t[k])
        if a.separate:
            put(t["wcls"])


class Model:
    def __init__(self, path):
        with open(path, "rb") as f:
            data = f.read()
        (magic,) = struct.unpack_from("<I", data, 0)
        if magic == MAGIC:
            (version,) = struct.unpack_from("<i", data, 4)
            assert version == 1, "ak42 version %d" % version
            h = struct.unpack_from("<7i", data, 8)
            shared = data[36] != 0
            off = 256
        else:
            h = struct.unpack_from("<7i", data, 0)
            shared = h[5] > 0
            off = 28
        (self.dim, self.hid, self.L, self.nh, self.nkv, vocab,
         self.seq_len) = h
        self.vocab = abs(vocab)
        self.hs = self.dim // self.nh
        self.kv_dim = self.hs * self.nkv
        fl = struct.unpack_from("<%df" % ((len(data) - off) // 4), data, off)
        pos = [0]

        def take(n, rows=None):
            v = fl[pos[0]:pos[0] + n]
            pos[0] += n
            if rows is None:
                return list(v)
            cols = n // rows
            return [list(v[r * cols:(r + 1) * cols]) for r in range(rows)]

        d, hd, L, kv, V = self.dim, self.hid, self.L, self.kv_dim, self.vocab

        def per_layer(rows, cols):
            return [take(rows * cols, rows) for _ in range(L)]

        def vecs(n):
            return [take(n) for _ in range(L)]

        if magic == MAGIC:
            self.rms_att, self.rms_ffn, self.rms_final = vecs(d), vecs(d), take(d)
            self.emb = take(V * d, V)
            self.wq, self.wk = per_layer(d, d), per_layer(kv, d)
            self.wv, self.wo = per_layer(kv, d), per_layer(d, d)
            self.w1, self.w2 = per_layer(hd, d), per_layer(d, hd)
            self.w3 = per_layer(hd, d)
        else:
            self.emb = take(V * d, V)
            self.rms_att = vecs(d)
            self.wq, self.wk = per_layer(d, d), per_layer(kv, d)
            self.wv, self.wo = per_layer(kv, d), per_layer(d, d)
            self.rms_ffn = vecs(d)
            self.w1, self.w2 = per_layer(hd, d), per_layer(d, hd)
            self.w3 = per_layer(hd, d)
            self.rms_final = take(d)
            take(self.seq_len * self.hs)  # freq_cis real + imag
        self.wcls = self.emb if shared else take(V * d, V)
        assert pos[0] == len(fl), "file size does not fit the header"

    def new_cache(self):
        return [([], []) for _ in range(self.L)]

    def step(self, cache, token, pos):
        """Logits after `token` at `pos`, given the cache of 0..pos-1."""
        def rms(x, w):
            s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + 1e-5)
            return [wi * v * s for wi, v in zip(w, x)]

        def mv(m, x):
            return [sum(a * b for a, b in zip(row, x)) for row in m]

        def rotate(v):
            out = list(v)
            for h in range(0, len(v), self.hs):
                for j in range(0, self.hs, 2):
                    ang = pos / (10000.0 ** (j / self.hs))
                    c, s = math.cos(ang), math.sin(ang)
                    a, b = v[h + j], v[h + j + 1]
                    out[h + j], out[h + j + 1] = a * c - b * s, a * s + b * c
            return out

        x = list(self.emb[token])
        for l in range(self.L):
            xb = rms(x, self.rms_att[l])
            q = rotate(mv(self.wq[l], xb))
            k = rotate(mv(self.wk[l], xb))
            v = mv(self.wv[l], xb)
            keys, vals = cache[l]
            keys.append(k)
            vals.append(v)
            att = []
            for h in range(self.nh):
                o = (h // (self.nh // self.nkv)) * self.hs
                qh = q[h * self.hs:(h + 1) * self.hs]
                sc = [sum(a * b for a, b in zip(qh, kk[o:o + self.hs]))
                      / math.sqrt(self.hs) for kk in keys]
                mx = max(sc)
                e = [math.exp(s - mx) for s in sc]
                tot = sum(e)
                att += [sum(e[t] / tot * vals[t][o + i] for t in range(len(e)))
                        for i in range(self.hs)]
            x = [a + b for a, b in zip(x, mv(self.wo[l], att))]
            xb = rms(x, self.rms_ffn[l])
            g = [a / (1.0 + math.exp(-a)) * b
                 for a, b in zip(mv(self.w1[l], xb), mv(self.w3[l], xb))]
            x = [a + b for a, b in zip(x, mv(self.w2[l], g))]
        return mv(self.wcls, rms(x, self.rms_final))


def stop_list(req):
    seqs = []
    for key, nested in (("stop_token", False), ("stop_token_ids", False),
                        ("stop_sequence", True), ("stop_sequences", True)):
        v = req.get(key)
        if v is None:
            continue
        if key == "stop_token":
            seqs.append([v])
        elif key == "stop_sequence":
            seqs.append(list(v))
        elif nested:
            seqs += [list(s) for s in v]
        else:
            seqs += [[t] for t in v]
    return seqs


def decode(a):
    m = Model(a.ckpt)
    with open(a.input) as f:
        for line_no, line in enumerate(f, 1):
            req = json.loads(line)
            prompt, max_tokens = req["prompt"], req.get("max_tokens", 16)
            out = {"id": req.get("id"), "line": line_no}
            if not prompt and max_tokens:
                out.update(tokens=[], finish_reason="error",
                           error="empty prompt")
                print(json.dumps(out))
                continue
            stops, gen, stop = stop_list(req), [], 0
            cache, logits = m.new_cache(), None
            for p, t in enumerate(prompt):
                logits = m.step(cache, t, p)
            while len(gen) < max_tokens:
                best = max(range(m.vocab), key=lambda i: (logits[i], -i))
                if a.flip_near:
                    second = max((i for i in range(m.vocab) if i != best),
                                 key=lambda i: (logits[i], -i))
                    if logits[best] - logits[second] < a.flip_near:
                        best = second
                gen.append(best)
                stop = max([len(s) for s in stops
                            if len(s) <= len(gen) and gen[-len(s):] == s] or [0])
                if stop or len(gen) == max_tokens:
                    break
                logits = m.step(cache, best, len(prompt) + len(gen) - 1)
            keep = gen if not stop or req.get("include_stop") else gen[:len(gen) - stop]
            out.update(tokens=keep, finish_reason="stop" if stop else "length",
                       usage={"prompt_tokens": len(prompt),
                              "completion_tokens": len(gen)})
            print(json.dumps(out))


def greedy(m, prompt, n):
    """The first n greedy tokens after prompt (no stops)."""
    cache, gen, logits = m.new_cache(), [], None
    for p, t in enumerate(prompt):
        logits = m.step(cache, t, p)
    while len(gen) < n:
        gen.append(max(range(m.vocab), key=lambda i: (logits[i], -i)))
        if len(gen) < n:
            logits = m.step(cache, gen[-1], len(prompt) + len(gen) - 1)
    return gen


def workload(a):
    m = Model(a.ckpt)
    rnd = random.Random(a.seed)
    for i in range(a.n):
        n_prompt = 0 if rnd.random() < 0.05 else rnd.randint(1, 10)
        prompt = [rnd.randrange(m.vocab) for _ in range(n_prompt)]
        max_tokens = rnd.choice([0, 1, rnd.randint(1, a.max_tokens),
                                 a.max_tokens])
        req = {"id": "r%d" % i, "prompt": prompt, "max_tokens": max_tokens}
        if n_prompt and max_tokens > 1 and rnd.random() < 0.5:
            gen = greedy(m, prompt, max_tokens)
            at = rnd.randrange(len(gen))
            length = rnd.randint(1, min(4, len(gen) - at))
            seq = gen[at:at + length]
            kind = rnd.random()
            if length == 1 and kind < 0.5:
                req["stop_token_ids"] = [seq[0], rnd.randrange(m.vocab)]
            else:
                # Two of the same length: a hidden stop has candidates.
                other = [rnd.randrange(m.vocab) for _ in range(length)]
                req["stop_sequences"] = [other, seq] if kind < 0.8 else [seq]
            if rnd.random() < 0.3:
                req["include_stop"] = True
        print(json.dumps(req))


def logits(a):
    m = Model(a.ckpt)
    cache = m.new_cache()
    for p, t in enumerate(int(x) for x in a.tokens.split(",")):
        print(" ".join(repr(v) for v in m.step(cache, t, p)))


def compare(a):
    def load(path):
        with open(path) as f:
            return [[float(v) for v in line.split()] for line in f]
    x, y = load(a.a), load(a.b)
    if len(x) != len(y) or any(len(r) != len(s) for r, s in zip(x, y)) or not x:
        print("compare: shapes differ")
        sys.exit(1)
    scale = max(abs(v) for r in x for v in r) or 1.0
    worst = max(abs(u - v) for r, s in zip(x, y) for u, v in zip(r, s))
    print("compare: %d positions x %d logits, max |diff| %.3g, relative %.3g"
          % (len(x), len(x[0]), worst, worst / scale))
    sys.exit(0 if worst / scale <= a.tol else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("--out", required=True)
    for k in ("dim", "hidden", "layers", "heads", "kv-heads", "vocab", "seq-len"):
        mk.add_argument("--" + k, type=int, required=True)
    mk.add_argument("--separate", action="store_true")
    mk.add_argument("--format", choices=("legacy", "ak42"), default="legacy")
    mk.add_argument("--seed", type=int, default=1)
    lg = sub.add_parser("logits")
    lg.add_argument("--ckpt", required=True)
    lg.add_argument("--tokens", required=True)
    dc = sub.add_parser("decode")
    dc.add_argument("--ckpt", required=True)
    dc.add_argument("--input", required=True)
    dc.add_argument("--flip-near", type=float, default=0.0)
    wl = sub.add_parser("workload")
    wl.add_argument("--ckpt", required=True)
    wl.add_argument("--n", type=int, required=True)
    wl.add_argument("--seed", type=int, default=1)
    wl.add_argument("--max-tokens", type=int, default=30)
    cp = sub.add_parser("compare")
    cp.add_argument("a")
    cp.add_argument("b")
    cp.add_argument("--tol", type=float, default=1e-9)
    a = ap.parse_args()
    {"make": write_checkpoint, "logits": logits, "decode": decode,
     "workload": workload, "compare": compare}[a.cmd](a)


if __name__ == "__main__":
    main()
