"""What a number in an inference-perf run's YAML or JSON may be, for the three readers of
the run (``session.lifecycle``, ``session.lifecycle_load``, ``session.lifecycle_prompts``).

YAML reads ``true`` as a bool (a Python int) and ``.inf``/``.nan`` as floats, so a count
or a length is checked for being a real number that is not a bool, and finite where an
arithmetic on it follows.
"""

from __future__ import annotations

import math
from typing import Any


def real(value: Any) -> bool:
    """An int or a float, not a bool (infinite and NaN included)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite(value: Any) -> bool:
    """A real number that is neither infinite nor NaN."""
    return real(value) and math.isfinite(value)


def positive_whole(value: Any) -> bool:
    """A positive whole number (``2.0`` included: YAML may write a count so)."""
    return finite(value) and value == int(value) and value > 0
