#!/usr/bin/env python3
"""slow_stream.py PORT PROMPT_LEN MAX_TOKENS WAIT_S: one streamed completion
whose answer is read only after WAIT_S seconds, through a small receive
buffer, so the server's buffer for it fills and the request is paused
(it gives up its slot) and later resumed.  Prints the token ids the stream
carried, as a JSON list.  For the pause/resume checks of
tests/e2e_stateful.sh and tests/e2e_llama.sh."""
import json
import socket
import sys
import time

port, prompt_len, max_tokens, wait_s = (int(sys.argv[1]), int(sys.argv[2]),
                                        int(sys.argv[3]), float(sys.argv[4]))
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
body = json.dumps({"id": "slow", "prompt": list(range(1, prompt_len + 1)),
                   "max_tokens": max_tokens, "stream": True})
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
           % (len(body), body)).encode())
time.sleep(wait_s)
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
