"""``prefillscope probe URL | --file FILE``: what can this server's /metrics tell us?

One snapshot, normalised to the canonical series (``probes/canonical.py``) with each value's
provenance — ``measured``, ``derived`` or ``unknown`` — the latency histograms it keeps,
and the KV pool's buckets. ``--json`` keys: ``flavour``, ``source``, ``series`` (name →
``{value, provenance, source}``), ``histograms``, ``itl_per``, ``pool`` (``active_blocks``,
``reclaimable_blocks``, ``free_blocks``, ``total_blocks``, same form plus ``unit`` and,
when unknown but bounded, ``bounds``). Unreachable endpoints, files that are not
exposition text and bad mappings are one-line errors with exit status 2.

The exposition parser (httpx, prometheus_client), the histogram summaries (numpy, pandas)
and rich are imported when the command runs, so the CLI starts without them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from probes.canonical import HISTOGRAMS, SERIES
from probes.mapping import BUILTIN_FLAVOURS, choose_mapping
from probes.mapping_model import Snapshot
from probes.pool import PoolBreakdown, pool_breakdown
from runfmt.codec import encode
from workloads.errors import InputError
from workloads.limits import Bound

if TYPE_CHECKING:
    from probes.exposition import Exposition


def _read(url: str | None, file: Path | None, timeout_s: float) -> tuple[Exposition, str]:
    from probes.exposition import fetch_exposition_sync, metrics_url, parse_exposition

    if (url is None) == (file is None):
        raise InputError("URL", "give a server URL or --file FILE (one of them)")
    if file is not None:
        if not file.is_file():
            raise InputError("--file", f"no such file: {file}", "pass a saved /metrics page")
        return parse_exposition(file.read_text(errors="replace"), source=str(file)), str(file)
    target = metrics_url(url or "")
    return fetch_exposition_sync(target, timeout=timeout_s), target


def probe_report(snapshot: Snapshot, pool: PoolBreakdown, source: str) -> dict[str, Any]:
    """The ``probe --json`` object."""
    from probes.normalise import histogram_summary

    histograms = {}
    for name in HISTOGRAMS:
        hist = snapshot.histograms[name]
        histograms[name] = histogram_summary(hist) | {
            "provenance": "measured" if hist is not None else "unknown",
            "source": snapshot.histogram_sources[name],
        }
    return {
        "flavour": snapshot.flavour,
        "source": source,
        "series": {name: encode(snapshot.series[name].reading()) for name in SERIES},
        "histograms": histograms,
        "itl_per": snapshot.itl_per,
        "pool": encode(pool.recorded()),
    }


def _number(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.6g}"


def _print(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    series = Table(title=f"{report['flavour']} — {report['source']}")
    for column in ("series", "value", "provenance", "source"):
        series.add_column(column)
    for name, item in report["series"].items():
        series.add_row(name, _number(item["value"]), item["provenance"], item["source"] or "")
    console.print(series)
    hists = Table(title="latency histograms (cumulative since server start)")
    for column in ("histogram", "count", "mean s", "p50 s", "p99 s", "source"):
        hists.add_column(column)
    for name, item in report["histograms"].items():
        hists.add_row(
            name,
            _number(item["count"]),
            _number(item["mean"]),
            _number(item["p50"]),
            _number(item["p99"]),
            item["source"] or "not exposed",
        )
    console.print(hists)
    pool = Table(title="KV pool")
    for column in ("bucket", "value", "bounds", "provenance", "source"):
        pool.add_column(column)
    for name, item in report["pool"].items():
        bounds = item.get("bounds")
        pool.add_row(
            name,
            f"{_number(item['value'])} {item['unit']}" if item["value"] is not None else "unknown",
            f"{_number(bounds[0])} … {_number(bounds[1])}" if bounds else "",
            item["provenance"],
            item["source"] or "",
        )
    console.print(pool)


def probe(
    url: Annotated[str | None, typer.Argument(help="Server base URL (…/metrics is added).")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="A saved /metrics page instead of a URL.")
    ] = None,
    flavour: Annotated[
        str, typer.Option(help=f"auto or one of: {', '.join(BUILTIN_FLAVOURS)}.")
    ] = "auto",
    mapping: Annotated[
        Path | None, typer.Option("--mapping", help="A TOML mapping for your own engine.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /metrics.")] = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """What a server's /metrics can tell us: canonical series, histograms, the KV pool."""
    Bound(0, 3600, above=True, why="a scrape waits at most an hour").check("--timeout", timeout)
    exposition, source = _read(url, file, timeout)
    chosen = choose_mapping(exposition, flavour=flavour, mapping_file=mapping)
    snapshot = chosen.snapshot(exposition)
    report = probe_report(snapshot, pool_breakdown(snapshot), source)
    if as_json:
        typer.echo(json.dumps(report))
    else:
        _print(report)


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
