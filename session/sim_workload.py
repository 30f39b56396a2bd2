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
  rebuilt from the workload its ``run.json`` records (``runfmt.run.Run.spec``) where
  that plan has the recorded id and length; a request it does not have so (a later turn,
  whose prompt held the server's answers) gets fresh tokens of its recorded length, and
  ``SimWorkload.prompts`` says how many did. A run whose spec cannot be rebuilt, or whose
  prompts were text rendered by the server's tokenizer, is refused with the reason: a
  replay of other prompts would fit another workload. Only a run that records no spec at
  all (one made by hand) is replayed with fresh tokens throughout, and ``prompts`` says so.

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
from runfmt.run import Run, open_run
from simengine.core import EngineRequest
from simengine.driver import Release
from simengine.tokenizer import FIRST_WORD_ID
from workloads.errors import InputError
from workloads.plan import Plan


@dataclass
class SimWorkload:
    """Requests with send times, a closed-loop queue and its users, and session turns."""

    timed: list[tuple[float, EngineRequest]] = field(default_factory=list)
    queue: list[EngineRequest] = field(default_factory=list)
    users: int = 0
    #: request id → (think time, the next turn of its session)
    next_turn: dict[str, tuple[float, EngineRequest]] = field(default_factory=dict)
    #: Where a run's replayed prompts came from (``from_run``); ``None`` for a plan.
    prompts: str | None = None

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


def from_run(run: Run, vocab_size: int, seed: int = 0, argument: str = "--workload") -> SimWorkload:
    """A run's measured requests: recorded send times and lengths, replayed open loop with
    the run's own prompts (see the module docstring); ``InputError`` for ``argument`` when
    its plan cannot be rebuilt."""
    table = run.tables.measured
    rows = table[table["sent_s"].notna() & (table["prompt_tokens"].fillna(0) > 0)]
    rows = rows.sort_values("sent_s")
    if rows.empty:
        raise InputError(argument, f"{run.path} holds no measured request with a send time")
    rng = np.random.default_rng(seed)
    t0 = float(rows["sent_s"].iloc[0])
    planned = _planned_prompts(run, vocab_size, argument)
    out = SimWorkload()
    fresh = 0
    for row in rows.itertuples():
        output = row.output_tokens if row.output_tokens and row.output_tokens > 0 else None
        max_tokens = int(output or row.max_tokens or 1)
        tokens = planned.get(str(row.id)) if planned is not None else None
        if tokens is None or len(tokens) != row.prompt_tokens:
            tokens = rng.integers(FIRST_WORD_ID, vocab_size, size=int(row.prompt_tokens)).tolist()
            fresh += 1
        req = EngineRequest(str(row.id), tokens, max_tokens, ignore_eos=True)
        out.timed.append((float(row.sent_s) - t0, req))
    if planned is None:
        out.prompts = f"fresh tokens of the recorded lengths ({run.spec_problem})"
    else:
        out.prompts = f"rebuilt from the run's plan for {len(rows) - fresh} of {len(rows)}"
        if fresh:
            out.prompts += f"; {fresh} not in it as recorded (later turns) got fresh tokens"
    return out


def _planned_prompts(run: Run, vocab_size: int, argument: str) -> dict[str, list[int]] | None:
    """The run's prompts rebuilt from the workload its run.json records, so the prefixes
    its requests shared are shared in the replay too; ``None`` when it records none, an
    ``InputError`` with the reason when its plan cannot be rebuilt."""
    from workloads.build import build_plan

    if run.info is None or not run.info.workload.recorded:
        return None  # a run made by hand: nothing to rebuild, and ``prompts`` says so
    spec = run.require_spec(argument)
    if spec.prompt_format != "tokens":
        raise InputError(
            argument,
            f"{run.path}: its {spec.prompt_format} prompts were rendered by the server's "
            "tokenizer, so their tokens cannot be rebuilt offline",
            "calibrate on a run with --set prompt_format=tokens",
        )
    try:
        plan = build_plan(spec)
    except InputError as exc:
        raise InputError(argument, f"{run.path}: its plan cannot be rebuilt ({exc})") from None
    return {r.id: r.prompt.token_ids(vocab_size).tolist() for r in plan.requests}


def load_workload(
    source: str | Run, assignments: list[str], overrides: dict[str, object], base: EngineConfig
) -> SimWorkload:
    """A run's recorded requests (an opened ``Run``, or a run directory's path), or the
    plan of a workload name/spec/trace."""
    from workloads.build import build_plan
    from workloads.spec import load_spec, parse_assignments

    if isinstance(source, Run):
        return from_run(source, base.vocab_size)
    path = Path(source)
    if path.is_dir():
        return from_run(open_run(path, "--workload"), base.vocab_size)
    spec = load_spec(source, {**dict(parse_assignments(assignments)), **overrides})
    return from_plan(build_plan(spec), base.vocab_size, base.model)
