#!/usr/bin/env python3
"""tenant_ttft.py - time to first token of one tenant, alone or while
another floods (tests/e2e/e2e_tenant.sh).

usage: tenant_ttft.py URL KEY_B N_B [KEY_A N_FLOOD]
Tenant B sends N_B streamed requests (as short as A's) one after
another; the p99 and median of their times to first token (request sent
-> first data event) are printed as "p99_ms=<x> median_ms=<y>".  With
KEY_A, a child process runs N_FLOOD threads of tenant A that send short
streamed requests back to back while B runs (a process of its own, so
that A's threads do not hold B's interpreter lock)."""
import http.client
import json
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse


def body(n_prompt):
    return json.dumps({"prompt": [5 + i % 50 for i in range(n_prompt)],
                       "max_tokens": 6, "stream": True, "temperature": 0})


def one(conn, key, data):
    """One streamed request; seconds to its first data event, or None."""
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", data,
                 {"Authorization": "Bearer " + key,
                  "Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        r.read()
        return None
    first = None
    for line in r:
        if first is None and line.startswith(b"data: "):
            first = time.monotonic() - t0
    return first


def flood(url, key, n):
    """n threads of requests, until killed."""
    data = body(4)

    def loop():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        while True:
            one(conn, key, data)

    for _ in range(n):
        threading.Thread(target=loop, daemon=True).start()
    while True:
        time.sleep(1)


def main():
    if sys.argv[1] == "flood":
        flood(urlparse(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return
    url = urlparse(sys.argv[1])
    key_b, n_b = sys.argv[2], int(sys.argv[3])
    child = None
    if len(sys.argv) > 5:
        child = subprocess.Popen([sys.executable, __file__, "flood",
                                  sys.argv[1], sys.argv[4], sys.argv[5]])
        time.sleep(1.0)		# the flood fills the queue first
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    data = body(4)
    ttft = []
    try:
        for _ in range(n_b):
            t = one(conn, key_b, data)
            if t is None:
                print("tenant B was refused", file=sys.stderr)
                sys.exit(1)
            ttft.append(t)
    finally:
        if child:
            child.kill()
            child.wait()
    ttft.sort()
    p99 = ttft[min(len(ttft) - 1, int(len(ttft) * 0.99))]
    print("p99_ms=%.3f median_ms=%.3f" % (p99 * 1e3, ttft[len(ttft) // 2] * 1e3))


main()
