"""``bench --ray``: the shards as Ray actors on a local cluster (two CPUs on 127.0.0.1).

The run directory passes what a one-process run passes — every request ``ok``, the
oracle's expectation equal to the engine's ``cached_tokens`` request by request — and
``run.json`` reports each actor's clock offset and its error bound. An actor killed
mid-run is a failed shard whose rows, streamed back while it ran, are in the run.
Skipped when ``ray`` is not installed (``pip install 'prefillscope[ray]'``).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from bench_support import bench_cli, read_json, requests_table, sharded_options
from oracle_races import assert_cached_as_expected

from session.bench_runner import run_bench
from workloads.errors import InputError

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # a Ray cluster starts in seconds, more on a busy machine


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_ray_run_is_a_run_with_its_clocks_aligned(tmp_path: Path) -> None:
    outcome = asyncio.run(run_bench(sharded_options(tmp_path / "run", 2, ray="auto")))
    assert outcome.status == "complete", outcome.reason
    requests = requests_table(tmp_path / "run")
    assert len(requests) == 48 and (requests["status"] == "ok").all()
    assert assert_cached_as_expected(requests, related="group") >= 1
    run = read_json(tmp_path / "run", "run.json")
    clocks = run["load"]["ray"]
    assert clocks["actors"] == 2 and len(clocks["clocks"]) == 2
    # one host: the same monotonic clock, so the offset is within its own error bound
    for clock in clocks["clocks"]:
        assert 0 < clock["error_s"] < 0.5
        assert abs(clock["offset_s"]) <= clock["error_s"]
    assert [s["status"] for s in run["result"]["shards"]] == ["complete"] * 2
    # one CPU each, packed: both on this one node
    assert clocks["placement"] == "cpu" and clocks["nodes"] == 1
    assert len({clock["node"] for clock in clocks["clocks"]}) == 1
    assert outcome.summary.to_json()["requests"]["completed"] == 48
    assert not (tmp_path / "run" / "shards").exists()


async def _kill_actor_mid_run(out: Path):
    task = asyncio.create_task(
        run_bench(sharded_options(out, 2, ray="auto", num_requests=200, rate=10))
    )
    journal = out / "shards" / "1" / "requests.jsonl"
    while not (journal.exists() and journal.read_text().count("\n") >= 3):
        await asyncio.sleep(0.1)
    (name,) = [n for n in ray.util.list_named_actors() if n.endswith("-shard-1")]
    ray.kill(ray.get_actor(name))
    return await task


def test_a_dead_actor_is_a_failed_shard_with_its_rows_kept(tmp_path: Path) -> None:
    outcome = asyncio.run(_kill_actor_mid_run(tmp_path / "run"))
    run = read_json(tmp_path / "run", "run.json")
    assert outcome.status == "interrupted" and "Ray actor is gone" in run["reason"]
    shards = {s["index"]: s for s in run["result"]["shards"]}
    assert shards[1]["status"] == "failed"
    requests = requests_table(tmp_path / "run")
    kept = shards[1]["requests"]["finished"]
    assert kept >= 3
    assert len(requests) == kept + shards[0]["requests"]["finished"]


def test_one_actor_per_node_and_more_shards_than_nodes_refused(tmp_path: Path) -> None:
    """``--ray-placement node`` on this one-node cluster: one shard runs on it; two are
    refused before anything is written, the message naming the flag and the fix."""
    one = replace(sharded_options(tmp_path / "one", 1, ray="auto"), ray_placement="node")
    outcome = asyncio.run(run_bench(one))
    assert outcome.status == "complete", outcome.reason
    ray_info = read_json(tmp_path / "one", "run.json")["load"]["ray"]
    assert ray_info["placement"] == "node" and ray_info["actors"] == ray_info["nodes"] == 1
    assert ray_info["clock_alignment_error_max_s"] == ray_info["clocks"][0]["error_s"] > 0
    two = replace(sharded_options(tmp_path / "two", 2, ray="auto"), ray_placement="node")
    with pytest.raises(InputError) as refused:
        asyncio.run(run_bench(two))
    assert refused.value.field == "--ray-placement"
    assert "2 shards" in str(refused.value) and "1 node" in str(refused.value)
    assert "--workers 1" in str(refused.value)
    assert not (tmp_path / "two").exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--ray-placement", "node"), "--ray-placement"),  # without --ray
        (("--ray", "auto", "--ray-placement", "rack"), "--ray-placement"),
    ],
)
def test_bad_placement_flags_are_one_line_exit_2(tmp_path: Path, flags, named) -> None:
    out = tmp_path / "run"
    done = bench_cli("--workload", "shared-prefix", "--out", str(out), *flags)
    assert done.returncode == 2
    assert named in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr and not out.exists()
