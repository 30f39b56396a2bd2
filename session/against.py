"""``simulate --against DIR``: replay a measured inference-perf run and score the prediction.

The run (``session.lifecycle``) is rebuilt as a workload — its prompts, stages, rate,
arrival process, output lengths and client timeout — and served by the embedded engine
on a virtual clock with the run's model, tensor and data parallelism and server limits on the
given GPU. Requests are summarised per load stage (by send time) and over the whole run
by bench's code (``session.simulate.summarize``), and each of TTFT, ITL, TPOT and E2E's
mean, p90 and p99 is set beside the measured figure: ``error = predicted / actual − 1``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Collection, Sequence

import numpy as np

from perfmodel.config import EngineConfig
from runfmt.metrics import E2E, ITL, TPOT, TTFT
from runfmt.simresult import AgainstResult, AgainstScore, SimFigures, StageFigures, extended
from runfmt.slo import Slo
from session.lifecycle import WHOLE_RUN, LifecycleRun
from session.lifecycle_load import stage_arrivals
from session.sim_workload import SimWorkload
from session.simulate import summarize
from simengine.core import EngineCore, EngineRequest
from simengine.driver import RequestTiming, VirtualDriver
from simengine.tokenizer import FIRST_WORD_ID

#: What the scoreboard compares, in this order.
METRICS = (TTFT.key, ITL.key, TPOT.key, E2E.key)
STATS = ("mean", "p90", "p99")


#: Seconds from a stage's last request ending to the next stage's first possible send,
#: besides ``load.interval``: inference-perf starts a stage's clock a second after it
#: queues the stage's requests.
STAGE_START_S = 1.0


def workload(
    run: LifecycleRun, vocab_size: int, seed: int = 0
) -> list[list[tuple[float, EngineRequest]]]:
    """The run's requests, stage by stage, each with its send time from its stage's start
    (the rules of ``session.lifecycle``)."""
    rng = np.random.default_rng(seed)
    # the lengths and the order from a stream of their own
    plan_rng = np.random.default_rng([seed, 1])
    lengths = run.prompts.draw(plan_rng)
    extra = max(0, round(run.prompt_len - run.prompts.mean_len))
    prompts, outputs = [], []
    for group, system_len in enumerate(lengths.system):
        system = rng.integers(FIRST_WORD_ID, vocab_size, size=system_len)
        for question_len, output_len in zip(
            lengths.question[group], lengths.output[group], strict=True
        ):
            question = rng.integers(FIRST_WORD_ID, vocab_size, size=question_len + extra)
            # int64 arrays, not lists: the engine takes each prompt's bytes as they are
            # (a request repeats a prompt; converting a list costs more than simulating it)
            prompts.append(np.concatenate([system, question]))
            outputs.append(max(1, int(output_len)))
    # inference-perf shuffles its prompts once and starts each stage at the first of them
    order = plan_rng.permutation(len(prompts))
    prompts, outputs = [prompts[k] for k in order], [outputs[k] for k in order]
    n, i = len(prompts), 0
    stages = []
    for times in stage_arrivals(run.stages, run.arrivals, seed):
        stage = []
        for j, t in enumerate(times):
            req = EngineRequest(f"r{i}", prompts[j % n], outputs[j % n], ignore_eos=True)
            stage.append((float(t), req))
            i += 1
        stages.append(stage)
    return stages


class StageRelease:
    """Sends each load stage once every request of the one before it has ended (finished
    or timed out), ``gap_s`` later: inference-perf waits for a stage to drain, sleeps
    ``load.interval`` and starts the next stage's clock (``STAGE_START_S``). A stage that
    overloads the server thus ends when its backlog does, and the next one meets an idle
    server. A closed-loop stage (``concurrency[k]`` not None) sends that many of its
    requests on their schedule and each other one as one ends."""

    def __init__(
        self,
        stages: Sequence[Sequence[tuple[float, EngineRequest]]],
        gap_s: float,
        concurrency: Sequence[int | None] | None = None,
    ):
        self._stages = stages
        self._gap_s = gap_s
        self._concurrency = list(concurrency or [None] * len(stages))
        self._stage_of = {req.request_id: k for k, s in enumerate(stages) for _, req in s}
        self._left = [len(s) for s in stages]
        self._held: list[deque[tuple[float, EngineRequest]]] = [deque() for _ in stages]

    def first(self) -> list[tuple[float, EngineRequest]]:
        """What is sent from the start: the first stage (and any stage after an empty one)."""
        return self._from(0, 0.0)

    def __call__(self, request_id: str, now: float) -> list[tuple[float, EngineRequest]]:
        k = self._stage_of[request_id]
        self._left[k] -= 1
        if self._held[k]:  # a permit freed: the next of the stage goes now (or on schedule)
            t, req = self._held[k].popleft()
            return [(max(now, t), req)]
        if self._left[k] or k + 1 == len(self._stages):
            return []
        return self._from(k + 1, now + self._gap_s)

    def _from(self, k: int, start: float) -> list[tuple[float, EngineRequest]]:
        sent = [(start + t, req) for t, req in self._stages[k]]
        if not sent and k + 1 < len(self._stages):  # nothing to wait for
            return self._from(k + 1, start + self._gap_s)
        limit = self._concurrency[k]
        if limit is not None:
            sent, held = sent[:limit], sent[limit:]
            self._held[k].extend(held)
        return sent


def replay(
    run: LifecycleRun,
    config: EngineConfig,
    seed: int = 0,
    cores: Sequence[EngineCore] | None = None,
) -> list[list[RequestTiming]]:
    """Every request of the run, stage by stage, served on the virtual clock (client
    timeout honoured; each stage sent once the one before it drained, a closed-loop
    stage's requests as permits free, ``StageRelease``)
    by the run's data-parallel replicas, ``cores`` (new engines of ``config`` when not
    given), each with its own scheduler and prefix cache. Each stage's requests are dealt
    over the replicas as ``simulate`` deals a workload (``SimWorkload.split``: round-robin
    in send order; vLLM's balancer sends each to the least-loaded engine, which identical
    requests at a steady rate alternate), and each replica waits for its own share of a
    stage to drain (a close stand-in for the client's wait on all of them: round-robin
    shares of one stage drain together)."""
    stages = workload(run, config.vocab_size, seed)
    n = run.data_parallel_size
    engines = cores or [EngineCore(config) for _ in range(n)]
    if len(engines) != n:
        raise ValueError(f"{len(engines)} engines for {n} data-parallel replicas")
    # each stage dealt once: its requests, and a closed-loop stage's users, over the replicas
    dealt = [
        SimWorkload(timed=stage, users=s.concurrency or 0).split(n)
        for stage, s in zip(stages, run.stages, strict=True)
    ]
    timings: dict[str, RequestTiming] = {}
    for r, core in enumerate(engines):
        share = [parts[r].timed for parts in dealt]
        users = [  # one user at least, where the replica has requests
            None if s.concurrency is None else max(1, parts[r].users)
            for parts, s in zip(dealt, run.stages, strict=True)
        ]
        release = StageRelease(share, run.stage_interval_s + STAGE_START_S, users)
        result = VirtualDriver(core).run(
            release.first(), record_steps=False, release=release, timeout_s=run.timeout_s
        )
        timings.update(result.requests)
    return [[timings[req.request_id] for _, req in stage] for stage in stages]


def stage_summaries(
    stages: list[list[RequestTiming]], slo: Slo | None = None
) -> dict[int, SimFigures]:
    """Bench's summary of each stage's requests, and of the whole run's."""
    every = [t for stage in stages for t in stage]
    out = {WHOLE_RUN: summarize(every, [], slo or Slo())}
    if len(stages) > 1:
        for i, stage in enumerate(stages):
            out[i] = summarize(stage, [], slo or Slo())
    else:
        out[0] = out[WHOLE_RUN]
    return out


