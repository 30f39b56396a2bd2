"""``session.shard_results``: one run's result from its worker shards' results."""

from __future__ import annotations

from loadgen.load_options import LoadResult
from runfmt.codec import encode
from runfmt.run_result import ClientAccount, RunResult, SendTimer
from runtime.signals import STOP_REASON_PREFIX
from session.shard_results import merge_results


def _shard(
    index: int, status: str = "complete", reason: str | None = None, **fields
) -> tuple[int, RunResult]:
    result = LoadResult(status=status, reason=reason, **fields)
    return index, result.section()


def test_counts_and_errors_are_summed_over_every_shard():
    merged = LoadResult(planned=10)
    merge_results(
        merged,
        [
            _shard(0, released=5, sent=5, finished=5, ok=4, errors={"timeout": 1}),
            _shard(1, released=5, sent=4, finished=4, ok=2, errors={"timeout": 1, "http_5xx": 1}),
        ],
    )
    assert (merged.released, merged.sent, merged.finished, merged.ok) == (10, 9, 9, 6)
    assert merged.errors == {"timeout": 2, "http_5xx": 1}
    assert merged.not_sent == 1 and merged.status == "complete"
    assert [s.index for s in merged.shards] == [0, 1]
    assert [s.requests.ok for s in merged.shards] == [4, 2]


def test_the_run_spans_the_earliest_start_and_the_latest_end():
    merged = LoadResult()
    merge_results(
        merged,
        [
            _shard(0, started_s=2.0, schedule_t0_s=2.5, ended_s=9.0),
            _shard(1, started_s=1.0, schedule_t0_s=1.5, ended_s=7.0),
            _shard(2),
        ],
    )
    assert (merged.started_s, merged.schedule_t0_s, merged.ended_s) == (1.0, 2.5, 9.0)


def test_a_failed_shards_reason_comes_first_and_names_the_shard():
    merged = LoadResult()
    stop = f"{STOP_REASON_PREFIX}SIGINT)"
    merge_results(
        merged,
        [_shard(0, "interrupted", stop), _shard(1, "failed", "server went away"), _shard(2)],
    )
    assert (merged.status, merged.reason) == ("interrupted", "shard 1: server went away")


def test_all_shards_failed_is_failed_and_a_stop_reason_is_kept_as_it_is():
    merged = LoadResult()
    merge_results(merged, [_shard(0, "failed", "a"), _shard(1, "failed", "b")])
    assert (merged.status, merged.reason) == ("failed", "shard 0: a")
    stopped = LoadResult()
    stop = f"{STOP_REASON_PREFIX}SIGTERM)"
    merge_results(stopped, [_shard(0), _shard(1, "interrupted", stop)])
    assert (stopped.status, stopped.reason) == ("interrupted", stop)


def test_client_figures_sum_cpu_and_samples_and_keep_the_worst_lag_and_timer():
    merged = LoadResult()
    merge_results(
        merged,
        [
            _shard(0, client=ClientAccount(samples=3, cpu_s=1.5, cpu_share=0.4,
                                           loop_lag_max_s=0.01,
                                           timer=SendTimer(wakeups=10, spin_s=0.002))),
            _shard(1, client=ClientAccount(samples=2, cpu_s=0.5, cpu_share=0.9,
                                           loop_lag_max_s=0.03,
                                           timer=SendTimer(wakeups=5, spin_s=0.001))),
        ],
    )  # fmt: skip
    assert encode(merged.client) == {
        "workers": 2,
        "samples": 5,
        "loop_lag_max_s": 0.03,
        "cpu_s": 2.0,
        "cpu_share": 0.9,
        "timer": {"wakeups": 15, "spin_s": 0.002},
    }


def test_a_shard_that_recorded_nothing_is_written_as_it_was():
    """A worker that died before its account: its client and cache protocol are ``{}`` in
    ``run.json``, as before the result was typed."""
    dead = LoadResult(status="failed", reason="worker 1 died", planned=4).section()
    merged = LoadResult()
    merge_results(merged, [(1, dead)])
    doc = encode(merged.section())
    assert doc["cache_protocol"] == {} and doc["shards"][0]["client"] == {}
    assert doc["shards"][0]["requests"]["planned"] == 4 and doc["status"] == "failed"
