"""``bench``'s vLLM result and profiler flags (``prefillscope.vllm_result``), end to end on
the embedded engine: ``--save-result`` writes vLLM's file where vLLM would, with the keys
asked for; ``--append-result`` adds a line; ``--profile`` drives a server's profiler
endpoints, and says so where a server has none."""

from __future__ import annotations

import json
import re
from pathlib import Path

from aiohttp import web
from bench_support import bench_cli
from server_support import fast_config
from small_disk import fill, small_tmpfs
from threaded_app import ThreadedApp

from prefillscope.vllm_result import VllmResultFlags, profiler_call, result_path, wait_ready
from runtime.atomic import EXIT_WRITE_FAILED
from simengine.embedded import EmbeddedServer

SMALL = ["--random-input-len", "32", "--random-output-len", "4", "--num-prompts", "6",
         "--gpu-telemetry", "off", "--engine", "fixed_step_s=0.002"]  # fmt: skip


def test_save_result_writes_vllms_file_where_vllm_would_with_the_keys_asked(tmp_path: Path):
    results = tmp_path / "results"
    done = bench_cli(
        *SMALL, "--max-concurrency", "2", "--save-result", "--save-detailed",
        "--result-dir", str(results), "--goodput", "ttft:60000", "e2el:60000",
        "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,99",
        "--label", "nightly", "--metadata", "tp=1", "host=cpu", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [path] = results.iterdir()
    # vLLM's name: {label}-{request_rate}qps-concurrency{N}-{model}-{date}.json
    assert re.fullmatch(r"nightly-infqps-concurrency2-[\w.-]+-\d{8}-\d{6}\.json", path.name)
    assert f"vLLM result file: {path}" in done.stderr
    doc = json.loads(path.read_text())
    assert (doc["label"], doc["tp"], doc["host"], doc["max_concurrency"]) == (
        "nightly", "1", "cpu", 2,
    )  # fmt: skip
    assert doc["tokenizer_id"] == doc["model_id"]  # no --tokenizer: vLLM's is the model
    assert {"p50_ttft_ms", "p99_ttft_ms", "p50_e2el_ms", "p99_e2el_ms"} <= set(doc)
    assert not any("tpot" in key or "itl_ms" in key for key in doc)  # not asked for
    # every request met the generous SLO: goodput is the request throughput, not null
    assert doc["request_goodput"] == doc["request_throughput"] > 0
    # --save-detailed: the answers' text, one per request, as streamed
    assert len(doc["generated_texts"]) == 6 and all(t.strip() for t in doc["generated_texts"])
    assert doc["errors"] == [""] * 6 and len(doc["start_times"]) == 6
    # the screen shows the percentiles asked for, timed as vLLM times them
    assert "percentiles asked for" in done.stdout and "TTFT (from actual send)" in done.stdout


def test_append_result_adds_a_line_and_no_detail_without_save_detailed(tmp_path: Path):
    for _ in range(2):
        done = bench_cli(
            *SMALL, "--append-result", "--result-dir", str(tmp_path),
            "--result-filename", "all.json", "--out", str(tmp_path / f"run{_}"),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    lines = (tmp_path / "all.json").read_text().splitlines()
    docs = [json.loads(line) for line in lines]
    assert len(docs) == 2 and all(d["completed"] == 6 for d in docs)
    assert all("generated_texts" not in d and "ttfts" not in d for d in docs)
    assert all(d["request_goodput"] is None for d in docs)  # no --goodput: null, as vLLM


def test_a_result_file_on_a_full_disk_is_exit_6_and_leaves_nothing(tmp_path: Path):
    """vLLM's result file is written as every document is (``runtime.atomic``): on a full
    disk one line and exit 6, no file and no temporary left; the run itself is kept."""
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        fill(disk)
        done = bench_cli(
            *SMALL, "--save-result", "--result-dir", str(disk), "--result-filename", "r.json",
            "--out", str(tmp_path / "run"),
        )  # fmt: skip
        assert done.returncode == EXIT_WRITE_FAILED, done.stderr
        [line] = [x for x in done.stderr.splitlines() if "write failed: " in x]
        assert f"no space left on {disk}" in line and "r.json: nothing written there" in line
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    assert (tmp_path / "run" / "summary.json").is_file()


def test_result_flags_without_save_result_are_refused_before_anything_runs(tmp_path: Path):
    done = bench_cli(*SMALL, "--result-dir", str(tmp_path / "r"), "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and "--result-dir" in done.stderr
    assert "--save-result" in done.stderr and not (tmp_path / "run").exists()


def test_the_default_name_of_a_ramp_is_vllms():
    from datetime import datetime

    path = result_path(
        VllmResultFlags(save=True), backend="openai", rate=None, max_concurrency=None,
        model="org/tiny-llama", ramp=("linear", 1.0, 8.0), now=datetime(2026, 12, 6, 21, 0, 5),
    )  # fmt: skip
    assert path == Path("openai-ramp-up-linear-1qps-8qps-tiny-llama-20261206-210005.json")


class _Profiler(ThreadedApp):
    """A server with vLLM's profiler endpoints, counting the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def routes(self, app: web.Application) -> None:
        async def profile(request: web.Request) -> web.Response:
            self.calls.append(request.path)
            return web.json_response({})

        app.router.add_post("/start_profile", profile)
        app.router.add_post("/stop_profile", profile)


def test_profile_calls_the_servers_profiler_endpoints(capsys):
    with _Profiler() as server:
        assert profiler_call(server.url, "start_profile", None)
        assert profiler_call(server.url, "stop_profile", None)
    assert server.calls == ["/start_profile", "/stop_profile"]
    assert "profiler started" in capsys.readouterr().err


def test_profile_against_a_server_without_a_profiler_says_so_and_runs(tmp_path: Path):
    with EmbeddedServer(fast_config()) as server:
        done = bench_cli(
            "--endpoint", server.url, "--random-input-len", "32", "--random-output-len", "4",
            "--num-prompts", "4", "--gpu-telemetry", "off", "--profile",
            "--ready-check-timeout-sec", "30",
            "--out", str(tmp_path / "run"),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "/start_profile answered 404" in done.stderr and "not profiled" in done.stderr


def test_the_ready_check_waits_for_a_server_that_comes_up_late(tmp_path: Path):
    """vLLM's --ready-check-timeout-sec: a server listening only after ~1.5 s is waited
    for; a port where nothing comes up is one line naming the flag, exit 2."""
    import socket
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class Models(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"data": []}')

        def log_message(self, *args) -> None:
            pass

    servers = []

    def start_late() -> None:
        time.sleep(1.5)
        servers.append(ThreadingHTTPServer(("127.0.0.1", port), Models))
        servers[0].serve_forever()

    threading.Thread(target=start_late, daemon=True).start()
    began = time.monotonic()
    wait_ready(f"http://127.0.0.1:{port}", 30.0, None)
    assert time.monotonic() - began >= 1.4
    servers[0].shutdown()
    servers[0].server_close()
    done = bench_cli(
        "--endpoint", f"http://127.0.0.1:{port}", *SMALL[:6], "--ready-check-timeout-sec", "1",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert done.returncode == 2 and not (tmp_path / "run").exists()
    assert done.stderr.startswith("prefillscope: error: --ready-check-timeout-sec:")
    assert "not ready after 1 s" in done.stderr
