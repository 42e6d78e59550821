"""A stored comparison body (``Comparison.to_dict()``) read back into the typed model.

The store keeps a comparison as the JSON its ``to_dict()`` wrote; every reader (the
TUI's comparison screen, the CLI, the evidence report) turns it back into the same
:class:`~replay_tui.compare.comparison.Comparison` with :func:`comparison_from_dict` and
reads attributes, never keys.  Bodies written by older versions lack some fields: those
take the dataclass defaults.  Non-finite numbers were stored as strings (``"nan"``,
``"inf"``, strict JSON) and come back as floats, so ``comparison_from_dict(d).to_dict()``
gives ``d`` back for a body of the current version.

A body that is not a comparison at all raises :class:`StoredComparisonError` naming the
part that is wrong.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from replay_tui.compare.artifacts import ArtifactDiff
from replay_tui.compare.comparison import Comparison
from replay_tui.compare.environment import EnvironmentDiff, EnvRow, PackagesDiff
from replay_tui.compare.floor import FloorRef
from replay_tui.compare.metrics import MetricDiff
from replay_tui.compare.noise_results import NoiseJudgement
from replay_tui.compare.tensors import CheckpointDiff, TensorDiff
from replay_tui.gaps import Gap
from storage.records import GapCounts

T = TypeVar("T")


class StoredComparisonError(ValueError):
    """A stored comparison body that cannot be read back."""


def _num(v: Any) -> float | None:
    """A stored number: NaN and infinities were written as strings."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return v  # ints stay ints (exact)
    if isinstance(v, str) and v.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(v)
    return None


def _tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v) if isinstance(v, list | tuple) else ()


def _dicts(v: Any) -> list[Mapping[str, Any]]:
    return [x for x in v if isinstance(x, Mapping)] if isinstance(v, list | tuple) else []


def _build(model: type[T], d: Mapping[str, Any], where: str, /, **override: Any) -> T:
    """``model`` from the keys of ``d`` it knows (absent ones take their defaults)."""
    names = {f.name for f in dataclasses.fields(model)}  # type: ignore[arg-type]
    kw = {k: v for k, v in d.items() if k in names}
    kw.update(override)
    try:
        return model(**kw)
    except TypeError as e:
        raise StoredComparisonError(f"{where}: {e}") from None


def _floats(d: Mapping[str, Any], *names: str) -> dict[str, float | None]:
    return {n: _num(d.get(n)) for n in names if n in d}


def tensor_from_dict(d: Mapping[str, Any]) -> TensorDiff:
    shape_a, shape_b = d.get("shape_a"), d.get("shape_b")
    return _build(
        TensorDiff,
        d,
        f"tensor {d.get('name')!r}",
        shape_a=None if shape_a is None else _tuple(shape_a),
        shape_b=None if shape_b is None else _tuple(shape_b),
        **_floats(d, "max_abs_diff", "rel_l2"),
    )


def checkpoint_from_dict(d: Mapping[str, Any]) -> CheckpointDiff:
    return _build(
        CheckpointDiff,
        d,
        f"checkpoint {d.get('a')!r}",
        tensors=tuple(tensor_from_dict(t) for t in _dicts(d.get("tensors"))),
        worst=tuple(tensor_from_dict(t) for t in _dicts(d.get("worst"))),
        only_a=_tuple(d.get("only_a")),
        only_b=_tuple(d.get("only_b")),
    )


def artifact_from_dict(d: Mapping[str, Any]) -> ArtifactDiff:
    tensors = d.get("tensors")
    return _build(
        ArtifactDiff,
        d,
        f"artifact {d.get('path')!r}",
        tensors=checkpoint_from_dict(tensors) if isinstance(tensors, Mapping) else None,
    )


