#!/usr/bin/env python3
"""slow_stream.py PORT PROMPT_LEN MAX_TOKENS WAIT_S: one streamed completion
whose answer is read only once the server's /metrics counts a pause (or
after WAIT_S seconds at the latest), through a small receive buffer, so
the server's buffer for it fills and the request is paused (it gives up
its slot) and later resumed.  Waiting for the pause, not a fixed time,
keeps a slow build (make asan) from reading before the buffer ever
fills.  Prints the token ids the stream carried, as a JSON list.  For the
pause/resume checks of tests/e2e/e2e_stateful.sh and tests/e2e/e2e_llama.sh."""
import json
import socket
import sys
import time

port, prompt_len, max_tokens, wait_s = (int(sys.argv[1]), int(sys.argv[2]),
                                        int(sys.argv[3]), float(sys.argv[4]))
# The receive buffer is set before connect(): the window a socket offers
# in its handshake comes from the buffer it has then, and TCP never takes
# an offered window back, so a buffer made small only after connect()
# still lets the server send up to the default window (64 KiB here), and
# on some kernels that holds the whole answer and nothing ever pauses.
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", port))
body = json.dumps({"id": "slow", "prompt": list(range(1, prompt_len + 1)),
                   "max_tokens": max_tokens, "stream": True})
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
           % (len(body), body)).encode())


def pauses():
    """dynbatch_http_pauses_total from /metrics, on its own connection."""
    try:
        m = socket.create_connection(("127.0.0.1", port), timeout=5)
        m.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        text = b""
        while True:
            chunk = m.recv(65536)
            if not chunk:
                break
            text += chunk
        m.close()
    except OSError:
        return 0
    for line in text.split(b"\n"):
        if line.startswith(b"dynbatch_http_pauses_total "):
            return float(line.split()[1])
    return 0


deadline = time.monotonic() + wait_s
while time.monotonic() < deadline and pauses() == 0:
    time.sleep(0.1)
data = b""
while b"data: [DONE]" not in data:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
tokens = []
for line in data.split(b"\n"):
    if line.startswith(b"data: {"):
        tokens += json.loads(line[6:])["choices"][0].get("token_ids", [])
print(json.dumps(tokens))
