"""Latency statistics of a run: hand-computed expectations for every convention that
``probes/latency.py`` states."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_shapes import lognormal_streams
from rundirs import write_run

from loadgen.records import ChunkEvent, ErrorKind, RequestRecord, Status
from probes.latency import summarize, summarize_frames
from probes.slo import parse_slo
from probes.token_gaps import token_gaps
from runfmt.rundir import RunDir
from runfmt.slo import Slo
from runfmt.tables import RunTables
from runtime.quantiles import describe
from workloads.errors import InputError

EMPTY = pd.DataFrame()


def frames(records: list[RequestRecord], chunks: list[ChunkEvent]) -> tuple[pd.DataFrame, ...]:
    return (
        pd.DataFrame([r.to_row() for r in records]),
        pd.DataFrame([asdict(c) for c in chunks]),
    )


def test_per_token_itl_splits_multi_token_chunks_and_matches_tpot() -> None:
    # a: first chunk 2 tokens at 1.0, 1 token at 1.1, 4 tokens at 1.5 (gap 0.4 -> 4 x 0.1).
    # b: a token-less role delta, then 1 token at 2.0 and 2 tokens at 2.4 (2 x 0.2).
    chunks = [
        ChunkEvent("a", 1.0, 2),
        ChunkEvent("a", 1.5, 4),  # out of order on purpose: gaps follow time, not row order
        ChunkEvent("a", 1.1, 1),
        ChunkEvent("b", 1.9, 0),
        ChunkEvent("b", 2.0, 1),
        ChunkEvent("b", 2.4, 2),
    ]
    records = [
        RequestRecord("a", intended_s=0.5, sent_s=0.5, first_token_s=1.0, end_s=1.5,
                      output_tokens=7),
        RequestRecord("b", intended_s=1.5, sent_s=1.5, first_token_s=2.0, end_s=2.4,
                      output_tokens=3),
    ]  # fmt: skip
    requests, chunk_df = frames(records, chunks)
    gaps = token_gaps(chunk_df)
    by_request = {
        rid: gaps.gap_s[gaps.request == i].tolist() for i, rid in enumerate(gaps.request_ids)
    }
    assert by_request["a"] == pytest.approx([0.0, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert by_request["b"] == pytest.approx([0.2, 0.2])
    summary = summarize_frames(requests, chunk_df, EMPTY).as_read()
    assert summary["itl_s"]["count"] == 8 == (7 - 1) + (3 - 1)
    assert summary["itl_s"]["mean"] == pytest.approx(0.9 / 8)
    # A request's mean per-token gap is its TPOT: (end - first token) / (output - 1).
    assert gaps.per_request("mean") == pytest.approx({"a": 0.5 / 6, "b": 0.4 / 2})
    assert summary["tpot_s"]["mean"] == pytest.approx((0.5 / 6 + 0.4 / 2) / 2)
    assert summary["chunks"] == {
        "count": 5,
        "tokens": 10,
        "multi_token": 3,
        "multi_token_share": 0.6,
    }


def test_ttft_from_intended_and_sent_and_a_lagging_client_is_flagged() -> None:
    # The client falls 10 ms further behind its schedule each request; the server is flat.
    records = []
    chunks = []
    for i in range(50):
        intended, sent = i * 0.1, i * 0.1 + 0.01 * i
        records.append(
            RequestRecord(f"r{i}", intended_s=intended, sent_s=sent, first_token_s=sent + 0.2,
                          end_s=sent + 0.3, output_tokens=2)
        )  # fmt: skip
        chunks += [ChunkEvent(f"r{i}", sent + 0.2, 1), ChunkEvent(f"r{i}", sent + 0.3, 1)]
    summary = summarize_frames(*frames(records, chunks), EMPTY).as_read()
    assert summary["ttft_sent_s"]["p50"] == pytest.approx(0.2)
    assert summary["ttft_sent_s"]["p99"] == pytest.approx(0.2)
    expected = np.array([0.2 + 0.01 * i for i in range(50)])
    assert summary["ttft_s"]["p99"] == pytest.approx(np.percentile(expected, 99))
    assert summary["e2e_s"]["mean"] == pytest.approx(expected.mean() + 0.1)
    assert summary["e2e_sent_s"]["mean"] == pytest.approx(0.3)
    client = summary["client"]
    assert client["dispatch_lag_p99_s"] == pytest.approx(np.percentile(expected - 0.2, 99))
    assert client["limited"] is True
    assert "dispatch lag p99" in client["reasons"][0]


def test_a_wait_for_a_concurrency_slot_is_the_caps_not_a_client_limit() -> None:
    # --max-concurrency 1 and a server slower than the schedule: each request waits 10 ms
    # longer for its slot than the one before, then goes out 0.5 ms after the slot frees.
    records, chunks = [], []
    for i in range(50):
        intended = i * 0.1
        released = intended + 0.01 * i
        sent = released + 0.0005
        records.append(
            RequestRecord(f"r{i}", intended_s=intended, released_s=released, sent_s=sent,
                          first_token_s=sent + 0.2, end_s=sent + 0.3, output_tokens=2)
        )  # fmt: skip
        chunks += [ChunkEvent(f"r{i}", sent + 0.2, 1), ChunkEvent(f"r{i}", sent + 0.3, 1)]
    summary = summarize_frames(*frames(records, chunks), EMPTY).as_read()
    client = summary["client"]
    waits = np.array([0.01 * i for i in range(50)])
    # the dispatch lag is sent - intended, the wait included; but the cap is the user's
    # choice: the lag past the slot (0.5 ms) is the client's, and it is within the bound
    assert client["dispatch_lag_p99_s"] == pytest.approx(np.percentile(waits + 0.0005, 99))
    assert client["limited"] is False and client["reasons"] == []
    assert client["concurrency_wait_s"]["p99"] == pytest.approx(np.percentile(waits, 99))
    assert summary["ttft_s"]["p99"] == pytest.approx(np.percentile(waits + 0.2005, 99))
    # a run written before released_s (no such column): the same lag, no wait to name
    old = frames(records, chunks)[0].drop(columns=["released_s"])
    legacy = summarize_frames(old, frames(records, chunks)[1], EMPTY).as_read()["client"]
    assert legacy["dispatch_lag_p99_s"] == client["dispatch_lag_p99_s"]
    assert "concurrency_wait_s" not in legacy and "slot" not in legacy["reasons"][0]
    # a client late past its slot is limited, and the reason says the lag is past the wait
    late = [dict(r.to_row(), sent_s=r.released_s + 0.05) for r in records]
    slow = summarize_frames(pd.DataFrame(late), frames(records, chunks)[1], EMPTY).as_read()[
        "client"
    ]
    assert slow["limited"] is True
    assert "50.0 ms > 5 ms past the --max-concurrency slot wait" in slow["reasons"][0]


def _steady_requests(n: int = 40) -> tuple[pd.DataFrame, pd.DataFrame]:
    records = [
        RequestRecord(f"r{i}", intended_s=i * 0.25, sent_s=i * 0.25 + 0.001,
                      first_token_s=i * 0.25 + 0.05, end_s=i * 0.25 + 0.15, output_tokens=2)
        for i in range(n)
    ]  # fmt: skip
    chunks = [ChunkEvent(r.id, t, 1) for r in records for t in (r.first_token_s, r.end_s)]
    return frames(records, chunks)


def test_client_cpu_saturation_must_be_sustained() -> None:
    requests, chunks = _steady_requests()  # a 10 s window, dispatch lag 1 ms
    t = np.arange(0.0, 10.0, 0.5)
    spike = pd.DataFrame({"t_s": t, "loop_lag_s": 0.002, "cpu_share": np.where(t == 4.0, 1.0, 0.3)})
    calm = summarize_frames(requests, chunks, spike).as_read()["client"]
    assert calm["limited"] is False
    assert calm["cpu_share"]["max"] == 1.0
    assert calm["loop_lag_s"]["p99"] == pytest.approx(0.002)
    busy = spike.assign(cpu_share=np.where((t >= 3.0) & (t < 7.5), 0.95, 0.3))
    loaded = summarize_frames(requests, chunks, busy).as_read()["client"]
    assert loaded["limited"] is True
    assert loaded["cpu_share"]["sustained_max"] == pytest.approx(0.95)
    assert loaded["reasons"] == ["client CPU at 95% of a core over 3 s (saturated at 90%)"]


def test_the_busiest_worker_decides_and_each_has_its_own_share() -> None:
    """Two worker processes, one saturated and one idle: each has a core of its own, so
    the client is limited (a mean over both loops' samples, 52 %, would say it is not)."""
    requests, chunks = _steady_requests()
    t = np.arange(0.0, 10.0, 0.5)
    busy = pd.DataFrame({"t_s": t, "loop_lag_s": 0.001, "cpu_share": 0.95, "worker": 1})
    idle = busy.assign(cpu_share=0.1, worker=0)
    mixed = pd.concat([idle, busy]).sort_values("t_s", kind="stable")
    client = summarize_frames(requests, chunks, mixed).as_read()["client"]
    assert client["limited"] is True
    cpu = client["cpu_share"]
    assert cpu["sustained_max"] == pytest.approx(0.95) and cpu["busiest_worker"] == 1
    assert cpu["cores_mean"] == pytest.approx(1.05)
    by_worker = {w["worker"]: w for w in cpu["workers"]}
    assert by_worker[0]["mean"] == pytest.approx(0.1) and by_worker[1]["mean"] == pytest.approx(
        0.95
    )
    assert client["reasons"] == [
        "client CPU at 95% of a core (worker 1) over 3 s (saturated at 90%)"
    ]
    calm = summarize_frames(requests, chunks, mixed.assign(cpu_share=0.5)).as_read()["client"]
    assert calm["limited"] is False and len(calm["cpu_share"]["workers"]) == 2


def test_goodput_counts_failures_and_judges_itl_by_the_worst_gap() -> None:
    records = [
        # good: TTFT 0.1, gaps 0.02 0.02
        RequestRecord("good", intended_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.14,
                      output_tokens=3),
        # mean gap 0.03 would pass ITL 0.05, but one 0.06 gap misses it
        RequestRecord("stall", intended_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.16,
                      output_tokens=3),
        # misses TTFT counted from the intended send, though sent-time TTFT is fine
        RequestRecord("late", intended_s=0.0, sent_s=0.4, first_token_s=0.6, end_s=0.62,
                      output_tokens=2),
        # a one-token answer has no ITL to miss
        RequestRecord("short", intended_s=0.0, sent_s=0.0, first_token_s=0.2, end_s=0.2,
                      output_tokens=1),
        RequestRecord("failed", intended_s=0.0, sent_s=0.0, end_s=1.0, status=Status.ERROR,
                      error_kind=ErrorKind.HTTP_5XX),
    ]  # fmt: skip
    chunks = [
        ChunkEvent("good", 0.1, 1), ChunkEvent("good", 0.12, 1), ChunkEvent("good", 0.14, 1),
        ChunkEvent("stall", 0.1, 1), ChunkEvent("stall", 0.1, 1), ChunkEvent("stall", 0.16, 1),
        ChunkEvent("late", 0.6, 1), ChunkEvent("late", 0.62, 1), ChunkEvent("short", 0.2, 1),
    ]  # fmt: skip
    summary = summarize_frames(
        *frames(records, chunks), EMPTY, parse_slo("ttft=500,itl=50ms")
    ).as_read()
    assert summary["goodput"] == {
        "slo": {"ttft_s": 0.5, "itl_s": 0.05},
        "requests": 2,  # good, short
        "share": 2 / 5,
        "requests_per_s": 2 / 1.0,  # window 0.0 .. 1.0 (the failed request ends last)
    }
    assert summary["requests"] == {
        "total": 5, "completed": 4, "failed": 1, "warmup_excluded": 0, "by_kind": {"request": 5}
    }  # fmt: skip
    assert summary["errors"] == {"http_5xx": 1}
    assert summarize_frames(*frames(records, chunks), EMPTY).as_read()["goodput"] is None
    tight = summarize_frames(
        *frames(records, chunks), EMPTY, Slo(e2e_s=0.15, tpot_s=0.021)
    ).as_read()
    assert tight["goodput"]["requests"] == 1  # only "good": e2e 0.14, tpot 0.02


def test_percentiles_are_numpys_and_warmup_is_excluded(tmp_path: Path) -> None:
    records, chunks = lognormal_streams(requests=300, seed=3, output_tokens=9, tokens_per_chunk=3)
    warm = RequestRecord("warm", warmup=True, intended_s=-5.0, sent_s=-5.0, first_token_s=99.0,
                         end_s=99.5, output_tokens=2)  # fmt: skip
    warm_chunks = [ChunkEvent("warm", 99.0, 1), ChunkEvent("warm", 99.5, 1)]
    run = RunDir(write_run(tmp_path / "run", [*records, warm], [*chunks, *warm_chunks]))
    requests = RunTables(run).requests
    done = requests[~requests["warmup"]]
    summary = summarize(tmp_path / "run").as_read()
    ttft = (done["first_token_s"] - done["intended_s"]).to_numpy()
    assert summary["ttft_s"] == describe(ttft) | {"max": float(ttft.max())}
    for name, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p999", 99.9)):
        assert summary["ttft_s"][name] == np.percentile(ttft, q)
    assert summary["ttft_s"]["count"] == 300
    assert summary["itl_s"]["count"] == 300 * 8
    assert summary["requests"]["warmup_excluded"] == 1
    window = done["end_s"].max() - done["intended_s"].min()
    assert summary["throughput"]["window_s"] == pytest.approx(window)
    assert summary["throughput"]["requests_per_s"] == pytest.approx(300 / window)
    assert summary["throughput"]["output_tokens_per_s"] == pytest.approx(300 * 9 / window)
    # 9 tokens: a first chunk of 1, then chunks of 3, 3, 2 -> 3 of 4 chunks multi-token.
    assert summary["chunks"]["multi_token_share"] == pytest.approx(3 / 4)
    assert summary["prefix"]["expected_hit_rate"] == pytest.approx(1024 / 1100)
    assert summary["prefix"]["observed_hit_rate"] == pytest.approx(1024 / 1100)


def test_unreported_cached_tokens_is_unknown_not_zero() -> None:
    records = [
        RequestRecord(f"r{i}", intended_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.2,
                      output_tokens=1, prompt_tokens=100, expected_cached_tokens=50)
        for i in range(3)
    ]  # fmt: skip
    prefix = summarize_frames(*frames(records, []), EMPTY).as_read()["prefix"]
    assert prefix == {
        "expected_hit_rate": 0.5,
        "observed_hit_rate": None,
        "reported_requests": 0,
        "observed_reason": "no request carries both prompt_tokens and cached_tokens",
    }


def test_an_empty_run_summarises_without_numbers(tmp_path: Path) -> None:
    summary = summarize(RunDir(tmp_path, create=True)).as_read()
    assert summary["requests"]["completed"] == 0
    assert summary["ttft_s"] == describe([]) | {"max": None}
    assert summary["throughput"]["requests_per_s"] is None
    assert summary["client"]["limited"] is False


@pytest.mark.parametrize(
    "text", ["ttft", "ttft=", "ttft=fast", "ttfb=0.5", "itl=-1", "itl=0", "e2e=1,e2e=2"]
)
def test_bad_slo_is_an_input_error_naming_the_flag(text: str) -> None:
    with pytest.raises(InputError) as err:
        parse_slo(text)
    assert err.value.field == "--slo"
    assert "--slo ttft=" in str(err.value)


def test_slo_units() -> None:
    assert parse_slo("TTFT=500ms, tpot=0.02s,e2e=3s") == Slo(ttft_s=0.5, tpot_s=0.02, e2e_s=3.0)


def test_a_bare_slo_number_is_milliseconds_as_in_vllm() -> None:
    assert parse_slo("ttft=500,tpot=50") == Slo(ttft_s=0.5, tpot_s=0.05)
    assert parse_slo("ttft:500 tpot:50") == Slo(ttft_s=0.5, tpot_s=0.05)  # vLLM's --goodput
