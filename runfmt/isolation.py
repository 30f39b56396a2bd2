"""``isolation.json``: the result of a tenant-isolation experiment, declared once.

``session.isolation`` runs the experiment and builds this document; ``diagnose.isolation``
computes its verdicts, channels and power check as these types; the report reads them
(``runfmt.codec`` writes and reads them as JSON). The document holds the verdict for the
sweep, one experiment per prefix length (the control and cross channels: the TTFT gap with
its interval, the attacker's power, the server's cached tokens, the verdict and its rule),
the power check, the tenants (as hashes), the settings, the target, every probe (timings
and token counts, never a prompt) and the command. The secret prefix is there only as a
SHA-256 of its token ids.

Times are seconds. A gap that could not be measured (too few answered probes) is NaN in
memory and ``null`` in the file. Every section keeps what it does not declare in
``extra`` (a newer writer's keys), so a document read and written back holds the same keys
and values. Format versions: 1 is the first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from runfmt.codec import EMPTY, decode, encode, frozen_map, key
from runfmt.names import ISOLATION_JSON
from runfmt.run_sections import TargetSection
from runfmt.rundir import RunDir
from runfmt.version import document_version

#: The ``format_version`` this version writes.
ISOLATION_FORMAT_VERSION = 1


def _seconds() -> Any:
    """A time that may be unmeasured: NaN in memory, ``null`` in the file."""
    return key(nan_null=True, default=math.nan)


@dataclass(frozen=True)
class TtftGap:
    """Median TTFT of hits − misses (seconds), its interval, and the attacker's power
    (``diagnose.isolation_gap.ttft_gap`` measures it)."""

    hit_s: float = _seconds()
    miss_s: float = _seconds()
    gap_s: float = _seconds()
    ci_low_s: float = _seconds()
    ci_high_s: float = _seconds()
    p_value: float = _seconds()
    confidence: float = _seconds()
    #: Answered probes of the hit and of the miss arm.
    probes: tuple[int, ...] = (0, 0)
    spread_s: float = _seconds()
    probes_needed_95: int | None = None
    #: Why the interval is not trusted (too few probes for a median), else ``None``.
    inconclusive: str | None = None
    needed_probes: int | None = None
    #: Decided, and the interval excludes no difference.
    significant: bool = False
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class CacheEvidence:
    """What the server reported as cached for one channel's probes of the secret
    (``diagnose.isolation.cache_evidence`` counts it)."""

    #: Probes of the secret prefix whose ``cached_tokens`` the server reported.
    reported: int = 0
    #: Of those, how many it reported more cached tokens for than any fresh probe.
    hits: int = 0
    #: The most cached tokens reported for a probe of the secret (None: never reported).
    max_hit_tokens: int | None = None
    #: The most reported for a fresh probe (the baseline a hit must exceed).
    max_miss_tokens: int | None = None
    #: Fresh probes reported cached for more than ``diagnose.isolation.FRESH_CACHED_SHARE``
    #: of their prefix (impossible: the server's ``cached_tokens`` contradict themselves).
    fresh_cached: int = 0
    #: Fresh probes whose cached tokens the server reported.
    fresh_reported: int = 0
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Channel:
    """One prober's view: the timing gap and the server's cache report."""

    # a field renamed by ``key`` (frozen sections, so no shared mutable default)
    gap: TtftGap = key("ttft", default_factory=TtftGap)  # noqa: RUF009
    cache: CacheEvidence = key("cached_tokens", default_factory=CacheEvidence)  # noqa: RUF009
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Verdict:
    """The verdict on one experiment (or a sweep), the rule behind it (``by``), and the
    trials that would decide."""

    verdict: str = "inconclusive"
    by: str = ""
    sentence: str = ""
    resolution_s: float = _seconds()
    trials_needed: int | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Experiment:
    """One prefix length: its trials, the secret's hash, both channels and the verdict."""

    prefix_tokens: int = 0
    trials: int = 0
    secret_sha256: str | None = None
    control: Channel = field(default_factory=Channel)
    cross: Channel = field(default_factory=Channel)
    verdict: Verdict = field(default_factory=Verdict)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Power:
    """The power check of a sweep: the shortest prefix whose control gap is significant,
    and the longest shorter one whose is not."""

    shortest_detectable_tokens: int | None = None
    longest_undetectable_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Tenants:
    """The two tenants as written in outputs (forms, LoRA names, hashes of the rest)."""

    victim: tuple[str, ...] = ()
    attacker: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Secret:
    """Where the secret prefix came from (``random`` or ``file``) and how it is kept."""

    source: str | None = None
    hash: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Settings:
    """What the experiment was asked to do and how it kept trials apart."""

    trials: int | None = None
    warmup_trials: int | None = None
    prefix_tokens: tuple[int, ...] = ()
    suffix_tokens: int | None = None
    probes_per_trial: tuple[str, ...] = ()
    statistic: str | None = None
    resolution: str | None = None
    seed: int | None = None
    resamples: int | None = None
    confidence: float | None = None
    #: ``reset`` (the cache emptied) or ``fresh-prefix`` (a fresh secret every trial).
    cache_between_trials: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Probe:
    """One request of the experiment: where it stood (length, trial, channel, arm, its
    place in the trial's order; ``-1``: the prime or a warm-up) and what it measured."""

    prefix_tokens: int = 0
    trial: int = 0
    warmup: bool = False
    channel: str = ""
    arm: str = ""
    order: int = 0
    ttft_s: float | None = None
    cached_tokens: int | None = None
    prompt_tokens: int | None = None
    ok: bool = False
    error_kind: str | None = None
    http_status: int | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class IsolationResult:
    """``isolation.json``: the sections in the order they are written."""

    FILE: ClassVar[str] = ISOLATION_JSON

    status: str = "unknown"
    reason: str | None = None
    verdict: Verdict = field(default_factory=Verdict)
    experiments: tuple[Experiment, ...] = ()
    power: Power = field(default_factory=Power)
    tenants: Tenants = field(default_factory=Tenants)
    secret: Secret = field(default_factory=Secret)
    settings: Settings = field(default_factory=Settings)
    notes: tuple[str, ...] = ()
    target: TargetSection = field(default_factory=TargetSection)
    started_unix_s: float | None = None
    probes: tuple[Probe, ...] = ()
    command: tuple[str, ...] = ()
    tool_version: str = ""
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    def to_json(self) -> dict[str, Any]:
        """The ``isolation.json`` document."""
        return {"format_version": ISOLATION_FORMAT_VERSION} | encode(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], source: str = ISOLATION_JSON) -> IsolationResult:
        """An ``isolation.json`` of any version this one reads (``InputError`` naming
        ``source`` for a newer one)."""
        document_version(dict(doc), source, ISOLATION_FORMAT_VERSION)
        read = decode(cls, doc)
        extra = {k: v for k, v in read.extra.items() if k != "format_version"}
        return replace(read, extra=frozen_map(extra))

    @classmethod
    def read(cls, run: RunDir) -> IsolationResult:
        """The document in ``run`` (``InputError`` when missing, unreadable or newer)."""
        return cls.from_json(run.read_json(cls.FILE), str(run.path / cls.FILE))
