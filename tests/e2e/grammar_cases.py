#!/usr/bin/env python3
"""grammar_cases.py - random constrained requests and their independent check.

  grammar_cases.py gen SEED N > requests.jsonl
      N requests, each with a random GBNF grammar ("grammar"), a random
      JSON schema (response_format json_schema) or JSON mode (json_object),
      random sampling fields; each line also carries "_check", what its
      output must be (a Python regex written from the same random tree as
      the GBNF, or the schema), which the caller strips before sending.
  grammar_cases.py strip < requests.jsonl > in.jsonl
  grammar_cases.py check requests.jsonl results.jsonl [ERROR]
      Every result that finished with "stop" must be a sentence of its
      grammar: re.fullmatch for a GBNF, json.loads plus the validator
      below for a schema; "length" is fine, and so is an error whose
      message holds ERROR (when given).  Prints a summary; exit 1 on the
      first bad one.

The regex and the validator are the reference: neither shares code with
lib/grammar, and each is written from the meaning of GBNF and of JSON
schema, not from the engine's compilation.
"""
import json
import random
import re
import sys

# Characters the random grammars use: printable ASCII the tokenizer's
# corpus holds, as GBNF literals and as regex literals.
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789{}[]:, \"-"
CLASSES = [("[a-z]", "[a-z]"), ("[0-9]", "[0-9]"), ("[a-f0-9]", "[a-f0-9]"),
           ("[^a-z0-9]", "[^a-z0-9]"), ("[xyz]", "[xyz]")]


