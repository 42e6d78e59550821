"""Reading a noise floor's or a judgement's stored JSON back: each value checked for its
type (a float may be stored as the strings ``"inf"``, ``"-inf"``, ``"nan"``), a bad one
refused with ``ValueError`` naming what it was."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def read_float(v: object, what: str) -> float:
    """A float from JSON: a number, or the strings "inf", "-inf", "nan"."""
    if isinstance(v, bool):
        raise ValueError(f"{what}: expected a number, got {v!r}")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    raise ValueError(f"{what}: expected a number, got {v!r}")


def read_opt_float(v: object, what: str) -> float | None:
    return None if v is None else read_float(v, what)


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


def read_int(v: object, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what}: expected an integer, got {v!r}")
    return v


def read_str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise ValueError(f"{key}: expected a string, got {v!r}")
    return v


def read_list(d: Mapping[str, Any], key: str) -> list[Any]:
    v = d.get(key)
    if not isinstance(v, list):
        raise ValueError(f"{key}: expected a list, got {type(v).__name__}")
    return v


def read_optional(read: Any, v: object, what: str) -> Any:
    """``read(v)`` for a stored object, None for an absent one."""
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise ValueError(f"noise judgement: {what} must be an object")
    return read(v)


def read_choice(v: object, allowed: Sequence[str], what: str) -> str:
    if not isinstance(v, str) or v not in allowed:
        raise ValueError(f"{what}: expected one of {', '.join(allowed)}, got {v!r}")
    return v
