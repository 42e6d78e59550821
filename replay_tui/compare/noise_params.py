"""The knobs of the noise rule (``compare.noise_rule``), checked on construction."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from storage.wire import Wire, wire


@dataclass(frozen=True)
class NoiseParams(Wire):
    """The knobs of the rule.  Invalid values raise ``ValueError`` on construction."""

    WIRE_ORDER = (
        "alpha",
        "rel_floor",
        "abs_floor",
        "margin",
        "exit_run",
        "tail_fraction",
        "window",
        "margin_abs",
    )

    alpha: float = 0.05
    """Family-wise false-failure rate of the endpoint tests (Bonferroni over them)."""
    rel_floor: float = 1e-3
    """Smallest half-width, relative to ``|mean|`` (numerical epsilon: 0.1 %)."""
    abs_floor: float = 1e-12
    """Smallest half-width, absolute (for metrics whose mean is 0)."""
    margin: float | None = None
    """A practical margin the user declared, relative (0.01 = 1 % of the metric's value):
    a band wider than it is recorded as ``too_wide``, and the candidate is tested for
    equivalence within ``± margin * |mean|`` (TOST).  None: no relative margin declared."""
    margin_abs: float | None = field(default=None, metadata=wire(omit="none"))
    """The same margin declared in the metric's own units (``--margin 0.01``: ± 0.01);
    at most one of ``margin`` and ``margin_abs`` is set."""
    exit_run: int = 3
    """Consecutive logged points out of the band that count as leaving it."""
    tail_fraction: float = 0.02
    """The tail endpoint: the mean over the last this share of the logged steps (>= 1)."""
    window: int = 5
    """The per-step spread is pooled over this many logged points each side."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> NoiseParams:
        """Raise ``ValueError`` naming the first bad value; return self."""

        def number(name: str, v: object) -> float:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ValueError(f"{name} must be a number, got {v!r}")
            return float(v)

        def integer(name: str, v: object) -> int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{name} must be an integer, got {v!r}")
            return v

        if not 0.0 < number("alpha", self.alpha) < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        for name, v in (("rel_floor", self.rel_floor), ("abs_floor", self.abs_floor)):
            f = number(name, v)
            if not (f >= 0.0 and math.isfinite(f)):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.margin is not None:
            f = number("margin", self.margin)
            if not (f > 0.0 and math.isfinite(f)):
                raise ValueError(
                    f"margin must be a finite number > 0 (relative: 0.01 = 1 %) or None, "
                    f"got {self.margin!r}"
                )
        if self.margin_abs is not None:
            f = number("margin_abs", self.margin_abs)
            if not (f > 0.0 and math.isfinite(f)):
                raise ValueError(f"margin_abs must be a finite number > 0, got {self.margin_abs!r}")
            if self.margin is not None:
                raise ValueError("declare one margin: relative (margin) or absolute (margin_abs)")
        if integer("exit_run", self.exit_run) < 1:
            raise ValueError(f"exit_run must be >= 1, got {self.exit_run!r}")
        if not 0.0 < number("tail_fraction", self.tail_fraction) <= 0.5:
            raise ValueError(f"tail_fraction must be in (0, 0.5], got {self.tail_fraction!r}")
        if integer("window", self.window) < 0:
            raise ValueError(f"window must be >= 0, got {self.window!r}")
        return self

    @property
    def declared_margin(self) -> bool:
        return self.margin is not None or self.margin_abs is not None

    def margin_at(self, mean: float) -> float | None:
        """The declared margin in the metric's units at a mean of ``mean`` (None: none)."""
        if self.margin_abs is not None:
            return self.margin_abs
        return None if self.margin is None else self.margin * abs(mean)

    def margin_text(self) -> str:
        """``±0.5 %`` (relative) or ``±0.01`` (absolute); ``none``."""
        if self.margin_abs is not None:
            return f"±{self.margin_abs:g}"
        return "none" if self.margin is None else f"±{pct(self.margin)}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "") -> NoiseParams:
        """As ``Wire.from_dict``, and a key that names no parameter is refused (a knob
        misspelt would otherwise be read as its default)."""
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown noise parameter(s): {', '.join(unknown)}")
        return super().from_dict(d, where)


def pct(x: float) -> str:
    """A share as a percentage with 3 significant digits: ``0.005`` -> ``0.5 %``."""
    return f"{100 * x:.3g} %"
