"""``trace:FILE``: replay a recorded request trace, one JSON object a line.

Two line formats, told apart by their keys (a file may mix them):

* **Mooncake** — ``{"timestamp": ms, "input_length": n, "output_length": m,
  "hash_ids": [...]}``. The prompt is cut into blocks of the trace's block size (512
  by default; ``block_size=`` to change it); ``hash_ids`` names each block, equal ids
  are identical blocks, and the last block is partial when ``input_length`` is not a
  multiple of the block size. Each id becomes one keyed token run, so the prefix reuse
  the trace recorded is exactly the reuse the plan has (and the oracle sees).
* **Prompts** — ``{"prompt": "text" | [token ids], "output_length"?: m,
  "timestamp"?: ms}``. Text is tokenized with the target's tokenizer (the prompt is
  then sent as that text) and needs one; token ids are sent as they are.

Timestamps (milliseconds from the trace's start: >= 0, at most a week) drive the
schedule unless ``--rate`` or ``--concurrency`` says otherwise; ``time_scale`` stretches
them (0.5 replays twice as fast). Lines may come in any order: they are replayed in
time order (file order among equal timestamps). A ``hash_ids`` entry is a whole number
from 0 to 2^63 - 1, the range of the block keys it becomes (a larger one would share
its key with another id).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.distributions import Distribution
from workloads.errors import InputError
from workloads.family import Family, arrival_name, make_plan, resolve_arrival, schedule
from workloads.limits import MAX_SECONDS, MAX_TOKENS
from workloads.params import dist, number, option
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.seeding import derive_key, rng

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec
    from workloads.tokenizer import Tokenizer

MOONCAKE_BLOCK_SIZE = 512
_KEY_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class TraceParams:
    path: str = field(**option("", "the JSONL trace (trace:FILE sets it)"))
    block_size: int = field(**number(MOONCAKE_BLOCK_SIZE, 1, "tokens per hash_ids block"))
    time_scale: float = field(
        **number(1.0, 0, "timestamp multiplier (0.5 = 2x faster)", above=True)
    )
    output_len: Distribution = field(**dist(128, 1, "max_tokens of lines without output_length"))


@dataclass(frozen=True)
class TraceRow:
    """One parsed line: its number in the file, when it was sent, what it asked."""

    line: int
    timestamp_ms: float | None
    prompt: Prompt
    output_len: int | None
    text: str | None = None
    mooncake: bool = False


class _Reader:
    """Parses lines of one file, naming the file and line in every complaint."""

    def __init__(self, path: Path, block_size: int, seed: int, tokenizer: Tokenizer | None):
        self.path = path
        self.block_size = block_size
        self.tokenizer = tokenizer
        self.blocks: dict[int, Segment] = {}
        # Keyed runs are mixed before use, so consecutive keys give unrelated tokens.
        self.key_base = derive_key(seed, "trace-block")

    def fail(self, line: int, problem: str, fix: str | None = None) -> InputError:
        return InputError("workload", f"{self.path} line {line}: {problem}", fix)

    def count(self, obj: dict, key: str, line: int, minimum: int) -> int:
        """A token count: a whole number from ``minimum`` to ``MAX_TOKENS`` (an
        output_length of 10^30 overflowed the plan; 6e8 built it until killed)."""
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(line, f"{key} must be a whole number >= {minimum}, got {value!r}")
        if value > MAX_TOKENS:
            raise self.fail(line, f"{key} {value:,} is above the cap of {MAX_TOKENS:,} tokens")
        return value

    def timestamp(self, obj: dict, line: int) -> float | None:
        value = obj.get("timestamp")
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise self.fail(line, f"timestamp must be a number of milliseconds, got {value!r}")
        if value < 0:  # an offset from the trace's start; -1 was taken as a time before it
            raise self.fail(
                line,
                f"timestamp must be >= 0 (milliseconds from the trace's start), got {value:g}",
                "shift the trace's timestamps so that its first request is at 0",
            )
        if value > MAX_SECONDS * 1000:  # told here, not as the plan's span on --rate
            raise self.fail(line, f"timestamp {value:g} ms is beyond a week from 0")
        return float(value)

    def block(self, hash_id: int, length: int) -> Segment:
        """The run of one hash id; full blocks are shared objects (most ids repeat)."""
        full = length == self.block_size
        segment = self.blocks.get(hash_id) if full else None
        if segment is None:
            segment = Segment(length, key=(self.key_base + hash_id) & _KEY_MASK)
            if full:
                self.blocks[hash_id] = segment
        return segment

    def mooncake(self, obj: dict, line: int) -> TraceRow:
        n = self.count(obj, "input_length", line, 1)
        ids = obj["hash_ids"]
        want = -(-n // self.block_size)
        if not isinstance(ids, list) or any(type(h) is not int for h in ids):
            raise self.fail(line, "hash_ids must be a list of integers")
        outside = next((h for h in ids if not 0 <= h <= _KEY_MASK), None)
        if outside is not None:  # 10^30 was folded onto another id's key
            raise self.fail(
                line,
                f"hash_ids entry {outside} is outside 0 to 2^63-1, the range of block keys",
                "give each block's id as a whole number in that range",
            )
        if len(ids) != want:
            raise self.fail(
                line,
                f"{len(ids)} hash_ids for input_length {n}, expected {want}",
                f"is the trace's block size {self.block_size}? set block_size=",
            )
        bs = self.block_size
        segments = tuple(self.block(h, min(bs, n - i * bs)) for i, h in enumerate(ids))
        return TraceRow(
            line,
            self.timestamp(obj, line),
            Prompt(segments),
            self.count(obj, "output_length", line, 1),
            mooncake=True,
        )

    def prompt(self, obj: dict, line: int) -> TraceRow:
        value = obj["prompt"]
        output = (
            None if obj.get("output_length") is None else self.count(obj, "output_length", line, 1)
        )
        if isinstance(value, str):
            if self.tokenizer is None:
                raise self.fail(
                    line, "a text prompt needs the target's tokenizer", "give --tokenizer"
                )
            ids = self.tokenizer.encode(value)
            return TraceRow(line, self.timestamp(obj, line), Prompt.of_tokens(ids), output, value)
        if (
            not isinstance(value, list)
            or not value
            or any(type(t) is not int or t < 0 for t in value)
        ):
            raise self.fail(line, "prompt must be text or a non-empty list of token ids")
        return TraceRow(line, self.timestamp(obj, line), Prompt.of_tokens(value), output)

    def row(self, text: str, line: int) -> TraceRow:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.fail(line, f"not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise self.fail(line, "expected a JSON object")
        if "hash_ids" in obj:
            return self.mooncake(obj, line)
        if "prompt" in obj:
            return self.prompt(obj, line)
        raise self.fail(line, "expected Mooncake keys (hash_ids, input_length) or a prompt")


def read_trace(
    path: str | Path,
    *,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    seed: int = 0,
    tokenizer: Tokenizer | None = None,
) -> list[TraceRow]:
    """Every request line of ``path`` in time order (file order among equal timestamps)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("workload", f"trace file {path} not found", "check the path after trace:")
    reader = _Reader(path, block_size, seed, tokenizer)
    try:
        with path.open(encoding="utf-8") as fh:
            rows = [reader.row(text, i) for i, text in enumerate(fh, 1) if text.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("workload", f"cannot read trace {path}: {exc}") from None
    if not rows:
        raise InputError("workload", f"trace {path} has no requests")
    if all(r.timestamp_ms is not None for r in rows):
        rows.sort(key=lambda r: r.timestamp_ms or 0.0)
    return rows


def build(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: TraceParams = spec.params
    if not p.path:
        raise InputError("workload", "a trace workload needs a file", "use trace:FILE")
    rows = read_trace(p.path, block_size=p.block_size, seed=spec.seed, tokenizer=tokenizer)
    stamps = [r.timestamp_ms for r in rows]
    offsets = None
    if all(t is not None for t in stamps):
        offsets = tuple((t - stamps[0]) / 1000.0 for t in stamps)  # type: ignore[operator]
    name = arrival_name(spec, "trace")
    if name == "trace" and offsets is None:
        raise InputError(
            "arrival",
            f"trace {p.path} has lines without a timestamp",
            "give --rate or --concurrency",
        )
    arrival = resolve_arrival(spec, FAMILY, name, offsets, p.time_scale)
    sched = schedule(spec, arrival, len(rows))
    count = min(sched.count, len(rows))
    outputs = p.output_len.sample_int(rng(spec.seed, "lengths", "output"), count)
    requests = [
        RequestSpec(
            id=f"trace-{r.line:06d}",
            prompt=r.prompt,
            max_tokens=r.output_len if r.output_len is not None else int(outputs[i]),
            intended_s=sched.at(i),
            kind="trace",
            text=r.text,
        )
        for i, r in enumerate(rows[:count])
    ]
    native = p.block_size if any(r.mooncake for r in rows) else None
    return make_plan(
        spec, requests, arrival, sched.concurrency, trace_rows=len(rows), trace_block_size=native
    )


FAMILY = Family(
    name="trace",
    summary="replay a JSONL trace: Mooncake hash_ids blocks or plain prompts",
    params=TraceParams,
    build=build,
)
