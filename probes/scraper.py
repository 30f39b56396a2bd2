"""Scraping a server's /metrics during a run into the ``server_metrics`` table.

Every ``interval_s`` (0.5 s by default) one GET, parsed, and every sample appended in
long format — ``t_s, metric, labels (JSON), value`` — so nothing the server said is lost
to our mapping's choices; normalising happens on read (``probes.normalise``). ``t_s`` is
the midpoint of the request on the run clock: the server rendered its values somewhere
between send and receipt. ``*_created`` samples (prometheus_client's creation stamps,
constant) are not kept. A failed scrape is recorded in the probe status and journal,
and the next one is attempted on schedule: the probe never stops the run.

Parsing a vLLM page (~400 samples) takes ~2 ms of CPU when it is plain text
(``probes.plain_exposition``), ~10 ms when it needs prometheus_client's parser.
``bench`` runs the scraper in a child process (``probes.probe_process``), away from the
load generator's event loop; a caller that runs it in-process shares its loop with it,
so parsing is done cooperatively, pausing every millisecond
(``parse_exposition_cooperatively``), lest the caller's other tasks stall.
"""

from __future__ import annotations

import asyncio
import json

from probes.exposition import Exposition, fetch_text, metrics_url, parse_exposition_cooperatively
from probes.sampling import PeriodicProbe, ProbeStatus
from runfmt.names import SERVER_METRICS_TABLE
from runfmt.rundir import RunDir, RunWriteError
from runtime.clock import RunClock
from workloads.errors import InputError

DEFAULT_INTERVAL_S = 0.5


def sample_rows(t_s: float, exposition: Exposition) -> list[dict]:
    """The long-format rows of one scrape."""
    return [
        {
            "t_s": t_s,
            "metric": s.name,
            "labels": json.dumps(s.labels, sort_keys=True, separators=(",", ":")),
            "value": s.value,
        }
        for s in exposition.samples
        if not s.name.endswith("_created")
    ]


class MetricsScraper(PeriodicProbe):
    """Scrape ``url``'s metrics into ``run`` until stopped; use as ``async with``."""

    def __init__(
        self,
        url: str,
        clock: RunClock,
        run: RunDir | None = None,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 5.0,
    ) -> None:
        super().__init__(ProbeStatus.for_run(SERVER_METRICS_TABLE, run), clock, interval_s)
        self.url = metrics_url(url)
        self.timeout_s = timeout_s
        self.first: Exposition | None = None
        self.last: Exposition | None = None
        self._table = run.table(SERVER_METRICS_TABLE) if run is not None else None
        #: Whether the last scrape failed by running out of ``timeout_s`` (a page that
        #: stalls): the run's last sample is then not attempted, lest the run's end wait
        #: another whole timeout for it (a 2 s bench took 16 s against a stalled page).
        self._ran_out = False

    async def tick(self) -> Exposition | None:
        """One scrape; returns None (and records why) when it failed."""
        sent = self.clock.now()
        if self._ran_out and self._stopping():
            self.status.fail(
                f"last scrape not taken: the one before had no page within {self.timeout_s:g} s",
                sent,
            )
            return None
        try:
            text = await fetch_text(self.url, self.timeout_s)
            t_s = (sent + self.clock.now()) / 2
            exposition = await parse_exposition_cooperatively(text, source=self.url)
        except InputError as exc:
            self._ran_out = self.clock.now() - sent >= 0.9 * self.timeout_s
            self.status.fail(exc.problem, sent)
            return None
        self._ran_out = False
        if self._table is not None:
            try:
                await self._append(sample_rows(t_s, exposition))
            except RunWriteError as exc:  # the disk full: the scrape is lost, not the probe
                self.status.fail(exc.reason, sent)
                return None
        self.first = self.first or exposition
        self.last = exposition
        self.status.succeeded()
        return exposition

    async def _append(self, rows: list[dict], batch: int = 100) -> None:
        """Journal the rows a batch at a time, yielding in between (a vLLM page is ~400
        rows, ~2 ms of JSON): the event loop is timing tokens meanwhile."""
        assert self._table is not None
        for start in range(0, len(rows), batch):
            self._table.append_many(rows[start : start + batch])
            await asyncio.sleep(0)
