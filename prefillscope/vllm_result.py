"""What ``bench`` does for ``vllm bench serve``'s result and profiler flags.

* ``--save-result`` writes the run's vllm-json (``prefillscope.report.export``) where
  vLLM would: ``--result-filename`` or vLLM's own name,
  ``{label}-{request_rate}qps[-concurrency{N}]-{model}-{YYYYmmdd-HHMMSS}.json`` (the label
  is ``--label``, else vLLM's ``--backend``; a ramp's name is
  ``{label}-ramp-up-{strategy}-{start}qps-{end}qps…``), in ``--result-dir`` (created) or
  the working directory; ``--append-result`` adds it as one more line to the file;
  ``--save-detailed`` keeps the per-request lists (and makes the run keep each answer's
  text for ``generated_texts``). The run directory is written as always.
* ``--ready-check-timeout-sec N`` waits up to N seconds for the server to answer
  ``GET /v1/models`` before anything else (vLLM's ready check; 0, the default, skips it);
  a server still not up then is one line, exit 2.
* ``--profile`` asks the server to start its profiler (``POST /start_profile``) before
  anything is sent and to stop it (``POST /stop_profile``) once the run is over, as
  vLLM's client does; a server without those endpoints (vLLM serves them only when
  started with a profiler configured) gets one line saying so, and the run goes on.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from workloads.errors import InputError

#: Seconds a profiler call may take (vLLM's stop writes the trace before it answers).
PROFILE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class VllmResultFlags:
    """``vllm bench serve``'s result flags as ``bench`` was given them."""

    save: bool = False
    detailed: bool = False
    append: bool = False
    result_dir: Path | None = None
    result_filename: str | None = None
    label: str | None = None
    metadata: tuple[str, ...] = ()
    profile: bool = False

    @property
    def writes(self) -> bool:
        return self.save or self.append

    def check(self) -> tuple[tuple[str, str], ...]:
        """The ``--metadata`` pairs; ``InputError`` for one that is not KEY=VALUE, or a
        result flag given without a file to write."""
        pairs = []
        for item in self.metadata:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise InputError("--metadata", f"{item!r} is not KEY=VALUE", "e.g. version=0.3")
            pairs.append((key.strip(), value.strip()))
        if not self.writes:
            for flag, given in (
                ("--save-detailed", self.detailed),
                ("--result-dir", self.result_dir),
                ("--result-filename", self.result_filename),
            ):
                if given:
                    raise InputError(
                        flag, "shapes the vLLM result file", "add --save-result to write one"
                    )
        return tuple(pairs)


#: vLLM's ``--backend`` values that name its request function for the completions API
#: (a vLLM client's words, not our server flavours); its default is the second.
VLLM_CLIENTS = ("vllm", "openai")


def vllm_backend(given: str, api: str | None) -> str:
    """vLLM's ``--backend`` of this run: ``openai-chat`` for the chat API, else the one
    given (``vllm``/``openai``), else vLLM's default, ``openai``."""
    if api == "chat":
        return "openai-chat"
    return given if given in VLLM_CLIENTS else VLLM_CLIENTS[1]


def result_path(
    flags: VllmResultFlags,
    *,
    backend: str,
    rate: float | None,
    max_concurrency: int | None,
    model: str | None,
    ramp: tuple[str, float, float] | None,
    now: datetime,
) -> Path:
    """Where vLLM would write this run's result (module docstring)."""
    label = flags.label or backend
    rate_text = str(float("inf") if rate is None else float(rate))
    cap = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    model_id = (model or "").split("/")[-1]
    stamp = now.strftime("%Y%m%d-%H%M%S")
    if ramp is not None:
        strategy, start, end = ramp
        name = f"{label}-ramp-up-{strategy}-{start:g}qps-{end:g}qps{cap}-{model_id}-{stamp}.json"
    else:
        name = f"{label}-{rate_text}qps{cap}-{model_id}-{stamp}.json"
    name = flags.result_filename or name
    if flags.result_dir is not None:
        return flags.result_dir / name
    return Path(name)


def check_result_dir(flags: VllmResultFlags) -> None:
    """``--result-dir`` made now (as vLLM makes it), so a path that cannot be a folder
    is refused before anything is sent."""
    if flags.writes and flags.result_dir is not None:
        try:
            flags.result_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                "--result-dir", f"cannot create {flags.result_dir}: {exc.strerror}"
            ) from None


