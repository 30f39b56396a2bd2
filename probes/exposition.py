"""Reading a Prometheus text exposition into plain samples.

A page in the plain subset of the format (what vLLM, SGLang, llama.cpp and the embedded
engine write) is read by ``probes.plain_exposition``, 5–6× faster; any other page is
parsed by prometheus_client (``text_string_to_metric_families``), imported only then,
with the same result. Either way this module holds the page as flat ``(name, labels,
value)`` samples indexed by name, because
the mappings address sample names (``vllm:prefix_cache_hits_total``,
``…_bucket``) and the run directory stores samples, not families. A bad exposition is
reported with the line that broke it, so a user can see what their server sent.

A scrape is one GET of a text page: the standard library's ``urllib`` does it, in a
worker thread when the caller is async. The probe process (``probes.probe_process``) is
a fresh interpreter per run, and an HTTP client library's import and TLS set-up
(httpx: ~0.13 CPU-s) would cost it more than all the scrapes of a short run.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from probes.plain_exposition import read_plain
from workloads.errors import InputError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Exposition:
    """Every sample of one scrape, with the family types the server declared."""

    samples: list[Sample]
    types: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        index: dict[str, list[Sample]] = defaultdict(list)
        for sample in self.samples:
            index[sample.name].append(sample)
        self._index = dict(index)

    def get(self, name: str) -> list[Sample]:
        """All samples with this exact name (empty when the server does not expose it)."""
        return self._index.get(name, [])

    def names(self) -> set[str]:
        return set(self._index)


def parse_exposition(text: str, *, source: str = "exposition") -> Exposition:
    """Parse exposition text; a malformed line raises ``InputError`` naming that line."""
    plain = _plain(text)
    if plain is not None:
        return plain
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[Sample] = []
    types: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            _add_family(family, samples, types)
    except ValueError as exc:
        raise InputError(source, _describe_parse_error(text, exc), _FIX) from None
    return Exposition(samples, types)


async def parse_exposition_cooperatively(
    text: str, *, source: str = "exposition", slice_s: float = 0.001
) -> Exposition:
    """``parse_exposition`` that yields to the event loop every ``slice_s`` of work.

    A vLLM page takes ~10 ms to parse; in one piece that would stall the load
    generator's token timestamps once per scrape — the very tail ITL being measured.
    prometheus_client's parser is a generator of families, so parsing can pause
    between families and the longest stall becomes about one family's worth. A plain
    page (``probes.plain_exposition``) takes ~2 ms and is read in one piece."""
    plain = _plain(text)
    if plain is not None:
        return plain
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[Sample] = []
    types: dict[str, str] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + slice_s
    try:
        for family in text_string_to_metric_families(text):
            _add_family(family, samples, types)
            if loop.time() >= deadline:
                await asyncio.sleep(0)
                deadline = loop.time() + slice_s
    except ValueError as exc:
        raise InputError(source, _describe_parse_error(text, exc), _FIX) from None
    return Exposition(samples, types)


def _plain(text: str) -> Exposition | None:
    """The page read by the fast reader, or None when it is not plain."""
    read = read_plain(text)
    if read is None:
        return None
    samples, types = read
    return Exposition([Sample(name, labels, value) for name, labels, value in samples], types)


def _add_family(family: Metric, samples: list[Sample], types: dict[str, str]) -> None:
    samples.extend(Sample(s.name, dict(s.labels), float(s.value)) for s in family.samples)
    types[family.name] = family.type


def exposition_from_rows(rows: Iterable[Mapping[str, Any]]) -> Exposition:
    """Rebuild a scrape from run-table rows (``metric``, ``labels`` as JSON, ``value``)."""
    return Exposition(
        [
            Sample(
                str(r["metric"]), json.loads(r["labels"]) if r["labels"] else {}, float(r["value"])
            )
            for r in rows
        ]
    )


_FIX = "the server must answer /metrics with Prometheus text exposition format"


def _describe_parse_error(text: str, exc: ValueError) -> str:
    """Locate the first line that does not parse on its own; exposition is line-based,
    so this finds the culprit without reimplementing the grammar."""
    from prometheus_client.parser import text_string_to_metric_families

    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            shown = line if len(line) <= 80 else line[:77] + "..."
            return f"line {number} is not valid exposition text: {shown!r}"
    return f"not valid exposition text ({exc})"


def metrics_url(url: str) -> str:
    """The scrape URL for a server URL: ``http://host:port`` → ``…/metrics``; a URL that
    already names a path is used as given (some servers mount metrics elsewhere)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.scheme or not parts.netloc:
        raise InputError("url", f"{url!r} is not an http(s) URL", "e.g. http://127.0.0.1:8000")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


#: The most a /metrics page may weigh: vLLM's is ~100 KiB; a page beyond this is not a
#: metrics page a run should journal every half second (the scrape fails, the run goes on).
MAX_PAGE_BYTES = 8 * 1024 * 1024
_READ_BYTES = 64 * 1024


def get_text(url: str, timeout_s: float = 5.0, max_bytes: int = MAX_PAGE_BYTES) -> str:
    """The exposition text at ``url`` (already a metrics URL), unparsed; one blocking GET
    bounded in time (``timeout_s`` for the whole answer, not per read: a page that trickles
    is cut) and size (``max_bytes``). Every failure — refused, timed out, too large, an
    answer other than HTTP 200 — is an ``InputError`` naming the URL."""
    import http.client
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status = response.status
            charset = response.headers.get_content_charset() or "utf-8"
            parts: list[bytes] = []
            size = 0
            while chunk := response.read1(_READ_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    raise InputError(
                        "metrics", f"GET {url}: the page is larger than {max_bytes:,} bytes",
                        "scrape a smaller page (--mapping) or drop --server-metrics",
                    )  # fmt: skip
                if time.monotonic() > deadline:
                    raise InputError("metrics", f"GET {url}: no whole page within {timeout_s:g} s")
                parts.append(chunk)
            body = b"".join(parts)
    except urllib.error.HTTPError as exc:
        exc.close()
        status, body, charset = exc.code, b"", "utf-8"
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", exc)  # a URLError wraps what refused or timed out
        kind = type(reason).__name__
        raise InputError(
            "metrics", f"GET {url} failed: {kind} {reason}".rstrip(), "is the server up?"
        ) from None
    if status != 200:
        raise InputError("metrics", f"GET {url} answered HTTP {status}", "does it expose /metrics?")
    return body.decode(charset, errors="replace")


async def fetch_text(url: str, timeout_s: float = 5.0) -> str:
    """``get_text`` from a worker thread: the caller's event loop keeps running. Parsing is
    left to the caller, who may do it cooperatively."""
    return await asyncio.to_thread(get_text, url, timeout_s)


def fetch_exposition_sync(url: str, *, timeout: float = 5.0) -> Exposition:
    """One blocking scrape, parsed, for one-shot commands."""
    return parse_exposition(get_text(url, timeout), source=url)
