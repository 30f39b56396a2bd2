"""A client that sends the embedded server a body it must refuse, in a process of its own
so that the server's loop shares no GIL with it.

Kinds: ``declared``, 10^7 token ids (~48 MiB) with their Content-Length; ``chunked``, the
same without a length (chunked transfer encoding); ``ids:N``, a body of N bytes of
one-digit token ids (``[1,1,1,…]``: half a token a byte, so the largest body the server
reads holds many times ``max_model_len`` ids and is refused only once decoded).

Used by the timing test of the server's connections and by
``benchmarks/metrics_under_body.py``. ``start`` launches it; it prints the body's size
when ready, then either sends once when told (``repeat=False``: a line on its stdin) or
sends again and again until its stdin closes (``repeat=True``); it prints one line per
answer: the status line, or the error's name."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = r"""
import select, socket, sys
host, port, repeat, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "repeat", sys.argv[4]
if kind.startswith("ids:"):
    count = (int(kind[4:]) - 40) // 2
    body = b'{"max_tokens": 1, "prompt": [' + b",".join([b"1"] * count) + b"]}"
else:
    body = b'{"model": "x", "max_tokens": 1, "prompt": [' + b",".join([b"1234"] * 10**7) + b"]}"
if kind == "chunked":
    head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    pieces = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
else:
    head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    payload = body

def send(sock):
    try:
        sock.sendall(head.encode() + payload)
    except OSError:
        pass  # refused before the rest was read
    try:
        print(sock.recv(4096).split(b"\r\n")[0].decode(), flush=True)
    except OSError as exc:
        print(type(exc).__name__, flush=True)
    sock.close()

if repeat:
    print(len(body), flush=True)
    while not select.select([sys.stdin], [], [], 0)[0]:
        send(socket.create_connection((host, port), timeout=10))
else:
    sock = socket.create_connection((host, port), timeout=10)
    print(len(body), flush=True)
    sys.stdin.readline()
    send(sock)
"""


def start(url: str, *, repeat: bool, kind: str = "declared") -> tuple[subprocess.Popen[str], int]:
    """The sender of a ``kind`` body for the server at ``url`` (``http://host:port``), and
    its body's size in bytes once it is ready."""
    host, port = url.removeprefix("http://").split(":")
    sender = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, host, port, "repeat" if repeat else "once", kind],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert sender.stdin is not None and sender.stdout is not None
    return sender, int(sender.stdout.readline())