def write_result(path: Path, document: str, append: bool) -> None:
    """The document at ``path`` (whole, by ``runtime.atomic``), or one more line of it; a
    failed write is ``WriteFailed`` (one line, exit 6), as every command's."""
    from runtime import atomic

    if append and path.exists() and path.stat().st_size:
        try:
            with path.open("a", encoding="utf-8") as out:
                out.write("\n" + document)
        except OSError as exc:
            reason = f"cannot append to {path}: {atomic.failure_reason(path.parent, exc)}"
            raise atomic.WriteFailed(exc.errno, reason, None, exc) from None
        return
    atomic.write_text(path, document)


def wait_ready(endpoint: str | None, timeout_s: float, api_key: str | None) -> None:
    """Return once ``GET {endpoint}/v1/models`` answers below 500, or ``InputError``
    after ``timeout_s`` seconds (0: no check; the embedded engine is ready when started)."""
    import time

    import httpx

    if endpoint is None or timeout_s <= 0:
        return
    base = endpoint if "://" in endpoint else f"http://{endpoint}"
    url = base.rstrip("/").removesuffix("/v1") + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            status = httpx.get(url, headers=headers, timeout=min(5.0, timeout_s)).status_code
            if status < 500:
                return
            last = f"HTTP {status}"
        except httpx.HTTPError as exc:
            last = str(exc) or type(exc).__name__
        if time.monotonic() >= deadline:
            raise InputError(
                "--ready-check-timeout-sec",
                f"{url} not ready after {timeout_s:g} s ({last})",
                "start the server first, or wait longer",
            )
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def profiler_call(endpoint: str | None, action: str, api_key: str | None) -> bool:
    """``POST {endpoint}/{action}`` (``start_profile``/``stop_profile``); one line on
    stderr either way. True when the server did it."""
    import httpx

    if endpoint is None:
        print(
            "prefillscope: --profile: the embedded engine has no profiler; not profiled",
            file=sys.stderr,
        )
        return False
    url = endpoint.rstrip("/") + "/" + action
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        status = httpx.post(url, headers=headers, timeout=PROFILE_TIMEOUT_S).status_code
    except httpx.HTTPError as exc:
        print(f"prefillscope: --profile: {url}: {exc or type(exc).__name__}", file=sys.stderr)
        return False
    if status == 200:
        what = "started" if action == "start_profile" else "stopped"
        print(f"prefillscope: --profile: the server's profiler {what} ({url})", file=sys.stderr)
        return True
    print(
        f"prefillscope: --profile: {url} answered {status}: this server has no profiler "
        "endpoint (vLLM serves /start_profile and /stop_profile only when started with "
        "--profiler-config); not profiled",
        file=sys.stderr,
    )
    return False


def save(
    run_dir: Path,
    flags: VllmResultFlags,
    *,
    backend: str,
    rate: float | None,
    max_concurrency: int | None,
    ramp: tuple[str, float, float] | None,
    tokenizer: str | None = None,
) -> Path:
    """Write the run's vllm-json where vLLM would; its path. The percentiles and the
    goodput SLO are those the run was summarised with (``--percentile-metrics``,
    ``--metric-percentiles``, ``--goodput``)."""
    from dataclasses import replace

    from prefillscope.report.export import run_options, to_vllm_json
    from runfmt.run import open_run

    run = open_run(run_dir)
    options = replace(
        run_options(run),
        detailed=flags.detailed,
        backend=backend,
        label=flags.label,
        metadata=flags.check(),
        ramp=ramp,
    )
    model = run.info.target.model if run.info is not None else None
    options = replace(options, tokenizer_id=tokenizer or model)  # vLLM's: else the model
    path = result_path(
        flags, backend=backend, rate=rate, max_concurrency=max_concurrency, model=model,
        ramp=ramp, now=datetime.now(),
    )  # fmt: skip
    write_result(path, to_vllm_json(run, options), flags.append)
    return path


def ramp_of(overrides: dict[str, object]) -> tuple[str, float, float] | None:
    """``(strategy, start, end)`` of a ramp arrival, as vLLM names its ramp-up."""
    if overrides.get("arrival") != "ramp":
        return None
    return (
        str(overrides.get("ramp", "linear")),
        float(overrides.get("start_rate", 0.0)),  # type: ignore[arg-type]
        float(overrides["rate"]),  # type: ignore[arg-type]
    )
