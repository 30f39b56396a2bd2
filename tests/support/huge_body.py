"""A client that sends the embedded server a 10^7-token body (~48 MiB, with its
Content-Length), in a process of its own so that the server's loop shares no GIL with it.

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
host, port, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "repeat"
body = b'{"model": "x", "max_tokens": 1, "prompt": [' + b",".join([b"1234"] * 10**7) + b"]}"
head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"

def send(sock):
    try:
        sock.sendall(head.encode() + body)
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


def start(url: str, *, repeat: bool) -> tuple[subprocess.Popen[str], int]:
    """The sender for the server at ``url`` (``http://host:port``), and its body's size
    in bytes once it is ready."""
    host, port = url.removeprefix("http://").split(":")
    sender = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, host, port, "repeat" if repeat else "once"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert sender.stdin is not None and sender.stdout is not None
    return sender, int(sender.stdout.readline())
