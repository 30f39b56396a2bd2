"""A /metrics scrape is bounded in time and size: a page that trickles a byte at a time
(each read within the socket timeout, the whole never) fails once ``timeout_s`` has
passed in all, and a page larger than ``MAX_PAGE_BYTES`` fails without being kept; the
scraper journals the failure and goes on (``MetricsScraper.tick``)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web
from threaded_app import ThreadedApp

from probes.exposition import MAX_PAGE_BYTES, get_text
from probes.scraper import MetricsScraper
from runtime.clock import RunClock
from workloads.errors import InputError

PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"


class BadMetrics(ThreadedApp):
    """``/trickle``: a byte every 50 ms, for ever; ``/huge``: a page over the cap;
    ``/metrics``: a good page; ``/stall``: half a page, then nothing (``stalled`` counts
    its GETs)."""

    stalled = 0

    def routes(self, app: web.Application) -> None:
        async def stall(request: web.Request) -> web.StreamResponse:
            type(self).stalled += 1
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            await resp.write(PAGE[:20])
            await asyncio.sleep(2)  # far past a scrape's timeout
            return resp

        async def trickle(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            while True:
                await resp.write(b"#")
                await asyncio.sleep(0.05)

        async def huge(request: web.Request) -> web.Response:
            return web.Response(body=PAGE * (MAX_PAGE_BYTES // len(PAGE) + 2))

        async def good(request: web.Request) -> web.Response:
            return web.Response(body=PAGE, content_type="text/plain")

        app.router.add_get("/stall", stall)
        app.router.add_get("/trickle", trickle)
        app.router.add_get("/huge", huge)
        app.router.add_get("/metrics", good)


def test_a_trickling_page_fails_at_the_whole_answers_deadline() -> None:
    with BadMetrics() as server:
        began = time.monotonic()
        with pytest.raises(InputError, match=r"no whole page within 0.5 s"):
            get_text(f"{server.url}/trickle", timeout_s=0.5)
        took = time.monotonic() - began
    print(f"trickling page cut after {took:.2f} s (deadline 0.5 s)")
    assert took < 2.0  # per-read timeouts alone would never end it


def test_a_page_over_the_size_cap_fails_and_the_scraper_goes_on() -> None:
    with BadMetrics() as server:
        with pytest.raises(InputError, match=r"larger than 8,388,608 bytes"):
            get_text(f"{server.url}/huge", timeout_s=5)

        async def two_ticks() -> tuple[object, object, str | None]:
            clock = RunClock()
            huge = MetricsScraper(f"{server.url}/huge", clock, timeout_s=5)
            good = MetricsScraper(server.url, clock, timeout_s=5)
            failed = await huge.tick()
            return failed, await good.tick(), huge.status.reason

        failed, scraped, reason = asyncio.run(two_ticks())
    assert failed is None and reason is not None and "larger than" in reason
    assert scraped is not None  # the next scrape is taken as usual


def test_after_a_scrape_that_ran_out_of_time_the_last_one_is_not_taken() -> None:
    """A page that stalls: the first scrape runs out of its 0.3 s, and the run's last
    sample (after the stop) is not attempted, so the run's end waits for no second
    timeout (before: a second GET, another whole timeout at every run's end; a 2-s bench
    against such a page took 16 s). Counted in GETs, not timed."""
    BadMetrics.stalled = 0
    with BadMetrics() as server:

        async def run() -> int:
            scraper = MetricsScraper(
                f"{server.url}/stall", RunClock(), interval_s=60, timeout_s=0.3
            )
            async with scraper:  # the first sample, failed
                pass  # the run: the next sample is a minute away, so the stop comes first
            return scraper.status.failed

        failed = asyncio.run(run())
    assert BadMetrics.stalled == 1, BadMetrics.stalled  # before: 2, the last one a timeout
    assert failed == 2  # the last sample counts as failed (not taken), the run's end on time
