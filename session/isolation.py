"""``prefillscope isolation``: does a shared prefix cache leak one tenant's prompts to another?

A controlled experiment, per prefix length and trial:

1. the server's prefix cache is emptied (``/reset_prefix_cache``, SGLang's
   ``/flush_cache``, llama.cpp's slots: ``loadgen.cache``); a server that cannot is sent
   a *fresh* secret every trial instead, so nothing of an earlier trial can hit;
2. the victim (``--tenant-a``) sends the secret prefix with a suffix of its own;
3. four probes follow in a seeded random order: the victim's own repeat of the secret
   and a fresh prefix of the same length (the *control*: the channel must exist), and
   the attacker's (``--tenant-b``) same two (the *cross* channel under test). Each probe
   has a fresh suffix and asks for one token; TTFT counts from its intended send time
   (``session.isolation_probe``).

``diagnose.isolation`` then reads the probes: the server's ``cached_tokens`` where it
reports them, the TTFT gap with its bootstrap interval, the attacker's power, a verdict
per length and for the sweep. The folder (``--out``, default ``runs/<time>-isolation``)
gets ``isolation.json`` (``runfmt.isolation``), which holds a hash of each secret and
never the secret: no token id, no text of it, in any file or line printed.

A stop signal ends the experiment after the request in flight: ``isolation.json`` is
written ``interrupted`` with the trials done and their verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.isolation import (
    DEFAULT_RESOLUTION,
    MAX_FAILED_SHARE,
    Resolution,
    assess,
    cache_evidence,
    contradiction,
    detectable_below,
    failed_verdict,
    overall,
)
from diagnose.isolation_gap import STATISTIC, ttft_gap
from diagnose.metrics import CONFIDENCE, RESAMPLES
from loadgen.adapters import RequestParams
from loadgen.smoke import smoke_test
from loadgen.target import Target
from runfmt.codec import frozen_map
from runfmt.isolation import (
    Channel,
    Experiment,
    IsolationResult,
    Power,
    Probe,
    Secret,
    Settings,
    Tenants,
    Verdict,
)
from runfmt.names import ISOLATION_JSON
from runfmt.rundir import RunDir
from runtime import redact, signals
from runtime.version import package_version
from session.bench_options import BenchOptions
from session.bench_plan import plan_tokenizer
from session.bench_runner import default_out, open_target
from session.isolation_probe import Prober, Sent, prober, prompt_of
from session.isolation_tenants import Tenant, tenants
from simengine.settings import EngineSettings
from workloads.errors import InputError
from workloads.plan import Prompt

#: Fresh tokens after the prefix of every request (an attacker's question).
SUFFIX_TOKENS = 16
#: The probes of one trial: (channel, arm).
PROBES = (("control", "hit"), ("control", "miss"), ("cross", "hit"), ("cross", "miss"))
_KEY_BITS = 62


@dataclass
class IsolationOptions:
    """What one isolation experiment is asked to do (the command's flags)."""

    endpoint: str | None = None
    backend: str = "auto"
    api: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    vocab_size: int | None = None
    engine: EngineSettings | None = None
    tenant_a: list[str] | None = None
    tenant_b: list[str] | None = None
    #: Prefix lengths to test; None: 1024, or the secret file's length.
    prefix_tokens: tuple[int, ...] | None = None
    trials: int = 30
    warmup_trials: int = 1
    #: A file holding the secret prefix as text (tokenized by the server); None: random.
    secret_file: Path | None = None
    resolution: Resolution = field(default_factory=lambda: Resolution.parse(DEFAULT_RESOLUTION))
    seed: int = 0
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    timeout_s: float | None = 120.0
    out: Path | None = None
    command: list[str] = field(default_factory=list)


@dataclass
class IsolationOutcome:
    """How the experiment ended: its result, its folder and the overall verdict."""

    result: IsolationResult
    out: Path
    verdict: str
    status: str

    @property
    def document(self) -> dict[str, Any]:
        """``isolation.json`` as written (no secret in it)."""
        return redact.document(self.result.to_json())


@dataclass
class _Secret:
    """The secret prefix: a user's token ids, or a fresh random key per draw."""

    ids: np.ndarray | None
    source: str

    def draw(self, length: int) -> np.ndarray | int:
        return self.ids[:length] if self.ids is not None else secrets.randbits(_KEY_BITS)


class _Experiment:
    """The trials of every prefix length, their probes and the analysis."""

    def __init__(self, options: IsolationOptions, target: Target, progress: Callable[[str], None]):
        self.options = options
        self.target = target
        self.progress = progress
        self.rows: list[Probe] = []
        self.hashes: dict[int, str] = {}
        self.between: str = "reset"
        self.notes: list[str] = []
        self.status, self.reason = "complete", None

    async def run(self, client: Prober, victim: Tenant, attacker: Tenant, secret: _Secret) -> None:
        opts = self.options
        try:
            for length in opts.prefix_tokens or ():
                await self._length(client, victim, attacker, secret, length)
        except asyncio.CancelledError:
            signals.absorb_cancellation()
            self.status, self.reason = "interrupted", signals.stop_reason()

    async def _length(
        self, client: Prober, victim: Tenant, attacker: Tenant, secret: _Secret, length: int
    ) -> None:
        opts = self.options
        digest = hashlib.sha256()
        fixed = secret.draw(length)
        for trial in range(-opts.warmup_trials, opts.trials):
            rng = np.random.default_rng([opts.seed, length, trial + opts.warmup_trials])
            keys = iter(int(k) for k in rng.integers(0, 2**_KEY_BITS, size=8))
            if self.between == "reset":
                why = await client.reset()
                if why is not None:
                    if secret.ids is not None:
                        raise InputError(
                            "--secret-file", f"the prefix cache cannot be reset ({why})",
                            "a given secret needs a server whose cache can be reset",
                        )  # fmt: skip
                    self.between = "fresh-prefix"
                    self.notes.append(f"{why}: a fresh secret every trial instead of a reset")
            prefix = fixed if self.between == "reset" else secret.draw(length)
            prime = prompt_of(prefix, length, next(keys), SUFFIX_TOKENS)
            if trial == 0 or (trial > 0 and self.between != "reset"):
                ids = Prompt(prime.segments[:1]).token_ids(self.target.vocab_size or 0)
                digest.update(np.asarray(ids, dtype=np.int64).tobytes())
                self.hashes[length] = digest.hexdigest()
            sent = await client.send(victim, prime, f"prime-{length}-{trial}")
            self._row(length, trial, "prime", "prime", -1, sent)
            for order in rng.permutation(len(PROBES)):
                channel, arm = PROBES[order]
                head = prefix if arm == "hit" else next(keys)
                tenant = victim if channel == "control" else attacker
                prompt = prompt_of(head, length, next(keys), SUFFIX_TOKENS)
                sent = await client.send(tenant, prompt, f"{channel}-{arm}-{length}-{trial}")
                self._row(length, trial, channel, arm, int(order), sent)
        self.progress(self._line(length))

    def _row(self, length: int, trial: int, channel: str, arm: str, order: int, sent: Sent) -> None:
        self.rows.append(
            Probe(prefix_tokens=length, trial=trial, warmup=trial < 0, channel=channel,
                  arm=arm, order=order, ttft_s=sent.ttft_s, cached_tokens=sent.cached_tokens,
                  prompt_tokens=sent.prompt_tokens, ok=sent.ok, error_kind=sent.error_kind,
                  http_status=sent.http_status)
        )  # fmt: skip

    def _line(self, length: int) -> str:
        control, cross = (self.channel(length, c) for c in ("control", "cross"))
        return (
            f"prefix {length} tokens: {self.options.trials} trials; TTFT hit − miss "
            f"{control.gap.gap_s * 1e3:+.1f} ms within the victim's tenant, "
            f"{cross.gap.gap_s * 1e3:+.1f} ms across tenants"
        )

    def channel(self, length: int, name: str) -> Channel:
        rows = [r for r in self.rows if r.prefix_tokens == length and not r.warmup]
        mine = [r for r in rows if r.channel == name]

        def answered(arm: str) -> list[Probe]:
            return [r for r in mine if r.arm == arm and r.ok]

        ttft = {
            a: [np.nan if r.ttft_s is None else r.ttft_s for r in answered(a)]
            for a in ("hit", "miss")
        }
        gap = ttft_gap(
            ttft["hit"],
            ttft["miss"],
            resamples=self.options.resamples,
            confidence=self.options.confidence,
            seed=np.random.SeedSequence([self.options.seed, length]),
        )
        cached = cache_evidence(
            [r.cached_tokens for r in answered("hit")],
            [r.cached_tokens for r in answered("miss")],
            length,
        )
        return Channel(gap, cached)

    def failures(self) -> list[str]:
        """A note per prober whose requests failed, with the most common way."""
        notes = []
        for channel in ("prime", "control", "cross"):
            failed = [r for r in self.rows if r.channel == channel and not r.ok]
            if failed:
                kinds = Counter(f"{r.error_kind} (HTTP {r.http_status})" for r in failed)
                who = {"prime": "victim's primes", "control": "victim's probes"}.get(
                    channel, "attacker's probes"
                )
                notes.append(
                    f"{len(failed)} of the {who} failed, most as {kinds.most_common(1)[0][0]}"
                )
        return notes

    def failed_requests(self) -> str | None:
        """Why the experiment failed when more than ``MAX_FAILED_SHARE`` of its measured
        requests (primes and probes) did, else ``None``."""
        measured = [r for r in self.rows if not r.warmup]
        failed = [r for r in measured if not r.ok]
        if not measured or len(failed) <= MAX_FAILED_SHARE * len(measured):
            return None
        kinds = Counter(str(r.error_kind) for r in failed)
        return (
            f"{len(failed)} of {len(measured)} measured requests failed (most as "
            f"{kinds.most_common(1)[0][0]}), more than {MAX_FAILED_SHARE:.0%}"
        )

    def analysis(self) -> tuple[Verdict, list[Experiment], Power]:
        lengths = sorted({r.prefix_tokens for r in self.rows if not r.warmup})
        experiments, verdicts, controls = [], [], []
        for length in lengths:
            control, cross = self.channel(length, "control"), self.channel(length, "cross")
            verdict = assess(control, cross, self.options.resolution)
            verdicts.append((length, verdict))
            controls.append((length, control.gap))
            trials = len({r.trial for r in self.rows if r.prefix_tokens == length} - {-1})
            lying = contradiction(control, cross)
            if lying is not None and lying not in self.notes:
                self.notes.append(f"at {length} prefix tokens: {lying}")
            experiments.append(
                Experiment(prefix_tokens=length, trials=trials,
                           secret_sha256=self.hashes.get(length), control=control, cross=cross,
                           verdict=verdict)
            )  # fmt: skip
        verdict = overall(verdicts)
        failed = self.failed_requests()
        if failed is not None and self.status == "complete":
            self.status, self.reason = "failed", failed
            verdict = failed_verdict(verdict, failed)
        return verdict, experiments, detectable_below(controls)


def _prefix_lengths(options: IsolationOptions, secret: _Secret, target: Target) -> tuple[int, ...]:
    lengths = options.prefix_tokens
    if lengths is None:
        lengths = (len(secret.ids),) if secret.ids is not None else (1024,)
    if secret.ids is not None and max(lengths) > len(secret.ids):
        raise InputError(
            "--prefix-tokens",
            f"{max(lengths)} is longer than the secret ({len(secret.ids)} tokens)",
            "test lengths up to the secret's",
        )
    limit = target.max_model_len
    if limit is not None and max(lengths) + SUFFIX_TOKENS + 1 > limit:
        raise InputError(
            "--prefix-tokens", f"{max(lengths)} + a {SUFFIX_TOKENS}-token suffix exceeds the "
            f"server's max_model_len {limit}", f"use at most {limit - SUFFIX_TOKENS - 1}",
        )  # fmt: skip
    return lengths


def _secret(options: IsolationOptions, target: Target) -> _Secret:
    if options.secret_file is None:
        return _Secret(None, "random")
    try:
        text = options.secret_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("--secret-file", f"cannot read {options.secret_file}: {exc}") from None
    tokenizer = plan_tokenizer(target, None, options.api_key)
    if tokenizer is None:
        raise InputError(
            "--secret-file", f"the {target.flavour} server has no /tokenize", "drop --secret-file"
        )
    try:
        ids = np.asarray(tokenizer.encode(text, special=False), dtype=np.int64)
    finally:
        close = getattr(tokenizer, "close", None)
        if close is not None:
            close()
    if len(ids) == 0:
        raise InputError("--secret-file", f"{options.secret_file} holds no tokens")
    return _Secret(ids, "file")


def _folder(options: IsolationOptions) -> RunDir:
    path = options.out or default_out("isolation")
    if (path / ISOLATION_JSON).exists():
        raise InputError("--out", f"{path} already holds an isolation result", "pick a new folder")
    try:
        return RunDir(path, create=True)
    except OSError as exc:
        raise InputError("--out", f"cannot create {path}: {exc.strerror}") from None


async def run_isolation(
    options: IsolationOptions, progress: Callable[[str], None] | None = None
) -> IsolationOutcome:
    """Run the experiment end to end (module docstring); ``InputError`` before sending."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    redact.register(options.api_key)
    redact.register_urls(options.endpoint)
    redact.register_argv(options.command)
    for items, flag in ((options.tenant_a, "--tenant-a"), (options.tenant_b, "--tenant-b")):
        if items:  # bad input before anything starts
            redact.register(*Tenant.parse("check", items, flag).secrets())
    bench = BenchOptions(
        workload="isolation", endpoint=options.endpoint, backend=options.backend,
        api=options.api, model=options.model, api_key=options.api_key,
        vocab_size=options.vocab_size, engine=options.engine,
    )  # fmt: skip
    async with contextlib.AsyncExitStack() as stack:
        target, engine = await open_target(bench, stack)
        if target.api not in ("completions", "sglang", "llamacpp"):
            raise InputError("--api", f"isolation sends token ids; {target.api} takes text",
                             "use --api completions")  # fmt: skip
        victim, attacker, notes = tenants(target.flavour, options.tenant_a, options.tenant_b)
        await smoke_test(
            replace(target, api_key=victim.api_key or target.api_key),
            token_ids=True, params=RequestParams(), timeout_s=options.timeout_s,
        )  # fmt: skip
        secret = _secret(options, target)
        options.prefix_tokens = _prefix_lengths(options, secret, target)
        folder = _folder(options)
        started = time.time()
        experiment = _Experiment(options, target, say)
        experiment.notes += notes
        async with prober(target, options.timeout_s) as client:
            await experiment.run(client, victim, attacker, secret)
        verdict, experiments, power = experiment.analysis()
        experiment.notes += experiment.failures()
        described = replace(target.describe(), embedded=engine is not None)
        if engine is not None:
            settings = (options.engine or EngineSettings.default()).describe()
            described = replace(described, engine=frozen_map(settings))
        result = IsolationResult(
            status=experiment.status,
            reason=experiment.reason,
            verdict=verdict,
            experiments=tuple(experiments),
            power=power,
            tenants=Tenants(tuple(victim.describe()), tuple(attacker.describe())),
            secret=Secret(secret.source, "sha256 of the prefix's token ids"),
            settings=Settings(
                trials=options.trials, warmup_trials=options.warmup_trials,
                prefix_tokens=tuple(options.prefix_tokens), suffix_tokens=SUFFIX_TOKENS,
                probes_per_trial=tuple(f"{c}-{a}" for c, a in PROBES), statistic=STATISTIC,
                resolution=options.resolution.describe(), seed=options.seed,
                resamples=options.resamples, confidence=options.confidence,
                cache_between_trials=experiment.between,
            ),
            notes=tuple(experiment.notes),
            target=described,
            started_unix_s=started,
            probes=tuple(experiment.rows),
            command=tuple(redact.argv(options.command)),
            tool_version=package_version(),
        )  # fmt: skip
        folder.write_json(ISOLATION_JSON, result.to_json())
        return IsolationOutcome(result, folder.path, verdict.verdict, experiment.status)
    raise AssertionError("unreachable")  # pragma: no cover
