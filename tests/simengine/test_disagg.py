"""Disaggregated prefill/decode on the virtual clock: the transfer arithmetic, exactly."""

from __future__ import annotations

import pytest
from engine_util import prompt

from perfmodel.config import EngineConfig
from simengine.core import EngineRequest
from simengine.disagg import transfer_wait_s
from simengine.disagg_config import DisaggConfig, parse_ratio
from simengine.disagg_driver import simulate_disagg
from simengine.driver import simulate
from simengine.kv_link import KvLink, LinkSpec
from workloads.errors import InputError

#: llama-3.1-8b: 32 layers × 8 KV heads × 128 × 2 B × 2 (K and V).
BYTES_PER_TOKEN = 131_072
ALONE_2048_S = 2048 * BYTES_PER_TOKEN * 8 / 100e9  # 0.021474836 s at 100 Gb/s


def _run(transfer: str, budget: int, *, latency_s: float = 0.0, n: int = 1, length: int = 2048):
    config = EngineConfig(model="llama-3.1-8b", max_num_batched_tokens=budget, max_num_seqs=8)
    disagg = DisaggConfig(1, 1, LinkSpec(100.0, latency_s=latency_s), transfer)
    arrivals = [
        (0.0, EngineRequest(f"r{i}", prompt(length, i), 4, ignore_eos=True)) for i in range(n)
    ]
    return simulate_disagg(config, disagg, arrivals)


def _prefill_end_and_first_decode_step(result) -> tuple[float, float]:
    pairs = list(zip(result.step_workers, result.steps, strict=True))
    prefill_end = max(s.start_s + s.duration_s for w, s in pairs if w == "prefill-0")
    first_decode = min(s.start_s for w, s in pairs if w == "decode-0")
    return prefill_end, first_decode


@pytest.mark.parametrize("latency_us", [0.0, 250.0])
def test_after_prefill_a_lone_2048_token_request_waits_the_whole_transfer(latency_us) -> None:
    result = _run("after-prefill", 2048, latency_s=latency_us / 1e6)
    (job,) = result.jobs
    assert job.bytes == 268_435_456
    assert round(ALONE_2048_S, 6) == 0.021475
    prefill_end, first_decode = _prefill_end_and_first_decode_step(result)
    assert first_decode - prefill_end == pytest.approx(ALONE_2048_S + latency_us / 1e6, rel=1e-9)
    assert transfer_wait_s(job) == pytest.approx(ALONE_2048_S + latency_us / 1e6, rel=1e-9)
    # the client's first token comes from that decode step: TTFT includes the transfer
    timing = result.requests["r0"]
    assert timing.token_times[0] > first_decode and len(timing.token_times) == 4


def test_overlap_leaves_only_the_last_chunks_transfer_after_prefill() -> None:
    after = _run("after-prefill", 512)
    overlap = _run("overlap", 512)
    last_chunk_s = 512 * BYTES_PER_TOKEN * 8 / 100e9
    (job,) = overlap.jobs
    assert [t.nbytes for t in job.transfers] == [512 * BYTES_PER_TOKEN] * 4
    assert transfer_wait_s(job) == pytest.approx(last_chunk_s, rel=1e-9)
    assert transfer_wait_s(after.jobs[0]) == pytest.approx(ALONE_2048_S, rel=1e-9)
    saved = after.requests["r0"].ttft_s - overlap.requests["r0"].ttft_s
    assert saved == pytest.approx(ALONE_2048_S - last_chunk_s, rel=1e-6)


def test_eight_concurrent_transfers_share_the_link_and_each_take_8x() -> None:
    result = _run("after-prefill", 16384, n=8)
    seconds = [t.seconds for job in result.jobs for t in job.transfers]
    assert len(seconds) == 8
    for s in seconds:
        assert s == pytest.approx(8 * ALONE_2048_S, rel=1e-9)
    assert result.link_bytes == 8 * 268_435_456
    assert result.link_busy_s == pytest.approx(8 * ALONE_2048_S, rel=1e-9)


def test_fifo_link_serves_one_transfer_at_a_time() -> None:
    link = KvLink(LinkSpec(8.0, sharing="fifo"))  # 1 GB/s
    for i in range(3):
        link.start(f"t{i}", 1_000_000_000, 0.0)
    ends = []
    while (t := link.next_event_s()) is not None:
        ends += [x.delivered_s for x in link.advance(t)]
    assert ends == pytest.approx([1.0, 2.0, 3.0])


