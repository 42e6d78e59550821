"""Plain-text report of a Comparison for the command line.

Order: the verdict (large) with the tolerances, why, what is missing, artifacts,
the worst tensors of each differing checkpoint, metrics with divergence steps,
environment fields that differ (by class), and the pair's provenance gaps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from replay_tui.compare.artifacts import ArtifactDiff
from replay_tui.compare.comparison import TOLERANCE_RULE, Comparison
from replay_tui.compare.environment import CLASS_ORDER, CLASS_TITLES, EnvironmentDiff, EnvRow
from replay_tui.compare.metrics import MetricDiff
from replay_tui.compare.states import with_states, words
from replay_tui.gaps import gap_lines
from replay_tui.textfmt import short, table
from storage.records import GapCounts

STATE_MARKS: dict[str, str] = {
    "identical": "==",
    "within_tolerance": "~",
    "within_noise": "~n",
    "outside_noise": "XX",
    "outside_tolerance": "XX",
    "missing": "??",
    "volatile": "v",
    "not_judged": "--",
}
"""Each item's mark by the state the comparison gave it (``compare.states``)."""
ARTIFACT_MARKS: dict[str, str] = {
    "match": "==",
    "same_tensors": "~=",
    "close": "~",
    "differs": "!=",
    "out_of_tolerance": "XX",
    "unavailable": "??",
    "only_a": "A-",
    "only_b": "-B",
    "unhashed": "??",
    "stale": "--",
}
METRIC_MARKS: dict[str, str] = {
    "equal": "==",
    "close": "~",
    "differs": "XX",
    "incomplete": "??",
    "timing": "t",
}
_VALUE_WIDTH = 44
_EXPECTED_SHOWN = 12
_TENSORS_SHOWN = 10


def table_(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """A report section's table, indented under its heading."""
    return table(headers, rows, indent=indent)


def num(x: float | str | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.6g}"


def exact(x: float | None) -> str:
    """Shortest text that round-trips, so two values that differ never print alike."""
    return "-" if x is None else repr(x)


def value(v: Any, present: bool = True, width: int = _VALUE_WIDTH) -> str:
    if not present:
        return "(absent)"
    if v is None:
        return "null"
    text = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def value_pair(
    a: Any, b: Any, present_a: bool = True, present_b: bool = True, width: int = _VALUE_WIDTH
) -> tuple[str, str]:
    """Two values to show side by side.  Cut alike they could hide where they differ
    (two long command lines differing in one flag at the end), so both are shown around
    the first character that differs, with an ellipsis on every cut side."""
    if not (present_a and present_b) or a is None or b is None:
        return value(a, present_a, width), value(b, present_b, width)
    ta, tb = _text(a), _text(b)
    if ta == tb or (len(ta) <= width and len(tb) <= width):
        return value(a, True, width), value(b, True, width)
    first = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None)
    if first is None:
        first = min(len(ta), len(tb))
    start = max(0, first - width // 3)

    def window(t: str) -> str:
        part = t[start:]
        head = "…" if start else ""
        room = width - len(head)
        if len(part) > room:
            part = part[: room - 1] + "…"
        return head + part

    return window(ta), window(tb)


def banner(c: Comparison) -> str:
    spaced = " ".join(c.verdict)
    inner = f"  {spaced}  "
    width = max(len(inner), 40)
    edge = "#" * (width + 4)
    lines = [
        edge,
        "#" + " " * (width + 2) + "#",
        "# " + inner.center(width) + " #",
        "#" + " " * (width + 2) + "#",
        edge,
    ]
    relation = "  (B is a replay of A)" if c.b_replays_a else ""
    lines.append(f"A {c.a_run} ({c.a_status})")
    lines.append(f"B {c.b_run} ({c.b_status}){relation}")
    lines.append(f"tolerance: rtol={c.rtol:g}  atol={c.atol:g}   {TOLERANCE_RULE}")
    lines.append(
        "  (metrics: reference |a| as numpy.isclose; tensors: reference |b| as torch.allclose)"
    )
    if c.floor is not None:
        f = c.floor
        lines.append(
            f"noise: floor #{f.fact_id} of {f.run_id} ({f.k} replicas,"
            f" measured {f.created_at}), alpha={c.alpha:g}"
            + (f", margin={c.margin:g}" if c.margin is not None else "")
            + f"; candidate: run {f.candidate.upper()}   (docs/noise.md)"
        )
    lines.append(f"verdict: {c.verdict}  exit code {c.exit_code}: {c.headline}")
    if c.a_run == c.b_run:
        lines.append("warning: A and B are the same run: this comparison proves nothing")
    return "\n".join(lines)


def artifact_mark(x: ArtifactDiff) -> str:
    if x.state == "missing" and x.status in ("only_a", "only_b"):
        return ARTIFACT_MARKS[x.status]  # missing, and on which side
    if x.state is not None:
        return STATE_MARKS.get(x.state, "?")
    return ARTIFACT_MARKS.get(x.checkpoint or x.status, "?")


def _artifact_status(x: ArtifactDiff) -> str:
    seen = (x.checkpoint or x.status).replace("_", " ")
    if x.state is None or x.state in ("identical", "not_judged"):
        return seen
    return f"{words(x.state)} ({seen})"


def artifacts_text(arts: Sequence[ArtifactDiff]) -> list[str]:
    if not arts:
        return ["── artifacts: none recorded in either run"]
    counts: dict[str, int] = {}
    for x in arts:
        counts[x.status] = counts.get(x.status, 0) + 1
    summary = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items()))
    rows = [
        [
            artifact_mark(x),
            x.path,
            x.kind_a or x.kind_b or "-",
            "stale" if x.stale_a else short(x.sha256_a),
            "stale" if x.stale_b else short(x.sha256_b),
            "-" if x.size_a is None else str(x.size_a),
            "-" if x.size_b is None else str(x.size_b),
            _artifact_status(x),
        ]
        for x in arts
    ]
    out = [f"── artifacts ({len(arts)}: {summary})"]
    out.append(
        table_(["", "PATH", "KIND", "SHA256 A", "SHA256 B", "SIZE A", "SIZE B", "STATUS"], rows)
    )
    for x in arts:
        if x.error:
            out.append(f"  {x.path}: {x.error}")
        if x.stale_a or x.stale_b:
            out.append(f"  {x.note or x.path + ': stale'}")
        if x.checkpoint is not None:
            out.extend(checkpoint_text(x))
    return out


