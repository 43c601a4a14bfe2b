#!/usr/bin/env python3
"""hostile_http.py - HTTP clients that misbehave, for tests/e2e/e2e_serve.sh.

Each subcommand plays one client against `dynbatch serve` on 127.0.0.1:PORT,
prints what it saw as key=value lines and exits 0 when the server behaved,
1 (with a line saying what went wrong) when it did not.  Only the standard
library is used.

  flood PORT PID BYTES  pipeline BYTES of GET requests (/health, /metrics,
                        /nothing in turn) without reading; report the
                        server's peak RSS (VmHWM) once the sender has
                        stalled, then read every answer and check each is
                        whole and in order.
  halfclose PORT MODE   send one completion (MODE plain or stream) behind a
                        pipelined GET /health, then shutdown(SHUT_WR), and
                        read to the end: both must be answered, the stream
                        with its last event, [DONE] and the last chunk.
                        Prints the completion's token ids.
  reset_behind PORT     start a long completion, pipeline requests until the
                        server's receive buffer is full, then leave with a
                        reset (SO_LINGER 0).
  close_running PORT    start a long completion, then close() (a FIN, as a
                        half-close sends, but nothing left to read on).
  amplify PORT PID PATH MAX_KB  one small request to PATH (/v1/completions
                        or /v1/chat/completions) asking for the largest
                        answer a client may ask for (n 64, max_tokens
                        1000, 20 top logprobs, not streamed): it must be
                        refused (400) or cost the server at most MAX_KB
                        of peak RSS (VmHWM) more than before.
  same_text PORT SEED N  N random requests (completions and chat, n 1..3,
                        sampled with a seed, random "stop" strings), each
                        plain and streamed: the streamed pieces of each
                        choice must join to the plain text, with the same
                        finish_reason.
  stop_cut PORT SEED N  N random completions, each without and then with
                        "stop" strings: the text with stops must be the
                        text without them cut before the first stop
                        (finish_reason "stop"), else the same.
"""
import json
import random
import socket
import struct
import sys
import threading
import time

PATHS = [("/health", 200), ("/metrics", 200), ("/nothing", 404)]


def fail(msg):
    print("error=" + msg)
    sys.exit(1)


def vm_hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


