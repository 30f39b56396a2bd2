"""Planted secrets never reach an output.

Six distinct secrets go in through every path a user has: ``--api-key KEY``,
``--api-key=KEY``, a URL's password, and — inside a ``diagnose ab --launch`` command — an
environment assignment (``env HF_TOKEN=…``), a ``--api-key KEY`` and a ``--hf-token=KEY``
flag. The bench runs go through a proxy in front of the embedded engine that refuses
every third completion with HTTP 401 and the key echoed in its body, as OpenAI's API does
("Incorrect API key provided: sk-…"). Then every byte the commands produced is searched:
each run directory, the A/B folder (``ab.json``, every trial, the server logs), the HTML
reports and the commands' stdout and stderr. The secrets must really have been used —
the proxy saw the keys, the launched servers got their flags and environment — and
must appear nowhere.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import ClientSession, web
from bench_support import CLI as BENCH_CLI
from bench_support import requests_table
from key_gateway import QueryKeyGateway
from threaded_app import ThreadedApp

from perfmodel.config import EngineConfig
from simengine.embedded import EmbeddedServer

PREFILLSCOPE = [sys.executable, "-c", "from prefillscope.cli import main; main()"]
SECRETS = {
    "--api-key KEY": "sk-flag-7f3a9c1e5d",
    "--api-key=KEY": "sk-eq-2b8d4f60a1",
    "URL password": "pw-url-5c1e7a93b2",
    "launch env HF_TOKEN=": "hf-env-9d2c4b71c3",
    "launch --api-key KEY": "sk-launch-3e6f0a2dd4",
    "launch --hf-token=KEY": "hf-launch-8a4c1f5be5",
}
BENCH = ["--workload", "system-prompt", "--num-requests", "6", "--rate", "20"]
BENCH += ["--vocab-size", "32000", "--gpu-telemetry", "off"]
#: A launched server: ``prefillscope serve`` behind a wrapper that records what it was
#: given (argv and $HF_TOKEN, to a file outside the A/B folder), prints them to its log as
#: vLLM prints its arguments at start, and drops the auth flags.
WRAPPER = """
import json, os, sys
seen, port, chunk = sys.argv[1:4]
given = {"argv": sys.argv, "HF_TOKEN": os.environ.get("HF_TOKEN")}
with open(seen + "-" + port, "w") as fh:
    json.dump(given, fh)
print("non-default args:", given, flush=True)
sys.argv = ["prefillscope", "serve", "--port", port, "--max-num-batched-tokens", chunk,
            "--fixed-step-ms", "2"]
