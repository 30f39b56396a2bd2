"""What the live dashboard shows, gathered from the load generator's callbacks.

The callbacks run on the client's event loop, once or twice per request, so each does
one append or one counter increment and nothing else. Nothing runs per network read: a
stream's reads are the arrays the read loop appends to anyway (``ChunkTimes``, handed over
by ``on_stream``), and each refresh takes what they gained since the last one. A callback
per read (a call, a tuple, then a Python loop over the tuples at the refresh) cost 5.5k
CPU instructions per read with the refreshes; taking the arrays, 1.2k (callgrind, 512
streams reading 12 times between two refreshes, 20 ms tokens at 0.25 s refreshes). The
work — per-token gaps, rolling percentiles over the last ``window_s`` seconds, rates — is
done in :meth:`LiveStats.snapshot`, a few times a second, on the same event loop (no lock,
no thread competing with the client for the GIL), with numpy over all new reads at once.

The rules are the summary's (``probes.latency``; limits from ``probes.client_limits``):
TTFT from the *intended* send time (from the actual send under a ``--max-concurrency``
cap, as the end-of-run table leads with it), ITL per token (a read of n tokens after a gap g
gives n gaps of g/n; the extra tokens of a request's first read give gaps of 0), and a
client is limited when its dispatch lag p99 (past any ``--max-concurrency`` slot wait: the
cap's queue is the user's choice) exceeds ``DISPATCH_LAG_LIMIT_S`` or its CPU
stays saturated. Live figures are over a window and thinned to a few thousand samples
per tick: a view, not the statistics. What each figure is called, its unit and how it
is written are the metric registry's (``LIVE_LATENCIES``, ``LIVE_THROUGHPUT``).
"""

from __future__ import annotations

import time
from array import array
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from loadgen.load_options import LoadObserver
from loadgen.records import ChunkTimes, RequestRecord
from probes.client_limits import CPU_SATURATION_SHARE, CPU_SUSTAIN_S, DISPATCH_LAG_LIMIT_S
from runfmt import metrics as registry
from runfmt.metrics import DISPATCH_LAG, ITL, TTFT
from runtime.clock import RunClock
from runtime.quantiles import QUANTILES as QUANTILE_PERCENTS
from runtime.quantiles import quantiles

WINDOW_S = 10.0
#: Most samples one tick adds to a rolling window (evenly thinned beyond that).
TICK_SAMPLES = 4096
#: The statistics of each rolling latency, as ``Quantiles`` holds them (the dashboard's
#: columns), and their levels from the one quantile table.
LIVE_STATS = ("p50", "p90", "p99")
QUANTILES = tuple(QUANTILE_PERCENTS[stat] / 100.0 for stat in LIVE_STATS)
#: The rolling latencies a snapshot holds, in the order the dashboard shows them.
LIVE_LATENCIES = (registry.TTFT, registry.ITL, registry.DISPATCH_LAG)
#: The live output rate is the registry's output tokens per second, over the window.
LIVE_THROUGHPUT = registry.OUTPUT_TOKENS_PER_S

# numpy's quantile imports numpy.ma on its first call (~15 ms, more where bytecode is not
# cached): done here, at import, before the run clock starts, so that it does not stall
# the run's event loop at the first dashboard tick and show as dispatch lag.
quantiles(np.zeros(2), QUANTILES)


@dataclass(frozen=True)
class Quantiles:
    """Rolling percentiles of one latency (seconds); ``None`` where nothing was seen."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    count: int = 0


class Rolling:
    """Timed samples of the last ``window_s`` seconds, kept as one array pair per tick."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._parts: deque[tuple[float, int, np.ndarray]] = deque()

    def add(self, times: np.ndarray, values: np.ndarray) -> None:
        """One tick's samples (``times`` ascending, or at least ending with the latest)."""
        if not times.size:
            return
        seen = int(times.size)
        if seen > TICK_SAMPLES:
            values = values[np.linspace(0, seen - 1, TICK_SAMPLES).astype(np.int64)]
        self._parts.append((float(times.max()), seen, values))

    def trim(self, now: float) -> None:
        start = now - self.window_s
        while self._parts and self._parts[0][0] < start:
            self._parts.popleft()

    def quantiles(self) -> Quantiles:
        """Percentiles of the window; ``count`` is how many samples it holds (unthinned)."""
        if not self._parts:
            return Quantiles()
        values = np.concatenate([v for _, _, v in self._parts])
        p50, p90, p99 = quantiles(values, QUANTILES)
        return Quantiles(p50, p90, p99, sum(n for _, n, _ in self._parts))


