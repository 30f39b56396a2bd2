"""Real HTTP servers on 127.0.0.1 for the probe tests.

``ReplayServer`` serves real captures from tests/fixtures in order, one per GET of
``/metrics`` (the last one repeats), on its own thread and event loop so that both sync
and async tests can talk to it over loopback. A response can be a capture, an altered
capture (a malformed line), or an HTTP status. ``PrometheusServer`` runs the real
Prometheus binary against such targets.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import httpx
from aiohttp import web
from threaded_app import ThreadedApp

from runtime.child import stop_process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ReplayServer(ThreadedApp):
    """Serve ``responses`` (text, or an int HTTP status) at ``path`` in order."""

    def __init__(self, responses: list[str | int], path: str = "/metrics") -> None:
        super().__init__()
        self.responses = responses
        self.path = path
        self.requests = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_get(self.path, self._handle)

    async def _handle(self, request: web.Request) -> web.Response:
        response = self.responses[min(self.requests, len(self.responses) - 1)]
        self.requests += 1
        if isinstance(response, int):
            return web.Response(status=response, text="nope")
        return web.Response(text=response, content_type="text/plain")


class PrometheusServer:
    """A real Prometheus (Debian's package) on a free port, scraping ``targets``
    (``host:port``) every second, with its storage in ``workdir``."""

    def __init__(self, binary: str, targets: list[str], workdir: Path) -> None:
        self.binary = binary
        self.targets = targets
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> PrometheusServer:
        config = self.workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: target\n    static_configs:\n"
            f"      - targets: {json.dumps(self.targets)}\n"
        )
        log = (self.workdir / "prometheus.log").open("w")
        self._process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited: {(self.workdir / 'prometheus.log').read_text()}"
                )
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("prometheus did not become ready in 30 s")

    def value(self, promql: str) -> float | None:
        """An instant query's single value (None when empty)."""
        data = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()
        result = data["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, promql: str, expected: float, timeout_s: float = 20.0) -> None:
        """Wait until Prometheus has scraped the state the test set up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.value(promql) == expected:
                return
            time.sleep(0.2)
        raise AssertionError(f"{promql} never reached {expected} (last {self.value(promql)})")

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            stop_process(self._process, 10)


async def stream_completion(
    client: httpx.AsyncClient, url: str, model: str, prompt: list[int], max_tokens: int
) -> tuple[float, int | None]:
    """One streamed completion: the client's TTFT (from send to the first token chunk)
    and the server-reported cached tokens (None when absent, never 0)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    sent = time.perf_counter()
    ttft: float | None = None
    cached: int | None = None
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            if ttft is None and any(c.get("text") for c in event.get("choices", [])):
                ttft = time.perf_counter() - sent
            details = (event.get("usage") or {}).get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens", cached)
    if ttft is None:
        raise AssertionError("the stream carried no token")
    return ttft, cached