from prefillscope.cli import main
main()
"""


class EchoingProxy(ThreadedApp):
    """A proxy to an engine that refuses every third completion sent with a bearer key
    with 401, echoing the key in the error body; it records the keys it saw."""

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream
        self.keys_seen: set[str] = set()
        self._completions: dict[str, int] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._handle)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        auth = request.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        if key:
            self.keys_seen.add(key)
        if key and request.path.endswith("/completions"):
            self._completions[key] = self._completions.get(key, 0) + 1
            if self._completions[key] % 3 == 0:  # the first (the smoke test) goes through
                error = {
                    "message": f"Incorrect API key provided: {key}. Find your key at …",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
                return web.json_response({"error": error}, status=401)
        async with (
            ClientSession() as session,
            session.request(request.method, self.upstream + request.path_qs, data=body) as up,
        ):
            headers = {"Content-Type": up.headers.get("Content-Type", "application/json")}
            resp = web.StreamResponse(status=up.status, headers=headers)
            await resp.prepare(request)
            async for piece in up.content.iter_any():
                await resp.write(piece)
            await resp.write_eof()
            return resp


@pytest.fixture(scope="module")
def proxy() -> Iterator[EchoingProxy]:
    with (
        EmbeddedServer(EngineConfig(fixed_step_s=0.002)) as engine,
        EchoingProxy(engine.url) as echoing,
    ):
        yield echoing


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def leaks(where: str, data: bytes) -> list[str]:
    """``"<secret> ×N in <where>"`` for each planted secret found in ``data``."""
    counts = {name: data.count(s.encode()) for name, s in SECRETS.items()}
    return [f"{name} ×{n} in {where}" for name, n in counts.items() if n]


def folder_leaks(folder: Path) -> list[str]:
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        found += leaks(str(path.relative_to(folder.parent)), path.read_bytes())
    return found


@pytest.mark.slow
def test_planted_secrets_reach_no_output(tmp_path: Path, proxy: EchoingProxy) -> None:
    host = proxy.url.removeprefix("http://")
    benches = {
        "flag": ["--endpoint", proxy.url, "--api-key", SECRETS["--api-key KEY"]],
        "eq": ["--endpoint", proxy.url, f"--api-key={SECRETS['--api-key=KEY']}"],
        "url": ["--endpoint", f"http://user:{SECRETS['URL password']}@{host}"],
    }
    outputs: dict[str, bytes] = {}
    found: list[str] = []
    for name, target in benches.items():
        out = tmp_path / name
        done = run(*BENCH_CLI, *BENCH, *target, "--out", out)
        assert done.returncode == 0, done.stderr
        outputs[f"bench {name} stdout+stderr"] = (done.stdout + done.stderr).encode()
        report = run(*PREFILLSCOPE, "report", out, "--html", tmp_path / f"{name}.html")
        assert report.returncode == 0, report.stderr
        outputs[f"report {name} stdout+stderr"] = (report.stdout + report.stderr).encode()
        outputs[f"report {name}.html"] = (tmp_path / f"{name}.html").read_bytes()
        found += folder_leaks(out)
    seen = tmp_path / "seen"
    launch = (
        f"env HF_TOKEN={SECRETS['launch env HF_TOKEN=']} {shlex.quote(sys.executable)} "
        f"-c {shlex.quote(WRAPPER)} {seen} {{port}} {{chunk}} "
        f"--api-key {SECRETS['launch --api-key KEY']} "
        f"--hf-token={SECRETS['launch --hf-token=KEY']}"
    )
    ab_out = tmp_path / "ab"
    done = run(
        *PREFILLSCOPE, "diagnose", "ab", "--chunks", "512,1024", "--launch", launch,
        "--workload", "shared-prefix", "--num-requests", "6", "--rate", "20", "--seed", "1",
        "--set", "output_len=4", "--set", "prefix_len=64", "--set", "suffix_len=32",
        "--vocab-size", "32000", "--gpu-telemetry", "off", "--resamples", "200",
        "--warmup-trials", "0",
        "--tolerance", "rate=100", "--tolerance", "client=1", "--tolerance", "loop_lag=1",
        "--out", ab_out,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    outputs["diagnose ab stdout+stderr"] = (done.stdout + done.stderr).encode()
    found += folder_leaks(ab_out)
    trial = next((ab_out / "trials").iterdir())
    report = run(*PREFILLSCOPE, "report", trial, "--html", tmp_path / "trial.html")
    outputs["report trial.html"] = (tmp_path / "trial.html").read_bytes()
    outputs["report trial stdout+stderr"] = (report.stdout + report.stderr).encode()

    for where, data in outputs.items():
        found += leaks(where, data)
    files = sum(1 for f in [*tmp_path.rglob("*")] if f.is_file())
    print(f"searched {len(outputs)} outputs and {files} files for {len(SECRETS)} secrets")
    assert found == [], "\n".join(found)

    # the keys reached the server, and the server's echo of them is in the run, redacted
    assert {SECRETS["--api-key KEY"], SECRETS["--api-key=KEY"]} <= proxy.keys_seen
    for name in ("flag", "eq"):
        refused = requests_table(tmp_path / name).query("http_status == 401")
        assert len(refused) >= 1
        echoed = "HTTP 401: Incorrect API key provided: REDACTED. "
        assert refused["error_message"].str.startswith(echoed).all()
    url_run = json.loads((tmp_path / "url" / "run.json").read_text())
    assert url_run["target"]["url"].startswith("http://user:REDACTED@")
    # the launched servers really got the secrets (recorded outside the A/B folder)
    given = [json.loads(p.read_text()) for p in tmp_path.glob("seen-*")]
    assert len(given) == 2
    for record in given:
        assert record["HF_TOKEN"] == SECRETS["launch env HF_TOKEN="]
        assert SECRETS["launch --api-key KEY"] in record["argv"]
        assert f"--hf-token={SECRETS['launch --hf-token=KEY']}" in record["argv"]
    doc = json.loads((ab_out / "ab.json").read_text())
    assert "HF_TOKEN=REDACTED" in doc["launch"] and "--hf-token=REDACTED" in doc["launch"]


#: A key passed in the endpoint's query string, as Azure-style deployments take it.
QUERY_KEY = "qk-gateway-4d7e1b9a30"


@pytest.mark.slow
def test_a_key_in_the_endpoint_query_is_sent_every_time_and_shown_nowhere(
    tmp_path: Path,
) -> None:
    with (
        EmbeddedServer(EngineConfig(fixed_step_s=0.002)) as engine,
        QueryKeyGateway(engine.url, "api_key", QUERY_KEY) as gateway,
    ):
        endpoint = f"{gateway.url}/v1?api_key={QUERY_KEY}&deployment=d1"
        out = tmp_path / "run"
        text = ["--set", "prompt_format=text"]  # /tokenize goes through the gateway too
        done = run(*BENCH_CLI, *BENCH, *text, "--endpoint", endpoint, "--out", out)
        assert done.returncode == 0, done.stderr
        streams = {"bench": done.stdout + done.stderr}
        html, vllm_json = tmp_path / "report.html", tmp_path / "vllm.json"
        for name, args in {
            "report": ["report", out, "--html", html],
            "report --json": ["report", out, "--json"],
            "export csv": ["export", out, "--format", "csv"],
            "export vllm-json": ["export", out, "--format", "vllm-json", "--out", vllm_json],
        }.items():
            shown = run(*PREFILLSCOPE, *args)
            assert shown.returncode == 0, shown.stderr
            streams[name] = shown.stdout + shown.stderr
        log = list(gateway.log)
    found = {where: data.count(QUERY_KEY) for where, data in streams.items()}
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    found |= {str(p.relative_to(tmp_path)): p.read_bytes().count(QUERY_KEY.encode()) for p in files}
    total = sum(found.values())
    print(f"planted {QUERY_KEY!r}: {total} in {len(streams)} streams, {len(files)} files")
    completions = [line for line in log if " /v1/completions?" in line]
    print(f"gateway saw {len(log)} requests, {len(completions)} completions:", *log[:2],
          completions[-1], sep="\n  ")  # fmt: skip
    assert total == 0, {k: n for k, n in found.items() if n}
    # every request reached the server with the query as given, none was refused
    assert gateway.refused == [] and len(completions) == 6 + 1  # the run's and the test request
    assert all(f"?api_key={QUERY_KEY}&deployment=d1" in line for line in log), log
    paths = {line.split()[1].partition("?")[0] for line in log}
    assert {"/v1/models", "/v1/completions", "/metrics", "/tokenize"} <= paths
    # the URL is recorded with the key's value redacted and the rest of the query kept
    target = json.loads((out / "run.json").read_text())["target"]
    assert target["url"] == f"{gateway.url}?api_key=REDACTED&deployment=d1"
