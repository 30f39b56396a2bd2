"""Helpers the embedded-engine tests share: deterministic prompts and run-to-completion."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from simengine.core import EngineCore, EngineRequest, StepResult


def prompt(n: int, seed: int) -> list[int]:
    """``n`` word-token ids drawn from ``seed``."""
    return np.random.default_rng(seed).integers(259, 32000, size=n).tolist()


@dataclass
class Run:
    """Everything a run to completion produced."""

    tokens: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    finish: dict[str, str] = field(default_factory=dict)
    cached: dict[str, int] = field(default_factory=dict)
    steps: list[StepResult] = field(default_factory=list)


def run_all(core: EngineCore, requests: list[EngineRequest] = ()) -> Run:
    """Add ``requests`` and step until nothing is left."""
    for req in requests:
        core.add_request(req)
    return drain(core)


def drain(core: EngineCore, run: Run | None = None, max_steps: int = 200_000) -> Run:
    """Step until the core is empty, collecting tokens, finish reasons and cache hits."""
    run = run or Run()
    for _ in range(max_steps):
        if not core.has_unfinished():
            return run
        result = core.step()
        run.steps.append(result)
        for update in result.updates:
            run.tokens[update.request_id].extend(t.token_id for t in update.new_tokens)
            run.cached[update.request_id] = update.num_cached_tokens
            if update.finished:
                run.finish[update.request_id] = update.finish_reason
    raise AssertionError(f"engine still busy after {max_steps} steps (livelock?)")