class Reader:
    """Reads HTTP/1.1 answers off a socket, skipping 1xx interim ones."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.eof = False

    def fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            self.eof = True
        self.buf += data
        return bool(data)

    def take_until(self, sep):
        while sep not in self.buf:
            if not self.fill():
                return None
        head, self.buf = self.buf.split(sep, 1)
        return head

    def take(self, n):
        while len(self.buf) < n:
            if not self.fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def answer(self):
        """(status, headers dict, body bytes, chunked ended) or None at EOF."""
        while True:
            head = self.take_until(b"\r\n\r\n")
            if head is None:
                return None
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
            if 100 <= status < 200:
                continue
            break
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line = self.take_until(b"\r\n")
                if size_line is None:
                    return status, headers, body, False
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    if self.take_until(b"\r\n") is None:
                        return status, headers, body, False
                    return status, headers, body, True
                piece = self.take(size + 2)
                if piece is None:
                    return status, headers, body, False
                body += piece[:-2]
        n = int(headers.get("content-length", "0"))
        body = self.take(n)
        return status, headers, body, body is not None


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def flood(port, pid, total):
    reqs = [("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p).encode() for p, _ in PATHS]
    sock = connect(port)
    base_kb = vm_hwm_kb(pid)
    sent = {"bytes": 0, "n": 0, "done": False}

    def sender():
        chunk, n_in_chunk = b"", 0
        while sent["bytes"] < total:
            chunk += reqs[(sent["n"] + n_in_chunk) % len(reqs)]
            n_in_chunk += 1
            if len(chunk) >= 16384 or sent["bytes"] + len(chunk) >= total:
                sock.sendall(chunk)
                sent["bytes"] += len(chunk)
                sent["n"] += n_in_chunk
                chunk, n_in_chunk = b"", 0
        sent["done"] = True

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    last, still = -1, 0.0
    while not sent["done"] and still < 1.0:	# until it stalls (or ends)
        time.sleep(0.1)
        still = still + 0.1 if sent["bytes"] == last else 0.0
        last = sent["bytes"]
    stalled_kb = vm_hwm_kb(pid)
    print("sent_before_reading=%d" % sent["bytes"])
    print("stalled=%d" % (not sent["done"]))
    print("rss_growth_kb=%d" % (stalled_kb - base_kb))
    rd = Reader(sock)
    i = 0
    while not sent["done"] or i < sent["n"]:
        a = rd.answer()
        if a is None:
            fail("connection closed after %d answers" % i)
        status, headers, body, whole = a
        path, want = PATHS[i % len(PATHS)]
        if status != want or not whole:
            fail("answer %d (%s): status %d, whole %s" % (i, path, status, whole))
        if path == "/metrics" and not body.startswith(b"# HELP"):
            fail("answer %d: not the metrics: %r" % (i, body[:120]))
        if path == "/health" and b'"status"' not in body:
            fail("answer %d: not the health" % i)
        i += 1
    t.join()
    print("answers=%d" % i)
    print("rss_growth_end_kb=%d" % (vm_hwm_kb(pid) - base_kb))


def completion_request(body):
    return ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
            "application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode()


def halfclose(port, mode):
    stream = mode == "stream"
    body = json.dumps({"prompt": [5, 6], "max_tokens": 40, "stream": stream})
    sock = connect(port)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + completion_request(body))
    sock.shutdown(socket.SHUT_WR)
    rd = Reader(sock)
    a = rd.answer()
    if a is None or a[0] != 200:
        fail("GET /health before the completion: %r" % (a,))
    a = rd.answer()
    if a is None:
        fail("no answer to the completion after the half-close")
    status, headers, payload, whole = a
    if status != 200 or not whole:
        fail("completion: status %d, whole %s, body %r" % (status, whole, payload[-200:]))
    tokens = []
    if stream:
        events = [e for e in payload.decode().split("\n\n") if e]
        if events[-1] != "data: [DONE]":
            fail("the stream does not end with [DONE]: %r" % events[-1])
        last = json.loads(events[-2][len("data: "):])
        if last["choices"][0]["finish_reason"] != "length":
            fail("last event: %r" % last)
        for e in events[:-1]:
            tokens += json.loads(e[len("data: "):])["choices"][0]["token_ids"]
    else:
        ans = json.loads(payload)
        if ans["choices"][0]["finish_reason"] != "length":
            fail("answer: %r" % ans)
        tokens = ans["choices"][0]["token_ids"]
    sock.settimeout(5)
    try:
        if rd.take(1) is not None or rd.buf:
            fail("bytes after the answer")
    except socket.timeout:
        fail("the connection was not closed after the answer")
    print("closed=1")
    print("tokens=" + ",".join(str(t) for t in tokens))


def reset_behind(port):
    sock = connect(port)
    sock.sendall(completion_request(json.dumps({"prompt": [1], "max_tokens": 3000})))
    time.sleep(0.2)	# running now
    sock.setblocking(False)
    junk = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
    n, still = 0, 0
    while still < 5:	# until the server's window has stayed shut a while
        try:
            n += sock.send(junk)
            still = 0
        except BlockingIOError:
            still += 1
            time.sleep(0.1)
    print("pipelined_bytes=%d" % n)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def close_running(port):
    sock = connect(port)
    sock.sendall(completion_request(json.dumps({"prompt": [2], "max_tokens": 3000})))
    time.sleep(0.2)	# running now
    sock.close()


def burst(port, n):
    """n connections (the whole table) at once, twice.  First each sends
    a byte per round, together, then all close: every one is answered
    (a half-closed partial request) in the same round of the server's
    loop, which overflowed its list of connections to look at (a heap
    overflow any client could cause: SIGABRT or SIGSEGV).  Then each
    sends a whole request at once and must get its answer."""
    socks = [connect(port) for _ in range(n)]
    for k in range(3):
        for s in socks:
            s.sendall(b"G" if k == 0 else b"E")
        time.sleep(0.2)
    for s in socks:
        s.close()
    time.sleep(0.5)
    socks = [connect(port) for _ in range(n)]
    for s in socks:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    ok = 0
    for s in socks:
        s.settimeout(10)
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        if got.startswith(b"HTTP/1.1 "):	# 200, or 503 while old ones close
            ok += 1
        s.close()
    print("answered=%d" % ok)


def post_json(port, path, body, timeout=60):
    """POST body to path; the answer's status and its body, as bytes."""
    sock = connect(port)
    data = json.dumps(body).encode()
    sock.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % (path, len(data))).encode() + data)
    sock.settimeout(timeout)
    got = b""
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    sock.close()
    head, _, rest = got.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    if b"transfer-encoding: chunked" in head.lower():
        body_out = b""
        while rest:
            line, _, rest = rest.partition(b"\r\n")
            size = int(line.split(b";")[0], 16)
            if size == 0:
                break
            body_out += rest[:size]
            rest = rest[size + 2:]
        rest = body_out
    return status, rest


