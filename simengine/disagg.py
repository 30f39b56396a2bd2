"""Disaggregated prefill/decode: P prefill and D decode engine cores joined by a KV link.

Each worker is a whole :class:`~simengine.core.EngineCore` (its own block pool, prefix
cache and scheduler); the cluster moves them on one shared clock. A request's life:

1. **Prefill.** It goes to the prefill worker with the fewest unfinished requests, as
   the same request capped at one output token (vLLM's P/D proxies send ``max_tokens=1``
   to the prefiller); that token is discarded. Prefix caching works there as usual.
2. **Transfer.** Its prompt's KV crosses the :class:`~simengine.kv_link.KvLink`:
   ``after-prefill`` sends the whole cache when the last chunk is done; ``overlap``
   sends each chunk as its step ends, so only the last chunk's transfer is left after
   the prefill. Blocks the chosen decode worker already caches (a decode-side prefix
   hit, looked up when the first transfer starts) are not sent.
3. **Decode.** Once every piece arrived, the decode worker with the fewest unfinished
   requests indexes the received blocks in its pool and admits the full request; its
   prefix cache then hits them, it recomputes the tail the prefix-cache rule leaves
   (vLLM recomputes the last token too) and samples the first token, so the client's
   TTFT includes the transfer. Received blocks are unpinned until admission: if the
   decode pool is so full that they are evicted first, the decoder recomputes them.

The cluster is clock-free like the core: ``submit`` and ``advance`` take the time and
``next_event_s`` says when the next step ends or transfer arrives, so the virtual-time
loop (:func:`simulate_disagg`) and the server's real-time driver move it the same way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest, RequestUpdate, StepResult
from simengine.disagg_config import DisaggConfig
from simengine.kv_link import KvLink, Transfer
from workloads.prefix import block_hashes


@dataclass(slots=True)
class Worker:
    """One engine core with a role, and the step it is in (if any)."""

    role: str
    index: int
    core: EngineCore
    busy_until: float | None = None
    step_start: float = 0.0
    result: StepResult | None = None
    dirty: bool = False

    @property
    def load(self) -> int:
        return self.core.stats.num_running + self.core.stats.num_waiting


@dataclass(slots=True)
class KvJob:
    """One request between its prefill and its admission on a decode worker."""

    request: EngineRequest
    decoder: Worker
    prompt: np.ndarray
    arrival_s: float
    sent_tokens: int = 0
    decode_hit_tokens: int | None = None
    outstanding: int = 0
    prefill_end_s: float | None = None
    bytes: int = 0
    transfers: list[Transfer] = field(default_factory=list)
    delivered_s: float | None = None
    aborted: bool = False


#: ``(worker, step result, start, end)`` for each step that ran (metrics, step records).
OnStep = Callable[[Worker, StepResult, float, float], None]
#: ``(job, transfer)`` for each delivered transfer.
OnTransfer = Callable[[KvJob, Transfer], None]
#: ``(job)`` when a request's KV is complete on its decode worker and it is queued there.
OnAdmit = Callable[[KvJob], None]


class DisaggCluster:
    """P prefill cores, D decode cores and the link, moved together on one clock."""

    def __init__(
        self,
        config: EngineConfig,
        disagg: DisaggConfig,
        *,
        on_step: OnStep | None = None,
        on_transfer: OnTransfer | None = None,
        on_admit: OnAdmit | None = None,
    ) -> None:
        config.validate()
        disagg.validate()
        self.config = config
        self.disagg = disagg
        decode_config = dataclasses.replace(config, enable_prefix_caching=True)
        self.prefill = [
            Worker("prefill", i, EngineCore(config)) for i in range(disagg.prefill_workers)
        ]
        self.decode = [
            Worker("decode", i, EngineCore(decode_config)) for i in range(disagg.decode_workers)
        ]
        self.workers = [*self.prefill, *self.decode]
        self.link = KvLink(disagg.link)
        self.kv_bytes_per_token = self.prefill[0].core.cost.kv_bytes_per_token
        self.on_step = on_step
        self.on_transfer = on_transfer
        self.on_admit = on_admit
        #: Requests between their submission and their admission on a decode worker.
        self.jobs: dict[str, KvJob] = {}
        self._where: dict[str, Worker] = {}
        self._overlap = disagg.transfer == "overlap"

    # -- requests ------------------------------------------------------------------------
    def submit(self, req: EngineRequest, now: float) -> None:
        """Queue a request for prefill; the next ``advance`` starts it (so requests arriving
        together share a step). Raises RequestRejected if it could never be served."""
        decoder = min(self.decode, key=lambda w: w.load)
        decoder.core.check_request(req)
        worker = min(self.prefill, key=lambda w: w.load)
        worker.core.add_request(dataclasses.replace(req, max_tokens=1))
        prompt = np.asarray(req.prompt_token_ids, dtype=np.int64)
        self.jobs[req.request_id] = KvJob(req, decoder, prompt, now)
        self._where[req.request_id] = worker
        worker.dirty = True

    def abort(self, request_id: str) -> None:
        """Drop a request wherever it is (prefill, link or decode)."""
        job = self.jobs.pop(request_id, None)
        if job is not None:
            job.aborted = True
        worker = self._where.pop(request_id, None)
        if worker is not None:
            worker.core.abort_request(request_id)
            worker.dirty = True

    # -- time ----------------------------------------------------------------------------
    def next_event_s(self) -> float | None:
        """When the next step ends or the next transfer is delivered; None when idle."""
        times = [w.busy_until for w in self.workers if w.busy_until is not None]
        link_t = self.link.next_event_s()
        if link_t is not None:
            times.append(link_t)
        return min(times) if times else None

    def advance(self, now: float) -> list[tuple[float, RequestUpdate]]:
        """Run every event up to ``now``; the decode workers' updates with their times."""
        out: list[tuple[float, RequestUpdate]] = []
        while True:
            t = self.next_event_s()
            if t is None or t > now:
                break
            for worker in self.workers:
                if worker.busy_until is not None and worker.busy_until <= t:
                    self._end_step(worker, out)
            for transfer in self.link.advance(t):
                self._delivered(transfer)
            self._kick_all(t)
        self._kick_all(now)
        return out

    def _kick_all(self, now: float) -> None:
        for worker in self.workers:
            if worker.dirty:
                self._kick(worker, now)

    def _kick(self, worker: Worker, now: float) -> None:
        """Start the worker's next step at ``now`` if it is idle and has anything to do."""
        worker.dirty = False
        if worker.busy_until is not None or not worker.core.has_unfinished():
            return
        result = worker.core.step()
        if result.kind == "idle" and not result.updates:
            return  # nothing can move until something else changes (marks it dirty)
        worker.result = result
        worker.step_start = now
        worker.busy_until = now + result.duration_s

    def _end_step(self, worker: Worker, out: list[tuple[float, RequestUpdate]]) -> None:
        result, end = worker.result, worker.busy_until
        assert result is not None and end is not None
        worker.busy_until = None
        worker.result = None
        worker.dirty = True
        if self.on_step is not None and result.kind != "idle":
            self.on_step(worker, result, worker.step_start, end)
        if worker.role == "decode":
            for update in result.updates:
                out.append((end, update))
                if update.finished:
                    self._where.pop(update.request_id, None)
            return
        if self._overlap:
            for request_id, computed in result.prefill_progress:
                job = self.jobs.get(request_id)
                if job is not None:
                    self._send(job, min(computed, len(job.prompt)), end)
        for update in result.updates:
            if update.finished:
                self._prefilled(update, end)

    # -- KV transfer ---------------------------------------------------------------------
    def _prefilled(self, update: RequestUpdate, end: float) -> None:
        """The prefill worker finished a prompt: send what is left, or fail the request."""
        job = self.jobs.get(update.request_id)
        self._where.pop(update.request_id, None)
        if job is None:
            return
        if update.finish_reason == "abort" or update.error is not None:
            return
        job.prefill_end_s = end
        if job.sent_tokens < len(job.prompt) or not job.transfers:
            self._send(job, len(job.prompt), end)
        elif job.outstanding == 0:
            self._admit(job, end)

    def _send(self, job: KvJob, upto: int, now: float) -> None:
        """Put the prompt's KV ``[sent, upto)`` on the link, less what the decoder holds."""
        if job.decode_hit_tokens is None:
            job.decode_hit_tokens = self._decode_hit(job)
        start = max(job.sent_tokens, job.decode_hit_tokens)
        job.sent_tokens = max(job.sent_tokens, upto)
        if upto <= start and job.transfers:
            return
        nbytes = max(0, upto - start) * self.kv_bytes_per_token
        job.bytes += nbytes
        job.outstanding += 1
        job.transfers.append(self.link.start(job.request.request_id, nbytes, now))

    def _decode_hit(self, job: KvJob) -> int:
        """Prompt tokens whose blocks the decode worker already caches (not sent again)."""
        pool = job.decoder.core.pool
        hashes = block_hashes(job.prompt, pool.block_size, job.request.scope)
        return len(pool.find_cached(hashes, len(job.prompt) + 1)) * pool.block_size

    def _delivered(self, transfer: Transfer) -> None:
        job = self.jobs.get(transfer.request_id)
        if job is None or job.aborted:
            return
        job.outstanding -= 1
        if self.on_transfer is not None:
            self.on_transfer(job, transfer)
        if job.outstanding == 0 and job.prefill_end_s is not None:
            self._admit(job, transfer.delivered_s or 0.0)

    def _admit(self, job: KvJob, now: float) -> None:
        """Index the received blocks in the decoder's pool and queue the full request."""
        job.delivered_s = now
        decoder = job.decoder
        _receive_blocks(decoder.core, job)
        del self.jobs[job.request.request_id]
        if self.on_admit is not None:
            self.on_admit(job)
        decoder.core.add_request(job.request)
        self._where[job.request.request_id] = decoder
        decoder.dirty = True


def _receive_blocks(core: EngineCore, job: KvJob) -> None:
    """Give the prompt's full blocks their identities in ``core``'s pool, unpinned."""
    pool = core.pool
    hashes = block_hashes(job.prompt, pool.block_size, job.request.scope)
    present = pool.find_cached(hashes, len(job.prompt) + 1)
    pool.touch(present)
    new = pool.allocate(len(hashes) - len(present)) or []
    for block, block_hash in zip(new, hashes[len(present) :], strict=False):
        pool.cache_block(block, block_hash)
    pool.release(present + new)


def transfer_wait_s(job: KvJob) -> float:
    """Seconds between the prompt's prefill end and its KV being on the decode worker."""
    if job.delivered_s is None or job.prefill_end_s is None:
        return math.nan
    return job.delivered_s - job.prefill_end_s