def metric_from_dict(d: Mapping[str, Any]) -> MetricDiff:
    return _build(
        MetricDiff,
        d,
        f"metric {d.get('name')!r}",
        example_steps_only_a=_tuple(d.get("example_steps_only_a")),
        example_steps_only_b=_tuple(d.get("example_steps_only_b")),
        missing=_tuple(d.get("missing")),
        **_floats(
            d,
            "a",
            "b",
            "abs_diff",
            "rel_diff",
            "a_at_out_of_tol",
            "b_at_out_of_tol",
            "history_max_abs_diff",
        ),
    )


def _changed(v: Any) -> tuple[tuple[str, str, str], ...]:
    out = []
    for c in _dicts(v):
        out.append((str(c.get("name", "")), str(c.get("a", "")), str(c.get("b", ""))))
    return tuple(out)


def environment_from_dict(d: Mapping[str, Any] | None) -> EnvironmentDiff:
    if not isinstance(d, Mapping):
        return EnvironmentDiff(rows=(), packages=None)
    rows = tuple(
        _build(EnvRow, r, f"environment row {r.get('path')!r}", cls=r.get("class", "same"))
        for r in _dicts(d.get("rows"))
    )
    p = d.get("packages")
    packages = None
    if isinstance(p, Mapping):
        packages = PackagesDiff(
            count_a=int(p.get("count_a") or 0),
            count_b=int(p.get("count_b") or 0),
            added=_tuple(p.get("added")),
            removed=_tuple(p.get("removed")),
            changed=_changed(p.get("changed")),
        )
    return EnvironmentDiff(rows=rows, packages=packages)


def gap_from_dict(d: Mapping[str, Any]) -> Gap:
    return _build(Gap, d, f"gap {d.get('code')!r}")


def comparison_from_dict(body: Mapping[str, Any]) -> Comparison:
    """The typed comparison of a stored body (see the module doc)."""
    if not isinstance(body, Mapping):
        raise StoredComparisonError(f"a comparison is a JSON object, not {type(body).__name__}")
    for key in ("a_run", "b_run", "verdict"):
        if not isinstance(body.get(key), str):
            raise StoredComparisonError(f"the comparison has no {key}")
    counts = body.get("gap_counts")
    return _build(
        Comparison,
        body,
        "comparison",
        reasons=tuple(str(r) for r in _tuple(body.get("reasons"))),
        missing=tuple(str(r) for r in _tuple(body.get("missing"))),
        probable_causes=tuple(str(r) for r in _tuple(body.get("probable_causes"))),
        shared_causes=tuple(str(r) for r in _tuple(body.get("shared_causes"))),
        artifacts=tuple(artifact_from_dict(x) for x in _dicts(body.get("artifacts"))),
        metrics=tuple(metric_from_dict(m) for m in _dicts(body.get("metrics"))),
        environment=environment_from_dict(body.get("environment")),
        gaps=tuple(gap_from_dict(g) for g in _dicts(body.get("gaps"))),
        gap_counts=_gap_counts(counts),
        rtol=_num(body.get("rtol")) if body.get("rtol") is not None else math.nan,
        atol=_num(body.get("atol")) if body.get("atol") is not None else math.nan,
        noise=_noise(body.get("noise")),
        floor=_floor(body.get("floor")),
    )


def _gap_counts(v: Any) -> dict[str, GapCounts]:
    """Per side (``a``, ``b``, ``pair``), the counts stored; a side stored as something
    other than counts is left out (as a body that has none)."""
    if not isinstance(v, Mapping):
        return {}
    return {str(side): GapCounts.from_dict(n) for side, n in v.items() if isinstance(n, Mapping)}


def _floor(v: Any) -> FloorRef | None:
    if not isinstance(v, Mapping):
        return None
    try:
        return FloorRef.from_dict(v)
    except ValueError as e:
        raise StoredComparisonError(f"comparison floor: {e}") from None


def _noise(v: Any) -> NoiseJudgement | None:
    if not isinstance(v, Mapping):
        return None
    try:
        return NoiseJudgement.from_dict(v)
    except (ValueError, KeyError, TypeError) as e:
        raise StoredComparisonError(f"comparison noise judgement: {e}") from None
