"""``/metrics`` latency of the embedded server while a 10^7-token request is refused.

Starts the engine as ``bench`` does (``EngineProcess``: a process of its own), then
alternates, ``--rounds`` times, a quiet phase and a phase in which another process sends
a body the server must refuse over and over (``tests/support/huge_body.py``): 10^7 token
ids (~48 MiB) with their Content-Length (``declared``), the same chunked, without a length
(``chunked``), and the largest body the server reads, of one-digit ids (``ids``: many
times ``max_model_len`` ids, refused only once decoded). In both phases this process
sends back-to-back ``GET /metrics`` (a new connection each) and records each one's
latency. The phases alternate in one run, so that a machine busy with other work weighs
on both alike; the figures are the latency distributions side by side, and the answers
counted.

    .venv/bin/python benchmarks/metrics_under_body.py              # 5 rounds of 1 s + 1 s
    .venv/bin/python benchmarks/metrics_under_body.py --rounds 10 --phase-s 2
    .venv/bin/python benchmarks/metrics_under_body.py --kinds ids  # one kind only
"""

from __future__ import annotations

import argparse
import collections
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

import huge_body

from perfmodel.config import EngineConfig
from runtime.quantiles import describe
from simengine import server as engine_server
from simengine.engine_process import EngineProcess

KINDS = ("declared", "chunked", "ids")


def metrics_latencies(host: str, port: int, seconds: float) -> list[float]:
    """Back-to-back ``GET /metrics`` for ``seconds``: each one's latency in seconds."""
    out = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        began = time.monotonic()
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if not sock.recv(64).startswith(b"HTTP/1.1 200"):
                raise SystemExit("/metrics did not answer 200")
        out.append(time.monotonic() - began)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--phase-s", type=float, default=1.0)
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS)
    )
    args = parser.parse_args()
    config = EngineConfig(fixed_step_s=0.002)
    # the largest body this server reads (what it reads is what it may have to decode)
    limit = (
        getattr(engine_server, "BODY_BASE_BYTES", 0)
        + getattr(engine_server, "BODY_BYTES_PER_TOKEN", 0) * config.max_model_len
    )
    kinds = args.kinds.split(",")
    latencies: dict[str, list[float]] = {"quiet": [], **{k: [] for k in kinds}}
    answers: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in kinds}
    sizes = {}
    with EngineProcess(config) as server:
        host, port = server.url.removeprefix("http://").split(":")
        for _ in range(args.rounds):
            for kind in kinds:
                latencies["quiet"] += metrics_latencies(host, int(port), args.phase_s)
                spec = f"ids:{limit}" if kind == "ids" else kind
                sender, sizes[kind] = huge_body.start(server.url, repeat=True, kind=spec)
                assert sender.stdin is not None and sender.stdout is not None
                latencies[kind] += metrics_latencies(host, int(port), args.phase_s)
                sender.stdin.close()
                answers[kind].update(a[:12] for a in sender.stdout.read().splitlines())
                sender.wait()
    for kind in kinds:
        said = ", ".join(f"{n} x {a!r}" for a, n in answers[kind].most_common())
        print(f"{kind}: body {sizes[kind] / 2**20:.2f} MiB, answered {said}")
    print(f"{'/metrics latency (ms)':<24}{'n':>6}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}")
    for name, values in latencies.items():
        d = describe(values)
        row = [d[k] * 1e3 for k in ("p50", "p90", "p99")] + [max(values) * 1e3]
        print(f"{name:<24}{len(values):>6}" + "".join(f"{v:8.1f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
