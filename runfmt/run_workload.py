"""``run.json``'s ``workload``: the resolved workload spec, typed, enough to rebuild its plan.

The keys are a spec file's (``workloads.spec``): the workload's name as given, its family
and preset, its seed and prompt format, the load keys every family takes (``duration`` in
seconds, ``ramp`` written only when it is not ``linear``), and ``params``, the family's own
parameters as plain values (a distribution as its string, a list as an array): an open set
per family, read back by the family's own parameter types when the spec is rebuilt.
``WorkloadSection.of`` records a ``WorkloadSpec``; ``WorkloadSection.spec`` rebuilds it
(``workloads.spec.WorkloadSpec.rebuilt`` checks every value as a spec file's would be).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runfmt.codec import EMPTY, decode, encode, key

if TYPE_CHECKING:  # imported when a spec is recorded or rebuilt: the families are many
    from workloads.spec import WorkloadSpec


@dataclass(frozen=True)
class WorkloadSection:
    """The workload a run sent (``run.json["workload"]``)."""

    workload: str | None = None
    family: str | None = None
    preset: str | None = None
    seed: int | None = None
    prompt_format: str | None = None
    num_requests: int | None = None
    duration: float | None = None
    arrival: str | None = None
    rate: float | None = None
    cv: float | None = None
    start_rate: float | None = None
    ramp: str | None = key(omit_none=True, default=None)
    concurrency: int | None = None
    params: Mapping[str, Any] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @classmethod
    def of(cls, spec: WorkloadSpec) -> WorkloadSection:
        """What ``run.json`` records of ``spec``: its flat keys (``WorkloadSpec.to_dict``,
        the one mapping of a spec to them: ``workloads`` is below ``runfmt`` and cannot
        name this section) read by the codec, as the section is read back from the file."""
        return decode(cls, spec.to_dict())

    @property
    def recorded(self) -> bool:
        """Whether the run recorded a spec at all (an old or partial ``run.json`` may not)."""
        return bool(encode(self))

    def spec(self) -> WorkloadSpec:
        """The spec rebuilt from its family, preset, load keys and parameters, without
        reading the files it named (a spec file, a trace); ``InputError`` naming the key
        that cannot be read back (a family or parameter this version does not know, a value
        out of range)."""
        from workloads.spec import WorkloadSpec

        load = {
            "num_requests": self.num_requests,
            "duration": self.duration,
            "arrival": self.arrival,
            "rate": self.rate,
            "cv": self.cv,
            "start_rate": self.start_rate,
            "ramp": self.ramp,
            "concurrency": self.concurrency,
        }
        return WorkloadSpec.rebuilt(
            name=self.workload,
            family=self.family,
            preset=self.preset,
            seed=self.seed,
            prompt_format=self.prompt_format,
            load={k: v for k, v in load.items() if v is not None},
            params=self.params,
        )
