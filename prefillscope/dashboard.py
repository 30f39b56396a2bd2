"""The bench run as a person watches it: a rich Live dashboard, or plain progress lines.

On a terminal, a few refreshes a second of: progress, requests sent / done / in flight /
failed, errors by class, achieved vs target send rate, output tokens per second, rolling
TTFT / ITL / dispatch-lag percentiles over the last 10 s, and a warning when the client
itself is limiting the run. Every line is built to fit 80 columns and is cut, never
wrapped, when narrower. Rendering runs as a task on the load generator's event loop
(no refresh thread competing for the GIL); each frame costs about a millisecond.

Without a terminal (CI logs, pipes, ``--json``) the same figures are printed as one
plain line every few seconds instead, so logs stay greppable.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, TextIO

from rich.console import Console, Group, RenderableType
from rich.text import Text

from runfmt import metrics as registry
from runfmt.units import fmt_rate
from session.live_stats import (
    LIVE_STATS,
    LIVE_THROUGHPUT,
    Display,
    LiveSnapshot,
    LiveStats,
    Quantiles,
)

if TYPE_CHECKING:
    from rich.live import Live

REFRESH_S = 0.25
PLAIN_EVERY_S = 5.0


# -- formatting ------------------------------------------------------------------------------
#: Every figure's name, unit and format are the metric registry's (``LIVE_LATENCIES``);
#: the send rate is of requests sent, not completed, so it only borrows the unit.
SEND_UNIT = registry.REQUESTS_PER_S.unit


def _rate(value: float | None, unit: str) -> str:
    return f"\u2013 {unit}" if value is None else fmt_rate(value, unit)


def progress_text(snap: LiveSnapshot) -> str:
    """``150 sent · 123/200 done · 12.3 s`` or, bounded by time, ``12.3 s / 60 s · …``."""
    elapsed = f"{snap.elapsed_s:,.1f} s"
    if snap.duration_s:
        return f"{elapsed} / {snap.duration_s:g} s · {snap.sent:,} sent · {snap.finished:,} done"
    total = f"/{snap.total:,}" if snap.total else ""
    return f"{snap.sent:,} sent · {snap.finished:,}{total} done · {elapsed}"


def errors_text(snap: LiveSnapshot) -> str:
    if not snap.errors:
        return "none"
    return " · ".join(f"{kind} {n:,}" for kind, n in snap.errors.items())


def rate_text(snap: LiveSnapshot) -> str:
    target = f" (target {_rate(snap.target_rate, snap.target_unit)})" if snap.target_rate else ""
    tokens = LIVE_THROUGHPUT.format(snap.tokens_per_s, missing=f"\u2013 {LIVE_THROUGHPUT.unit}")
    return f"{_rate(snap.send_rate, SEND_UNIT)} sent{target} · {tokens} out"


def plain_line(snap: LiveSnapshot) -> str:
    """The snapshot as one log line."""
    parts = [
        progress_text(snap),
        f"{snap.in_flight:,} in flight",
        f"{snap.failed:,} failed" + (f" ({errors_text(snap)})" if snap.errors else ""),
        rate_text(snap),
        *(
            f"{metric.named('p50')} {metric.format(q.p50)} p99 {metric.format(q.p99)}"
            for metric, q in snap.latencies()
            if metric.key != registry.DISPATCH_LAG.key  # the log line leaves the lag out
        ),
    ]
    if snap.limited:
        parts.append("CLIENT-LIMITED: " + "; ".join(snap.limited))
    return "bench: " + " · ".join(parts)


# -- the rich view ---------------------------------------------------------------------------
LABEL = 12
NUMBER = 10


def _line(label: str, value: str, style: str = "") -> Text:
    text = Text(f"{label:<{LABEL}}", style="dim", no_wrap=True, overflow="ellipsis")
    text.append(value, style=style)
    return text


def _bar(snap: LiveSnapshot, width: int) -> Text:
    """Done requests bright, sent but unfinished ones dim, the rest dark (by time when
    the run is bounded by a duration)."""
    done = round(snap.progress * width)
    sent = done
    if not snap.duration_s and snap.total:
        sent = max(done, min(width, round(snap.sent / snap.total * width)))
    bar = Text("━" * done, style="bold magenta", no_wrap=True)
    bar.append("━" * (sent - done), style="magenta")
    bar.append("━" * (width - sent), style="grey23")
    return bar


def _quantile_row(metric: registry.Metric, q: Quantiles) -> str:
    cells = [*(metric.format(getattr(q, stat)) for stat in LIVE_STATS), f"{q.count:,}"]
    return f"{metric.short:<{LABEL}}" + "".join(f"{c:>{NUMBER}}" for c in cells)


def render(snap: LiveSnapshot, title: str, window_s: float, width: int) -> RenderableType:
    """One dashboard frame for a terminal ``width`` columns wide.

    Plain text lines, each cut (never wrapped) at the width: a rich table costs several
    milliseconds a frame on the load generator's loop, these a fraction of one.
    """
    status = f" {snap.progress:4.0%} · " + progress_text(snap)
    bar = _bar(snap, max(10, width - len(status)))
    bar.append(status)
    header = f"{'last ' + format(window_s, 'g') + ' s':<{LABEL}}" + "".join(
        f"{name:>{NUMBER}}" for name in (*(registry.STAT_LABELS[s] for s in LIVE_STATS), "n")
    )
    lines = [
        Text(title, style="bold", no_wrap=True, overflow="ellipsis"),
        bar,
        _line(
            "requests",
            f"sent {snap.sent:,} · done {snap.finished:,} · in flight {snap.in_flight:,} · "
            f"failed {snap.failed:,}",
        ),
        _line("rate", rate_text(snap)),
        _line("errors", errors_text(snap), "bold red" if snap.errors else "green"),
        Text(header, style="bold", no_wrap=True, overflow="ellipsis"),
        *(
            Text(_quantile_row(metric, q), no_wrap=True, overflow="ellipsis")
            for metric, q in snap.latencies()
        ),
    ]
    cpu = "–" if snap.cpu_share is None else f"{snap.cpu_share:.0%} of a core"
    lines.append(_line("client", f"CPU {cpu}"))
    if snap.limited:
        lines.append(
            Text(
                "⚠ client-limited: " + "; ".join(snap.limited),
                style="bold yellow",
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    return Group(*lines)


class LiveDashboard:
    """The rich Live view on ``console`` (a terminal), refreshed every ``REFRESH_S``."""

    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.title = title
        self._live: Live | None = None

    async def run(self, stats: LiveStats) -> None:
        from rich.live import Live  # a terminal's only: plain progress lines need none of it

        self._live = Live(
            console=self.console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()
        while True:
            frame = render(stats.snapshot(), self.title, stats.window_s, self.console.width)
            self._live.update(frame, refresh=True)
            await asyncio.sleep(REFRESH_S)

    def close(self, stats: LiveStats) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class PlainProgress:
    """One plain line to ``stream`` every ``every_s`` seconds (and a last one at the end)."""

    def __init__(self, stream: TextIO, every_s: float = PLAIN_EVERY_S) -> None:
        self.stream = stream
        self.every_s = every_s

    async def run(self, stats: LiveStats) -> None:
        ticks = max(1, round(self.every_s / REFRESH_S))
        n = 0
        while True:
            await asyncio.sleep(REFRESH_S)
            snap = stats.snapshot()  # folded every tick, so appends never pile up
            n += 1
            if n % ticks == 0:
                self._print(snap)

    def close(self, stats: LiveStats) -> None:
        self._print(stats.snapshot())

    def _print(self, snap: LiveSnapshot) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed pipe must not fail the run
            print(plain_line(snap), file=self.stream, flush=True)


def make_display(as_json: bool, title: str) -> Display:
    """The live dashboard on a terminal; plain lines otherwise (stderr under ``--json``)."""
    if not as_json and sys.stdout.isatty():
        return LiveDashboard(Console(), title)
    return PlainProgress(sys.stderr if as_json else sys.stdout)
