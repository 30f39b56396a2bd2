"""A run as a whole: cache protocol, live observer, client health, server death, Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import aiohttp
import numpy as np
import pandas as pd
import pytest
from aiohttp import web
from loadgen_servers import (
    Server,
    generator,
    replay,
    routes,
    run_against,
    specs,
    status_reply,
)
from prometheus_client.parser import text_string_to_metric_families
from repo_paths import FIXTURES, SUPPORT
from server_support import engine_moments

from loadgen.load_options import LoadObserver, LoadOptions
from loadgen.records import ChunkTimes, RequestRecord
from loadgen.run import LoadRun
from loadgen.target import Target
from perfmodel.config import EngineConfig
from probes.token_gaps import token_gaps
from runfmt.codec import encode
from runfmt.rundir import RunDir
from runfmt.tables import CLIENT, RunTables
from runtime.clock import RunClock
from simengine.embedded import EmbeddedServer
from workloads.plan import Plan


def _reply_json(body: object) -> web.Response:
    return web.json_response(body)


def test_cache_reset_through_the_server_endpoint(tmp_path: Path) -> None:
    resets: list[str] = []

    async def reset(request: web.Request) -> web.StreamResponse:
        resets.append(request.method)
        return _reply_json({"success": True})

    server = generator(0.0, 0.0)

    async def go():
        async with Server(routes({"/reset_prefix_cache": reset}, server)) as url:
            return await run_against(url, specs(2), tmp_path, cache_protocol="reset")

    result, _, _, _ = asyncio.run(go())
    assert resets == ["POST"]
    assert encode(result.cache_protocol) == {
        "requested": "reset",
        "applied": "reset",
        "salt": None,
        "note": None,
    }
    assert all("cache_salt" not in body for body in server.bodies)


def test_cache_reset_refused_by_vllm_falls_back_to_a_salt(tmp_path: Path) -> None:
    not_found = status_reply(404, b'{"detail":"Not Found"}')  # vLLM without dev mode
    server = generator(0.0, 0.0)
    plan = specs(3)
    plan[1] = replace(plan[1], tenant="acme")

    async def go():
        async with Server(routes({"/reset_prefix_cache": not_found}, server)) as url:
            return await run_against(url, plan, tmp_path, cache_protocol="reset")

    result, _, _, _ = asyncio.run(go())
    protocol = result.cache_protocol
    assert protocol.applied == "salt" and "VLLM_SERVER_DEV_MODE=1" in (protocol.note or "")
    salt = protocol.salt
    assert [b["cache_salt"] for b in server.bodies] == [salt, f"{salt}-acme", salt]
    # a later run gets a different salt: nothing it caches can hit this run's prefixes
    result2, _, _, _ = asyncio.run(go())
    assert result2.cache_protocol.salt != salt


def test_llamacpp_reset_erases_every_slot(tmp_path: Path) -> None:
    slots = json.loads((FIXTURES / "llamacpp" / "slots-idle.json").read_text())
    erased: list[str] = []

    async def list_slots(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            erased.append(request.path_qs)
            return _reply_json({"n_erased": 0})
        return _reply_json(slots)

    native = (FIXTURES / "llamacpp" / "completion-native-stream.sse").read_bytes()
    handlers = {"/slots": list_slots, "/completion": replay(native)}
    handlers.update({f"/slots/{s['id']}": list_slots for s in slots})

    async def go():
        async with Server(routes(handlers, list_slots)) as url:
            return await run_against(
                url, specs(1), tmp_path, flavour="llamacpp", api="llamacpp", cache_protocol="reset"
            )

    result, requests, _, _ = asyncio.run(go())
    assert result.cache_protocol.applied == "reset"
    assert erased == [f"/slots/{s['id']}?action=erase" for s in slots]
    assert requests.iloc[0]["cached_tokens"] == 3


class Counting(LoadObserver):
    def __init__(self) -> None:
        self.sent = self.first = self.finished = self.tokens = 0
        self.streams: dict[str, ChunkTimes] = {}

    def on_send(self, record: RequestRecord) -> None:
        self.sent += 1

    def on_first_token(self, record: RequestRecord) -> None:
        assert record.first_token_s is not None
        self.first += 1

    def on_stream(self, record: RequestRecord, chunks: ChunkTimes) -> None:
        assert not chunks.t_s  # handed over before its first read
        self.streams[record.id] = chunks

    def on_finish(self, record: RequestRecord) -> None:
        self.finished += 1
        self.tokens += sum(self.streams[record.id].n_tokens)


def _run(url: str, plan: Plan, path: Path, observer=None, **options) -> LoadRun:
    target = Target(url, "vllm", "completions", "tiny-llama", vocab_size=8192)
    return LoadRun(
        plan, target, RunDir(path, create=True), RunClock(), LoadOptions(**options), observer
    )


def test_observer_and_client_health(tmp_path: Path) -> None:
    observer = Counting()

    async def go():
        async with Server(generator(0.01, 0.005)) as url:
            run = _run(
                url,
                Plan("t", 0, specs(6, max_tokens=5, gap_s=0.05)),
                tmp_path,
                observer,
                health_interval_s=0.05,
            )
            return await run.run(), run

    result, run = asyncio.run(go())
    assert (observer.sent, observer.first, observer.finished) == (6, 6, 6)
    assert observer.tokens == 30
    chunks = RunTables(run.run_dir).chunks  # what the observer saw is what was written
    for request_id, seen in observer.streams.items():
        written = chunks[chunks["request_id"] == request_id]
        assert list(seen.t_s) == written["t_s"].tolist()
        assert list(seen.n_tokens) == written["n_tokens"].tolist()
    client = RunTables(run.run_dir).client
    assert len(client) >= 5 and result.client.samples == len(client)
    assert tuple(client.columns) == CLIENT.columns  # the run format's schema
    assert (client["loop_lag_s"] >= 0).all() and (client["cpu_share"] <= 1.5).all()
    assert client["t_s"].is_monotonic_increasing


@pytest.mark.timing
def test_server_killed_mid_run(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(SUPPORT / "loadgen_servers.py"), "--ttft", "0.02", "--itl", "0.02"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        plan = Plan("t", 0, specs(40, max_tokens=20, gap_s=0.05))

        async def go():
            run = _run(url, plan, tmp_path)
            task = asyncio.create_task(run.run())
            await asyncio.sleep(0.8)
            proc.kill()
            return await asyncio.wait_for(task, 20), run

        result, run = asyncio.run(go())
    finally:
        proc.kill()
        proc.wait()
    requests = RunTables(tmp_path).requests
    assert result.status == "interrupted" and "stopped answering" in result.reason
    assert len(requests) == result.finished == result.released
    ok = requests[requests["status"] == "ok"]
    assert len(ok) >= 3 and (ok["output_tokens"] == 20).all()
    failed = requests[requests["status"] == "error"]
    kinds = set(failed["error_kind"])
    assert "stream_truncated" in kinds  # the streams cut by the kill
    assert kinds <= {"stream_truncated", "connect", "dropped", "cancelled"}
    assert result.sent < 40  # it stopped sending to a dead server
    assert RunTables(run.run_dir).chunks["request_id"].isin(requests["id"]).all()


def test_cancelled_run_records_in_flight_requests(tmp_path: Path) -> None:
    """What Ctrl-C does under asyncio.run: the main task is cancelled."""

    async def go():
        async with Server(generator(0.05, 0.02)) as url:
            run = _run(url, Plan("t", 0, specs(30, max_tokens=10, gap_s=0.03)), tmp_path)
            task = asyncio.create_task(run.run())
            await asyncio.sleep(0.6)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return run

    run = asyncio.run(go())
    assert run.result.status == "interrupted" and "cancelled" in run.result.reason
    requests = RunTables(run.run_dir).requests
    cancelled = requests[requests["error_kind"] == "cancelled"]
    assert len(cancelled) >= 2  # ~0.25 s of work in flight at 30 ms intervals
    assert (requests[requests["status"] == "ok"]["output_tokens"] == 10).all()
    assert len(requests) == run.result.finished and run.result.sent < 30
    assert cancelled["end_s"].notna().all()


def test_bad_options_and_plans_are_one_line_input_errors(tmp_path: Path) -> None:
    from workloads.errors import InputError

    cases = [
        (specs(1, gap_s=0.0), {"max_concurrency": 0}, "--max-concurrency"),
        (specs(1, gap_s=0.0), {"request_timeout_s": -1.0}, "--timeout"),
        (specs(2), {}, "--concurrency"),  # closed-loop requests, no users
        (specs(1, gap_s=0.0), {"cache_protocol": "flush"}, "--cache"),
    ]
    for plan, options, field in cases:
        run = _run("http://127.0.0.1:9", Plan("t", 0, plan), tmp_path / field, **options)
        with pytest.raises(InputError) as info:
            asyncio.run(run.run())
        assert info.value.field == field and "\n" not in str(info.value)
    chat = Target("http://127.0.0.1:9", "vllm", "chat", "m", vocab_size=8192)
    run = LoadRun(
        Plan("t", 0, specs(1, gap_s=0.0)), chat, RunDir(tmp_path / "c", create=True), RunClock()
    )
    with pytest.raises(InputError, match="takes text prompts"):
        asyncio.run(run.run())


def _engine_itl(url: str) -> tuple[float, float]:
    """The engine's own ``vllm:inter_token_latency_seconds`` (sum, count)."""
    text = asyncio.run(_get_text(url + "/metrics"))
    values = {"sum": 0.0, "count": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:inter_token_latency_seconds":
            for sample in family.samples:
                for part in values:
                    if sample.name.endswith("_" + part):
                        values[part] += sample.value
    return values["sum"], values["count"]


async def _get_text(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.text()


@pytest.mark.timing
def test_client_itl_equals_the_engines_own(tmp_path: Path) -> None:
    """Per-token gaps seen by the client average to the engine's own ITL (per emission),
    judged request by request against the engine's emit moments of the same tokens.

    A client's span from first to last token differs from the engine's only by how late
    those two tokens were delivered; on a busy machine a stall lands on some requests'
    first or last token, so the typical (median) request is compared, not the mean."""
    with (
        EmbeddedServer(EngineConfig(fixed_step_s=0.004, vocab_size=4096)) as server,
        engine_moments() as engine,
    ):
        before = _engine_itl(server.url)

        async def go():
            return await run_against(
                server.url,
                specs(30, prompt_len=32, max_tokens=24, gap_s=0.02),
                tmp_path,
                flavour="embedded",
                model=server.config.model_name,
            )

        _, requests, chunks, _ = asyncio.run(go())
        after = _engine_itl(server.url)
    assert (requests["status"] == "ok").all()
    assert len(engine) == 30 and all(m.emissions == 24 for m in engine)
    # the histogram is the engine's per-request gaps, one observation per emission
    assert after[1] - before[1] == 30 * 23
    engine_spans = np.array([m.decode_s for m in engine])
    assert after[0] - before[0] == pytest.approx(engine_spans.sum(), rel=1e-9)
    # Events that reach the client in one read share a chunk (and a timestamp), so count
    # per token with the statistics module's rule rather than per chunk.
    gaps = token_gaps(chunks)
    assert gaps.gap_s.size == 30 * 23  # every token but the first of each request
    client_itl = pd.Series(gaps.gap_s).groupby(gaps.request).mean().to_numpy()
    engine_itl = engine_spans / 23
    assert np.median(client_itl) == pytest.approx(np.median(engine_itl), rel=0.02), (
        np.median(client_itl),
        np.median(engine_itl),
    )
