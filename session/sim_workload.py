"""What ``simulate`` replays: a workload's requests as engine requests, and what releases them.

Three sources, one shape:

* a workload (``--workload`` name, spec file or ``trace:FILE``): the plan ``bench`` would
  send, with the same release rules as the load generator: a request with a send time
  arrives then (open loop); the others are served in plan order by ``Plan.concurrency``
  users, each sending its next when its last one ends (closed loop); turn k of a session
  arrives ``think_time_s`` after turn k-1 ended. A later turn's prompt is the plan's
  (the real run appends the tokens the server returned, which a simulation has not);
* a run directory: its recorded send times and prompt/output lengths, replayed open
  loop (the run's own feedback is in those times already). Prompts are the run's own,
  rebuilt from the workload its ``run.json`` records, where that plan has the recorded
  ids and lengths; else fresh tokens of the recorded lengths (no shared prefix).

``split(n)`` deals the workload over n engine replicas (open-loop requests round-robin,
users and sessions pinned to one replica each), so replicas simulate independently.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfmodel.config import EngineConfig
from simengine.core import EngineRequest
from simengine.driver import Release
from workloads.errors import InputError
from workloads.plan import Plan

#: The first id of word tokens (below: special and byte tokens of the engine's vocabulary).
FIRST_WORD_ID = 259


@dataclass
class SimWorkload:
    """Requests with send times, a closed-loop queue and its users, and session turns."""

    timed: list[tuple[float, EngineRequest]] = field(default_factory=list)
    queue: list[EngineRequest] = field(default_factory=list)
    users: int = 0
    #: request id → (think time, the next turn of its session)
    next_turn: dict[str, tuple[float, EngineRequest]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.timed) + len(self.queue) + len(self.next_turn)

    def requests(self) -> Iterable[EngineRequest]:
        yield from (req for _, req in self.timed)
        yield from self.queue
        yield from (req for _, req in self.next_turn.values())

    def start(self) -> tuple[list[tuple[float, EngineRequest]], Release]:
        """The arrivals known at t=0 and the release rule of one run (fresh state)."""
        queue = iter(self.queue)
        closed = {req.request_id for req in self.queue}
        first = [(0.0, req) for req in itertools.islice(queue, self.users)]

        def release(request_id: str, t: float) -> list[tuple[float, EngineRequest]]:
            out = []
            turn = self.next_turn.get(request_id)
            if turn is not None:
                out.append((t + turn[0], turn[1]))
            if request_id in closed:
                nxt = next(queue, None)
                if nxt is not None:
                    out.append((t, nxt))
            return out

        return [*self.timed, *first], release

    def split(self, n: int) -> list[SimWorkload]:
        """The workload dealt over ``n`` replicas."""
        if n == 1:
            return [self]
        parts = [SimWorkload() for _ in range(n)]
        for i, item in enumerate(self.timed):
            parts[i % n].timed.append(item)
        users = [self.users // n + (1 if i < self.users % n else 0) for i in range(n)]
        serving = [i for i in range(n) if users[i]] or [0]
        for i, req in enumerate(self.queue):
            parts[serving[i % len(serving)]].queue.append(req)
        for part, count in zip(parts, users, strict=True):
            part.users = count
        owner = {req.request_id: i % n for i, (_, req) in enumerate(self.timed)}
        owner |= {req.request_id: serving[i % len(serving)] for i, req in enumerate(self.queue)}
        for rid, turn in self._turns_in_order():
            home = owner.get(rid, 0)
            parts[home].next_turn[rid] = turn
            owner[turn[1].request_id] = home
        return parts

    def _turns_in_order(self) -> list[tuple[str, tuple[float, EngineRequest]]]:
        """Session links, each after the link that leads to its request."""
        later = {turn[1].request_id for turn in self.next_turn.values()}
        out = []
        for rid in [r for r in self.next_turn if r not in later]:
            while rid in self.next_turn:
                out.append((rid, self.next_turn[rid]))
                rid = self.next_turn[rid][1].request_id
        return out


def from_plan(plan: Plan, vocab_size: int, model: str) -> SimWorkload:
    """The plan's requests as engine requests with the load generator's release rules."""
    out = SimWorkload(users=plan.concurrency or 0)
    previous: dict[int, str] = {}
    for spec in plan.requests:
        req = EngineRequest(
            spec.id,
            spec.prompt.token_ids(vocab_size).tolist(),
            spec.max_tokens,
            scope=spec.scope(model),
            ignore_eos=True,
            seed=None,
        )
        later_turn = spec.session is not None and (spec.turn or 0) >= 1
        if later_turn and spec.session in previous:
            out.next_turn[previous[spec.session]] = (spec.think_time_s, req)
        elif spec.intended_s is not None:
            out.timed.append((spec.intended_s, req))
        else:
            out.queue.append(req)
        if spec.session is not None:
            previous[spec.session] = spec.id
    if out.queue and not out.users:
        raise InputError(
            "--concurrency",
            f"{len(out.queue)} requests have no send time and no concurrency serves them",
            "give --concurrency N or an arrival rate",
        )
    return out


def from_run(run_dir: Path, vocab_size: int, seed: int = 0) -> SimWorkload:
    """A run's measured requests: recorded send times and lengths, replayed open loop."""
    from runfmt.tables import RunTables

    try:
        table = RunTables(run_dir).requests
    except (OSError, ValueError) as exc:
        raise InputError("--workload", f"cannot read the requests of {run_dir}: {exc}") from None
    rows = table[(~table["warmup"].astype(bool)) & table["sent_s"].notna()]
    rows = rows[rows["prompt_tokens"].fillna(0) > 0].sort_values("sent_s")
    if rows.empty:
        raise InputError("--workload", f"{run_dir} holds no measured request with a send time")
    rng = np.random.default_rng(seed)
    t0 = float(rows["sent_s"].iloc[0])
    planned = _planned_prompts(run_dir, vocab_size)
    out = SimWorkload()
    for row in rows.itertuples():
        output = row.output_tokens if row.output_tokens and row.output_tokens > 0 else None
        max_tokens = int(output or row.max_tokens or 1)
        tokens = planned.get(str(row.id))
        if tokens is None or len(tokens) != row.prompt_tokens:
            tokens = rng.integers(FIRST_WORD_ID, vocab_size, size=int(row.prompt_tokens)).tolist()
        req = EngineRequest(str(row.id), tokens, max_tokens, ignore_eos=True)
        out.timed.append((float(row.sent_s) - t0, req))
    return out


