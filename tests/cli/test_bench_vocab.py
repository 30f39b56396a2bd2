"""``prefillscope.bench_vocab``: ``bench`` spoken as ``vllm bench serve`` users speak it."""

from __future__ import annotations

import pytest

from prefillscope.bench_flags import BenchFlags
from prefillscope.bench_vocab import (
    dataset_overrides,
    engine_flags,
    gpu_telemetry,
    picked_percentiles,
    run_slo,
    workload_name,
)
from runfmt.slo import Slo
from workloads.errors import InputError


def _refused(call, **flags) -> InputError:
    with pytest.raises(InputError) as err:
        call(BenchFlags(**flags))
    return err.value


def test_the_workload_comes_from_workload_a_dataset_or_vllms_random_lengths(tmp_path):
    sg = tmp_path / "sg.json"
    sg.write_text("[]")
    assert workload_name(BenchFlags(workload="multi-turn")) == "multi-turn"
    assert workload_name(BenchFlags(dataset=f"sharegpt:{sg}")) == f"sharegpt:{sg}"
    assert workload_name(BenchFlags(dataset_name="sharegpt", dataset_path=str(sg))) == (
        f"sharegpt:{sg}"
    )
    assert workload_name(BenchFlags(dataset_name="random")) == "random"
    assert workload_name(BenchFlags(random_input_len=1024)) == "random"


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ({}, "--workload"),
        ({"workload": "multi-turn", "dataset": "random"}, "--dataset"),
        ({"dataset": "random", "dataset_name": "random"}, "--dataset"),
        ({"dataset_path": "sg.json"}, "--dataset-name"),
        ({"dataset": "alpaca"}, "--dataset"),
        ({"dataset": "sharegpt"}, "--dataset"),
    ],
)
def test_what_to_send_is_refused_naming_the_flag_when_unclear(flags, field):
    assert _refused(workload_name, **flags).field == field


def test_random_lengths_become_the_random_datasets_keys_and_no_other_workloads():
    flags = BenchFlags(random_input_len=512, random_range_ratio=0.1)
    assert dataset_overrides(flags, {"rate": 4.0}) == {"input_len": 512, "range_ratio": 0.1}
    with pytest.raises(InputError) as err:
        dataset_overrides(BenchFlags(workload="multi-turn", random_output_len=8), {})
    assert err.value.field == "--random-output-len"


def test_a_vllm_dataset_with_no_load_is_sent_all_at_once_as_vllm_sends_it():
    flags = BenchFlags(random_input_len=512)
    assert dataset_overrides(flags, {})["rate"] == float("inf")
    assert "rate" not in dataset_overrides(flags, {"concurrency": 4})
    assert "rate" not in dataset_overrides(BenchFlags(workload="random"), {})


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ({"dataset_name": "sharegpt", "dataset_path": "missing.json"}, "--dataset-path"),
        ({"dataset": "sharegpt:missing.json"}, "--dataset"),
        ({"dataset_name": "alpaca"}, "--dataset-name"),
    ],
)
def test_a_missing_file_or_unknown_dataset_names_the_flag_typed(flags, field):
    err = _refused(workload_name, **flags)
    assert err.field == field
    assert "no such file" in str(err) or "unknown dataset" in str(err)


def test_gpu_names_a_preset_for_the_embedded_engine_and_its_old_meaning_still_works(capsys):
    assert engine_flags(BenchFlags(gpu="h100", engine=["block_size=32"]), None) == [
        "block_size=32", "gpu=h100",
    ]  # fmt: skip
    with pytest.raises(InputError) as err:
        engine_flags(BenchFlags(gpu="h100"), "http://127.0.0.1:8000")
    assert err.value.field == "--gpu"
    assert gpu_telemetry(BenchFlags(gpu="off")) == "off"
    assert "--gpu off is --gpu-telemetry off now" in capsys.readouterr().err
    assert engine_flags(BenchFlags(gpu="off"), None) == []
    assert _refused(gpu_telemetry, gpu_telemetry="sometimes").field == "--gpu-telemetry"


def test_vllm_percentile_flags_default_each_other():
    assert picked_percentiles(BenchFlags()) is None
    assert picked_percentiles(BenchFlags(metric_percentiles="50,99")) == (
        ("ttft", "tpot", "itl"), (50.0, 99.0),
    )  # fmt: skip
    assert picked_percentiles(BenchFlags(percentile_metrics="e2el")) == (("e2el",), (99.0,))


def test_goodput_is_the_slo_in_milliseconds_and_not_both():
    assert run_slo(BenchFlags(goodput=["ttft:500", "tpot:50"])) == Slo(ttft_s=0.5, tpot_s=0.05)
    assert run_slo(BenchFlags()) is None
    assert _refused(run_slo, slo="ttft<=1s", goodput=["ttft:500"]).field == "--goodput"
