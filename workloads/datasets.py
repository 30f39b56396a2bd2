"""Datasets as ``vllm bench serve`` users know them: ``random``, ``sharegpt:FILE`` and
``jsonl:FILE``.

* ``random`` — distinct prompts of ``input_len`` tokens (±``range_ratio``, uniformly, as
  vLLM's ``--random-range-ratio``), ``output_len`` tokens out, optionally behind a shared
  prefix of ``prefix_len`` tokens (vLLM's ``--random-prefix-len``).
* ``sharegpt:FILE`` — the ShareGPT JSON (a list of ``{"conversations": [{"from":
  "human", "value": …}, {"from": "gpt", "value": …}, …]}``): each conversation's first
  human message is a prompt and its first answer's length in tokens is the output length,
  as vLLM reads it; conversations without both are skipped; they are taken in a shuffled
  order drawn from the seed, cycling when more requests are asked for than the file holds.
* ``jsonl:FILE`` — one JSON object a line: ``{"prompt": "…"}`` or ``{"messages": [{"role",
  "content"}, …]}`` (a chat conversation, sent through the chat API as it is, through the
  model's chat template otherwise), with ``max_tokens`` or ``output_len`` when the line
  says how long the answer is.

File prompts are text, so their token ids (what the prefix oracle and the context check
need) come from the target's tokenizer: the server's ``/tokenize`` or ``--tokenizer``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.distributions import Constant, Distribution, parse_distribution
from workloads.errors import InputError
from workloads.family import (
    Family,
    arrival_name,
    make_plan,
    resolve_arrival,
    schedule,
    unique_requests,
)
from workloads.params import dist, number, option
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.seeding import derive_key, rng

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec
    from workloads.tokenizer import Tokenizer

#: Dataset families whose workload name carries a file: ``sharegpt:FILE``.
FILE_DATASETS = ("sharegpt", "jsonl")


@dataclass(frozen=True)
class RandomParams:
    input_len: Distribution = field(**dist(1024, 1, "prompt tokens (vLLM --random-input-len)"))
    output_len: Distribution = field(**dist(128, 1, "output tokens (--random-output-len)"))
    range_ratio: float = field(
        **number(0.0, 0, "lengths vary uniformly by ± this share", maximum=1)
    )
    prefix_len: int = field(**number(0, 0, "tokens of a prefix every prompt shares"))
    requests: int = field(**number(100, 1, "requests when no count/duration is given"))


def _spread(length: Distribution, ratio: float, key: str) -> Distribution:
    """A constant length widened to ±``ratio`` of itself (vLLM's range ratio)."""
    if ratio <= 0 or not isinstance(length, Constant):
        return length
    if ratio >= 1:
        raise InputError("range_ratio", f"must be below 1, got {ratio:g}")
    low = max(1, round(length.value * (1 - ratio)))
    high = max(low, round(length.value * (1 + ratio)))
    return parse_distribution(f"uniform:{low}-{high}", key)


def build_random(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: RandomParams = spec.params
    arrival = resolve_arrival(spec, RANDOM, arrival_name(spec))
    sched = schedule(spec, arrival, p.requests)
    inputs = _spread(p.input_len, p.range_ratio, "input_len")
    outputs = _spread(p.output_len, p.range_ratio, "output_len")
    requests = unique_requests(spec.seed, "random", inputs, outputs, sched.count, sched)
    if p.prefix_len:
        shared = Segment(p.prefix_len, key=derive_key(spec.seed, "random-prefix"))
        requests = [
            replace(r, prompt=Prompt((shared, *r.prompt.segments)), group=0) for r in requests
        ]
    return make_plan(spec, requests, arrival, sched.concurrency)


@dataclass(frozen=True)
class FileParams:
    path: str = field(**option("", "the dataset file (sharegpt:FILE or jsonl:FILE sets it)"))
    output_len: Distribution = field(
        **dist(256, 1, "output tokens when the dataset does not say (or its answer is empty)")
    )
    requests: int = field(**number(0, 0, "requests when no count is given (0: the whole file)"))


@dataclass(frozen=True)
class Entry:
    """One prompt of a dataset file: its text or chat messages, and its answer length."""

    text: str | None
    messages: tuple[dict[str, Any], ...] | None = None
    answer: str | None = None
    max_tokens: int | None = None


def _read(path: Path, kind: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("--dataset", f"{kind} file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("--dataset", f"cannot read {path}: {exc}") from None


def sharegpt_entries(path: Path) -> list[Entry]:
    """First human message and first answer of every ShareGPT conversation having both."""
    try:
        data = json.loads(_read(path, "sharegpt"))
    except ValueError as exc:
        raise InputError("--dataset", f"{path} is not ShareGPT JSON: {exc}") from None
    if not isinstance(data, list):
        raise InputError("--dataset", f"{path} is not ShareGPT JSON (a list of conversations)")
    entries = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        prompt, answer = first.get("value"), second.get("value")
        if first.get("from") == "human" and isinstance(prompt, str) and prompt.strip():
            entries.append(Entry(prompt, answer=answer if isinstance(answer, str) else None))
    return entries


def jsonl_entries(path: Path) -> list[Entry]:
    """Every line's prompt or messages, and its answer length when it gives one."""
    entries = []
    for number_, line in enumerate(_read(path, "jsonl").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InputError("--dataset", f"{path} line {number_}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise InputError("--dataset", f"{path} line {number_}: not a JSON object")
        limit = obj.get("max_tokens", obj.get("output_len"))
        limit = limit if isinstance(limit, int) and limit > 0 else None
        messages = obj.get("messages")
        if isinstance(messages, list) and messages and all(_is_message(m) for m in messages):
            entries.append(Entry(None, tuple(messages), max_tokens=limit))
        elif isinstance(obj.get("prompt"), str) and obj["prompt"]:
            entries.append(Entry(obj["prompt"], max_tokens=limit))
        else:
            raise InputError(
                "--dataset",
                f"{path} line {number_}: no prompt",
                'write {"prompt": "…"} or {"messages": [{"role": …, "content": …}]}',
            )
    return entries


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m


def _prompt_ids(entry: Entry, tokenizer: Tokenizer) -> list[int]:
    if entry.messages is not None:
        encode_chat = getattr(tokenizer, "encode_chat", None)
        if encode_chat is None:
            raise InputError("--tokenizer", "chat messages need a tokenizer with a chat template")
        return encode_chat(list(entry.messages))
    assert entry.text is not None
    return tokenizer.encode(entry.text, special=True)


def build_file(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: FileParams = spec.params
    kind = spec.family.name
    if tokenizer is None:
        raise InputError(
            "--tokenizer",
            f"{kind} prompts are text: their tokens need the server's /tokenize or --tokenizer",
            "give --tokenizer (a model folder, tokenizer.json or HF model name)",
        )
    path = Path(p.path)
    entries = sharegpt_entries(path) if kind == "sharegpt" else jsonl_entries(path)
    if not entries:
        raise InputError("--dataset", f"{path} holds no usable prompt")
    arrival = resolve_arrival(spec, FAMILY_BY_NAME[kind], arrival_name(spec))
    sched = schedule(spec, arrival, p.requests or len(entries))
    order = rng(spec.seed, "dataset", kind).permutation(len(entries))
    fallback = p.output_len.sample_int(rng(spec.seed, "lengths", kind, "output"), sched.count)
    requests = []
    for i in range(sched.count):
        entry = entries[int(order[i % len(entries)])]
        ids = _prompt_ids(entry, tokenizer)
        out = entry.max_tokens
        if out is None and entry.answer:
            out = len(tokenizer.encode(entry.answer, special=False)) or None
        requests.append(
            RequestSpec(
                id=f"{kind}-{i:06d}",
                prompt=Prompt.of_tokens(ids),
                max_tokens=int(out or fallback[i]),
                intended_s=sched.at(i),
                kind=kind,
                text=entry.text,
                messages=entry.messages,
            )
        )
    return make_plan(spec, requests, arrival, sched.concurrency, dataset=str(path))


RANDOM = Family(
    name="random",
    summary="distinct random prompts of set lengths, as vLLM's random dataset",
    params=RandomParams,
    build=build_random,
    default_rate=2.0,
)
SHAREGPT = Family(
    name="sharegpt",
    summary="ShareGPT conversations' first prompts (sharegpt:FILE)",
    params=FileParams,
    build=build_file,
)
JSONL = Family(
    name="jsonl",
    summary="a JSONL file of prompts or chat conversations (jsonl:FILE)",
    params=FileParams,
    build=build_file,
)
FAMILY_BY_NAME = {f.name: f for f in (RANDOM, SHAREGPT, JSONL)}