def checkpoint_text(x: ArtifactDiff) -> list[str]:
    out = [f"── checkpoint {x.path}: {x.note or x.checkpoint}"]
    d = x.tensors
    if d is None:
        return out
    out.append(
        f"  {d.n_equal} equal / {d.n_close} close / {d.n_differ} differ /"
        f" {d.n_mismatch} shape or dtype mismatch / {len(d.only_a)} only in A /"
        f" {len(d.only_b)} only in B"
    )
    shown = [t for t in d.tensors if t.status in ("shape_mismatch",)] + list(d.worst)
    if shown:
        rows = [
            [
                t.name,
                t.status.replace("_", " "),
                (t.dtype_a or "-") if t.dtype_a == t.dtype_b else f"{t.dtype_a}/{t.dtype_b}",
                _shape(t.shape_a)
                if t.shape_a == t.shape_b
                else f"{_shape(t.shape_a)} vs {_shape(t.shape_b)}",
                num(t.max_abs_diff),
                num(t.rel_l2),
                "-" if t.n_unequal is None else f"{t.n_unequal}/{t.numel}",
                words(t.state) if t.state is not None else "yes" if t.within_tolerance else "NO",
            ]
            for t in shown[:_TENSORS_SHOWN]
        ]
        out.append("  worst tensors:")
        out.append(
            table_(
                ["TENSOR", "STATUS", "DTYPE", "SHAPE", "MAX ABS", "REL L2", "UNEQUAL", "JUDGED"],
                rows,
                indent="    ",
            )
        )
    if d.only_a:
        out.append(f"  only in A: {', '.join(d.only_a[:_TENSORS_SHOWN])}")
    if d.only_b:
        out.append(f"  only in B: {', '.join(d.only_b[:_TENSORS_SHOWN])}")
    return out


def _shape(s: tuple[int, ...] | None) -> str:
    return "-" if s is None else "[" + ",".join(map(str, s)) + "]"


