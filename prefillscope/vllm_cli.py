"""``vllm bench serve``'s command line, read by ``prefillscope bench`` as pasted.

``VLLM_FLAGS`` lists every flag of ``vllm bench serve`` (vLLM 0.32's ``--help=all``,
recorded in ``tests/fixtures/vllm-cpu/bench-serve-help-all.txt``; a flag vLLM adds shows
up in ``tests/cli/test_vllm_cli.py`` as one this table does not handle) and what each
becomes here:

* ``same`` — a flag of ``bench`` with vLLM's name and meaning, passed on; a flag that
  takes several values (``--goodput ttft:500 tpot:50``, ``--metadata K=V K=V``) is
  passed on once per value, the form typer reads;
* ``rename`` — our flag of that meaning (``--num-warmups`` is ``--warmup``);
* ``drop`` — what vLLM does there is what prefillscope does anyway (``--ignore-eos``:
  every request ignores EOS) or nothing a measurement sees (``--disable-tqdm``): dropped,
  with one note on stderr;
* ``refuse`` — no such thing here: one line naming the flag and our nearest equivalent,
  exit 2 (``InputError``);
* the rest are read together (``_Pending``): ``--host``/``--port``/``--base-url`` make
  our ``--endpoint`` URL and vLLM's ``--endpoint /v1/...`` (a path) picks our ``--api``;
  ``--backend openai-chat`` is the chat API; ``--ramp-up-strategy linear|exponential``
  with ``--ramp-up-start-rps``/``--ramp-up-end-rps`` is our ``ramp`` arrival (its
  ``--set ramp=`` shape; vLLM steps the rate per request, request i of n at
  ``start + (end − start)·i/(n − 1)``, ours moves it over time from the first request
  to the last expected one, so the two schedules share their end rates, not every gap);
  ``--temperature 0`` is what we send, another value is refused;
  vLLM's ``--label NAME`` (no ``=``) names the result file (``--result-label``) and
  labels the run ``label=NAME`` (``bench``'s own ``--label KEY=VALUE``, left as it is).

``VllmCompatibleCommand`` runs ``translate`` over ``bench``'s arguments before typer
parses them, so no vLLM flag reaches click's generic "No such option".
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from typer.core import TyperCommand

from workloads.errors import InputError

#: A flag that takes several values (argparse's ``nargs="+"``/``"*"``).
MANY = -1
_REPORT = "prefillscope report RUN_DIR draws the run's timeline and distributions"
_DATASETS = "prefillscope's datasets are random, sharegpt and jsonl (--dataset-name)"
_GREEDY = "prefillscope sends greedy requests (temperature 0), so runs compare"


@dataclass(frozen=True)
class VllmFlag:
    """One ``vllm bench serve`` flag: how many values it takes and what it becomes."""

    kind: str  # same | rename | drop | refuse | read
    values: int = 1  # 0: a switch; 1: one value; MANY: several
    to: str = ""  # rename: our flag; drop/refuse: why, and our equivalent


def _same(values: int = 1) -> VllmFlag:
    return VllmFlag("same", values)


def _rename(to: str, values: int = 1) -> VllmFlag:
    return VllmFlag("rename", values, to)


def _drop(why: str, values: int = 0) -> VllmFlag:
    return VllmFlag("drop", values, why)


def _refuse(why: str, values: int = 1) -> VllmFlag:
    return VllmFlag("refuse", values, why)


def _read(values: int = 1) -> VllmFlag:
    return VllmFlag("read", values)


_TRACE_OPTIONS = ("chunk-hash-size", "label-hash-ids", "label-input-length",
                  "label-output-length", "label-timestamp", "sec-multiplier")  # fmt: skip


def _dataset_option(dataset: str, ours: str = _DATASETS, values: int = 1) -> VllmFlag:
    return _refuse(f"an option of vLLM's {dataset} dataset, which prefillscope has not; {ours}",
                   values)  # fmt: skip


VLLM_FLAGS: dict[str, VllmFlag] = {
    # the same flag, the same meaning
    "--burstiness": _same(),
    "--dataset-name": _same(),
    "--dataset-path": _same(),
    "--goodput": _same(MANY),
    "--max-concurrency": _same(),
    "--metric-percentiles": _same(),
    "--percentile-metrics": _same(),
    "--model": _same(),
    "--num-prompts": _same(),
    "--random-input-len": _same(),
    "--random-output-len": _same(),
    "--random-range-ratio": _same(),
    "--request-rate": _same(),
    "--seed": _same(),
    "--tokenizer": _same(),
    "--save-result": _same(0),
    "--save-detailed": _same(0),
    "--append-result": _same(0),
    "--result-dir": _same(),
    "--result-filename": _same(),
    "--metadata": _same(MANY),
    "--profile": _same(0),
    "--ready-check-timeout-sec": _same(),
    "--help": _same(0),
    "-h": _same(0),
    # the same meaning under our name
    "--num-warmups": _rename("--warmup"),
    "--served-model-name": _rename("--model"),
    "--input-len": _rename("--random-input-len"),
    "--output-len": _rename("--random-output-len"),
    "--random-prefix-len": _rename("--set", 1),
    # read together with others (_Pending)
    "--host": _read(),
    "--port": _read(),
    "--base-url": _read(),
    "--endpoint": _read(),
    "--backend": _read(),
    "--ramp-up-strategy": _read(),
    "--ramp-up-start-rps": _read(),
    "--ramp-up-end-rps": _read(),
    "--temperature": _read(),
    "--label": _read(),
    # what prefillscope does anyway, or nothing a measurement sees
    "--ignore-eos": _drop("every request prefillscope sends ignores EOS already"),
    "--disable-tqdm": _drop("prefillscope shows its own progress (plain lines off a terminal)"),
    "--trust-remote-code": _drop("prefillscope runs no model code (tokenizers reads the files)"),
    "--skip-tokenizer-init": _drop("prefillscope loads a tokenizer only when text needs one"),
    "--tokenizer-mode": _drop("prefillscope reads tokenizer.json with tokenizers", 1),
    "--no-stream": _drop("it is about loading Hugging Face datasets, which prefillscope does not"),
    "--skip-chat-template": _drop("prefillscope applies no chat template in the client"),
    # no such thing here: our nearest equivalent
    "--plot-timeline": _refuse(_REPORT, 0),
    "--plot-dataset-stats": _refuse(_REPORT, 0),
    "--timeline-itl-thresholds": _refuse(_REPORT),
    "--probe-request-rate": _refuse(
        "prefillscope isolation measures what one load does to other requests"
    ),
    "--self-timed": _refuse("a trace's own timestamps: --workload trace --arrival trace", 0),
    "--no-self-timed": _refuse("a trace at a rate of your own: --workload trace --rate R", 0),
    "--request-id-prefix": _refuse("prefillscope names requests itself (the id column)"),
    "--logprobs": _refuse("no equivalent: prefillscope asks for no logprobs"),
    "--use-beam-search": _refuse("no equivalent: " + _GREEDY, 0),
    "--lora-modules": _refuse(
        "send to one adapter with --model ADAPTER, or --workload interference's tenants", MANY
    ),
    "--lora-assignment": _refuse("send to one adapter with --model ADAPTER"),
    "--header": _refuse("the one header prefillscope adds is --api-key's Authorization", MANY),
    "--extra-body": _refuse("no equivalent: prefillscope sends its own request bodies"),
    "--chat-template-kwargs": _refuse("no equivalent: the server applies its chat template"),
    "--insecure": _refuse(
        "no equivalent: give the server's CA with SSL_CERT_FILE, or use http://", 0
    ),
    "--disable-shuffle": _refuse("prefillscope takes a file's prompts in --seed's order", 0),
    "--no-oversample": _refuse(
        "ask for at most as many prompts as the file holds (--num-prompts)", 0
    ),
    "--sharegpt-output-len": _refuse(
        "prefillscope sends each conversation's own answer length; --set output_len=N "
        "sets it where the answer is empty"
    ),
    "--custom-output-len": _refuse(
        "vLLM's custom dataset is --dataset-name jsonl here; a line's max_tokens sets its "
        "length, --set output_len=N where it has none"
    ),
    "--custom-ensure-client-side-data": _dataset_option("custom_image", values=0),
    "--enable-multimodal-chat": _refuse("no equivalent: prefillscope sends text prompts", 0),
    "--frequency-penalty": _refuse(_GREEDY),
    "--presence-penalty": _refuse(_GREEDY),
    "--repetition-penalty": _refuse(_GREEDY),
    "--min-p": _refuse(_GREEDY),
    "--top-k": _refuse(_GREEDY),
    "--top-p": _refuse(_GREEDY),
    "--random-batch-size": _dataset_option("embeddings random"),
    "--no-reranker": _dataset_option("random-rerank", values=0),
    "--random-mm-base-items-per-request": _dataset_option("random-mm"),
    "--random-mm-bucket-config": _dataset_option("random-mm"),
    "--random-mm-limit-mm-per-prompt": _dataset_option("random-mm"),
    "--random-mm-num-mm-items-range-ratio": _dataset_option("random-mm"),
    "--hf-name": _dataset_option("Hugging Face"),
    "--hf-output-len": _dataset_option("Hugging Face"),
    "--hf-split": _dataset_option("Hugging Face"),
    "--hf-subset": _dataset_option("Hugging Face"),
    "--bfcl-categories": _dataset_option("BFCL"),
    "--asr-max-audio-len-sec": _dataset_option("ASR"),
    "--asr-min-audio-len-sec": _dataset_option("ASR"),
    "--blazedit-max-distance": _dataset_option("blazedit"),
    "--blazedit-min-distance": _dataset_option("blazedit"),
    "--spec-bench-category": _dataset_option("spec_bench"),
    "--spec-bench-output-len": _dataset_option("spec_bench"),
    "--speed-bench-category": _dataset_option("speed_bench"),
    "--speed-bench-dataset-subset": _dataset_option("speed_bench"),
    "--speed-bench-output-len": _dataset_option("speed_bench"),
    **{
        f"--prefix-repetition-{name}": _dataset_option(
            "prefix_repetition", "prefillscope's --workload shared-prefix (its --set keys)"
        )
        for name in ("num-prefixes", "output-len", "prefix-len", "suffix-len")
    },
    **{
        f"--timed-trace-{name}": _dataset_option(
            "timed_trace", "prefillscope's --workload trace reads a trace file (--set path=FILE)"
        )
        for name in _TRACE_OPTIONS
    },
}

#: vLLM's ``--backend`` values that are an API here; ``vllm`` and ``openai`` are ours too
#: (a server flavour; their API is vLLM's, the completions one).
_BACKEND_APIS = {"openai-chat": "chat"}
#: vLLM's ``--endpoint`` paths and our ``--api`` for each.
_PATH_APIS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
_RAMPS = ("linear", "exponential")
#: Flags that say a command line is vLLM's (our own spellings of these are others).
_VLLM_SPELLINGS = {"--num-prompts", "--request-rate", "--base-url", "--host", "--port",
                   "--ignore-eos", "--disable-tqdm", "--save-result", "--num-warmups"}  # fmt: skip
#: Flags that say what to send; a vLLM command line with none sends vLLM's default
#: dataset, ``random`` (1024 tokens in, 128 out: the random dataset's defaults here too).
_WHAT_TO_SEND = ("--workload", "--dataset", "--dataset-name", "--random-input-len",
                 "--random-output-len", "--random-range-ratio")  # fmt: skip


@dataclass
class _Pending:
    """The vLLM flags read together, as given; ``args`` turns them into ours."""

    given: dict[str, str] = field(default_factory=dict)
    #: A flag spelled as only vLLM spells it was seen.
    vllm_form: bool = False

    def args(self, ours: list[str], note: Callable[[str, str], None]) -> list[str]:
        out: list[str] = []
        if self.vllm_form and not any(flag in ours for flag in _WHAT_TO_SEND):
            note("--dataset-name", "not given: vLLM's default, random, is sent")
            out += ["--dataset-name", "random"]
        out += self._endpoint(ours)
        out += self._api()
        out += self._ramp(ours)
        temperature = self.given.get("--temperature")
        if temperature is not None and _number("--temperature", temperature) != 0:
            raise InputError("--temperature", f"{temperature} is not what we send", _GREEDY)
        if "--label" in self.given:  # names the result file, and labels the run
            name = self.given["--label"]
            out += ["--result-label", name, "--label", f"label={name}"]
        return out

    def _endpoint(self, ours: list[str]) -> list[str]:
        base = self.given.get("--base-url")
        host, port = self.given.get("--host"), self.given.get("--port")
        if base is None and host is None and port is None:
            return []
        if "--endpoint" in ours:
            raise InputError("--base-url", "given with our --endpoint URL", "give one of them")
        if base is not None:
            if host is not None or port is not None:
                raise InputError("--base-url", "given with --host/--port", "give one of them")
            return ["--endpoint", base]
        host = host or "127.0.0.1"
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return ["--endpoint", f"http://{host}:{port or 8000}"]

    def _api(self) -> list[str]:
        backend, path = self.given.get("--backend"), self.given.get("--endpoint")
        apis: list[str] = []
        if backend is not None:
            apis.append(_BACKEND_APIS[backend])
        if path is not None:
            if path.rstrip("/") not in _PATH_APIS:
                raise InputError(
                    "--endpoint",
                    f"prefillscope sends to {' or '.join(_PATH_APIS)}, not {path}",
                    "--endpoint /v1/chat/completions for chat (our --api chat)",
                )
            apis.append(_PATH_APIS[path.rstrip("/")])
        if len(set(apis)) > 1:
            raise InputError("--endpoint", f"{path} is not the API of --backend {backend}")
        return ["--api", apis[0]] if apis else []

    def _ramp(self, ours: list[str]) -> list[str]:
        names = ("--ramp-up-strategy", "--ramp-up-start-rps", "--ramp-up-end-rps")
        strategy, start, end = (self.given.get(name) for name in names)
        if strategy is None and start is None and end is None:
            return []
        if strategy is None:
            raise InputError(names[1], "needs --ramp-up-strategy", "linear or exponential")
        if strategy not in _RAMPS:
            raise InputError(names[0], f"unknown strategy {strategy!r}", "linear or exponential")
        if start is None or end is None:
            raise InputError(names[0], "needs --ramp-up-start-rps and --ramp-up-end-rps")
        if any(flag in ours for flag in ("--rate", "--request-rate", "--arrival")):
            raise InputError(names[0], "sets the rate itself", "drop --request-rate")
        low, high = _number(names[1], start), _number(names[2], end)
        if low < 0 or low > high:
            raise InputError(names[1], f"{start} is not between 0 and the end's {end}")
        if strategy == "exponential" and low == 0:
            raise InputError(names[1], "an exponential ramp cannot start at 0", "start above 0")
        return ["--arrival", "ramp", "--set", f"start_rate={start}", "--rate", end,
                "--set", f"ramp={strategy}"]  # fmt: skip


def _number(flag: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(flag, f"{text!r} is not a number") from None


def _values(flag: str, spec: VllmFlag, inline: str | None, rest: list[str]) -> list[str]:
    """The values ``flag`` takes, from ``--flag=VALUE`` or the tokens after it (consumed
    from ``rest``)."""
    if spec.values == 0:
        if inline is not None:
            raise InputError(flag, "takes no value", f"write {flag} alone")
        return []
    values = [inline] if inline is not None else []
    if spec.values == 1:
        if inline is None:
            if not rest or (rest[0].startswith("--") and len(rest[0]) > 2):
                raise InputError(flag, "needs a value")
            values.append(rest.pop(0))
        return values
    while rest and not rest[0].startswith("-"):
        values.append(rest.pop(0))
    if not values:
        raise InputError(flag, "needs one value or more")
    return values


def _note(flag: str, why: str) -> None:
    print(f"prefillscope: note: {flag} {why}", file=sys.stderr)


def translate(args: list[str], note: Callable[[str, str], None] = _note) -> list[str]:
    """``bench``'s arguments with every vLLM flag made ours (module docstring); what is
    not a vLLM flag is kept as it is. ``InputError`` for a refused flag."""
    rest, ours = list(args), []
    pending = _Pending()
    while rest:
        token = rest.pop(0)
        if token == "--":
            ours += [token, *rest]
            break
        name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        spec = VLLM_FLAGS.get(name)
        if spec is None:
            ours.append(token)
            continue
        pending.vllm_form |= name in _VLLM_SPELLINGS
        if spec.kind == "refuse":
            raise InputError(name, "vllm bench serve's; not here", spec.to)
        if name == "--endpoint" and not (inline if eq else (rest[0] if rest else "")).startswith(
            "/"
        ):
            ours.append(token)  # our --endpoint: the server's URL
            continue
        if name == "--label" and "=" in (inline if eq else (rest[0] if rest else "")):
            ours.append(token)  # a KEY=VALUE label: the run's own (--label), not vLLM's name
            continue
        if name == "--backend" and (inline if eq else (rest[0] if rest else "")) not in (
            _BACKEND_APIS
        ):
            ours.append(token)  # ours (auto, vllm, sglang, llamacpp, openai) or refused there
            continue
        values = _values(name, spec, inline if eq else None, rest)
        if spec.kind == "drop":
            note(name, "has no effect here: " + spec.to)
        elif spec.kind == "read":
            pending.given[name] = values[0]
        elif spec.kind == "rename" and name == "--random-prefix-len":
            ours += ["--set", f"prefix_len={values[0]}"]
        else:
            to = spec.to if spec.kind == "rename" else name
            for value in values or [None]:
                ours += [to] if value is None else [to, value]
    return ours + pending.args(ours, note)


class VllmCompatibleCommand(TyperCommand):
    """A typer command that reads ``vllm bench serve``'s flags (``translate``) first."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]  # click's signature
        return super().parse_args(ctx, translate(args))
