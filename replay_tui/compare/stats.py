"""The statistics the noise rule needs, in one small module (docs/noise.md).

- Student's t: :func:`student_t_ppf` (quantiles) and :func:`t_sf` (the upper tail), from
  the regularized incomplete beta function (Lentz's continued fraction); standard library
  only, accurate to about 1e-12 relative.
- :func:`mean_sd`: mean and sample standard deviation (n - 1).
- :func:`tost_p`: the p value of two one-sided tests (TOST) that a difference lies
  within ``(-margin, +margin)``.
- :func:`grid_step`: the step a metric's recorded values move in (an accuracy over N
  samples moves in steps of 1/N, a count in steps of 1), or None when the values show no
  such step (a smooth float metric).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Final

# -- Student's t ---------------------------------------------------------------------------

_CF_EPS: Final = 4e-16
_CF_TINY: Final = 1e-300
_CF_MAXIT: Final = 20_000


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function, modified Lentz's method
    (Numerical Recipes ``betacf``)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _CF_TINY:
        d = _CF_TINY
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAXIT + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        if abs(d) < _CF_TINY:
            d = _CF_TINY
        c = 1.0 + aa / c
        if abs(c) < _CF_TINY:
            c = _CF_TINY
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        if abs(d) < _CF_TINY:
            d = _CF_TINY
        c = 1.0 + aa / c
        if abs(c) < _CF_TINY:
            c = _CF_TINY
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def _betai(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)``; ``y`` is ``1 - x`` computed by the
    caller without cancellation."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def _t_sf(t: float, df: int) -> float:
    """``P(T > t)`` for ``t >= 0``: ``I_{df/(df+t^2)}(df/2, 1/2) / 2``."""
    t2 = t * t
    return 0.5 * _betai(0.5 * df, 0.5, df / (df + t2), t2 / (df + t2))


def _t_pdf(t: float, df: int) -> float:
    return math.exp(
        math.lgamma(0.5 * (df + 1))
        - math.lgamma(0.5 * df)
        - 0.5 * math.log(df * math.pi)
        - 0.5 * (df + 1) * math.log1p(t * t / df)
    )


def student_t_ppf(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom.

    Closed forms for ``df`` 1 and 2; otherwise Newton's method on the upper tail
    (``I_x(df/2, 1/2) / 2``, the regularized incomplete beta by Lentz's continued
    fraction), kept inside a bisection bracket.  Accurate to about 1e-12 relative.
    """
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    p = float(p)
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    return _t_ppf(p, df)


@lru_cache(maxsize=256)
def _t_ppf(p: float, df: int) -> float:
    if p == 0.5:
        return 0.0
    # by symmetry, solve for the tail q < 1/2 (1 - p is exact for p >= 1/2)
    return -_t_upper(p, df) if p < 0.5 else _t_upper(1.0 - p, df)


def _t_upper(q: float, df: int) -> float:
    """The t > 0 with ``P(T > t) = q``, for ``0 < q < 1/2``."""
    if df == 1:
        return 1.0 / math.tan(math.pi * q)
    if df == 2:
        return (1.0 - 2.0 * q) / math.sqrt(2.0 * q * (1.0 - q))
    lo, hi = 0.0, 1.0
    while _t_sf(hi, df) > q:
        lo, hi = hi, hi * 2.0
        if math.isinf(hi):
            return math.inf
    t = 0.5 * (lo + hi)
    for _ in range(200):
        g = _t_sf(t, df) - q
        if g == 0.0:
            return t
        if g > 0.0:
            lo = t
        else:
            hi = t
        pdf = _t_pdf(t, df)
        nxt = t + g / pdf if pdf > 0.0 else 0.5 * (lo + hi)
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - t) <= 1e-15 * max(1.0, t) or hi - lo <= 4e-16 * hi:
            return nxt
        t = nxt
    return t


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); exactly (x, 0) when all are equal."""
    first = values[0]
    if all(v == first for v in values):
        return first, 0.0
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var)


def t_sf(t: float, df: int) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom, any finite or
    infinite ``t``."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    if math.isnan(t):
        raise ValueError("t must be a number, got nan")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if t >= 0:
        return _t_sf(t, df)
    return 1.0 - _t_sf(-t, df)


def tost_p(diff: float, se: float, margin: float, df: int) -> float:
    """The p value of two one-sided tests that the true difference lies inside
    ``(-margin, +margin)``, for an observed ``diff`` with standard error ``se`` whose
    studentized form follows Student's t with ``df`` degrees of freedom:
    ``max(P(T > (diff + margin) / se), P(T > (margin - diff) / se))``.  Small: the
    difference is shown to lie within the margin.  ``se == 0`` (no measured spread):
    0 when ``|diff| < margin``, else 1."""
    if not (margin > 0 and math.isfinite(margin)) or not math.isfinite(diff):
        return 1.0
    if not se > 0:
        return 0.0 if abs(diff) < margin else 1.0
    return max(t_sf((diff + margin) / se, df), t_sf((margin - diff) / se, df))


# -- a metric's resolution -----------------------------------------------------------------

MAX_DENOMINATOR: Final = 10**6
"""A value is on a grid when it is the float64 nearest to a fraction whose denominator is
at most this (an accuracy over up to a million samples, a count, a value logged with up
to six decimals)."""
MAX_DENOMINATOR_F32: Final = 1000
"""The same for a value stored as float32 (``tensor.float().mean().item()``): the
nearest float32 to a fraction with a denominator of at most this.  Float32 is coarse,
so only small denominators are unambiguous."""


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def as_fraction(v: float) -> Fraction | None:
    """The fraction ``v`` was rounded from, or None: ``v`` is the float64 nearest to a
    fraction with a denominator <= :data:`MAX_DENOMINATOR`, or the float32 nearest to one
    with a denominator <= :data:`MAX_DENOMINATOR_F32`.  A smooth float value is almost
    never either (about 1e-4 per value for float64, see docs/noise.md)."""
    if not math.isfinite(v):
        return None
    r = Fraction(v).limit_denominator(MAX_DENOMINATOR)
    if float(r) == v:
        return r
    if abs(v) < 3e38 and _f32(v) == v:
        r32 = Fraction(v).limit_denominator(MAX_DENOMINATOR_F32)
        if _f32(float(r32)) == v:
            return r32
    return None


def fraction_gcd(values: Iterable[Fraction]) -> Fraction | None:
    """The greatest ``q`` of which every value is a whole multiple (None when every value
    is 0, or the common denominator exceeds :data:`MAX_DENOMINATOR`)."""
    vals = list(values)
    if not vals:
        return None
    den = 1
    for v in vals:
        den = den * v.denominator // math.gcd(den, v.denominator)
        if den > MAX_DENOMINATOR:
            return None
    g = 0
    for v in vals:
        g = math.gcd(g, abs(v.numerator * (den // v.denominator)))
    return Fraction(g, den) if g else None


def grid_step(values: Iterable[float], *, moved: bool) -> Fraction | None:
    """The step every value in ``values`` is a whole multiple of, or None.

    ``moved``: the values differ where they should agree (the replicas at one step, or
    their finals), so the metric is seen to move on its grid; without that there is no
    evidence of a step (a count that never changes, a single value).  None also when any
    value is not on a grid (:func:`as_fraction`), or the values share no denominator of
    at most :data:`MAX_DENOMINATOR`."""
    if not moved:
        return None
    fracs = []
    for v in values:
        f = as_fraction(v)
        if f is None:
            return None
        fracs.append(f)
    return fraction_gcd(fracs)
