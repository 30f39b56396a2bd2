"""Before a load run sends anything: its plan split into phases, and the options and
requests this target cannot take refused (``InputError``, one line, nothing sent)."""

from __future__ import annotations

from collections.abc import Sized

from loadgen.adapters.base import Adapter
from loadgen.load_options import LoadOptions
from loadgen.target import Target
from workloads.errors import InputError
from workloads.plan import PackedRequests, Plan


def split_plan(plan: Plan) -> tuple[PackedRequests, PackedRequests, PackedRequests]:
    """The warm-up requests, the open-loop ones by send time and the closed-loop ones;
    later turns of a session are released by their session, in none of the three. Views
    on the plan (read from its columns: no request is built here)."""
    requests = plan.requests
    warmup, intended = requests.column("warmup"), requests.column("intended_s")
    session, turn = requests.column("session"), requests.column("turn")
    warmups, open_loop, closed = [], [], []
    for i in range(len(requests)):
        if warmup[i]:
            warmups.append(i)
        elif session[i] is not None and (turn[i] or 0) >= 1:  # SessionBook.is_later_turn
            continue
        elif intended[i] is not None:
            open_loop.append(i)
        else:
            closed.append(i)
    open_loop.sort(key=intended.__getitem__)
    return requests.select(warmups), requests.select(open_loop), requests.select(closed)


def check_load(
    plan: Plan,
    closed: Sized,
    options: LoadOptions,
    target: Target,
    adapter: Adapter,
    users: int | None,
) -> None:
    """Refuse, before sending anything, options or a plan this target cannot take
    (``closed``: the closed-loop requests, which need ``users``)."""
    for flag, value in (
        ("--max-concurrency", options.max_concurrency),
        ("--concurrency", options.concurrency),
        ("--timeout", options.request_timeout_s),
        ("--duration", options.duration_s),
    ):
        if value is not None and value <= 0:
            raise InputError(flag, f"must be positive, got {value}")
    if closed and not users:
        raise InputError(
            "--concurrency",
            f"{len(closed)} requests have no send time and no concurrency serves them",
            "give --concurrency N or an arrival rate",
        )
    for spec in plan:
        problem = adapter.check(spec)
        if problem:
            raise InputError("--backend", f"request {spec.id}: {problem}")
        if spec.text is None and not target.vocab_size:
            raise InputError(
                "vocab_size",
                "token-id prompts need the target's vocabulary size",
                "pass the model's tokenizer or vocabulary size",
            )
