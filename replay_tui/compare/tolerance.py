"""The tolerance policy a judgement uses: one value, its defaults, validation and help.

A comparison first asks whether two runs are bit-identical, then whether every metric
and tensor is within a fixed tolerance (``rtol``/``atol``: EQUIVALENT), and, when a
noise floor of the run's own replicas is stored, whether what is beyond the tolerance
is still within that noise (``alpha``: the prediction interval's error rate; ``margin``:
the widest noise band that still means something, as a fraction of the metric's value;
docs/noise.md).  ``replay``, ``compare``, ``drill`` and ``bisect`` all take the same
flags, and every stored judgement keeps the values it used (``to_dict``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from storage.wire import Wire, wire

DEFAULT_RTOL: Final = 1e-5
DEFAULT_ATOL: Final = 1e-8
DEFAULT_ALPHA: Final = 0.05
TOLERANCE_RULE: Final = "|a - b| <= atol + rtol * |reference|"
"""Metrics take A as the reference (numpy.isclose); tensors take B (torch.allclose)."""

HELP: Final[dict[str, str]] = {
    "rtol": f"Relative tolerance for metrics and tensors (default {DEFAULT_RTOL:g}).",
    "atol": f"Absolute tolerance for metrics and tensors (default {DEFAULT_ATOL:g}).",
    "alpha": (
        "Error rate of the noise rule's prediction interval, over all endpoint tests"
        f" (default {DEFAULT_ALPHA:g}; docs/noise.md)."
    ),
    "margin": (
        "A practical margin: a percentage of a metric's value (0.5%) or an amount in its"
        " units (0.01). The candidate is tested for equivalence within it (TOST), beside the"
        " verdict, and a noise band wider than it is flagged as a gap (default: none)."
    ),
}


class ToleranceError(ValueError):
    """A tolerance value that cannot be used; the message names the flag."""


@dataclass(frozen=True)
class Tolerance(Wire):
    """The tolerance a judgement used; stored with the rule it applies (``rule``)."""

    WIRE_EXTRA = ("rule",)
    WIRE_ORDER = ("rtol", "atol", "alpha", "margin", "rule", "margin_abs")

    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    alpha: float = DEFAULT_ALPHA
    margin: float | None = None
    """Relative: a share of the metric's value (``--margin 0.5%``: 0.005)."""
    margin_abs: float | None = field(default=None, metadata=wire(omit="none"))
    """Absolute, in the metric's units (``--margin 0.01``); at most one of the two."""

    @property
    def rule(self) -> str:
        """How the tolerance is applied (:data:`TOLERANCE_RULE`)."""
        return TOLERANCE_RULE

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ToleranceError(f"--{name} must be a finite number >= 0 (got {v})")
        if not (isinstance(self.alpha, int | float) and 0 < self.alpha < 1):
            raise ToleranceError(f"--alpha must be between 0 and 1, exclusive (got {self.alpha})")
        if self.margin is not None and not (
            isinstance(self.margin, int | float) and math.isfinite(self.margin) and self.margin > 0
        ):
            raise ToleranceError(f"--margin must be a number > 0 (got {self.margin})")
        if self.margin_abs is not None and not (
            isinstance(self.margin_abs, int | float)
            and math.isfinite(self.margin_abs)
            and self.margin_abs > 0
        ):
            raise ToleranceError(f"--margin must be a number > 0 (got {self.margin_abs})")
        if self.margin is not None and self.margin_abs is not None:
            raise ToleranceError("--margin: one margin, a percentage or an amount")

    @classmethod
    def of(
        cls,
        rtol: float | None = None,
        atol: float | None = None,
        alpha: float | None = None,
        margin: float | None = None,
        margin_abs: float | None = None,
    ) -> Tolerance:
        """Flags as given (None: the default), validated."""
        return cls(
            rtol=DEFAULT_RTOL if rtol is None else rtol,
            atol=DEFAULT_ATOL if atol is None else atol,
            alpha=DEFAULT_ALPHA if alpha is None else alpha,
            margin=margin,
            margin_abs=margin_abs,
        )

    def text(self) -> str:
        """One line for beside a verdict: ``rtol=1e-05 atol=1e-08 alpha=0.05``."""
        out = f"rtol={self.rtol:g}  atol={self.atol:g}  alpha={self.alpha:g}"
        if self.margin_abs is not None:
            return out + f"  margin=±{self.margin_abs:g}"
        return out + (f"  margin={self.margin:g}" if self.margin is not None else "")


def parse_margin(text: str) -> tuple[float | None, float | None]:
    """``--margin``'s value as ``(relative, absolute)``: ``0.5%`` is ``(0.005, None)``,
    ``0.01`` is ``(None, 0.01)``; ``ToleranceError`` for anything else."""
    raw = text.strip()
    pct = raw.endswith("%")
    try:
        v = float(raw[:-1].strip() if pct else raw)
    except ValueError:
        raise ToleranceError(
            f"--margin must be a percentage (0.5%) or an amount (0.01), got {text[:40]!r}"
        ) from None
    if not (math.isfinite(v) and v > 0):
        raise ToleranceError(f"--margin must be a number > 0 (got {text[:40]})")
    return (v / 100.0, None) if pct else (None, v)


DEFAULT: Final = Tolerance()
