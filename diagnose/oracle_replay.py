"""What the prefix cache could have done: the run's plan replayed through ideal caches.

Each request of a run carries the oracle's expectation (``expected_cached_tokens``) for
the pool the server has and the cache scopes the requests were sent with. Judging the
cache needs two more counterfactuals, from the same prefix model
(``workloads.oracle.PrefixOracle``):

* **unbounded**: the same scopes, a pool that never evicts — what the workload allows;
  a hit rate far below it with evictions means the pool is too small (thrashing);
* **unscoped**: an unbounded pool that ignores salts and adapters — what the *content*
  allows; far above the scoped figure, a scope (a per-request salt) split it up.

Both replay the run's plan, rebuilt from ``run.json``'s workload spec (the spec rebuilds
the same plan for its seed), in the order the requests were sent, warm-ups included. The
replay also counts the **shared working set**: distinct full blocks that two or more
requests reference, which a pool must hold to serve the reuse. Plans whose prompts are
rendered by the server's tokenizer (``prompt_format: text``) or whose trace file is gone
cannot be rebuilt offline; the caller then says so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diagnose.inputs import RunView
from runfmt.series import Series
from workloads.build import build_plan
from workloads.errors import InputError
from workloads.oracle import DEFAULT_VOCAB_SIZE, PrefixOracle, replay_sequence
from workloads.plan import RequestSpec
from workloads.stats import DEFAULT_BLOCK_SIZE

#: Share of the run's requests whose prompt length must match the rebuilt plan.
MATCH_SHARE = 0.95


@dataclass(frozen=True)
class Replay:
    """Σ prompt tokens and Σ cached tokens under each ideal cache, over the measured
    completed requests whose prompt is known before the run."""

    requests: int
    prompt_tokens: float
    unbounded: float
    unscoped: float
    shared_blocks: int
    block_size: int

    @property
    def unbounded_rate(self) -> float:
        return self.unbounded / self.prompt_tokens if self.prompt_tokens else float("nan")

    @property
    def unscoped_rate(self) -> float:
        return self.unscoped / self.prompt_tokens if self.prompt_tokens else float("nan")

    @property
    def own_tokens_per_request(self) -> float:
        """Prompt tokens a request holds that an unbounded cache could not give it: what
        each request in flight adds to the working set beyond the shared blocks."""
        own = self.prompt_tokens - self.unbounded
        return own / self.requests if self.requests else 0.0


def block_size_of(view: RunView) -> int:
    recorded = view.info.oracle.block_size
    if recorded:
        return recorded
    if view.server is not None and view.server.latest(Series.BLOCK_SIZE).known:
        return int(view.server.latest(Series.BLOCK_SIZE).value or DEFAULT_BLOCK_SIZE)
    return DEFAULT_BLOCK_SIZE


def _sent_order(view: RunView, plan_ids: set[str]) -> list[str]:
    """Ids of the plan's requests in the order they were sent."""
    every = view.every_request
    if every.empty or "id" not in every.columns:
        return []
    sent = pd.to_numeric(every.get("sent_s"), errors="coerce")
    frame = pd.DataFrame({"id": every["id"].astype(str), "sent": sent}).dropna()
    frame = frame[frame["id"].isin(plan_ids)].sort_values("sent", kind="stable")
    return frame["id"].tolist()


def replay_oracle(view: RunView) -> tuple[Replay | None, str | None]:
    """The replay, or None and why it could not be made."""
    spec = view.spec
    if spec is None:
        return None, f"the plan cannot be rebuilt ({view.run.spec_problem})"
    if spec.prompt_format == "text":
        return None, "text prompts were rendered by the server's tokenizer: no offline rebuild"
    try:
        plan = build_plan(spec)
    except InputError as exc:
        return None, f"the plan cannot be rebuilt ({exc})"
    by_id = {r.id: r for r in plan.requests}
    order = [by_id[i] for i in _sent_order(view, set(by_id))]
    done = view.completed
    prompt = dict(zip(done["id"].astype(str), view.column("prompt_tokens", done), strict=True))
    known = [r for r in order if r.id in prompt and not r.composes_history]
    if not known:
        return None, "none of the run's completed requests is in the rebuilt plan"
    matches = sum(1 for r in known if prompt[r.id] == r.prompt_len)
    if matches < MATCH_SHARE * len(known):
        return None, (
            f"the rebuilt plan does not match the run's prompts ({matches} of {len(known)})"
        )
    return _replay(view, plan, order, {r.id for r in known}), None


def _replay(view: RunView, plan, order: list[RequestSpec], counted: set[str]) -> Replay:
    model = view.target.model or ""
    vocab = view.target.vocab_size or DEFAULT_VOCAB_SIZE
    size = block_size_of(view)
    scoped = PrefixOracle(size, None, model, vocab_size=vocab)
    unscoped = PrefixOracle(size, None, model, vocab_size=vocab)
    holders: Counter[int] = Counter()
    prompt_tokens = hits = free_hits = 0.0
    for r in order:
        if r.composes_history:
            continue  # a later turn's prompt holds what the server answered
        recorded = replay_sequence(plan, r, r.prompt)
        scope = r.scope(model)
        hashes = scoped.hasher.chain(recorded, scope)
        holders.update(set(hashes[: r.prompt_len // size]))
        hit = scoped.record(recorded, scope, prompt_len=r.prompt_len, hashes=hashes)
        free_hit = unscoped.record(recorded, None, prompt_len=r.prompt_len)
        if r.id in counted:
            prompt_tokens += r.prompt_len
            hits += hit
            free_hits += free_hit
    shared = int(np.sum(np.fromiter(holders.values(), dtype=np.int64) >= 2))
    return Replay(len(counted), prompt_tokens, hits, free_hits, shared, size)
