#!/usr/bin/env python3
"""affinity_client.py - clients for tests/e2e/e2e_affinity.sh.

  sessions --port P --replicas P0,P1 [--header] ...
      Conversations, one request at a time: turn k's prompt is turn k-1's
      prompt, its answer and new tokens.  Sent to nginx on P, with
      "X-Session-Id: <session>" when --header.  Around every request it
      reads both replicas' /metrics, so each request is known by the
      replica that served it (dynbatch_requests_total) and the prompt
      tokens that replica took from its cache
      (dynbatch_kv_prefix_hit_tokens_total).  Writes the requests
      (--requests-out) and results (--results-out) as JSON Lines for
      bin/refdecode, and one line per request to --log-out:
      "session turn replica hit_tokens want_hit_tokens".

  cancel --port P ...
      Streams that share a system prompt, cut off by the client at random
      moments (before the answer, after a few events), then the same ids
      reused at once with the same or other prompts, streamed to the end
      or not; every answer that completes is written for bin/refdecode.
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time


def metric(port, name):
    """Sum of the samples of metric name on the replica at port."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    total = 0
    for line in body.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def post(conn, body, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", "/v1/completions", json.dumps(body), h)
    r = conn.getresponse()
    return r.status, r.read().decode()


def sessions(a):
    rng = random.Random(a.seed)
    replicas = [int(p) for p in a.replicas.split(",")]
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
    # per session: its id and the tokens so far (prompt + answers)
    sess = [{"id": "%s-%d-%d" % (a.tag, a.seed, s), "history": []}
            for s in range(a.sessions)]
    reqs, results, log = [], [], []
    for turn in range(a.turns):
        for s in sess:
            n_new = a.first_len if turn == 0 else rng.randint(5, 20)
            prompt = s["history"] + [rng.randrange(a.vocab) for _ in range(n_new)]
            # the whole blocks of the previous turn's committed tokens,
            # less the last one (never consumed: docs/DESIGN.md 11.2)
            want = (max(len(s["history"]) - 1, 0) // a.block_tokens) * a.block_tokens
            rid = "%s-t%d" % (s["id"], turn)
            body = {"id": rid, "prompt": prompt, "max_tokens": a.max_tokens}
            before = [(metric(p, "dynbatch_requests_total"),
                       metric(p, "dynbatch_kv_prefix_hit_tokens_total")) for p in replicas]
            headers = {"X-Session-Id": s["id"]} if a.header else {}
            code, text = post(conn, body, headers)
            if code != 200:
                print("session %s turn %d: HTTP %d %s" % (s["id"], turn, code, text[:200]))
                return 1
            after = [(metric(p, "dynbatch_requests_total"),
                      metric(p, "dynbatch_kv_prefix_hit_tokens_total")) for p in replicas]
            served = [i for i in range(len(replicas)) if after[i][0] > before[i][0]]
            served_by = served[0] if len(served) == 1 else -1
            hits = sum(after[i][1] - before[i][1] for i in range(len(replicas)))
            tokens = json.loads(text)["choices"][0]["token_ids"]
            reqs.append(body)
            results.append({"id": rid, "tokens": tokens, "finish_reason": "length"})
            log.append("%s %d %d %d %d" % (s["id"], turn, served_by, hits, want))
            s["history"] = prompt + tokens
    conn.close()
    with open(a.requests_out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in reqs)
    with open(a.results_out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in results)
    with open(a.log_out, "w") as f:
        f.writelines(line + "\n" for line in log)
    return 0


# ---------------------------------------------------------------- cancel

def raw_stream(port, body, cut_after_events, cut_delay):
    """POST a streamed request on a raw socket.  cut_after_events < 0:
    read to the end and return the tokens; else close the socket after
    that many events (0: as soon as it is sent, after cut_delay s) and
    return None.  Returns (status, tokens or None)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    if cut_after_events == 0:
        time.sleep(cut_delay)
        s.close()
        return 0, None
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            s.close()
            return -1, buf[:200]
        buf += chunk
    head, buf = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    if status != 200:
        s.close()
        return status, head[:200]
    events = 0
    tokens = []
    while True:
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            i = ev.find(b"data: ")
            if i < 0:
                continue
            payload = ev[i + 6:].strip()
            if payload == b"[DONE]":
                s.close()
                return 200, tokens
            obj = json.loads(payload)
            if "error" in obj:
                s.close()
                return 500, payload[:200]
            tokens += obj["choices"][0]["token_ids"]
            events += 1
            if 0 < cut_after_events <= events:
                s.close()
                return 0, None
        chunk = s.recv(65536)
        if not chunk:
            s.close()
            return -1, b"stream ended without [DONE]"
        buf += chunk


def cancel(a):
    rng = random.Random(a.seed)
    system = [rng.randrange(a.vocab) for _ in range(a.system_len)]
    reqs, results, problems = {}, [], []
    lock = threading.Lock()

    def suffix():
        return [rng.randrange(a.vocab) for _ in range(rng.randint(3, 20))]

    def complete(rid, prompt, max_tokens, stream):
        """Send until not 409 (the id's cancelled request may still be
        live for a moment); record the answer."""
        body = {"id": rid, "prompt": prompt, "max_tokens": max_tokens}
        for _ in range(200):
            if stream:
                body["stream"] = True
                code, tokens = raw_stream(a.port, body, -1, 0)
            else:
                c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
                code, text = post(c, body)
                c.close()
                tokens = json.loads(text)["choices"][0]["token_ids"] if code == 200 else text
            if code != 409:
                break
            time.sleep(0.01)
        with lock:
            if code != 200:
                problems.append("%s: HTTP %s %s" % (rid, code, str(tokens)[:200]))
                return
            reqs[rid] = {"id": rid, "prompt": prompt, "max_tokens": max_tokens}
            results.append({"id": rid, "tokens": tokens, "finish_reason": "length"})

    for rnd in range(a.rounds):
        # 1. streams cut off at random moments
        plans = []
        for i in range(a.clients):
            rid = "c%d" % i
            prompt = system + suffix()
            plans.append((rid, prompt, rng.choice([0, 0, 1, 1, 2, 5]), rng.random() * 0.02))
        threads = [threading.Thread(target=raw_stream, args=(
            a.port, {"id": rid, "prompt": p, "max_tokens": a.long_tokens, "stream": True},
            cut, delay)) for rid, p, cut, delay in plans]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # 2. the same ids at once: the same prompt or another, streamed or
        # not, run to the end
        threads = []
        for rid, p, _, _ in plans:
            prompt = p if rng.random() < 0.5 else system + suffix()
            stream = rng.random() < 0.5
            threads.append(threading.Thread(target=complete, args=(
                rid, prompt, a.short_tokens, stream)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # the next round reuses the ids again: write this round's answers
        # under ids of their own
        for r in results:
            if "#" not in r["id"]:
                old = r["id"]
                r["id"] = "%s#%d" % (old, rnd)
                q = reqs.pop(old)
                q["id"] = r["id"]
                reqs[r["id"]] = q
    with open(a.requests_out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in reqs.values())
    with open(a.results_out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in results)
    for p in problems:
        print(p)
    print("completed=%d problems=%d" % (len(results), len(problems)))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sessions")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--replicas", required=True)
    s.add_argument("--header", action="store_true")
    s.add_argument("--tag", default="s")
    s.add_argument("--sessions", type=int, default=15)
    s.add_argument("--turns", type=int, default=3)
    s.add_argument("--first-len", type=int, default=40)
    s.add_argument("--max-tokens", type=int, default=8)
    s.add_argument("--block-tokens", type=int, default=16)
    c = sub.add_parser("cancel")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--clients", type=int, default=24)
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--system-len", type=int, default=64)
    c.add_argument("--long-tokens", type=int, default=300)
    c.add_argument("--short-tokens", type=int, default=12)
    for p in (s, c):
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--vocab", type=int, default=500)
        p.add_argument("--requests-out", required=True)
        p.add_argument("--results-out", required=True)
    s.add_argument("--log-out", required=True)
    a = ap.parse_args()
    sys.exit(sessions(a) if a.cmd == "sessions" else cancel(a))


if __name__ == "__main__":
    main()