def gbnf_literal(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def tree(r, depth):
    """A random expression: (gbnf, regex, can it be empty).  Nothing that
    can be empty is repeated with * or +: GBNF, like llama.cpp, refuses
    that as left recursion."""
    k = r.random()
    if depth <= 0 or k < 0.3:
        if r.random() < 0.5:
            s = "".join(r.choice(ALPHABET) for _ in range(r.randint(1, 3)))
            return gbnf_literal(s), re.escape(s), False
        return r.choice(CLASSES) + (False,)
    if k < 0.55:
        parts = [tree(r, depth - 1) for _ in range(r.randint(2, 3))]
        return (" ".join(p[0] for p in parts),
                "".join("(?:%s)" % p[1] for p in parts),
                all(p[2] for p in parts))
    if k < 0.75:
        parts = [tree(r, depth - 1) for _ in range(r.randint(2, 3))]
        return ("(" + " | ".join(p[0] for p in parts) + ")",
                "(?:" + "|".join(p[1] for p in parts) + ")",
                any(p[2] for p in parts))
    g, x, empty = tree(r, depth - 1)
    op = r.choice(["?", "*", "+", "{m,n}", "{m}"])
    if empty and op in ("*", "+"):
        op = "?"
    if op in ("?", "*", "+"):
        return "(" + g + ")" + op, "(?:" + x + ")" + op, op != "+" or empty
    m = r.randint(0, 2)
    n = m + r.randint(0, 2)
    if op == "{m}":
        return "(" + g + "){%d}" % m, "(?:" + x + "){%d}" % m, m == 0 or empty
    return ("(" + g + "){%d,%d}" % (m, n), "(?:" + x + "){%d,%d}" % (m, n),
            m == 0 or empty)


def random_grammar(r):
    """GBNF with a helper rule or two, and the regex of its root."""
    rules, regexes = [], {}
    for i in range(r.randint(0, 2)):
        g, x, _ = tree(r, 2)
        rules.append("r%d ::= %s" % (i, g))
        regexes["r%d" % i] = x
    parts = []
    for _ in range(r.randint(1, 3)):
        if regexes and r.random() < 0.4:
            name = r.choice(sorted(regexes))
            parts.append((name, "(?:%s)" % regexes[name]))
        else:
            g, x, _ = tree(r, 3)
            parts.append((g, "(?:%s)" % x))
    root = "root ::= " + " ".join(p[0] for p in parts)
    src = "# random grammar\n" + root + "\n" + "\n".join(rules) + "\n"
    return src, "".join(p[1] for p in parts)


def random_schema(r, depth=0):
    kinds = ["string", "integer", "boolean", "enum", "array", "const", "null"]
    if depth < 1:
        kinds.append("object")
    k = r.choice(kinds)
    if k == "string":
        s = {"type": "string"}
        if r.random() < 0.7:
            s["maxLength"] = r.randint(0, 6)
        if r.random() < 0.3:
            s["minLength"] = r.randint(0, s.get("maxLength", 3))
        return s
    if k == "integer":
        return {"type": "integer"}
    if k == "boolean":
        return {"type": "boolean"}
    if k == "null":
        return {"type": "null"}
    if k == "enum":
        return {"enum": r.sample(["red", "green", "blue", 1, 2, True, None], r.randint(1, 3))}
    if k == "const":
        return {"const": r.choice(["x", 7, False])}
    if k == "array":
        s = {"type": "array", "items": random_schema(r, depth + 1)}
        s["maxItems"] = r.randint(0, 3)
        if r.random() < 0.5:
            s["minItems"] = r.randint(0, s["maxItems"])
        return s
    props = {}
    for i in range(r.randint(1, 4)):
        props["k%d" % i] = random_schema(r, depth + 1)
    names = list(props)
    return {"type": "object", "properties": props,
            "required": r.sample(names, r.randint(0, len(names))),
            "additionalProperties": False}


def valid(v, s):
    """Does JSON value v validate against schema s (the subset above)?"""
    if "const" in s:
        return type(v) is type(s["const"]) and v == s["const"]
    if "enum" in s:
        return any(type(v) is type(e) and v == e for e in s["enum"])
    t = s.get("type")
    if t == "string":
        return (isinstance(v, str) and len(v) <= s.get("maxLength", 1 << 30)
                and len(v) >= s.get("minLength", 0))
    if t == "integer":
        return type(v) is int
    if t == "boolean":
        return type(v) is bool
    if t == "null":
        return v is None
    if t == "array":
        return (isinstance(v, list) and s.get("minItems", 0) <= len(v) <= s.get("maxItems", 1 << 30)
                and all(valid(x, s["items"]) for x in v))
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = s.get("properties", {})
        if s.get("additionalProperties") is False and any(k not in props for k in v):
            return False
        return (all(k in v for k in s.get("required", []))
                and all(valid(v[k], props[k]) for k in v if k in props))
    return False


def gen(seed, n):
    r = random.Random(seed)
    for i in range(n):
        q = {"id": "g%d" % i, "prompt": r.choice(["{", "hello", "the", "[1,", "x"]),
             "max_tokens": r.choice([48, 64, 96])}
        kind = r.random()
        if kind < 0.5:
            src, rx = random_grammar(r)
            q["grammar"] = src
            q["_check"] = {"regex": rx}
        elif kind < 0.85:
            s = random_schema(r)
            if s.get("type") != "object" and r.random() < 0.5:
                s = {"type": "object", "properties": {"v": s}, "required": ["v"],
                     "additionalProperties": False}
            q["response_format"] = {"type": "json_schema",
                                    "json_schema": {"name": "s%d" % i, "schema": s,
                                                    "strict": True}}
            q["_check"] = {"schema": s}
        else:
            q["response_format"] = {"type": "json_object"}
            q["_check"] = {"json_object": True}
        if r.random() < 0.75:
            q["temperature"] = r.choice([0.7, 1.0, 1.5])
            q["seed"] = r.randint(0, 1 << 40)
            if r.random() < 0.3:
                q["top_k"] = r.randint(1, 40)
            if r.random() < 0.3:
                q["top_p"] = 0.9
            if r.random() < 0.2:
                q["frequency_penalty"] = 0.5
            if r.random() < 0.2:
                q["min_p"] = 0.05
            if r.random() < 0.2:
                q["presence_penalty"] = 0.8
                q["repetition_penalty"] = 1.3
        if r.random() < 0.2:
            # favours some tokens (never bans: a ban could leave a
            # grammar nothing, which is its own test)
            q["logit_bias"] = {str(r.randint(3, 299)): r.choice([2.0, 5.0, 30.0])
                               for _ in range(r.randint(1, 8))}
        if r.random() < 0.15:
            q["n"] = 2
            q.setdefault("seed", r.randint(0, 1 << 40))
            q.setdefault("temperature", 1.0)
        print(json.dumps(q))


def check(req_path, res_path, allowed_error=None):
    want = {}
    for line in open(req_path):
        q = json.loads(line)
        want[q["id"]] = q["_check"]
    n = {"stop": 0, "length": 0, "error": 0}
    seen = set()
    for line in open(res_path):
        d = json.loads(line)
        rid, fin = d.get("id"), d.get("finish_reason")
        seen.add(rid)
        if rid not in want:
            print("unknown result id %r" % rid)
            return 1
        if fin != "stop":
            if fin == "error" and allowed_error and allowed_error in (d.get("error") or ""):
                n["error"] += 1
                continue
            if fin != "length":
                print("%s: finish %r: %s" % (rid, fin, d.get("error")))
                return 1
            n["length"] += 1
            continue
        n["stop"] += 1
        text, c = d.get("text"), want[rid]
        if text is None:
            print("%s: no text" % rid)
            return 1
        if "regex" in c:
            ok = re.fullmatch(c["regex"], text, re.S) is not None
        else:
            try:
                v = json.loads(text)
            except ValueError as e:
                print("%s: not JSON (%s): %r" % (rid, e, text))
                return 1
            ok = isinstance(v, dict) if "json_object" in c else valid(v, c["schema"])
        if not ok:
            print("%s: %r breaks %s" % (rid, text, json.dumps(c)))
            return 1
    if seen != set(want):
        print("results missing for %s" % sorted(set(want) - seen)[:5])
        return 1
    print("stop %d length %d error %d" % (n["stop"], n["length"], n["error"]))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "strip":
        for line in sys.stdin:
            q = json.loads(line)
            q.pop("_check", None)
            print(json.dumps(q))
    else:
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
