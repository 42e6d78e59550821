"""Final metrics and metric histories of two runs, compared value by value.

Histories are lists of ``(step, value)`` aligned by step (a step logged twice pairs its
first occurrences, then its second, ...).  Tolerance follows ``numpy.isclose`` with A
as the reference: ``|a - b| <= atol + rtol * |a|``.

Timing metrics (throughput, seconds per step, ...) measure the machine, not the
training: they are compared and shown but never decide a verdict.  Pure Python.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from replay_tui.compare.states import ItemState
from storage.wire import Wire, wire

MetricStatus = Literal["equal", "close", "differs", "incomplete", "timing"]

TIMING_METRIC = re.compile(
    r"(throughput|per_?sec(ond)?s?$|_per_s$|samples?_s$|tokens?_s$|its?_s$|steps?_s$"
    r"|(^|_)time($|_)|elapsed|wall_?clock|duration|latency|_secs?$|_seconds$|_ms$)",
    re.IGNORECASE,
)
"""Names of metrics that measure speed or time (matched case-insensitively)."""

_EXAMPLE_STEPS = 5


def is_timing_metric(name: str) -> bool:
    """Whether ``name`` looks like a speed or time measurement (not judged)."""
    return TIMING_METRIC.search(name) is not None


def isclose(a: float, b: float, *, rtol: float, atol: float) -> bool:
    """``|a - b| <= atol + rtol * |a|`` (numpy.isclose with A as the reference)."""
    if a == b:
        return True
    diff = abs(a - b)
    return math.isfinite(diff) and diff <= atol + rtol * abs(a)


def bitwise_equal(a: float, b: float) -> bool:
    """Same IEEE-754 double, bit for bit (0.0 and -0.0 differ)."""
    return struct.pack("<d", float(a)) == struct.pack("<d", float(b))


def abs_rel(a: float, b: float) -> tuple[float, float]:
    """``|a - b|`` and ``|a - b| / |a|`` (0 when equal, inf when only A is 0)."""
    diff = abs(float(a) - float(b))
    if diff == 0.0:
        return 0.0, 0.0
    return diff, (diff / abs(a) if a != 0 else math.inf)


@dataclass(frozen=True)
class MetricDiff(Wire):
    """One metric of both runs: its final values and its history.

    ``bitwise_equal``: finals and every history point bit-identical and nothing present
    on one side only.  ``within_tol``: every value compared (finals and aligned history
    steps) is within tolerance; what exists on one side only is listed in ``missing``
    and does not count against it.
    """

    WIRE_EXTRA = ("status",)
    WIRE_ORDER = ("name", "status", "timing")

    name: str
    a: float | None
    b: float | None
    abs_diff: float | None
    rel_diff: float | None
    final_bitwise_equal: bool | None
    final_within_tol: bool | None
    bitwise_equal: bool
    within_tol: bool
    timing: bool
    has_history: bool
    steps_compared: int = 0
    steps_only_a: int = 0
    steps_only_b: int = 0
    example_steps_only_a: tuple[int, ...] = ()
    example_steps_only_b: tuple[int, ...] = ()
    first_step_differs: int | None = None
    first_step_out_of_tol: int | None = None
    a_at_out_of_tol: float | None = None
    b_at_out_of_tol: float | None = None
    history_max_abs_diff: float | None = None
    missing: tuple[str, ...] = ()
    state: ItemState | None = field(default=None, metadata=wire(omit="none"))
    """What the comparison judged this metric (``compare.states``); None in a body
    stored before states existed."""

    @property
    def judged(self) -> bool:
        """Whether this metric takes part in the verdict (timing metrics do not)."""
        return not self.timing

    @property
    def status(self) -> MetricStatus:
        if self.timing:
            return "timing"
        if not self.within_tol:
            return "differs"
        if self.missing:
            return "incomplete"
        return "equal" if self.bitwise_equal else "close"


@dataclass(frozen=True)
class _History:
    compared: int
    only_a: list[int]
    only_b: list[int]
    first_differs: int | None
    first_out: int | None
    a_at_out: float | None
    b_at_out: float | None
    max_abs: float | None
    bitwise: bool


def _keyed(points: Sequence[tuple[int, float]]) -> dict[tuple[int, int], float]:
    """``(step, occurrence)`` -> value, so a step logged twice still aligns."""
    seen: dict[int, int] = {}
    out: dict[tuple[int, int], float] = {}
    for step, value in points:
        k = seen.get(step, 0)
        seen[step] = k + 1
        out[(step, k)] = float(value)
    return out


def _compare_history(
    ha: Sequence[tuple[int, float]], hb: Sequence[tuple[int, float]], rtol: float, atol: float
) -> _History:
    ka, kb = _keyed(ha), _keyed(hb)
    first_differs: int | None = None
    first_out: int | None = None
    a_at_out: float | None = None
    b_at_out: float | None = None
    max_abs: float | None = None
    bitwise = True
    compared = 0
    for key in sorted(ka.keys() & kb.keys()):
        va, vb = ka[key], kb[key]
        compared += 1
        if bitwise_equal(va, vb):
            continue
        bitwise = False
        diff, _ = abs_rel(va, vb)
        max_abs = diff if max_abs is None else max(max_abs, diff)
        if first_differs is None:
            first_differs = key[0]
        if first_out is None and not isclose(va, vb, rtol=rtol, atol=atol):
            first_out, a_at_out, b_at_out = key[0], va, vb
    if compared and max_abs is None:
        max_abs = 0.0
    only_a = sorted(step for step, _ in ka.keys() - kb.keys())
    only_b = sorted(step for step, _ in kb.keys() - ka.keys())
    return _History(
        compared, only_a, only_b, first_differs, first_out, a_at_out, b_at_out, max_abs, bitwise
    )


def compare_metric(
    name: str,
    final_a: float | None,
    final_b: float | None,
    history_a: Sequence[tuple[int, float]] | None,
    history_b: Sequence[tuple[int, float]] | None,
    *,
    rtol: float,
    atol: float,
) -> MetricDiff:
    """Compare one metric; ``None`` means the run did not record that part."""
    missing: list[str] = []
    abs_diff: float | None = None
    rel_diff: float | None = None
    final_bitwise: bool | None = None
    final_within: bool | None = None
    if final_a is not None and final_b is not None:
        abs_diff, rel_diff = abs_rel(final_a, final_b)
        final_bitwise = bitwise_equal(final_a, final_b)
        final_within = isclose(float(final_a), float(final_b), rtol=rtol, atol=atol)
    elif final_a is not None:
        missing.append("final value only in A")
    elif final_b is not None:
        missing.append("final value only in B")

    hist: _History | None = None
    if history_a is not None and history_b is not None:
        hist = _compare_history(history_a, history_b, rtol, atol)
        if hist.only_a:
            missing.append(f"{len(hist.only_a)} history step(s) only in A")
        if hist.only_b:
            missing.append(f"{len(hist.only_b)} history step(s) only in B")
    elif history_a is not None:
        missing.append("history only in A")
    elif history_b is not None:
        missing.append("history only in B")

    bitwise = not missing and final_bitwise is not False and (hist is None or hist.bitwise)
    within = final_within is not False and (hist is None or hist.first_out is None)
    return MetricDiff(
        name=name,
        a=None if final_a is None else float(final_a),
        b=None if final_b is None else float(final_b),
        abs_diff=abs_diff,
        rel_diff=rel_diff,
        final_bitwise_equal=final_bitwise,
        final_within_tol=final_within,
        bitwise_equal=bitwise,
        within_tol=within,
        timing=is_timing_metric(name),
        has_history=history_a is not None or history_b is not None,
        steps_compared=hist.compared if hist else 0,
        steps_only_a=len(hist.only_a) if hist else 0,
        steps_only_b=len(hist.only_b) if hist else 0,
        example_steps_only_a=tuple(hist.only_a[:_EXAMPLE_STEPS]) if hist else (),
        example_steps_only_b=tuple(hist.only_b[:_EXAMPLE_STEPS]) if hist else (),
        first_step_differs=hist.first_differs if hist else None,
        first_step_out_of_tol=hist.first_out if hist else None,
        a_at_out_of_tol=hist.a_at_out if hist else None,
        b_at_out_of_tol=hist.b_at_out if hist else None,
        history_max_abs_diff=hist.max_abs if hist else None,
        missing=tuple(missing),
    )


def compare_metrics(
    finals_a: Mapping[str, float],
    finals_b: Mapping[str, float],
    history_a: Mapping[str, Sequence[tuple[int, float]]],
    history_b: Mapping[str, Sequence[tuple[int, float]]],
    *,
    rtol: float,
    atol: float,
) -> tuple[MetricDiff, ...]:
    """Every metric named by either run (finals or histories), sorted by name."""
    names = sorted(set(finals_a) | set(finals_b) | set(history_a) | set(history_b))
    return tuple(
        compare_metric(
            name,
            finals_a.get(name),
            finals_b.get(name),
            history_a.get(name),
            history_b.get(name),
            rtol=rtol,
            atol=atol,
        )
        for name in names
    )
