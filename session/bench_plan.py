"""What a bench run sends: the workload resolved for the command line, built for a target.

Two things ``bench`` adds to ``workloads``: a closed loop bounded only by ``--duration``
("8 users for 60 s", which the workloads package sizes by a request count only) becomes a
generous plan that the load generator stops releasing at the deadline; and ``--warmup N``
puts N requests in front that share no token with the plan (they warm connections and
the server, not its prefix cache). Text prompts are rendered with the target's own
tokenizer when no ``--tokenizer`` is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from itertools import chain

from loadgen.target import Target
from workloads.build import build_plan
from workloads.errors import InputError
from workloads.family import arrival_name
from workloads.fit import refuse_overlong
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.registry import FILE_DATASETS
from workloads.seeding import derive_key
from workloads.spec import WorkloadSpec, load_spec
from workloads.tokenizer import (
    SERVED_TOKENIZERS,
    ChatTokenizer,
    LocalTokenizer,
    Tokenizer,
    chat_messages,
    load_tokenizer,
)

#: Requests per user per second a duration-bounded closed loop is sized for.
CLOSED_LOOP_RATE_BOUND = 50.0
CLOSED_LOOP_MIN_PLAN = 1_000
CLOSED_LOOP_MAX_PLAN = 200_000


def resolve_workload(
    workload: str, overrides: dict[str, object], api: str | None = None
) -> tuple[WorkloadSpec, float | None]:
    """The spec to build, and the deadline of a closed loop bounded by a duration.

    The workloads package sizes closed-loop plans by a request count only; "8 users for
    60 s" becomes a plan of ``CLOSED_LOOP_RATE_BOUND`` requests per user-second that the
    load generator stops releasing at the deadline. The chat API takes text, so prompts
    become text of exact token counts unless ``prompt_format`` says otherwise.
    """
    file_dataset = workload.partition(":")[0] in FILE_DATASETS
    if (api == "chat" or file_dataset) and "prompt_format" not in overrides:
        overrides = {**overrides, "prompt_format": "text"}
    spec = load_spec(workload, overrides)
    load = spec.load
    if arrival_name(spec) != "closed" or load.duration_s is None:
        return spec, None
    if load.num_requests is None:
        users = load.concurrency or 1
        sized = math.ceil(users * load.duration_s * CLOSED_LOOP_RATE_BOUND)
        count = min(CLOSED_LOOP_MAX_PLAN, max(CLOSED_LOOP_MIN_PLAN, sized))
        spec = load_spec(workload, {**overrides, "num_requests": count})
    return spec, load.duration_s


def warmup_requests(plan: Plan, count: int) -> list[RequestSpec]:
    """``count`` warm-up requests shaped like the plan's first ones but sharing no token
    with anything (so they warm connections and the server, not the prefix cache)."""
    measured = plan.measured
    if not measured:
        return []
    out = []
    for i in range(count):
        like = measured[i % len(measured)]
        key = derive_key(plan.seed, "bench-warmup", i)
        out.append(
            RequestSpec(
                id=f"bench-warmup-{i:04d}",
                prompt=Prompt((Segment(like.prompt_len, key=key),)),
                max_tokens=like.max_tokens,
                kind="warmup",
                warmup=True,
            )
        )
    return out


#: Families whose ``--rate`` is of units that hold several requests, by unit name.
RATE_UNITS = {"multi-turn": "sessions/s"}


def asked_rate(plan: Plan) -> tuple[float | None, str]:
    """The rate the user asked for (``--rate``) and what it counts (``req/s``, or
    ``sessions/s`` for multi-turn): what a display calls the target. ``None`` when none
    was given (closed loop, a trace's own times, the family's default)."""
    rate = plan.spec.get("rate")
    unit = RATE_UNITS.get(str(plan.spec.get("family")), "req/s")
    return (float(rate) if isinstance(rate, int | float) else None), unit


def counts_by_kind(plan: Plan) -> dict[str, int]:
    """Measured requests of each kind (``long-prompt``, ``decode``, ``turn`` …)."""
    counts: dict[str, int] = {}
    for kind in plan.measured.column("kind"):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def added_requests_note(plan: Plan) -> str | None:
    """What the workload sends beyond ``--num-requests``, said before sending: e.g.
    interference's decode streams, which ride alongside the long prompts it counts."""
    asked = plan.spec.get("num_requests")
    measured = len(plan.measured)
    if not isinstance(asked, int) or measured == asked:
        return None
    kinds = counts_by_kind(plan)
    extra = ", ".join(f"{n:,} {kind}" for kind, n in kinds.items())
    return (
        f"{plan.workload} sends {measured:,} requests for --num-requests {asked:,}: {extra} "
        f"(counted apart in the summary)"
    )