def _planned_prompts(run_dir: Path, vocab_size: int) -> dict[str, list[int]]:
    """The run's prompts rebuilt from the workload its run.json records (token-id plans
    only), so the prefixes its requests shared are shared in the replay too; empty when
    the plan cannot be rebuilt."""
    import json

    from workloads.build import build_plan
    from workloads.spec import load_spec

    try:
        spec = json.loads((run_dir / "run.json").read_text())["workload"]
        if spec.get("prompt_format") != "tokens":
            return {}
        load = ("seed", "num_requests", "rate", "arrival", "cv", "concurrency", "duration")
        overrides = {k: spec[k] for k in load if spec.get(k) is not None}
        overrides |= {k: v for k, v in (spec.get("params") or {}).items() if v not in ([], None)}
        plan = build_plan(load_spec(spec["workload"], overrides))
    except Exception:
        return {}
    return {r.id: r.prompt.token_ids(vocab_size).tolist() for r in plan.requests}


def load_workload(
    source: str, assignments: list[str], overrides: dict[str, object], base: EngineConfig
) -> SimWorkload:
    """A run directory's recorded requests, or the plan of a workload name/spec/trace."""
    from workloads.build import build_plan
    from workloads.spec import load_spec, parse_assignments

    path = Path(source)
    if path.is_dir():
        return from_run(path, base.vocab_size)
    spec = load_spec(source, {**dict(parse_assignments(assignments)), **overrides})
    return from_plan(build_plan(spec), base.vocab_size, base.model)
