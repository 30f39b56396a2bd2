"""A load against an ``https://`` endpoint, on asyncio's loop and on uvloop (the CLI's).

uvloop's TLS transport cannot be weakly referenced, and the exchanger once kept each
connection's last answer keyed by its transport: every request to an ``https://``
endpoint failed on the CLI's loop before a byte was sent. The server here is aiohttp's
with a self-signed certificate for 127.0.0.1 (``tests/fixtures/tls``), which the run's
connections are made to trust.
"""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from loadgen_servers import Server, generator, run_against, specs
from loops import LOOPS, run_on
from repo_paths import FIXTURES

TLS = FIXTURES / "tls"


def _server_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS / "cert.pem", TLS / "key.pem")
    return context


@pytest.mark.parametrize("loop", LOOPS)
def test_a_run_over_https_sends_every_request_and_times_its_tokens(
    loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six requests, two users, so that connections opened ahead are reused: all answered
    in full, each token timed when it arrived (the server's 30 ms between tokens)."""
    trusted = ssl.create_default_context(cafile=str(TLS / "cert.pem"))
    monkeypatch.setattr(
        aiohttp, "TCPConnector", functools.partial(aiohttp.TCPConnector, ssl=trusted)
    )

    async def main():
        async with Server(generator(0.01, 0.03), ssl_context=_server_context()) as url:
            assert url.startswith("https://")
            return await run_against(url, specs(6, max_tokens=5), tmp_path, concurrency=2)

    result, requests, chunks, _ = run_on(loop, main)
    assert result.ok == 6, requests[["error_kind", "error_message"]].to_string()
    assert requests["output_tokens"].tolist() == [5] * 6
    gaps = np.concatenate(
        [np.diff(np.sort(g["t_s"].to_numpy())) for _, g in chunks.groupby("request_id")]
    )
    assert gaps.size == 6 * 4
    assert np.median(gaps) == pytest.approx(0.03, abs=0.01)