@dataclass(frozen=True)
class LiveSnapshot:
    """One refresh of the dashboard."""

    elapsed_s: float
    total: int | None
    duration_s: float | None
    sent: int
    finished: int
    ok: int
    errors: dict[str, int]
    ttft: Quantiles
    itl: Quantiles
    dispatch_lag: Quantiles
    send_rate: float | None
    target_rate: float | None
    target_unit: str
    tokens_per_s: float | None
    cpu_share: float | None
    limited: list[str] = field(default_factory=list)
    #: A ``--max-concurrency`` cap: ``ttft`` is from the actual send (as vLLM times it).
    capped: bool = False

    def latencies(self) -> list[tuple[registry.Metric, Quantiles]]:
        """Each rolling latency with the registry entry that names it and writes its values."""
        by_key = {TTFT.key: self.ttft, ITL.key: self.itl, DISPATCH_LAG.key: self.dispatch_lag}
        metrics = list(LIVE_LATENCIES)
        if self.capped:  # the rolling TTFT is from the actual send: named so
            by_key[registry.TTFT_SENT.key] = self.ttft
            metrics = [registry.TTFT_SENT if m.key == TTFT.key else m for m in metrics]
        return [(metric, by_key[metric.key]) for metric in metrics]

    @property
    def in_flight(self) -> int:
        return self.sent - self.finished

    @property
    def failed(self) -> int:
        return self.finished - self.ok

    @property
    def progress(self) -> float:
        """Share done: requests finished of the plan, or time elapsed of the duration."""
        if self.duration_s:
            return min(1.0, self.elapsed_s / self.duration_s)
        return min(1.0, self.finished / self.total) if self.total else 0.0


class _Stream:
    """A request's reads (the arrays its read loop appends to) and how many were taken."""

    __slots__ = ("chunks", "taken")

    def __init__(self, chunks: ChunkTimes) -> None:
        self.chunks = chunks
        self.taken = 0


class NewReads:
    """Reads not folded yet, request by request: each request's new reads in arrival
    order, led by the one taken before them, if any (the start of their first gap).
    Typed arrays: what a worker process sends its parent is their bytes."""

    def __init__(self) -> None:
        self.t_s = array("d")
        self.n_tokens = array("q")
        #: Reads of each request's run, and whether its first one is a lead.
        self.sizes = array("q")
        self.led = array("b")

    def take(self, stream: _Stream) -> None:
        """The reads ``stream`` gained since it was last taken."""
        done, count = stream.taken, len(stream.chunks.n_tokens)
        if count == done:
            return
        start = max(done - 1, 0)
        self.t_s.extend(stream.chunks.t_s[start:count])
        self.n_tokens.extend(stream.chunks.n_tokens[start:count])
        self.sizes.append(count - start)
        self.led.append(done > 0)
        stream.taken = count

    def extend(self, other: NewReads) -> None:
        self.t_s.extend(other.t_s)
        self.n_tokens.extend(other.n_tokens)
        self.sizes.extend(other.sizes)
        self.led.extend(other.led)