def scores(
    run: LifecycleRun,
    summaries: dict[int, SimFigures],
    others: Sequence[dict[int, SimFigures]] = (),
) -> list[AgainstScore]:
    """Each stage × metric × statistic the run measured, predicted beside actual (and
    ranged over the ``others``: the summaries of further draws)."""
    out = []
    for stage, summary in summaries.items():
        actual = run.actual.get(stage)
        if actual is None:
            continue
        for metric in METRICS:
            for stat in STATS:
                predicted = summary.statistic(metric, stat)
                draws = tuple(o[stage].statistic(metric, stat) for o in others)
                out.append(
                    AgainstScore.of(stage, metric, stat, predicted, actual[metric].get(stat), draws)
                )
    return out


def _failures(run: LifecycleRun) -> int | None:
    """Requests the run measured as failed (None when its files do not say)."""
    whole = run.actual.get(WHOLE_RUN) or {}
    count = (whole.get("failures") or {}).get("count")
    return None if count is None else int(count)


def score_run(
    run: LifecycleRun,
    base: EngineConfig,
    seed: int = 0,
    given: Collection[str] = (),
    draws: int = 1,
) -> AgainstResult:
    """Replay ``run`` on ``base``'s GPU and cost model (and ``base``'s fields named in
    ``given`` over the run's own: ``LifecycleRun.engine``); the figures and their errors.
    With ``draws`` > 1 the run is replayed again with seeds ``seed + 1`` … (another draw
    of the client's random arrivals, prompt order and token ids each), and each score
    says the range its figure spans over them."""
    config = run.engine(base, given)
    t0 = time.perf_counter()
    cores = [EngineCore(config) for _ in range(run.data_parallel_size)]
    stages = replay(run, config, seed, cores)
    timings = [t for stage in stages for t in stage]
    summaries = stage_summaries(stages)
    others = [stage_summaries(replay(run, config, seed + k)) for k in range(1, draws)]
    wall = time.perf_counter() - t0
    whole = summaries[WHOLE_RUN]
    return AgainstResult(
        run=str(run.path),
        model=config.model,
        gpu=config.gpu,
        tensor_parallel_size=config.tensor_parallel_size,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        async_scheduling=config.async_scheduling,
        host_overhead_per_request_s=config.host_overhead_per_request_s,
        data_parallel_size=run.data_parallel_size,
        steps=sum(core.stats.steps for core in cores),
        # where a different budget could have scheduled differently (simengine.scheduler)
        budget_bound_steps=sum(core.scheduler.budget_bound_steps for core in cores),
        arrivals=run.arrivals,
        timeout_s=run.timeout_s,
        client_tokens_per_token=run.client_tokens_per_token,
        requests=whole.requests,
        timed_out=sum(1 for t in timings if t.error == "timeout"),
        measured_failures=_failures(run),
        configurations=tuple(
            extended(StageFigures, summaries[k], stage=k) for k in sorted(summaries)
        ),
        scores=tuple(scores(run, summaries, others)),
        draws=1 + len(others),
        seed=seed,
        wall_s=wall,
    )
