"""Compare any two runs and give the verdict (docs/architecture.md, "Compare").

- ``IDENTICAL``: every artifact's sha256 equal (or neither run has artifacts but both
  have metrics) and every metric bitwise equal, finals and histories.
- ``EQUIVALENT``: not identical, but every metric within tolerance and every differing
  checkpoint holds the same tensors or tensors within tolerance.  Other files whose
  bytes differ (logs, for instance) are reported but have no tolerance to judge by.
- ``WITHIN_NOISE``: a metric or tensor is outside tolerance, but a noise floor of the
  run's own replicas is stored and every endpoint of the candidate (the run of the pair
  that is not one of the replicas) lies within that noise (``compare/floor.py``,
  ``compare/noise_rule.py``, docs/noise.md): reproduced within this run's noise; not
  bit-identical.  Checkpoints that differ in keys, shapes or dtypes are never noise.
- ``DIVERGED``: a metric or a tensor is outside tolerance and outside the measured
  noise (or no noise was measured), or checkpoints differ in keys, shapes or dtypes.
- ``INCOMPLETE``: either run did not succeed, or something needed to compare is
  missing (an artifact or metric on one side only, an unhashed artifact, a checkpoint
  that cannot be found or opened, nothing to compare at all).

A stale artifact (listed by a run that did not write it) is no output of that run: stale
on both sides, or on one side and absent on the other, is a note, not a difference.

Precedence: a run that did not succeed makes the pair INCOMPLETE; otherwise a
divergence found in what could be compared wins over what is missing (it is a fact
whatever the rest shows); ``missing`` and ``reasons`` always list both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.compare.artifacts import ArtifactDiff, compare_artifacts
from replay_tui.compare.environment import EnvironmentDiff, compare_environment
from replay_tui.compare.floor import FloorRef
from replay_tui.compare.metrics import MetricDiff, compare_metrics
from replay_tui.compare.noise_results import NoiseJudgement
from replay_tui.compare.states import assign_states
from replay_tui.compare.tolerance import DEFAULT_ALPHA, DEFAULT_ATOL, DEFAULT_RTOL, TOLERANCE_RULE
from replay_tui.door import glob_match, glob_parts
from replay_tui.gaps import Gap, evaluate, evaluate_pair, probable_causes, shared_causes
from replay_tui.verdicts import DIVERGED_NO_FLOOR, MEANING, verdict_exit
from replay_tui.verdicts import VERDICTS as VERDICTS
from replay_tui.verdicts import Verdict as Verdict
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.records import GapCounts
from storage.wire import Wire, wire

if TYPE_CHECKING:
    from replay_tui.compare.floor import NoiseContext
    from replay_tui.compare.tensors import TensorDiff

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "TOLERANCE_RULE",
    "VERDICTS",
    "Comparison",
    "Verdict",
    "compare_runs",
    "json_safe",
]
COMPARISON_VERSION = 1

_MAX_TENSOR_REASONS = 5


def _gap_rows(gaps: tuple[Gap, ...]) -> list[dict[str, str]]:
    return [g.to_dict() for g in gaps]


def _read_gaps(v: object, where: str) -> tuple[Gap, ...]:
    if not isinstance(v, list):
        raise ValueError(f"{where}: expected a list, got {type(v).__name__}")
    out = []
    for i, g in enumerate(v):
        if not isinstance(g, Mapping):
            raise ValueError(f"{where}[{i}]: expected an object, got {type(g).__name__}")
        try:
            out.append(Gap(**g))
        except TypeError as e:
            raise ValueError(f"{where}[{i}]: {e}") from None
    return tuple(out)


def _counts_by_side(counts: dict[str, GapCounts]) -> dict[str, Any]:
    return {side: n.to_dict() for side, n in counts.items()}


def _read_counts(v: object, where: str) -> dict[str, GapCounts]:
    if not isinstance(v, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(v).__name__}")
    return {str(side): GapCounts.from_dict(n) for side, n in v.items() if isinstance(n, Mapping)}


@dataclass(frozen=True)
class Comparison(Wire):
    """The result of comparing run A with run B.  ``to_dict()`` is strict JSON; a stored
    one reads back with ``replay_tui.compare.stored.comparison_from_dict`` (which reads
    every body ever stored, leniently)."""

    WIRE_EXTRA = ("version", "exit_code", "tolerance_rule")
    WIRE_ORDER = (
        "version",
        "a_run",
        "b_run",
        "a_status",
        "b_status",
        "b_replays_a",
        "verdict",
        "exit_code",
        "rtol",
        "atol",
        "alpha",
        "margin",
        "tolerance_rule",
        "reasons",
        "probable_causes",
        "missing",
        "artifacts",
        "metrics",
        "environment",
        "gaps",
        "gap_counts",
        "shared_causes",
        "noise",
        "floor",
    )

    a_run: str
    b_run: str
    verdict: Verdict
    reasons: tuple[str, ...]
    missing: tuple[str, ...]
    artifacts: tuple[ArtifactDiff, ...]
    metrics: tuple[MetricDiff, ...]
    environment: EnvironmentDiff
    gaps: tuple[Gap, ...] = field(metadata=wire(encode=_gap_rows, decode=_read_gaps))
    gap_counts: dict[str, GapCounts] = field(
        metadata=wire(encode=_counts_by_side, decode=_read_counts)
    )
    """Each side's own gaps (``a``, ``b``) and the pair's (``pair``), counted by severity."""
    rtol: float
    atol: float
    a_status: str = "succeeded"
    b_status: str = "succeeded"
    b_replays_a: bool = False
    probable_causes: tuple[str, ...] = ()
    """For a divergence: what the manifests already explain it by (the pair's critical
    gaps, then A's own gaps such as no seed recorded)."""
    alpha: float = DEFAULT_ALPHA
    margin: float | None = None
    noise: NoiseJudgement | None = field(default=None, metadata=wire(omit="none"))
    """The candidate judged against the stored noise floor (only when the pair was beyond
    the tolerance and a floor speaks for it)."""
    floor: FloorRef | None = None
    """Which floor judged it, and the side that was the candidate (``compare.floor``);
    written beside the judgement only (``null`` there when none is known)."""
    shared_causes: tuple[str, ...] = field(default=(), metadata=wire(omit="empty"))
    """For a divergence: gaps both runs share (deterministic mode off in both...): they
    do not tell the two apart, so they are listed as shared, not as a probable cause."""

    @property
    def version(self) -> int:
        """The stored form's version."""
        return COMPARISON_VERSION

    @property
    def tolerance_rule(self) -> str:
        return TOLERANCE_RULE

    @property
    def exit_code(self) -> int:
        """0 when reproduced (``storage.vocabulary.REPRODUCED``), 1 otherwise."""
        return verdict_exit(self.verdict)

    @property
    def reproduced(self) -> bool:
        return self.exit_code == 0

    @property
    def headline(self) -> str:
        """The verdict in words for a banner: what it means, and for a pair not
        reproduced, its first reason in the words of the reasons list."""
        meaning = MEANING.get(self.verdict, "")
        if self.verdict == "DIVERGED" and self.floor is None:
            meaning = DIVERGED_NO_FLOOR
        if self.verdict in ("DIVERGED", "INCOMPLETE") and self.reasons:
            return f"{meaning.split(':')[0]}: {self.reasons[0]}"
        return meaning

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        if self.noise is None:
            del body["floor"]  # a floor is named beside the judgement it made, never alone
        return body


def json_safe(value: Any) -> Any:
    """A copy with NaN and infinities as strings (strict JSON, RFC 8785) and tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _severity_counts(gaps: list[Gap]) -> GapCounts:
    return GapCounts(
        critical=sum(g.severity == "critical" for g in gaps),
        warning=sum(g.severity == "warning" for g in gaps),
        info=sum(g.severity == "info" for g in gaps),
    )


# --------------------------------------------------------------------------- findings


@dataclass
class _Findings:
    divergent: list[str]
    missing: list[str]
    notes: list[str]


def volatile_globs(a: RunManifest, b: RunManifest) -> tuple[str, ...]:
    """The globs either run declared volatile at record time (a replay records its
    original's), in order, each once."""
    out: list[str] = []
    for m in (a, b):
        for g in m.capture.volatile_globs if m.capture else ():
            if g not in out:
                out.append(g)
    return tuple(out)


def mark_volatile(arts: tuple[ArtifactDiff, ...], globs: Sequence[str]) -> tuple[ArtifactDiff, ...]:
    """``arts`` with each differing path that a volatile glob names marked with it (the
    one glob matcher of ``--artifact``, ``replay_tui.door.glob_match``)."""
    if not globs:
        return arts
    parsed = [(g, p) for g in globs if (p := glob_parts(g)) is not None]
    out = []
    for x in arts:
        parts = glob_parts(x.path) or ()
        hit = next((g for g, p in parsed if glob_match(parts, p)), None)
        out.append(replace(x, volatile=hit) if hit is not None else x)
    return tuple(out)


def _artifact_findings(arts: tuple[ArtifactDiff, ...], f: _Findings) -> None:
    for x in arts:
        if x.volatile is not None and x.status in ("differs", "only_a", "only_b"):
            f.notes.append(
                f"file {x.path} {_volatile_state(x)}; declared volatile at record time"
                f" (--volatile {x.volatile}): listed, not judged"
            )
            continue
        if x.status == "stale":
            f.notes.append(x.note or f"artifact {x.path} was written by neither run (stale)")
        elif x.status in ("only_a", "only_b") and (x.stale_a or x.stale_b):
            f.missing.append(f"artifact {x.note}")
        elif x.status == "only_a":
            f.missing.append(f"artifact {x.path} is in A but not in B")
        elif x.status == "only_b":
            f.missing.append(f"artifact {x.path} is in B but not in A")
        elif x.status == "unhashed":
            f.missing.append(f"artifact {x.error or x.path + ' is unhashed'}")
        elif x.status == "differs" and x.checkpoint is None and "file" not in (x.kind_a, x.kind_b):
            f.notes.append(
                f"{x.kind_b or x.kind_a} {x.path} differs"
                f" ({(x.sha256_a or '')[:12]} vs {(x.sha256_b or '')[:12]}); a"
                f" {x.kind_b or x.kind_a} is judged by what it holds (metrics by value), not"
                " its bytes"
            )
        elif x.status == "differs" and x.checkpoint is None:
            f.divergent.append(
                f"file {x.path} differs ({(x.sha256_a or '')[:12]} vs {(x.sha256_b or '')[:12]}):"
                " a declared output is judged by its bytes unless the run declared it"
                " volatile (record --volatile GLOB)"
            )
        elif x.checkpoint == "unavailable":
            f.missing.append(f"checkpoint {x.path} could not be compared: {x.error}")
        elif x.checkpoint == "same_tensors":
            f.notes.append(f"checkpoint {x.path}: {x.note}")
        elif x.checkpoint == "close":
            worst = x.tensors.worst[0] if x.tensors and x.tensors.worst else None
            detail = (
                f"; largest: {worst.name} max abs {_g(worst.max_abs_diff)},"
                f" rel L2 {_g(worst.rel_l2)}"
                if worst
                else ""
            )
            f.notes.append(f"checkpoint {x.path}: {x.note}{detail}")
        elif x.checkpoint == "out_of_tolerance" and x.tensors is not None:
            f.divergent.extend(_tensor_reasons(x))


def _volatile_state(x: ArtifactDiff) -> str:
    if x.status == "only_a":
        return "is in A only"
    if x.status == "only_b":
        return "is in B only"
    return f"differs ({(x.sha256_a or '')[:12]} vs {(x.sha256_b or '')[:12]})"


def _badness(t: TensorDiff) -> tuple[int, float]:
    """Sort key: type and shape mismatches first, then by max abs diff (NaN as worst)."""
    if t.max_abs_diff is None:
        return (1, 0.0)
    return (0, math.inf if math.isnan(t.max_abs_diff) else t.max_abs_diff)


def _tensor_reasons(x: ArtifactDiff) -> list[str]:
    d = x.tensors
    assert d is not None
    out = [f"checkpoint {x.path}: {x.note}"]
    bad = [t for t in d.tensors if not t.within_tolerance and t.status not in ("only_a", "only_b")]
    bad.sort(key=_badness, reverse=True)
    for t in bad[:_MAX_TENSOR_REASONS]:
        if t.status == "shape_mismatch":
            out.append(
                f"tensor {t.name} shape differs: {list(t.shape_a or ())} vs {list(t.shape_b or ())}"
            )
        elif t.status == "dtype_mismatch" and t.max_abs_diff is None:
            out.append(f"tensor {t.name} type differs: {t.dtype_a} vs {t.dtype_b}")
        else:
            kind = f" ({t.dtype_a} vs {t.dtype_b})" if t.dtype_a != t.dtype_b else ""
            out.append(
                f"tensor {t.name} differs{kind}: max abs {_g(t.max_abs_diff)},"
                f" rel L2 {_g(t.rel_l2)}, {t.n_unequal} of {t.numel} elements unequal"
            )
    if len(bad) > _MAX_TENSOR_REASONS:
        out.append(f"... and {len(bad) - _MAX_TENSOR_REASONS} more tensor(s) outside tolerance")
    if d.only_a:
        out.append(f"keys only in A: {', '.join(d.only_a[:_MAX_TENSOR_REASONS])}")
    if d.only_b:
        out.append(f"keys only in B: {', '.join(d.only_b[:_MAX_TENSOR_REASONS])}")
    return out


def _metric_findings(metrics: tuple[MetricDiff, ...], f: _Findings) -> None:
    for m in metrics:
        if m.timing:
            if not m.bitwise_equal:
                f.notes.append(f"timing metric {m.name} differs (not judged: it measures speed)")
            continue
        f.missing.extend(f"metric {m.name}: {what}" for what in m.missing)
        if m.within_tol and m.bitwise_equal:
            continue
        if m.first_step_out_of_tol is not None:
            same = m.first_step_differs == m.first_step_out_of_tol
            where = "there" if same else f"at step {m.first_step_out_of_tol}"
            f.divergent.append(
                f"metric {m.name} first differs at step {m.first_step_differs}, leaves"
                f" tolerance {where} ({m.a_at_out_of_tol!r} vs {m.b_at_out_of_tol!r})"
            )
        if m.final_within_tol is False:
            f.divergent.append(
                f"metric {m.name} final value {m.a!r} vs {m.b!r}: abs diff {_g(m.abs_diff)},"
                f" rel diff {_g(m.rel_diff)}"
            )
        if m.within_tol:
            where = f" from step {m.first_step_differs}" if m.first_step_differs is not None else ""
            if m.first_step_differs is not None or m.final_bitwise_equal is False:
                f.notes.append(
                    f"metric {m.name} differs{where} but stays within tolerance"
                    + (f" (final abs diff {_g(m.abs_diff)})" if m.abs_diff else "")
                )


# --------------------------------------------------------------------------- compare


def compare_runs(
    a: RunManifest,
    b: RunManifest,
    *,
    objects: ObjectStore | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    files_a: Mapping[str, str | Path] | None = None,
    files_b: Mapping[str, str | Path] | None = None,
    noise: NoiseContext | None = None,
) -> Comparison:
    """Compare run A (the reference, e.g. the original) with run B; see the module doc.

    Checkpoint files are looked up in ``objects`` by sha256, or in ``files_a`` /
    ``files_b`` (artifact path -> local file), which win.  ``noise`` (from
    ``compare.floor.noise_context``) judges what is beyond the tolerance against a stored
    noise floor.
    """
    if not (math.isfinite(rtol) and math.isfinite(atol)) or rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be finite and >= 0 (got {rtol}, {atol})")
    arts = compare_artifacts(
        a.outputs.artifacts,
        b.outputs.artifacts,
        objects=objects,
        files_a=files_a,
        files_b=files_b,
        rtol=rtol,
        atol=atol,
    )
    mets = compare_metrics(
        a.outputs.metrics,
        b.outputs.metrics,
        a.outputs.metric_history,
        b.outputs.metric_history,
        rtol=rtol,
        atol=atol,
    )
    volatile = volatile_globs(a, b)
    arts = mark_volatile(arts, volatile)
    f = _Findings([], [], [])
    failed: list[str] = []
    for side, m in (("A", a), ("B", b)):
        if m.status != "succeeded":
            failed.append(
                f"run {side} ({m.run_id}) {m.status.replace('_', ' ')}"
                f" (exit code {m.exit_code}): its outputs are not final"
            )
    f.missing.extend(failed)
    _artifact_findings(arts, f)
    _metric_findings(mets, f)
    judged = [m for m in mets if not m.timing]
    outputs = [x for x in arts if x.status != "stale"]  # a stale file is neither run's output
    if not outputs and not judged:
        f.missing.append("nothing to compare: neither run recorded artifacts or metrics")

    identical = (
        not f.missing
        and all(x.status == "match" for x in outputs)
        and all(m.bitwise_equal for m in judged)
    )
    verdict: Verdict
    if failed:
        verdict, reasons = "INCOMPLETE", f.missing + f.divergent + f.notes
    elif f.divergent:
        verdict, reasons = "DIVERGED", f.divergent + f.missing + f.notes
    elif f.missing:
        verdict, reasons = "INCOMPLETE", f.missing + f.notes
    elif identical:
        verdict, reasons = "IDENTICAL", _identical_reasons(outputs, judged) + f.notes
    else:
        verdict, reasons = "EQUIVALENT", f.notes
    own_a, own_b = evaluate(a), evaluate(b)
    pair = evaluate_pair(a, b)
    judgement: NoiseJudgement | None = None
    floor_ref: FloorRef | None = None
    if verdict == "DIVERGED" and noise is not None:
        judgement = noise.judge(a if noise.candidate == "a" else b)
        floor_ref = noise.ref()
        verdict, reasons = _noise_verdict(judgement, noise, arts, f)
        pair = [*pair, *_too_wide_gaps(judgement, noise), *_unrelated(noise)]
    arts, mets, judgement = assign_states(arts, mets, judgement)
    causes = probable_causes(own_a, pair, own_b) if verdict == "DIVERGED" else []
    shared = shared_causes(own_a, own_b) if verdict == "DIVERGED" else []
    if verdict == "DIVERGED":
        reasons = _lead_with_artifact_sets(arts, reasons)
    return Comparison(
        a_run=a.run_id,
        b_run=b.run_id,
        verdict=verdict,
        reasons=tuple(reasons),
        missing=tuple(f.missing),
        artifacts=arts,
        metrics=mets,
        environment=compare_environment(a, b),
        gaps=tuple(pair),
        gap_counts={
            "a": _severity_counts(own_a),
            "b": _severity_counts(own_b),
            "pair": _severity_counts(pair),
        },
        rtol=rtol,
        atol=atol,
        a_status=a.status,
        b_status=b.status,
        b_replays_a=b.replay_of == a.run_id,
        probable_causes=tuple(causes),
        shared_causes=tuple(shared),
        alpha=noise.params.alpha if noise is not None else DEFAULT_ALPHA,
        margin=noise.params.margin if noise is not None else None,
        noise=judgement,
        floor=floor_ref,
    )


def _lead_with_artifact_sets(arts: tuple[ArtifactDiff, ...], reasons: list[str]) -> list[str]:
    """``reasons`` led by what the two runs' sets of artifacts differ by, when they do (a
    file written by one run only is the plainest cause of a divergence there is)."""
    only_a = [x.path for x in arts if x.status == "only_a" and x.volatile is None]
    only_b = [x.path for x in arts if x.status == "only_b" and x.volatile is None]
    if not (only_a or only_b):
        return reasons
    parts = []
    for side, paths in (("A", only_a), ("B", only_b)):
        if paths:
            shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            parts.append(f"{len(paths)} in {side} only ({shown})")
    return [f"the two runs' sets of artifacts differ: {'; '.join(parts)}", *reasons]


def _structural(arts: tuple[ArtifactDiff, ...]) -> list[str]:
    """Differences no noise explains: a declared file's bytes, a checkpoint's keys on one
    side, other shapes or types."""
    out = []
    for x in arts:
        if (
            x.status == "differs"
            and x.checkpoint is None
            and x.volatile is None
            and "file" in (x.kind_a, x.kind_b)
        ):
            out.append(f"file {x.path}: a declared output's bytes differ")
        d = x.tensors
        if d is None or x.checkpoint != "out_of_tolerance":
            continue
        if d.only_a or d.only_b:
            out.append(f"checkpoint {x.path}: its tensors are not the same set")
        bad = [t.name for t in d.tensors if t.status in ("shape_mismatch", "dtype_mismatch")]
        if bad:
            out.append(f"checkpoint {x.path}: {len(bad)} tensor(s) of another shape or type")
    return out


def _noise_verdict(
    j: NoiseJudgement, noise: NoiseContext, arts: tuple[ArtifactDiff, ...], f: _Findings
) -> tuple[Verdict, list[str]]:
    """WITHIN_NOISE or DIVERGED for a pair beyond the tolerance, and why."""
    side = "A" if noise.candidate == "a" else "B"
    st = noise.stored
    head = (
        f"judged against noise floor #{st.fact_id} of {st.run_id} ({st.floor.k} replicas,"
        f" measured {st.created_at}; run {side} is the candidate"
        + ("; it is one of the replicas, so the judgement is lenient" if noise.in_sample else "")
        + ")"
    )
    beyond = [f"within noise, beyond the fixed tolerance only: {r}" for r in f.divergent]
    structural = _structural(arts)
    if j.within and not structural and not f.missing:
        return "WITHIN_NOISE", [
            head,
            *j.reasons,
            *beyond,
            *f.notes,
        ]
    # The first reason is why it is DIVERGED (the faces' headline states it): what no
    # noise explains, or what is missing, before the noise rule's own words.
    why = list(j.reasons)
    if not j.within and j.status != "OUTSIDE_NOISE":
        why.append(f"the noise rule could not judge: {j.status.replace('_', ' ').lower()}")
    blockers = [*structural, *f.missing]
    if structural:
        blockers.insert(len(structural), "(a difference in structure is never noise)")
    if blockers:
        return "DIVERGED", [*blockers, head, *why, *f.divergent, *f.notes]
    return "DIVERGED", [*why[:1], head, *why[1:], *f.divergent, *f.notes]


def _unrelated(noise: NoiseContext) -> tuple[Gap, ...]:
    """FLOOR_REPLICAS_UNRELATED when the floor's replicas are unrelated draws."""
    from replay_tui.compare.floor import unrelated_gap

    gap = unrelated_gap(noise.stored.floor)
    return (gap,) if gap is not None else ()


def _too_wide_gaps(j: NoiseJudgement, noise: NoiseContext) -> tuple[Gap, ...]:
    """NOISE_TOO_WIDE: the floor's band is wider than the margin the user declared, so a
    pass within it means little."""
    seen: set[str] = set()
    out = []
    for w in j.too_wide:
        if w.metric in seen:
            continue
        seen.add(w.metric)
        out.append(
            Gap(
                "NOISE_TOO_WIDE",
                "warning",
                f"outputs.metrics.{w.metric}",
                f"the noise band of {w.metric} is ±{w.relative_width:.3%} of its value,"
                f" wider than the declared margin {w.margin:.3%}: a pass within this noise"
                " says little",
                "reduce the run's nondeterminism (deterministic algorithms, fixed reduction"
                " order), or measure the floor with more replicas",
            )
        )
    return tuple(out)


def _identical_reasons(arts: list[ArtifactDiff], judged: list[MetricDiff]) -> list[str]:
    out = []
    if arts:
        out.append(f"all {len(arts)} artifact(s) have the same sha256")
    if judged:
        steps = sum(m.steps_compared for m in judged)
        out.append(
            f"all {len(judged)} metric(s) bitwise equal"
            + (f" ({steps} history point(s))" if steps else "")
        )
    return out