def _in_tol(m: MetricDiff) -> str:
    """``yes``/``NO``, or ``-`` where nothing of the metric was in both runs (not a yes)."""
    if m.timing:
        return "timing"
    if m.final_within_tol is None and m.steps_compared == 0:
        return "-"
    return "yes" if m.within_tol else "NO"


def metrics_text(metrics: Sequence[MetricDiff]) -> list[str]:
    if not metrics:
        return ["── metrics: none recorded in either run"]
    rows = [
        [
            STATE_MARKS.get(m.state, "?") if m.state is not None else METRIC_MARKS[m.status],
            m.name,
            exact(m.a),
            exact(m.b),
            num(m.abs_diff),
            num(m.rel_diff),
            _in_tol(m),
            num(m.first_step_differs),
            num(m.first_step_out_of_tol),
            _steps(m),
            "timing" if m.timing else words(m.state),
        ]
        for m in metrics
    ]
    out = ["── metrics (final values; history aligned by step)"]
    out.append(
        table_(
            [
                "",
                "METRIC",
                "A",
                "B",
                "ABS DIFF",
                "REL DIFF",
                "IN TOL",
                "1ST DIFF",
                "LEAVES TOL",
                "STEPS",
                "JUDGED",
            ],
            rows,
        )
    )
    for m in metrics:
        for what in m.missing:
            out.append(f"  {m.name}: {what}")
    return out


def _steps(m: MetricDiff) -> str:
    if not m.has_history:
        return "-"
    text = str(m.steps_compared)
    if m.steps_only_a or m.steps_only_b:
        text += f" (+{m.steps_only_a} A only, +{m.steps_only_b} B only)"
    return text


def environment_text(env: EnvironmentDiff) -> list[str]:
    counts = env.counts()
    out = ["── environment (" + ", ".join(f"{counts[c]} {c}" for c in CLASS_ORDER) + " fields)"]
    for cls in CLASS_ORDER:
        if cls == "same":
            continue
        rows = env.of_class(cls)
        if not rows:
            continue
        out.append(f"  {CLASS_TITLES[cls]}:")
        shown: Sequence[EnvRow] = rows[:_EXPECTED_SHOWN] if cls == "expected" else rows
        out.append(
            table_(
                ["FIELD", "A", "B"],
                [[r.path, *value_pair(r.a, r.b, r.present_a, r.present_b)] for r in shown],
                indent="    ",
            )
        )
        if len(shown) < len(rows):
            out.append(f"    ... and {len(rows) - len(shown)} more")
    if env.packages is not None and not env.packages.same:
        out.append(f"  packages: {env.packages.summary()}")
    if not env.differing():
        out.append("  every field the same")
    return out


def gaps_text(c: Comparison) -> list[str]:
    counts = c.gap_counts
    head = (
        f"── pair gaps ({len(c.gaps)}); own gaps A {_counts(counts.get('a'))},"
        f" B {_counts(counts.get('b'))}"
    )
    out = [head]
    if not c.gaps:
        out.append("  none: nothing recorded explains a difference between these two runs")
    out.extend(gap_lines(c.gaps, indent="  ", fix=False))
    return out


def _counts(n: GapCounts | None) -> str:
    n = n or GapCounts()
    return f"{n.critical}c/{n.warning}w/{n.info}i"


def comparison_text(c: Comparison) -> str:
    """The whole report."""
    c = with_states(c)  # a body stored before states: the same rule, for showing
    lines = [banner(c), ""]
    if c.probable_causes:
        lines.append("probable cause (already in the manifests):")
        lines.extend(f"  - {x}" for x in c.probable_causes)
    if c.shared_causes:
        lines.append("shared by both runs (so not what tells them apart):")
        lines.extend(f"  - {x}" for x in c.shared_causes)
    if c.reasons:
        lines.append("why:")
        lines.extend(f"  - {r}" for r in c.reasons)
    if c.missing:
        lines.append("missing:")
        lines.extend(f"  - {m}" for m in c.missing)
    lines.append("")
    lines += artifacts_text(c.artifacts)
    lines.append("")
    lines += metrics_text(c.metrics)
    lines.append("")
    lines += environment_text(c.environment)
    lines.append("")
    lines += gaps_text(c)
    return "\n".join(lines)
