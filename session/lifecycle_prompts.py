"""The prompts an inference-perf client sent, read from its resolved ``results/config.yaml``.

Only inference-perf's ``shared_prefix`` generator is replayable from a configuration: its
prompts are random tokens whose lengths the configuration gives, and which of them share
a prefix is fixed by it (each group's system prompt, then a question of each prompt's
own). The dataset generators (``shareGPT``, ``cnn_dailymail``, …) send texts the files do
not hold, and the trace replays need their traces; those runs are refused by name.

How inference-perf builds them, and how the replay follows:

* ``num_groups`` system prompts (written ``num_unique_system_prompts`` by the versions that
  serialise under their aliases), each followed by ``num_prompts_per_group`` questions
  (``num_users_per_system_prompt``). A group's system-prompt length is drawn once, each
  prompt's question and output lengths once; a request sends its prompt with its own
  output length as ``max_tokens``. The prompts are shuffled once, and each stage's
  requests go through them in turn from the first.
* A length is a number or an inference-perf distribution: ``type`` ``normal`` (the
  default), ``skew_normal`` (``mean`` and ``std_dev`` are the location and scale, ``skew``
  the shape), ``lognormal`` (``mean`` and ``std_dev`` those of the value), ``uniform``
  (``min`` to ``max``), ``poisson`` (``mean``) or ``fixed`` (``mean``); every draw is
  clipped to ``min``–``max`` (defaults 10 and 1024, mean 512, ``std_dev`` 200 or the
  square root of ``variance``). The legacy ``question_distribution`` and
  ``output_distribution`` apply where the length itself is a number.
* ``enable_multi_turn_chat`` runs are refused: each user's turn there carries the
  conversation so far, which grows with responses the files do not hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from session.lifecycle_values import finite, positive_whole, real
from workloads.distributions import (
    Clip,
    Constant,
    Distribution,
    LogNormal,
    Normal,
    Poisson,
    SkewNormal,
    Uniform,
)
from workloads.errors import InputError

#: Each shared-prefix count under the names inference-perf may write it.
_COUNT_NAMES = {
    "groups": ("num_groups", "num_unique_system_prompts"),
    "prompts_per_group": ("num_prompts_per_group", "num_users_per_system_prompt"),
}
#: inference-perf's defaults for a distribution's fields.
_DEFAULTS = {"min": 10.0, "max": 1024.0, "mean": 512.0, "std_dev": 200.0, "skew": 0.0}
_TYPES = ("normal", "skew_normal", "lognormal", "uniform", "poisson", "fixed")


@dataclass(frozen=True)
class PromptDraw:
    """One draw of the lengths: a system prompt per group, a question and an output per
    prompt (arrays of ``groups`` and ``groups × prompts_per_group``)."""

    system: np.ndarray
    question: np.ndarray
    output: np.ndarray


@dataclass(frozen=True)
class SharedPrefixPlan:
    """What inference-perf's shared-prefix generator was asked for."""

    groups: int
    prompts_per_group: int
    system_len: Distribution
    question_len: Distribution
    output_len: Distribution

    @property
    def prompts(self) -> int:
        return self.groups * self.prompts_per_group

    @property
    def mean_len(self) -> float:
        """A prompt's mean length as the configuration counts it (system prompt and
        question), without the template tokens a client's measured ``prompt_len`` holds."""
        return self.system_len.mean + self.question_len.mean

    def draw(self, rng: np.random.Generator) -> PromptDraw:
        """The lengths of one generation (whole tokens, as inference-perf rounds them)."""
        shape = (self.groups, self.prompts_per_group)
        return PromptDraw(
            self.system_len.sample_int(rng, self.groups),
            self.question_len.sample_int(rng, self.prompts).reshape(shape),
            self.output_len.sample_int(rng, self.prompts).reshape(shape),
        )