def dataset_reuse_note(plan: Plan) -> str | None:
    """One line when a dataset file holds fewer usable prompts (or conversations) than the
    plan sends: they are reused, and a reused prompt can hit the prefix cache."""
    usable, used = plan.spec.get("dataset_usable"), plan.spec.get("dataset_used")
    if not isinstance(usable, int) or not isinstance(used, int) or used <= usable:
        return None
    unit = plan.spec.get("dataset_unit", "prompts")
    return (
        f"{plan.spec.get('dataset')} holds {usable:,} usable {unit}; the plan sends {used:,}, "
        f"so they are reused ({used / usable:.1f}× each on average): repeats can hit the "
        "prefix cache"
    )


def target_rate(plan: Plan) -> float | None:
    """The offered open-loop rate (requests/s) of the plan's schedule."""
    times = sorted(t for t in plan.measured.column("intended_s") if t is not None)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else None


def build_workload_plan(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    """``workloads.build.build_plan``, refusing a ``--concurrency`` the plan does not use
    (an open-loop ``--rate`` of a family without closed-loop users would ignore it)."""
    plan = build_plan(spec, tokenizer)
    if spec.load.concurrency is not None and plan.concurrency is None:
        raise InputError(
            "--concurrency",
            f"{spec.name} at an open-loop rate has no closed-loop users to set",
            "drop --concurrency (or --rate); cap an open loop with --max-concurrency",
        )
    return plan


def plan_tokenizer(
    target: Target, source: str | None = None, api_key: str | None = None
) -> Tokenizer | None:
    """The tokenizer text prompts are rendered with: ``source`` (``--tokenizer``), else
    the server's own when it serves one (vLLM, SGLang, llama.cpp, the embedded engine:
    its ``tokenize_dialect`` in ``workloads.tokenizer.SERVED_TOKENIZERS``)."""
    if source:
        return load_tokenizer(source, model=target.model, api_key=api_key)
    served = SERVED_TOKENIZERS.get(target.kind.tokenize_dialect or "")
    if served is not None:
        return served(target.base_url, model=target.model, api_key=api_key, query=target.query)
    return None


def exact_chat_prompts(plan: Plan, tokenizer: ChatTokenizer) -> Plan:
    """``plan`` with every chat request whose text is known before the run (all but later
    turns) holding the token ids its messages become through the model's chat template:
    what the server's prefix cache will see, so the oracle's expectation is exact."""

    def exact(r: RequestSpec) -> RequestSpec:
        if r.text is None or (r.session is not None and r.turn):
            return r
        return replace(r, prompt=Prompt.of_tokens(tokenizer.encode_chat(chat_messages(r.text))))

    return replace(plan, requests=(exact(r) for r in plan.requests))


def full_text_tokens(api: str, tokenizer: Tokenizer | None) -> Callable[[str], list[int]] | None:
    """How a composed text prompt (a later turn's history) becomes the server's token ids:
    through the chat template for the chat API, with the special tokens otherwise."""
    if tokenizer is None:
        return None
    if api == "chat":
        if not hasattr(tokenizer, "encode_chat"):
            return None
        chat = tokenizer.encode_chat
        return lambda text: chat(chat_messages(text))
    return lambda text: tokenizer.encode(text, special=True)


def vocab_from_tokenizer(target: Target, source: str | None) -> None:
    """The vocabulary of ``--tokenizer`` (a local model's) when the server does not say it."""
    if target.vocab_size or not source or source.startswith(("http://", "https://")):
        return
    target.vocab_size = LocalTokenizer(source).vocab_size
    target.discovered["vocab_size"] = "--tokenizer"


def build_bench_plan(
    spec: WorkloadSpec,
    target: Target,
    *,
    warmup: int = 0,
    text_tokenizer: Tokenizer | None = None,
    allow_overlong: bool = False,
) -> Plan:
    """The plan ``spec`` makes for ``target``, led by ``warmup`` warm-up requests; text
    prompts rendered with ``text_tokenizer`` (chat prompts then tokenized through the
    chat template when it can). Refused (``InputError``) when ``target`` cannot take it:
    token ids without a known vocabulary, or (unless ``allow_overlong``) requests longer
    than its context."""
    if warmup < 0:
        raise InputError("--warmup", f"must be >= 0, got {warmup}")
    plan = build_workload_plan(spec, text_tokenizer if spec.prompt_format == "text" else None)
    if target.api == "chat" and hasattr(text_tokenizer, "encode_chat"):
        plan = exact_chat_prompts(plan, text_tokenizer)  # type: ignore[arg-type]
    if not target.vocab_size and any(r.text is None for r in plan):
        raise InputError(
            "--vocab-size",
            f"{target.base_url} does not say its vocabulary size, which token-id prompts need",
            "pass --vocab-size N or --tokenizer (a model folder, tokenizer.json or HF name)",
        )
    if target.max_model_len and not allow_overlong:
        source = target.discovered.get("max_model_len", "the server")
        refuse_overlong(plan, target.max_model_len, source)
    if not warmup:
        return plan
    return replace(plan, requests=chain(warmup_requests(plan, warmup), plan.requests))