def test_fair_link_with_a_late_joiner_and_fixed_costs() -> None:
    link = KvLink(LinkSpec(8.0, latency_s=0.5, overhead_s=0.25))  # 1 GB/s
    a = link.start("a", 2_000_000_000, 0.0)
    assert link.advance(1.0) == []
    b = link.start("b", 1_000_000_000, 1.0)  # a has 1 GB left: both share, both end at 3 s
    assert link.queue_depth == 2 and b.depth_at_start == 2
    delivered = []
    while (t := link.next_event_s()) is not None:
        delivered += link.advance(t)
    assert {x.request_id for x in delivered} == {"a", "b"}
    assert a.delivered_s == pytest.approx(3.75) and b.delivered_s == pytest.approx(3.75)
    assert b.seconds == pytest.approx(2.75)


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_a_transfer_below_the_clocks_resolution_leaves_at_its_announced_time(sharing) -> None:
    """At the cap of 10⁹ Gb/s, bytes a day into a run take less than the clock resolves:
    the next event is the current time, and moving there must deliver (it did nothing,
    so the cluster's loop from event to event spun forever)."""
    link = KvLink(LinkSpec(1e9, sharing=sharing))
    day = 86_400.0
    link.advance(day)
    sizes = {"a": 1, "b": 4096, "c": 3}
    for name, nbytes in sizes.items():
        link.start(name, nbytes, day)
    delivered = []
    for _ in range(len(sizes)):  # each event moves the link on: no more events than transfers
        t = link.next_event_s()
        assert t == day
        delivered += link.advance(t)
        if len(delivered) == len(sizes):
            break
    assert sorted(x.request_id for x in delivered) == sorted(sizes)
    assert link.next_event_s() is None and link.bytes_sent == sum(sizes.values())


@pytest.mark.parametrize(
    ("spec", "flag"),
    [
        (LinkSpec(1e20), "--kv-link-gbps"),
        (LinkSpec(latency_s=1e6), "--kv-link-latency-us"),
        (LinkSpec(overhead_s=float("nan")), "--kv-transfer-overhead-us"),
        (LinkSpec(efficiency=0.0), "--kv-link-efficiency"),
    ],
)
def test_the_link_holds_every_constructor_to_its_flags_bounds(spec, flag) -> None:
    with pytest.raises(InputError) as err:
        KvLink(spec)
    assert err.value.field == flag


def test_decode_side_hit_skips_the_transfer_and_prefill_side_caches() -> None:
    config = EngineConfig(max_num_batched_tokens=2048)
    shared = prompt(1024, 3)
    arrivals = [
        (0.0, EngineRequest("first", shared + prompt(64, 4), 4, ignore_eos=True)),
        (5.0, EngineRequest("again", shared + prompt(64, 5), 4, ignore_eos=True)),
    ]
    result = simulate_disagg(config, DisaggConfig(1, 1), arrivals)
    first, again = result.jobs
    assert first.decode_hit_tokens == 0 and first.bytes == 1088 * BYTES_PER_TOKEN
    assert again.decode_hit_tokens == 1024 and again.bytes == 64 * BYTES_PER_TOKEN
    assert result.stats.prefix_hit_tokens == 1024  # the prefill worker's own cache
    assert result.requests["again"].finish_reason == "length"


def test_pd_emits_the_same_number_of_tokens_as_one_engine() -> None:
    arrivals = [
        (0.01 * i, EngineRequest(f"r{i}", prompt(200 + 40 * i, i), 12 + i)) for i in range(30)
    ]
    mono = simulate(EngineConfig(), arrivals)
    pd = simulate_disagg(EngineConfig(), DisaggConfig(2, 1, transfer="overlap"), arrivals)
    for rid, timing in mono.requests.items():
        assert len(pd.requests[rid].token_times) == len(timing.token_times)
        assert pd.requests[rid].finish_reason == timing.finish_reason


def test_a_request_no_decode_worker_can_hold_is_rejected() -> None:
    config = EngineConfig(max_model_len=512)
    result = simulate_disagg(
        config, DisaggConfig(), [(0.0, EngineRequest("x", prompt(500, 1), 64))]
    )
    assert "maximum context length" in result.requests["x"].error


@pytest.mark.parametrize("text", ["1", "0:1", "a:b", "2:-1", ""])
def test_bad_ratio_names_the_flag(text: str) -> None:
    with pytest.raises(InputError, match="--disaggregate"):
        parse_ratio(text)


def test_ratio() -> None:
    assert parse_ratio("3:1") == (3, 1)


def test_the_frontend_delays_each_request_before_the_prefill_worker() -> None:
    """``host_overhead_per_request_s``: the P/D cluster sees a request that long after its
    arrival; every token of a lone request moves by exactly that, timed from the arrival."""
    disagg = DisaggConfig(1, 1, LinkSpec(100.0), "after-prefill")
    arrivals = [(0.5, EngineRequest("r0", prompt(512, 0), 4, ignore_eos=True))]
    times = {}
    for front in (0.0, 0.008):
        config = EngineConfig(model="llama-3.1-8b", max_num_seqs=8,
                              host_overhead_per_request_s=front)  # fmt: skip
        timing = simulate_disagg(config, disagg, arrivals).requests["r0"]
        assert timing.arrival_s == 0.5
        times[front] = timing.token_times
    assert times[0.008] == pytest.approx([t + 0.008 for t in times[0.0]], rel=1e-12)
