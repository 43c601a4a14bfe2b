#!/usr/bin/env python3
"""tenant_ttft.py - time to first token of one tenant, alone or while
another floods, and the flood's answers checked (tests/e2e/e2e_tenant.sh).

usage: tenant_ttft.py URL KEY_B N_B [KEY_A N_FLOOD FLOOD_TOKENS ANSWERS]
       tenant_ttft.py replay URL KEY ANSWERS CONCURRENCY
Tenant B sends N_B streamed requests of 6 tokens (prompts of B_PROMPT
tokens, from the environment, default 4) one after another; the p99,
p90 and median of their times to first token (request sent -> first
data event) are printed as "p99_ms=<x> p90_ms=<y> median_ms=<z>
elapsed_s=<B's run> answer=<B's tokens>"; every one of B's answers must be the same (exit 1
otherwise).  With KEY_A, a child process runs N_FLOOD threads of tenant
A that send requests of FLOOD_TOKENS tokens back to back while B runs
(a process of its own, so that A's threads do not hold B's interpreter
lock); they are not streamed, so that the flood costs the machine
little but slots, and each answer is appended to ANSWERS as a JSON line
(the request and its token_ids): half of them greedy, half sampled with
a seed.  replay sends each request of ANSWERS again, CONCURRENCY at a
time, and exits 1 unless every answer is the same token for token."""
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse


def b_body():
    n = int(os.environ.get("B_PROMPT", "4"))
    return json.dumps({"prompt": [5 + i % 50 for i in range(n)],
                       "max_tokens": 6, "stream": True, "temperature": 0})


def flood_request(thread, i, max_tokens):
    """The i-th request of a flood thread: its own prompt; odd ones
    sampled with a seed of their own."""
    n = 4 + (thread + i) % 8
    req = {"prompt": [5 + (thread * 7 + i * 3 + j) % 250 for j in range(n)],
           "max_tokens": max_tokens}
    if i % 2:
        req.update(temperature=0.9, seed=thread * 100000 + i)
    else:
        req["temperature"] = 0
    return req


def post(conn, key, data):
    conn.request("POST", "/v1/completions", data,
                 {"Authorization": "Bearer " + key,
                  "Content-Type": "application/json"})
    return conn.getresponse()


def streamed(conn, key, data):
    """One streamed request: (seconds to its first data event, its
    token_ids), or None when refused."""
    t0 = time.monotonic()
    r = post(conn, key, data)
    if r.status != 200:
        r.read()
        return None
    first, tokens = None, []
    for line in r:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        if first is None:
            first = time.monotonic() - t0
        tokens += json.loads(line[6:])["choices"][0]["token_ids"]
    return first, tokens


def whole(conn, key, req):
    """One request not streamed: its token_ids, or None when refused."""
    r = post(conn, key, json.dumps(req))
    body = r.read()
    if r.status != 200:
        return None
    return json.loads(body)["choices"][0]["token_ids"]


def flood(url, key, n, max_tokens, answers):
    """n threads of requests, until killed; each answer one line of
    answers, written whole (one write of an O_APPEND file)."""
    fd = os.open(answers, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def loop(t):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        for i in range(1 << 30):
            req = flood_request(t, i, max_tokens)
            tokens = whole(conn, key, req)
            if tokens is not None:
                os.write(fd, (json.dumps({"request": req, "token_ids": tokens})
                              + "\n").encode())

    for t in range(n):
        threading.Thread(target=loop, args=(t,), daemon=True).start()
    while True:
        time.sleep(1)


def replay(url, key, answers, n_conc):
    with open(answers) as f:
        want = [json.loads(line) for line in f if line.endswith("\n")]
    todo = list(enumerate(want))
    bad = []
    lock = threading.Lock()

    def loop():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        while True:
            with lock:
                if not todo:
                    return
                i, a = todo.pop()
            got = whole(conn, key, a["request"])
            if got != a["token_ids"]:
                with lock:
                    bad.append((i, a, got))

    threads = [threading.Thread(target=loop) for _ in range(n_conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("replayed %d answers, %d differ" % (len(want), len(bad)))
    for i, a, got in bad[:3]:
        print("  answer %d: %s: under the flood %s, replayed %s"
              % (i, json.dumps(a["request"]), a["token_ids"], got))
    sys.exit(1 if bad or not want else 0)


def main():
    if sys.argv[1] == "flood":
        flood(urlparse(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
              int(sys.argv[5]), sys.argv[6])
        return
    if sys.argv[1] == "replay":
        replay(urlparse(sys.argv[2]), sys.argv[3], sys.argv[4],
               int(sys.argv[5]))
        return
    url = urlparse(sys.argv[1])
    key_b, n_b = sys.argv[2], int(sys.argv[3])
    child = None
    t0 = time.monotonic()	# elapsed_s: the flood's head start too
    if len(sys.argv) > 7:
        child = subprocess.Popen([sys.executable, __file__, "flood",
                                  sys.argv[1]] + sys.argv[4:8])
        time.sleep(1.0)		# the flood fills the batch and queue first
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    data = b_body()
    ttft, answers = [], set()
    try:
        for _ in range(n_b):
            got = streamed(conn, key_b, data)
            if got is None:
                print("tenant B was refused", file=sys.stderr)
                sys.exit(1)
            ttft.append(got[0])
            answers.add(tuple(got[1]))
    finally:
        elapsed = time.monotonic() - t0
        if child:
            child.kill()
            child.wait()
    if len(answers) != 1:
        print("tenant B got %d different answers to one request: %s"
              % (len(answers), sorted(answers)[:3]), file=sys.stderr)
        sys.exit(1)
    ttft.sort()

    def pct(p):
        return ttft[min(len(ttft) - 1, int(len(ttft) * p))] * 1e3

    print("p99_ms=%.3f p90_ms=%.3f median_ms=%.3f elapsed_s=%.3f answer=%s"
          % (pct(0.99), pct(0.9), pct(0.5), elapsed,
             ",".join(str(t) for t in answers.pop())))


main()
