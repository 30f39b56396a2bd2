"""``WorkloadSpec``: what to send, resolved from a name, a spec file and flag overrides.

``--workload`` names a family (``shared-prefix``), a preset (``doc-qa``), a trace
(``trace:FILE``) or a YAML/TOML spec file. Values are layered: the family's defaults,
then the preset's, then the file's, then flags. All keys are flat — load keys
(``num_requests``, ``rate``, ``arrival`` …) and the family's own keys side by side — so
a file reads like the command line it replaces::

    workload: doc-qa
    seed: 7
    num_requests: 500
    rate: 4
    arrival: gamma
    cv: 2
    prefix_len: lognormal:mean=8000,std=3000
    tenants: 2

Any key the family does not know is refused with the list of keys it does know.
PyYAML is imported when a YAML file is read, not before.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads import registry
from workloads.arrivals import ARRIVALS, RAMPS
from workloads.errors import InputError
from workloads.family import Family
from workloads.limits import MAX_CONCURRENCY, MAX_RATE, MAX_SECONDS, RATE_REASON
from workloads.params import convert, known_keys, make_params, params_dict

PROMPT_FORMATS = ("tokens", "text")
SPEC_SUFFIXES = (".yaml", ".yml", ".toml")

#: The load keys every family takes: (type, constraints).
_LOAD_KEYS: dict[str, tuple[type, dict[str, Any]]] = {
    "seed": (int, {"min": 0, "max": 2**63 - 1}),
    "num_requests": (int, {"min": 1}),
    "duration": (float, {"min": 0, "above": True, "max": MAX_SECONDS}),
    "arrival": (str, {"choices": ARRIVALS}),
    # inf: all at t=0, as vLLM; a finite rate capped as --rate's (1e308 overflowed the
    # planned token rate); build.check_span bounds below
    "rate": (float, {"min": 0, "above": True, "inf": True, "max": MAX_RATE, "why": RATE_REASON}),
    "cv": (float, {"min": 0, "above": True}),
    "burstiness": (float, {"min": 0, "above": True}),
    "start_rate": (float, {"min": 0, "max": MAX_RATE, "why": RATE_REASON}),
    "ramp": (str, {"choices": RAMPS}),
    "concurrency": (int, {"min": 1, "max": MAX_CONCURRENCY}),
    "prompt_format": (str, {"choices": PROMPT_FORMATS}),
}
#: Keys of ``_LOAD_KEYS`` that are not ``Load`` fields (``to_dict`` writes ``cv``, never
#: ``burstiness``).
_NOT_LOAD = ("seed", "prompt_format", "burstiness")


@dataclass(frozen=True)
class Load:
    """How much to send and when: the keys every family shares."""

    num_requests: int | None = None
    duration_s: float | None = None
    arrival: str | None = None
    rate: float | None = None
    cv: float | None = None
    start_rate: float = 0.0
    concurrency: int | None = None
    #: How a ramp's rate moves (``RAMPS``).
    ramp: str = "linear"


@dataclass(frozen=True)
class WorkloadSpec:
    """A fully resolved, validated workload: building it for its seed gives one plan."""

    name: str
    family: Family
    params: Any
    load: Load = Load()
    seed: int = 0
    preset: str | None = None
    prompt_format: str = "tokens"

    def to_dict(self) -> dict[str, object]:
        """The spec as flat plain values, the one mapping of a spec to its keys: for the
        plan (``Plan.spec``, with the family's facts), the command lines a diagnosis
        proposes, and ``run.json``, which records them typed
        (``runfmt.run_workload.WorkloadSection.of`` reads this dict with the codec)."""
        load = self.load
        return {
            "workload": self.name,
            "family": self.family.name,
            "preset": self.preset,
            "seed": self.seed,
            "prompt_format": self.prompt_format,
            "num_requests": load.num_requests,
            "duration": load.duration_s,
            "arrival": load.arrival,
            "rate": load.rate,
            "cv": load.cv,
            "start_rate": load.start_rate,
            **({"ramp": load.ramp} if load.ramp != "linear" else {}),
            "concurrency": load.concurrency,
            "params": params_dict(self.params),
        }

    @classmethod
    def rebuilt(
        cls,
        *,
        name: object,
        family: object,
        preset: object,
        seed: object,
        prompt_format: object,
        load: Mapping[str, object],
        params: Mapping[str, object],
    ) -> WorkloadSpec:
        """The spec a run recorded (``runfmt.run_workload.WorkloadSection``), rebuilt from
        its family, preset, load keys (a spec file's: ``duration``, ``rate`` …) and
        parameters, each checked as a spec file's would be. ``InputError`` naming the key
        that cannot be read back (a family or parameter this version does not know, a
        value out of range)."""
        if not isinstance(name, str) or not name:
            raise InputError("workload", "the spec names no workload")
        if family not in registry.FAMILY_NAMES:
            known = ", ".join(registry.FAMILY_NAMES)
            raise InputError("family", f"unknown workload family {family!r}", f"known: {known}")
        owner = registry.family(str(family))
        values = {
            key: convert(key, kind, load[key], meta)
            for key, (kind, meta) in _LOAD_KEYS.items()
            if load.get(key) is not None and key not in _NOT_LOAD
        }
        seed = convert("seed", int, seed or 0, _LOAD_KEYS["seed"][1])
        prompt_format = convert(
            "prompt_format", str, prompt_format or "tokens", _LOAD_KEYS["prompt_format"][1]
        )
        return cls(
            name=name,
            family=owner,
            params=make_params(
                owner.params,
                {k: v for k, v in params.items() if v is not None},
                f"workload {owner.name!r}",
            ),
            load=_load(values),
            seed=int(seed),  # type: ignore[call-overload]
            preset=preset if isinstance(preset, str) else None,
            prompt_format=str(prompt_format),
        )


def _read_spec_file(path: Path) -> dict[str, object]:
    import yaml

    if not path.is_file():
        raise InputError("workload", f"spec file {path} not found")
    try:
        raw = path.read_text(encoding="utf-8")
        data = tomllib.loads(raw) if path.suffix == ".toml" else yaml.safe_load(raw)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError("workload", f"cannot read spec file {path}: {problem}") from None
    if not isinstance(data, dict) or not isinstance(data.get("workload"), str):
        raise InputError("workload", f"spec file {path} must be a mapping with a 'workload' key")
    if isinstance(data.get("path"), str):
        data["path"] = str(path.parent / data["path"])
    workload = data["workload"]
    if workload.startswith("trace:"):
        data["workload"] = "trace:" + str(path.parent / workload.removeprefix("trace:"))
    return data


def _resolve_name(name: str) -> tuple[Family, str | None, dict[str, object]]:
    """The family, preset and preset values that ``name`` stands for."""
    kind, colon, path = name.partition(":")
    if colon and kind in registry.FILE_FAMILIES:
        return registry.family(kind), None, {"path": path}
    if name in registry.FAMILY_NAMES:
        return registry.family(name), None, {}
    if name in registry.PRESET_FAMILIES:
        owner, values = registry.preset(name)
        return owner, name, values
    known = registry.known_workloads()
    raise InputError("workload", f"unknown workload {name!r}", f"known: {known}")


def _load(values: dict[str, object]) -> Load:
    cv, burstiness = values.pop("cv", None), values.pop("burstiness", None)
    if cv is not None and burstiness is not None:
        raise InputError("burstiness", "give cv or burstiness, not both (cv = 1/sqrt(burstiness))")
    if isinstance(burstiness, float):
        cv = 1.0 / math.sqrt(burstiness)
    if "duration" in values:
        values["duration_s"] = values.pop("duration")
    return Load(cv=cv, **values)  # type: ignore[arg-type]


def load_spec(workload: str, overrides: Mapping[str, object] | None = None) -> WorkloadSpec:
    """Resolve ``workload`` (name, preset, ``trace:FILE`` or spec file) plus ``overrides``.

    ``overrides`` are flat keys as a spec file takes them (values may be strings from
    the command line); ``None`` values are ignored so unset flags can be passed as is.
    """
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    file_values: dict[str, object] = {}
    name = workload.strip()
    if Path(name).suffix.lower() in SPEC_SUFFIXES:
        file_values = _read_spec_file(Path(name))
        name = str(file_values.pop("workload"))
    family, preset, preset_values = _resolve_name(name)
    merged = {**preset_values, **file_values, **given}
    merged.pop("workload", None)
    family_keys = known_keys(family.params)
    for key in merged:
        if key not in _LOAD_KEYS and key not in family_keys:
            known = ", ".join([*family_keys, *_LOAD_KEYS])
            raise InputError(key, f"unknown key for workload {family.name!r}", f"known: {known}")
    load_values = {
        key: convert(key, kind, merged.pop(key), meta)
        for key, (kind, meta) in _LOAD_KEYS.items()
        if key in merged
    }
    seed = load_values.pop("seed", 0)
    prompt_format = load_values.pop("prompt_format", "tokens")
    return WorkloadSpec(
        name=workload.strip(),
        family=family,
        params=make_params(family.params, merged, f"workload {family.name!r}"),
        load=_load(load_values),
        seed=int(seed),  # type: ignore[call-overload]
        preset=preset,
        prompt_format=str(prompt_format),
    )


def parse_assignments(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["prefix_len=uniform:100-200", "groups=4"]`` → a dict of overrides."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError("set", f"expected KEY=VALUE, got {item!r}", "e.g. --set groups=4")
        out[key.strip()] = value.strip()
    return out