def length(value: Any, field: str, where: Path, flag: str) -> Distribution:
    """An inference-perf length (a number or a distribution mapping) as a distribution."""
    if real(value):
        if value < 0 or not math.isfinite(value):
            raise InputError(flag, f"{where}: {field} is {value!r}", "a length is >= 0")
        return Constant(float(value))
    if not isinstance(value, dict):
        raise InputError(flag, f"{where}: {field} is {value!r}", "a number or a distribution")
    kind = str(value.get("type") or "normal").lower()
    if kind not in _TYPES:
        raise InputError(flag, f"{where}: {field}.type is {kind!r}", f"one of {', '.join(_TYPES)}")
    fields = dict(_DEFAULTS)
    for key in (*_DEFAULTS, "variance"):
        given = value.get(key)
        if given is None:
            continue
        if not finite(given):
            raise InputError(flag, f"{where}: {field}.{key} is {given!r}", "a number")
        fields[key] = float(given)
    if "variance" in fields:
        fields["std_dev"] = math.sqrt(max(fields.pop("variance"), 0.0))
    low, high, mean, std = fields["min"], fields["max"], fields["mean"], fields["std_dev"]
    if low > high or low < 0 or std < 0:
        raise InputError(flag, f"{where}: {field} has min {low:g}, max {high:g}, std {std:g}",
                         "0 <= min <= max and std_dev >= 0")  # fmt: skip
    clip = Clip(low, high)
    if kind == "uniform":
        return Uniform(low, high)
    if kind == "fixed":  # inference-perf takes the mean as it is, unclipped
        return Constant(float(int(mean)))
    if std == 0 and kind in ("normal", "skew_normal", "lognormal"):
        return Constant(float(round(min(max(mean, low), high))))
    if kind == "normal":
        return Normal(mean, std, clip)
    if kind == "skew_normal":
        return SkewNormal(mean, std, fields["skew"], clip)
    if kind == "lognormal":
        if mean <= 0:
            raise InputError(flag, f"{where}: {field} is lognormal with mean {mean:g}", "mean > 0")
        return LogNormal.from_moments(mean, std, clip)
    return Poisson(mean if mean > 0 else 1.0, clip)


def _count(prefix: dict[str, Any], name: str, where: Path, flag: str) -> int:
    spellings = _COUNT_NAMES[name]
    key = next((k for k in spellings if prefix.get(k) is not None), None)
    if key is None:
        raise InputError(flag, f"{where}: data.shared_prefix has no {spellings[0]}",
                         "give an inference-perf results folder")  # fmt: skip
    value = prefix[key]
    if not positive_whole(value):
        raise InputError(flag, f"{where}: {key} is {value!r}", "a positive whole number")
    return int(value)


def read_prompts(client: dict[str, Any], where: Path, flag: str) -> SharedPrefixPlan:
    """The shared-prefix plan of a resolved client configuration; ``InputError`` naming
    ``flag`` for a run whose prompts a configuration cannot rebuild."""
    data = client.get("data")
    if not isinstance(data, dict):
        raise InputError(flag, f"{where} has no data section",
                         "give an inference-perf results folder")  # fmt: skip
    kind = str(data.get("type") or "shared_prefix")
    prefix = data.get("shared_prefix")
    if kind != "shared_prefix" or not isinstance(prefix, dict):
        raise InputError(
            flag,
            f"{where}: data.type {kind!r} sends prompts the run's files do not hold",
            "replay a run of data.type shared_prefix",
        )
    if prefix.get("enable_multi_turn_chat"):
        raise InputError(
            flag,
            f"{where}: enable_multi_turn_chat carries each conversation's responses, "
            "which the run's files do not hold",
            "replay a single-turn shared_prefix run",
        )

    def dist(name: str, legacy: str | None = None) -> Distribution:
        value = prefix.get(name)
        if real(value) and legacy and prefix.get(legacy) is not None:
            name, value = legacy, prefix[legacy]
        if value is None:
            raise InputError(flag, f"{where}: data.shared_prefix has no {name}",
                             "give an inference-perf results folder")  # fmt: skip
        return length(value, f"data.shared_prefix.{name}", where, flag)

    return SharedPrefixPlan(
        groups=_count(prefix, "groups", where, flag),
        prompts_per_group=_count(prefix, "prompts_per_group", where, flag),
        system_len=dist("system_prompt_len"),
        question_len=dist("question_len", "question_distribution"),
        output_len=dist("output_len", "output_distribution"),
    )