class LiveStats(LoadObserver):
    """Counters and rolling windows of one run; ``snapshot()`` for each refresh."""

    def __init__(
        self,
        clock: RunClock,
        *,
        total: int | None,
        duration_s: float | None = None,
        target_rate: float | None = None,
        target_unit: str = "req/s",
        window_s: float = WINDOW_S,
        capped: bool = False,
    ) -> None:
        self.clock = clock
        self.total = total
        self.duration_s = duration_s
        self.target_rate = target_rate
        self.target_unit = target_unit
        self.window_s = window_s
        self.capped = capped
        self.sent = self.finished = self.ok = 0
        self.errors: Counter[str] = Counter()
        self._sends: list[tuple[float, float]] = []
        self._firsts: list[tuple[float, float]] = []
        self._streams: dict[str, _Stream] = {}
        self._reads = NewReads()
        self._ttft = Rolling(window_s)
        self._itl = Rolling(window_s)
        self._lag = Rolling(window_s)
        self._ticks: deque[tuple[float, int, int]] = deque()  # (time, sends, tokens)
        self._cpu: deque[tuple[float, float]] = deque()
        self._worker_cpu: dict[int, deque[tuple[float, float]]] = {}
        self._start_s: float | None = None

    # -- callbacks (once or twice per request: one append each) ------------------------------
    def on_send(self, record: RequestRecord) -> None:
        self.sent += 1
        # the lag past a --max-concurrency slot: the cap's queue is the user's choice
        due = record.released_s if record.released_s is not None else record.intended_s
        self._sends.append((record.sent_s or 0.0, due or 0.0))

    def on_first_token(self, record: RequestRecord) -> None:
        # under a --max-concurrency cap, from the actual send: vLLM's TTFT, the table's first
        start = record.sent_s if self.capped else record.intended_s
        self._firsts.append((record.first_token_s or 0.0, start or 0.0))

    def on_stream(self, record: RequestRecord, chunks: ChunkTimes) -> None:
        self._streams[record.id] = _Stream(chunks)

    def on_finish(self, record: RequestRecord) -> None:
        self.finished += 1
        if record.ok:
            self.ok += 1
        else:
            self.errors[str(record.error_kind)] += 1
        stream = self._streams.pop(record.id, None)
        if stream is not None:
            self._reads.take(stream)  # its last reads; then it is forgotten

    # -- worker processes ---------------------------------------------------------------
    def take_pending(self) -> dict[str, object]:
        """A worker's side: what its callbacks gathered since the last call (and its
        event-loop thread's CPU clock), for the parent's ``absorb``; then forgotten."""
        self._take_reads()
        batch = {
            "sends": self._sends,
            "firsts": self._firsts,
            "reads": self._reads,
            "finished": self.finished,
            "ok": self.ok,
            "errors": dict(self.errors),
            "cpu": (time.perf_counter(), time.thread_time()),
        }
        self._sends, self._firsts, self._reads = [], [], NewReads()
        self.finished = self.ok = 0
        self.errors = Counter()
        return batch

    def absorb(self, worker: int, batch: dict) -> None:
        """The parent's side: one worker's ``take_pending``, folded in at the next refresh;
        the CPU share shown is then the busiest worker's."""
        self.sent += len(batch["sends"])
        self._sends.extend(batch["sends"])
        self._firsts.extend(batch["firsts"])
        self._reads.extend(batch["reads"])
        self.finished += batch["finished"]
        self.ok += batch["ok"]
        self.errors.update(batch["errors"])
        self._worker_cpu.setdefault(worker, deque()).append(tuple(batch["cpu"]))

    # -- refresh ------------------------------------------------------------------------
    def snapshot(self) -> LiveSnapshot:
        """Fold in what arrived since the last call; the figures as of now."""
        now = self.clock.now()
        if self._start_s is None:
            self._start_s = now
        self._ticks.append((now, *self._fold()))
        while self._ticks[0][0] < now - self.window_s:
            self._ticks.popleft()
        for rolling in (self._ttft, self._itl, self._lag):
            rolling.trim(now)
        elapsed = now - self._start_s
        seen = min(self.window_s, elapsed)
        sends = sum(n for _, n, _ in self._ticks)
        tokens = sum(n for _, _, n in self._ticks)
        lag = self._lag.quantiles()
        cpu = self._cpu_share()
        return LiveSnapshot(
            elapsed_s=elapsed,
            total=self.total,
            duration_s=self.duration_s,
            sent=self.sent,
            finished=self.finished,
            ok=self.ok,
            errors=dict(self.errors.most_common()),
            ttft=self._ttft.quantiles(),
            itl=self._itl.quantiles(),
            dispatch_lag=lag,
            send_rate=sends / seen if seen > 0.5 else None,
            target_rate=self.target_rate,
            target_unit=self.target_unit,
            capped=self.capped,
            tokens_per_s=tokens / seen if seen > 0.5 else None,
            cpu_share=cpu,
            limited=_limits(lag, cpu, elapsed),
        )

    def _fold(self) -> tuple[int, int]:
        """Fold in the callbacks' appends; returns the sends and tokens they held."""
        sends, self._sends = self._sends, []
        if sends:
            arr = np.asarray(sends, dtype=float)
            self._lag.add(arr[:, 0], arr[:, 0] - arr[:, 1])
        firsts, self._firsts = self._firsts, []
        if firsts:
            arr = np.asarray(firsts, dtype=float)
            self._ttft.add(arr[:, 0], arr[:, 0] - arr[:, 1])
        self._take_reads()
        reads, self._reads = self._reads, NewReads()
        return len(sends), self._fold_reads(reads)

    def _take_reads(self) -> None:
        """What every stream still in flight read since the last call."""
        for stream in self._streams.values():
            self._reads.take(stream)

    def _fold_reads(self, reads: NewReads) -> int:
        """Per-token gaps of the new reads, within each request; returns their tokens.

        A read of n tokens after a gap g gives n gaps of g/n; the extra tokens of a
        request's first read give gaps of 0.
        """
        t = np.frombuffer(reads.t_s, dtype=np.float64)
        n = np.frombuffer(reads.n_tokens, dtype=np.int64)
        sizes = np.frombuffer(reads.sizes, dtype=np.int64)
        if not sizes.size:
            return 0
        led = np.frombuffer(reads.led, dtype=np.int8).astype(bool)
        starts = np.cumsum(sizes) - sizes
        later = np.ones(t.size, dtype=bool)  # reads with a read of their request before them
        later[starts] = False
        tokens = int(n[later].sum() + n[starts[~led]].sum())
        gaps = np.diff(t)[later[1:]] / n[later]
        firsts = starts[~led]
        extra = n[firsts] - 1
        times = np.concatenate([np.repeat(t[later], n[later]), np.repeat(t[firsts], extra)])
        values = np.concatenate([np.repeat(gaps, n[later]), np.zeros(int(extra.sum()))])
        self._itl.add(times, values)
        return tokens

    def _cpu_share(self) -> float | None:
        """The event-loop thread's CPU over the last ``CPU_SUSTAIN_S`` seconds (1.0: a core);
        with worker processes, the busiest worker's."""
        if self._worker_cpu:
            shares = [_share(samples) for samples in self._worker_cpu.values()]
            known = [s for s in shares if s is not None]
            return max(known) if known else None
        self._cpu.append((time.perf_counter(), time.thread_time()))
        return _share(self._cpu)


