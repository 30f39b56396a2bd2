"""Before a load run sends anything: its plan split into phases, and the options and
requests this target cannot take refused (``InputError``, one line, nothing sent)."""

from __future__ import annotations

from loadgen.adapters.base import Adapter
from loadgen.load_options import LoadOptions
from loadgen.sessions import SessionBook
from loadgen.target import Target
from workloads.errors import InputError
from workloads.plan import Plan, RequestSpec


def split_plan(
    plan: Plan, sessions: SessionBook
) -> tuple[list[RequestSpec], list[RequestSpec], list[RequestSpec]]:
    """The warm-up requests, the open-loop ones by send time and the closed-loop ones;
    later turns of a session are released by their session, in none of the three."""
    warmups, open_loop, closed = [], [], []
    for spec in plan:
        if spec.warmup:
            warmups.append(spec)
        elif sessions.is_later_turn(spec):
            continue
        elif spec.intended_s is not None:
            open_loop.append(spec)
        else:
            closed.append(spec)
    open_loop.sort(key=lambda s: s.intended_s)
    return warmups, open_loop, closed


def check_load(
    plan: Plan,
    closed: list[RequestSpec],
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
