"""Datasets as ``vllm bench serve`` users know them: ``random``, ``sharegpt:FILE`` and
``jsonl:FILE``.

* ``random`` — distinct prompts of ``input_len`` tokens (±``range_ratio``, uniformly, as
  vLLM's ``--random-range-ratio``), ``output_len`` tokens out, optionally behind a shared
  prefix of ``prefix_len`` tokens (vLLM's ``--random-prefix-len``).
* ``sharegpt:FILE`` — the ShareGPT JSON (a list of ``{"conversations": [{"from":
  "human", "value": …}, {"from": "gpt", "value": …}, …]}``, read by ``workloads.sharegpt``):
  by default each conversation is a session whose turns are sent one after another, each
  with the history the file records (an opening ``system`` message kept as the system
  message), each answer's length in tokens the turn's output length; ``turns=first`` sends
  only each conversation's first turn, as vLLM does. Conversations are taken in a
  shuffled order drawn from the seed, reused when more requests are asked for than the
  file holds (the plan records how many it held and used: ``dataset_usable``,
  ``dataset_used``, said in one line before sending).
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
from workloads.limits import MAX_TOKENS
from workloads.params import choice, dist, number, option
from workloads.plan import PackedRequests, Plan, Prompt, RequestSpec, Segment
from workloads.seeding import derive_key, rng
from workloads.sharegpt import conversations

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec
    from workloads.tokenizer import Tokenizer


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
        requests = PackedRequests.pack(
            replace(r, prompt=Prompt((shared, *r.prompt.segments)), group=0) for r in requests
        )
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


def sharegpt_items(path: Path) -> list[Any]:
    """The JSON list a ShareGPT file holds."""
    try:
        data = json.loads(_read(path, "sharegpt"))
    except ValueError as exc:
        raise InputError("--dataset", f"{path} is not ShareGPT JSON: {exc}") from None
    if not isinstance(data, list):
        raise InputError("--dataset", f"{path} is not ShareGPT JSON (a list of conversations)")
    return data


def sharegpt_entries(path: Path) -> list[Entry]:
    """Every conversation's first turn (vLLM's form): the first user message, sent with
    the system message when the conversation opens with one, and its recorded answer."""
    entries = []
    for c in conversations(sharegpt_items(path)):
        user, answer = c.turns[0]
        if c.system is None:
            entries.append(Entry(user, answer=answer))
        else:
            entries.append(Entry(None, c.messages(0), answer=answer))
    return entries


def _answer_limit(obj: dict[str, Any], path: Path, line: int) -> int | None:
    """A line's ``max_tokens`` (or ``output_len``): a whole number of tokens up to
    ``MAX_TOKENS``; absent, null or 0 leave the workload's ``output_len`` to decide."""
    field_ = "max_tokens" if "max_tokens" in obj else "output_len"
    limit = obj.get(field_)
    whole = isinstance(limit, int) and not isinstance(limit, bool)
    if limit is None or (whole and limit == 0):
        return None
    if whole and 0 < limit <= MAX_TOKENS:
        return limit
    raise InputError(
        "--dataset",
        f"{path} line {line}: {field_} must be a whole number of tokens from 1 to "
        f"{MAX_TOKENS:,}, got {json.dumps(limit)[:40]}",
        f"give {field_} as a whole number, or leave it out (or 0) for --set output_len",
    )


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
        limit = _answer_limit(obj, path, number_)
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


def _text_tokenizer(spec: WorkloadSpec, tokenizer: Tokenizer | None) -> Tokenizer:
    if tokenizer is None:
        raise InputError(
            "--tokenizer",
            f"{spec.family.name} prompts are text: their tokens need the server's /tokenize "
            "or --tokenizer",
            "give --tokenizer (a model folder, tokenizer.json or HF model name)",
        )
    return tokenizer


def _answer_len(answer: str | None, tokenizer: Tokenizer) -> int | None:
    return (len(tokenizer.encode(answer, special=False)) or None) if answer else None