def amplify(port, pid, path, max_kb):
    body = {"max_tokens": 1000, "n": 64, "temperature": 1.0, "ignore_eos": True}
    if path.endswith("/chat/completions"):
        body.update({"messages": [{"role": "user", "content": "Hi"}],
                     "logprobs": True, "top_logprobs": 20})
    else:
        body.update({"prompt": "Hi", "logprobs": 20})
    before = vm_hwm_kb(pid)
    status, answer = post_json(port, path, body)
    grew = vm_hwm_kb(pid) - before
    print("status=%d answer_bytes=%d hwm_growth_kb=%d" % (status, len(answer), grew))
    if status != 400 and grew > max_kb:
        fail("a %d-byte request made the server's peak RSS grow by %d kB "
             "(answer %d bytes)" % (len(json.dumps(body)), grew, len(answer)))


WORDS = ["the", "cat", "\u65e5\u672c\u8a9e", "\u00e9", "\U0001f642", "sat", ".", "\n", "zz"]
STOPS = ["a", "e ", "\u65e5", "\U0001f642", "t", "the", "c", "at", ". ", "\n", "\u672c\u8a9e"]


def choice_text(c, chat):
    return c["message"]["content"] if chat else c["text"]


def sse_texts(raw, chat):
    """The joined text and the finish_reason of each choice of a stream."""
    texts, fins = {}, {}
    for line in raw.decode().split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for c in ev.get("choices", []):
            piece = c.get("delta", {}).get("content") if chat else c.get("text")
            texts[c["index"]] = texts.get(c["index"], "") + (piece or "")
            if c.get("finish_reason"):
                fins[c["index"]] = c["finish_reason"]
    return texts, fins


def random_body(rng, i):
    body = {"prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20))),
            "max_tokens": rng.randint(1, 60), "temperature": 1.0, "seed": i}
    return body


def same_text(port, seed, n):
    rng = random.Random(seed)
    for i in range(n):
        body = random_body(rng, i)
        body["n"] = rng.randint(1, 3)
        stops = rng.sample(STOPS, rng.randint(0, 3))
        if stops:
            body["stop"] = stops
        chat = i % 2 == 1
        path = "/v1/chat/completions" if chat else "/v1/completions"
        if chat:
            body["messages"] = [{"role": "user", "content": body.pop("prompt")}]
        status, raw = post_json(port, path, body)
        if status != 200:
            fail("%s answered %d: %r" % (json.dumps(body), status, raw[:200]))
        plain = json.loads(raw)["choices"]
        want = {c["index"]: choice_text(c, chat) for c in plain}
        want_fin = {c["index"]: c["finish_reason"] for c in plain}
        body["stream"] = True
        status, raw = post_json(port, path, body)
        got, got_fin = sse_texts(raw, chat)
        if status != 200 or got != want or got_fin != want_fin:
            fail("%s: plain %r %r, streamed (%d) %r %r" %
                 (json.dumps(body), want, want_fin, status, got, got_fin))
    print("checked=%d" % n)


def answer_choice(port, body):
    """The first choice of a plain completion; fails unless 200."""
    try:
        status, raw = post_json(port, "/v1/completions", body)
    except OSError as e:
        fail("%s: %s" % (json.dumps(body), e))
    if status != 200:
        fail("%s answered %d: %r" % (json.dumps(body), status, raw[:200]))
    return json.loads(raw)["choices"][0]


def stop_cut(port, seed, n):
    rng = random.Random(seed)
    for i in range(n):
        body = random_body(rng, i)
        full = answer_choice(port, body)
        body["stop"] = rng.sample(STOPS, rng.randint(1, 4))
        got = answer_choice(port, body)
        at = [full["text"].find(s) for s in body["stop"] if s in full["text"]]
        want = (full["text"][:min(at)], "stop") if at else (full["text"], full["finish_reason"])
        if (got["text"], got["finish_reason"]) != want:
            fail("%s: without stops %r, with them %r %s, want %r %s" %
                 (json.dumps(body), full["text"], got["text"], got["finish_reason"],
                  want[0], want[1]))
    print("checked=%d" % n)


def main():
    cmd = sys.argv[1]
    if cmd == "flood":
        flood(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "halfclose":
        halfclose(int(sys.argv[2]), sys.argv[3])
    elif cmd == "reset_behind":
        reset_behind(int(sys.argv[2]))
    elif cmd == "burst":
        burst(int(sys.argv[2]), int(sys.argv[3]))
    elif cmd == "close_running":
        close_running(int(sys.argv[2]))
    elif cmd == "amplify":
        amplify(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    elif cmd == "same_text":
        same_text(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "stop_cut":
        stop_cut(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        fail("unknown command " + cmd)


if __name__ == "__main__":
    main()
