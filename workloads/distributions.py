"""Length and time distributions, written as short strings a person can type in a flag.

``512`` · ``uniform:100-200`` · ``normal:mean=1000,std=200`` ·
``lognormal:mean=2000,std=1500`` (moments of the value itself) or
``lognormal:median=2000,sigma=0.8`` (of its logarithm) · ``exponential:mean=2`` ·
``poisson:mean=300`` · ``skewnormal:loc=500,scale=100,shape=4`` (Azzalini's skew normal:
location, scale and shape; shape 0 is the normal). All but constant and uniform take
optional ``min=``/``max=`` clip bounds.

Each parsed distribution prints back as the same canonical string, so a plan records
exactly what was asked for, and every impossible parameter (a negative length, a
minimum above a maximum, a zero or negative spread) is refused at parse time as an
``InputError`` naming the field rather than surfacing later as a strange plan.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from workloads.errors import InputError

KINDS = ("constant", "uniform", "normal", "lognormal", "exponential", "poisson", "skewnormal")
_RANGE = re.compile(r"\s*(-?[^-\s]+)\s*-\s*(-?[^-\s]+)\s*")
_FORMS = "e.g. 512, uniform:100-200, normal:mean=1000,std=200, lognormal:mean=2000,std=1500"


def _num(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Clip:
    """Optional bounds applied to every sample (``None``: unbounded on that side)."""

    low: float | None = None
    high: float | None = None

    def apply(self, values: np.ndarray) -> np.ndarray:
        if self.low is None and self.high is None:
            return values
        return np.clip(values, self.low, self.high)

    def suffix(self) -> str:
        parts = [
            f",{k}={_num(v)}" for k, v in (("min", self.low), ("max", self.high)) if v is not None
        ]
        return "".join(parts)


@dataclass(frozen=True)
class Constant:
    """Always the same value."""

    value: float

    @property
    def mean(self) -> float:
        return self.value

    @property
    def lowest(self) -> float:
        return self.value

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, float(self.value))

    def sample_int(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, round(self.value), dtype=np.int64)

    def __str__(self) -> str:
        return _num(self.value)


@dataclass(frozen=True)
class Uniform:
    """Uniform on ``[low, high]`` (integers drawn with both ends equally likely)."""

    low: float
    high: float

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def lowest(self) -> float:
        return self.low

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size=n)

    def sample_int(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(math.ceil(self.low), math.floor(self.high) + 1, size=n, dtype=np.int64)

    def __str__(self) -> str:
        return f"uniform:{_num(self.low)}-{_num(self.high)}"


class _Clipped:
    """Continuous draws bounded by ``clip``; integers are the rounded draws."""

    clip: Clip
    #: The lowest value a draw can take before clipping.
    floor: ClassVar[float] = 0.0

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def lowest(self) -> float:
        return self.clip.low if self.clip.low is not None else self.floor

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.clip.apply(self.draw(rng, n))

    def sample_int(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.rint(self.sample(rng, n)).astype(np.int64)


@dataclass(frozen=True)
class Normal(_Clipped):
    """Gaussian, clipped to ``clip`` (a length distribution is always clipped at its floor)."""

    mu: float
    std: float
    clip: Clip = Clip()
    floor: ClassVar[float] = -math.inf

    @property
    def mean(self) -> float:
        return self.mu

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.normal(self.mu, self.std, size=n)

    def __str__(self) -> str:
        return f"normal:mean={_num(self.mu)},std={_num(self.std)}{self.clip.suffix()}"


@dataclass(frozen=True)
class LogNormal(_Clipped):
    """Lognormal with log-mean ``mu`` and log-sd ``sigma`` (always positive)."""

    mu: float
    sigma: float
    clip: Clip = Clip()

    @classmethod
    def from_moments(cls, mean: float, std: float, clip: Clip) -> LogNormal:
        sigma2 = math.log1p((std / mean) ** 2)
        return cls(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), clip)

    @property
    def mean(self) -> float:
        return math.exp(self.mu + self.sigma**2 / 2)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.lognormal(self.mu, self.sigma, size=n)

    def __str__(self) -> str:
        median = math.exp(self.mu)
        return f"lognormal:median={median:.10g},sigma={self.sigma:.10g}{self.clip.suffix()}"


@dataclass(frozen=True)
class _ByMean(_Clipped):
    """A one-parameter family given by its mean, written ``KIND:mean=M`` (and clip bounds)."""

    average: float
    clip: Clip = Clip()
    kind: ClassVar[str] = ""

    @property
    def mean(self) -> float:
        return self.average

    def __str__(self) -> str:
        return f"{self.kind}:mean={_num(self.average)}{self.clip.suffix()}"


@dataclass(frozen=True)
class Exponential(_ByMean):
    """Exponential with the given mean (think times)."""

    kind: ClassVar[str] = "exponential"

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.average, size=n)


@dataclass(frozen=True)
class Poisson(_ByMean):
    """Poisson counts with the given mean (a length that is a count of rare events)."""

    kind: ClassVar[str] = "poisson"

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.poisson(self.average, size=n).astype(np.float64)


@dataclass(frozen=True)
class SkewNormal(_Clipped):
    """Azzalini's skew normal: location ``loc``, scale ``scale``, shape ``shape`` (0: the
    normal; positive: a longer right tail). Drawn as the sign-folded one of two correlated
    standard normals (Azzalini and Dalla Valle's construction), so numpy alone suffices."""

    loc: float
    scale: float
    shape: float
    clip: Clip = Clip()
    floor: ClassVar[float] = -math.inf

    @property
    def _delta(self) -> float:
        return self.shape / math.sqrt(1 + self.shape**2)

    @property
    def mean(self) -> float:
        return self.loc + self.scale * self._delta * math.sqrt(2 / math.pi)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        delta = self._delta
        u0 = rng.standard_normal(n)
        u1 = delta * u0 + math.sqrt(1 - delta**2) * rng.standard_normal(n)
        return self.loc + self.scale * np.where(u0 >= 0, u1, -u1)

    def __str__(self) -> str:
        return (
            f"skewnormal:loc={_num(self.loc)},scale={_num(self.scale)},shape={_num(self.shape)}"
            f"{self.clip.suffix()}"
        )


Distribution = Constant | Uniform | Normal | LogNormal | Exponential | Poisson | SkewNormal


def _float(field: str, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(field, f"{name}={text!r} is not a number", _FORMS) from None
    if not math.isfinite(value):
        raise InputError(field, f"{name} must be finite, got {text}", _FORMS)
    return value


def _keyed(field: str, kind: str, body: str, allowed: tuple[str, ...]) -> dict[str, float]:
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, text = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise InputError(field, f"{kind} takes {', '.join(allowed)}; got {part!r}", _FORMS)
        values[key] = _float(field, key, text.strip())
    return values


def _clip(field: str, values: dict[str, float]) -> Clip:
    clip = Clip(values.get("min"), values.get("max"))
    if clip.low is not None and clip.high is not None and clip.low > clip.high:
        raise InputError(field, f"min={clip.low:g} is above max={clip.high:g}")
    return clip


def _need(field: str, kind: str, values: dict[str, float], *names: str) -> list[float]:
    missing = [n for n in names if n not in values]
    if missing:
        raise InputError(field, f"{kind} needs {', '.join(missing)}", _FORMS)
    return [values[n] for n in names]


def _uniform(field: str, body: str) -> Uniform:
    if "=" in body:
        low, high = _need(
            field, "uniform", _keyed(field, "uniform", body, ("min", "max")), "min", "max"
        )
    else:
        match = _RANGE.fullmatch(body)
        if match is None:
            raise InputError(field, f"uniform needs LOW-HIGH, got {body!r}", "e.g. uniform:100-200")
        low, high = _float(field, "low", match[1]), _float(field, "high", match[2])
    if low > high:
        raise InputError(field, f"uniform minimum {low:g} is above its maximum {high:g}")
    return Uniform(low, high)


def _normal(field: str, body: str) -> Normal:
    values = _keyed(field, "normal", body, ("mean", "std", "min", "max"))
    mean, std = _need(field, "normal", values, "mean", "std")
    if std <= 0:
        raise InputError(field, f"normal std must be positive, got {std:g}")
    return Normal(mean, std, _clip(field, values))


def _lognormal(field: str, body: str) -> LogNormal:
    values = _keyed(field, "lognormal", body, ("mean", "std", "median", "sigma", "min", "max"))
    clip = _clip(field, values)
    if "median" in values or "sigma" in values:
        median, sigma = _need(field, "lognormal", values, "median", "sigma")
        if median <= 0 or sigma <= 0:
            raise InputError(field, "lognormal median and sigma must be positive")
        return LogNormal(math.log(median), sigma, clip)
    mean, std = _need(field, "lognormal", values, "mean", "std")
    if mean <= 0 or std <= 0:
        raise InputError(field, "lognormal mean and std must be positive")
    return LogNormal.from_moments(mean, std, clip)


def _by_mean(cls: type[_ByMean]) -> Callable[[str, str], _ByMean]:
    """The parser of ``cls``'s ``KIND:mean=M[,min=…,max=…]``."""

    def parse(field: str, body: str) -> _ByMean:
        values = _keyed(field, cls.kind, body, ("mean", "min", "max"))
        (mean,) = _need(field, cls.kind, values, "mean")
        if mean <= 0:
            raise InputError(field, f"{cls.kind} mean must be positive, got {mean:g}")
        return cls(mean, _clip(field, values))

    return parse


def _skewnormal(field: str, body: str) -> SkewNormal:
    values = _keyed(field, "skewnormal", body, ("loc", "scale", "shape", "min", "max"))
    loc, scale, shape = _need(field, "skewnormal", values, "loc", "scale", "shape")
    if scale <= 0:
        raise InputError(field, f"skewnormal scale must be positive, got {scale:g}")
    return SkewNormal(loc, scale, shape, _clip(field, values))


def _constant(field: str, body: str) -> Constant:
    return Constant(_float(field, "value", body))


_PARSERS = {
    "constant": _constant,
    "uniform": _uniform,
    "normal": _normal,
    "lognormal": _lognormal,
    "exponential": _by_mean(Exponential),
    "poisson": _by_mean(Poisson),
    "skewnormal": _skewnormal,
}


def parse_distribution(value: object, field: str) -> Distribution:
    """Parse ``value`` (a number, a distribution string, or a parsed distribution)."""
    if isinstance(value, Distribution):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InputError(field, f"expected a number or a distribution, got {value!r}", _FORMS)
    if isinstance(value, int | float):
        return Constant(_float(field, "value", str(value)))
    text = value.strip()
    kind, sep, body = text.partition(":")
    if not sep:
        return Constant(_float(field, "value", text))
    parser = _PARSERS.get(kind.strip().lower())
    if parser is None:
        raise InputError(field, f"unknown distribution {kind!r}", f"known: {', '.join(KINDS)}")
    return parser(field, body)


def at_most(dist: Distribution, maximum: float, field: str) -> Distribution:
    """``dist`` checked and clipped so that it never yields a value above ``maximum``
    (a length beyond any context, a time beyond any run, or a number no int64 holds).

    A bounded distribution that reaches above it, or any whose mean does, is refused; an
    unbounded tail is clipped at ``maximum``.
    """
    if isinstance(dist, Constant | Uniform):
        highest = dist.value if isinstance(dist, Constant) else dist.high
        if highest > maximum:
            raise InputError(
                field, f"{dist} goes above the cap of {maximum:g}", f"use values <= {maximum:g}"
            )
        return dist
    if not dist.mean <= maximum:
        raise InputError(field, f"{dist} has mean {dist.mean:g}, above the cap of {maximum:g}")
    high = dist.clip.high
    if high is not None and high <= maximum:
        return dist
    return replace(dist, clip=Clip(dist.clip.low, maximum))


def at_least(dist: Distribution, minimum: float, field: str) -> Distribution:
    """``dist`` checked and clipped so that it never yields a value below ``minimum``.

    Bounded distributions whose range reaches below the minimum are refused (a length
    of ``uniform:-5-10`` is a mistake, not something to silently clip); unbounded ones
    are clipped at the minimum, but their mean must respect it.
    """
    if isinstance(dist, Constant | Uniform):
        if dist.lowest < minimum:
            raise InputError(field, f"{dist} goes below {minimum:g}", f"use values >= {minimum:g}")
        return dist
    if dist.mean < minimum:
        raise InputError(field, f"{dist} has mean {dist.mean:g}, below {minimum:g}")
    if dist.lowest >= minimum:
        return dist
    high = dist.clip.high
    if high is not None and high < minimum:
        raise InputError(field, f"{dist} has max {high:g}, below {minimum:g}")
    return replace(dist, clip=Clip(minimum, high))


def whole_numbers(dist: Distribution, field: str) -> Distribution:
    """``dist`` checked to be one of whole numbers (a token count): a constant, a uniform's
    ends and a clip's bounds must be whole, not rounded behind the user's back
    (``prefix_len=2.5`` was taken as 2, ``uniform:2.5-10`` as 3 to 10). A normal's,
    lognormal's, exponential's, Poisson's or skew normal's mean and spread may be any
    number: their draws are rounded to whole tokens as the distribution's own values."""
    if isinstance(dist, Constant):
        ends: tuple[float | None, ...] = (dist.value,)
    elif isinstance(dist, Uniform):
        ends = (dist.low, dist.high)
    else:
        ends = (dist.clip.low, dist.clip.high)
    fractional = [v for v in ends if v is not None and v != int(v)]
    if fractional:
        raise InputError(
            field,
            f"{fractional[0]:g} is not a whole number of tokens"
            + ("" if isinstance(dist, Constant) else f" (in {dist})"),
            "give whole numbers, e.g. 2 or uniform:2-10",
        )
    return dist