def _share(samples: deque[tuple[float, float]]) -> float | None:
    """CPU over wall time of the (wall, cpu) samples of the last ``CPU_SUSTAIN_S`` seconds."""
    while len(samples) > 2 and samples[-1][0] - samples[1][0] >= CPU_SUSTAIN_S:
        samples.popleft()
    (w0, c0), (w1, c1) = samples[0], samples[-1]
    return (c1 - c0) / (w1 - w0) if w1 - w0 > 0.5 else None


def _limits(lag: Quantiles, cpu: float | None, elapsed_s: float) -> list[str]:
    """Why the client is limiting the run right now (empty: it is not)."""
    reasons = []
    if lag.p99 is not None and lag.count >= 10 and lag.p99 > DISPATCH_LAG_LIMIT_S:
        label = registry.DISPATCH_LAG.named("p99")
        reasons.append(f"{label} {lag.p99 * 1e3:.1f} ms > {DISPATCH_LAG_LIMIT_S * 1e3:.0f} ms")
    if cpu is not None and elapsed_s >= CPU_SUSTAIN_S and cpu >= CPU_SATURATION_SHARE:
        reasons.append(f"client CPU at {cpu:.0%} of a core")
    return reasons


class Display(Protocol):
    """Shows a run's progress until cancelled; ``close`` after the run."""

    async def run(self, stats: LiveStats) -> None: ...

    def close(self, stats: LiveStats) -> None: ...
