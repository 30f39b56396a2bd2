"""Helpers the server tests share: reading SSE streams and /metrics over HTTP, and
starting a server process that cannot outlive the test run."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadgen.sse import SSEParser
from perfmodel.config import EngineConfig
from simengine.embedded import EmbeddedServer
from simengine.metrics import RequestLatency

DONE = b"[DONE]"


def fast_config(**overrides: Any) -> EngineConfig:
    """A small engine with a fixed 2 ms step: fast tests, a 2500-token prefix fits."""
    settings: dict[str, Any] = {
        "fixed_step_s": 0.002,
        "num_gpu_blocks": 400,
        "max_model_len": 8192,
        "served_model_name": "tiny-embedded",
    }
    return EngineConfig(**(settings | overrides))


@contextmanager
def served(config: EngineConfig | None = None, **options: Any) -> Iterator[httpx.Client]:
    """An embedded engine (``fast_config()`` unless given) and a client bound to its URL."""
    with (
        EmbeddedServer(config or fast_config(), **options) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        yield client


def stream_events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming request; the JSON events in order (``[DONE]`` checked, not returned)."""
    parser = SSEParser()
    payloads: list[bytes] = []
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        for piece in response.iter_raw():
            payloads.extend(parser.feed(piece))
    assert payloads[-1] == DONE and DONE not in payloads[:-1]
    return [json.loads(p) for p in payloads[:-1]]


def metric_samples(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, keyed by (name, sorted labels), via prometheus_client's parser."""
    text = client.get("/metrics").text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def pick(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The one sample called ``name`` whose labels include ``labels``."""
    hits = [v for (n, lbl), v in samples.items() if n == name and set(labels.items()) <= set(lbl)]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """One sample from a fresh scrape (see ``pick``)."""
    return pick(metric_samples(client), name, **labels)


def wait_for(predicate: Any, timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` until true (the engine frees an aborted request asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@dataclass(frozen=True)
class EngineMoments:
    """One finished request as the engine itself timed it, on its loop clock: arrival,
    first and last token emitted, emissions that carried tokens."""

    arrival: float
    first: float
    last: float
    emissions: int

    @property
    def ttft_s(self) -> float:
        return self.first - self.arrival

    @property
    def decode_s(self) -> float:
        return self.last - self.first


@contextmanager
def engine_moments() -> Iterator[list[EngineMoments]]:
    """The embedded engines' own per-request moments, in the order requests finish, taken
    from ``RequestLatency.emitted`` (the call that feeds the latency histograms) while the
    block runs: the server-side truth for the same events a client timed."""
    finished: list[EngineMoments] = []
    counts: dict[int, int] = {}
    emitted = RequestLatency.emitted

    def recording(self: RequestLatency, has_tokens: bool, finished_now: bool, now: float) -> None:
        emitted(self, has_tokens, finished_now, now)
        if has_tokens:
            counts[id(self)] = counts.get(id(self), 0) + 1
        if finished_now and self.first is not None:
            emissions = counts.pop(id(self), 0)
            finished.append(EngineMoments(self.arrival, self.first, self.last, emissions))

    RequestLatency.emitted = recording  # type: ignore[method-assign]
    try:
        yield finished
    finally:
        RequestLatency.emitted = emitted  # type: ignore[method-assign]


@contextmanager
def held_steps(
    server: EmbeddedServer, hold_s: float, kinds: tuple[str, ...] = ("decode",)
) -> Iterator[None]:
    """Every step of ``kinds`` of ``server``'s engine holds its loop ``hold_s`` of wall
    time while the block runs, as a starved machine would (its core computing slower than
    its cost model says): each such step ends at least ``hold_s`` − its modelled time
    late, whatever the machine's load. The engine's own ``step`` is wrapped on its
    instance."""
    assert server.server is not None
    core = server.server.core
    step = core.step

    def holding() -> Any:
        result = step()
        if result.kind in kinds:
            time.sleep(hold_s)
        return result

    core.step = holding  # type: ignore[method-assign]
    try:
        yield
    finally:
        del core.step  # the class's method again
