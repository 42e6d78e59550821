"""The two checks a noise floor's stored numbers get beyond their type
(``storage.wire.read_float`` reads a float, the strings ``"inf"``, ``"-inf"`` and
``"nan"`` included): a floor's values are finite, and a weight distance is >= 0.  Each
refuses a bad value with ``ValueError`` naming what it was."""

from __future__ import annotations

import math

from storage.wire import read_float


def read_finite(v: object, what: str) -> float:
    f = read_float(v, what)
    if not math.isfinite(f):
        raise ValueError(f"noise floor {what}: values must be finite, got {v!r}")
    return f


def read_distance(v: object, what: str) -> float:
    f = read_float(v, what)
    if not f >= 0.0:  # NaN fails too
        raise ValueError(f"{what}: a distance must be >= 0, got {v!r}")
    return f