def build_file(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: FileParams = spec.params
    kind = spec.family.name
    if kind == "sharegpt" and spec.params.turns == "whole":
        return build_conversations(spec, tokenizer)
    tokenizer = _text_tokenizer(spec, tokenizer)
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
        out = entry.max_tokens or _answer_len(entry.answer, tokenizer)
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
    reuse = {"dataset_usable": len(entries), "dataset_used": sched.count, "dataset_unit": "prompts"}
    return make_plan(spec, requests, arrival, sched.concurrency, dataset=str(path), **reuse)


def _chat_ids(messages: tuple[dict[str, Any], ...], tokenizer: Tokenizer) -> list[int]:
    try:
        return _prompt_ids(Entry(None, messages), tokenizer)
    except InputError as exc:
        raise InputError(
            exc.field,
            f"{exc.problem}: ShareGPT conversations are sent whole, through the chat template",
            "give --tokenizer a model with a chat template, or --set turns=first "
            "(first turns only, as plain text, as vLLM sends them)",
        ) from None


def _sessions_for(requests: int, turns: list[int]) -> int:
    """How many conversations (taken in ``turns``' order, cycling) hold ``requests`` turns."""
    sessions = covered = 0
    while covered < requests:
        covered += turns[sessions % len(turns)]
        sessions += 1
    return sessions


def build_conversations(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    """ShareGPT conversations replayed whole: one session per conversation, its first turn
    at the session's arrival (or from a closed-loop user), turn k sent ``think_time`` after
    turn k-1's answer with the recorded history (``workloads.sharegpt``). ``--num-requests``
    counts turns: the last conversation is cut short to fit."""
    p: SharegptParams = spec.params
    tokenizer = _text_tokenizer(spec, tokenizer)
    path = Path(p.path)
    found = conversations(sharegpt_items(path))
    if not found:
        raise InputError("--dataset", f"{path} holds no usable conversation")
    arrival = resolve_arrival(spec, SHAREGPT, arrival_name(spec))
    order = [found[int(j)] for j in rng(spec.seed, "dataset", "sharegpt").permutation(len(found))]
    load = spec.load
    asked = load.num_requests or (p.requests if load.duration_s is None else 0) or None
    if asked is not None:
        count = _sessions_for(asked, [len(c.turns) for c in order])
        sized = replace(spec, load=replace(load, num_requests=count))
        sched = schedule(sized, arrival, count)
    else:
        sched = schedule(spec, arrival, len(found))
    chosen = [order[s % len(order)] for s in range(sched.count)]
    turns = [len(c.turns) for c in chosen]
    if asked is not None:  # the last conversation cut to the requests asked for
        turns[-1] -= sum(turns) - asked
    total = sum(turns)
    fallback = p.output_len.sample_int(rng(spec.seed, "lengths", "sharegpt", "output"), total)
    think = p.think_time.sample(rng(spec.seed, "think", "sharegpt"), total)
    timed: list[tuple[float, RequestSpec]] = []
    i = 0
    for s, (conv, n) in enumerate(zip(chosen, turns, strict=True)):
        start = sched.at(s)
        clock = float(s) if start is None else start
        for k in range(n):
            pause = float(think[i]) if k else 0.0
            clock += pause
            messages = conv.messages(k)
            out = _answer_len(conv.turns[k][1], tokenizer)
            request = RequestSpec(
                id=f"sharegpt-s{s:05d}-t{k:03d}",
                prompt=Prompt.of_tokens(_chat_ids(messages, tokenizer)),
                max_tokens=int(out or fallback[i]),
                intended_s=start if k == 0 else None,
                kind="sharegpt",
                session=s,
                turn=k,
                think_time_s=pause,
                messages=messages,
                carries_history=True,
            )
            timed.append((clock, request))
            i += 1
    timed.sort(key=lambda pair: pair[0])
    reuse = {"dataset_usable": len(found), "dataset_used": len(chosen)}
    return make_plan(
        spec,
        [r for _, r in timed],
        arrival,
        sched.concurrency,
        dataset=str(path),
        dataset_unit="conversations",
        **reuse,
    )


@dataclass(frozen=True)
class SharegptParams(FileParams):
    turns: str = field(
        **choice(
            "whole",
            ("whole", "first"),
            "whole: every conversation as a session, each turn with its recorded history; "
            "first: each conversation's first turn only (vllm bench serve's form)",
        )
    )
    think_time: Distribution = field(
        **dist(
            0,
            0,
            "seconds from an answer to the conversation's next turn (turns=whole)",
            whole=False,
        )
    )


RANDOM = Family(
    name="random",
    summary="distinct random prompts of set lengths, as vLLM's random dataset",
    params=RandomParams,
    build=build_random,
    default_rate=2.0,
)
SHAREGPT = Family(
    name="sharegpt",
    summary="ShareGPT conversations, replayed whole as sessions (sharegpt:FILE)",
    params=SharegptParams,
    build=build_file,
)
JSONL = Family(
    name="jsonl",
    summary="a JSONL file of prompts or chat conversations (jsonl:FILE)",
    params=FileParams,
    build=build_file,
)
FAMILY_BY_NAME = {f.name: f for f in (RANDOM, SHAREGPT, JSONL)}
