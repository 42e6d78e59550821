"""How far apart two runs are, GOOD's noise floor, and what a probe behaves like.

The distance between two runs is two numbers: the largest gap between their metrics
(finals and every history step both logged; timing metrics are left out, they measure
the machine) and the largest relative L2 between the tensors of their checkpoints
(0 when the files are byte-identical).  GOOD's noise floor is the largest distance
between any two of: GOOD as recorded and its ``--times N`` replays.

A probe behaves like BAD when it is further from GOOD than the noise floor and within
it of BAD (or within the comparison's tolerance of BAD); like GOOD the other way round.
Each side's answer is a :class:`Closeness` (near or far, and what said so: bit-identical,
within tolerance, within or outside the noise rule's band, within or beyond twice the
largest distance among GOOD's runs, the same or another exit status), and
:func:`conclude` is the one rule from the two closenesses to the behaviour: the evidence
table shows the closenesses, so its columns always say why the probe behaves as it does.
When GOOD and BAD are not clearly further apart than the noise floor (``MARGIN`` times
it), nothing can be attributed: the run is not reproducible enough.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

from replay_tui.compare.comparison import Comparison, compare_runs
from replay_tui.compare.distance import metric_gap, weight_rel_l2
from replay_tui.compare.noise_floor_model import NoiseFloor as RuleFloor
from replay_tui.compare.noise_rule import judge as rule_judge
from replay_tui.verdicts import is_reproduced
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.wire import Wire, wire

MARGIN = 10.0
"""GOOD and BAD must be this many times further apart than GOOD's noise floor."""
NEAR = 2.0
"""A probe is near a run when it lies within this many times GOOD's noise floor of it.
The floor is the largest distance among GOOD's K + 1 runs, and a fresh run of the same
distribution falls beyond that largest distance with a probability near 2 / (K + 2):
taken as it is, a probe that does behave like BAD would read "neither" one time in three
(docs/noise.md).  Widening it 2×, as Megatron-LM's golden values widen their observed
spread 1.5-3×, keeps that rare while GOOD and BAD stay ``MARGIN`` floors apart."""

Behaviour = Literal["BAD", "GOOD", "neither", "failed"]


def _number(v: object, where: str) -> float:
    """A distance as it was written: a number as it is (an int stays an int, so that it
    writes back the same), or a non-finite one as a string ("nan", "inf", "-inf")."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    raise ValueError(f"{where}: expected a number, got {v!r}")


@dataclass(frozen=True)
class Distance(Wire):
    metric_gap: float = field(metadata=wire(decode=_number))
    weight_rel_l2: float = field(metadata=wire(decode=_number))

    def within(self, floor: Distance) -> bool:
        return self.metric_gap <= floor.metric_gap and self.weight_rel_l2 <= floor.weight_rel_l2

    def beyond(self, floor: Distance, margin: float = 1.0) -> bool:
        return (
            self.metric_gap > margin * floor.metric_gap
            or self.weight_rel_l2 > margin * floor.weight_rel_l2
        )


ZERO = Distance(0.0, 0.0)


def compared_weight_rel_l2(cmp: Comparison) -> float | None:
    """The largest relative L2 over the tensors ``cmp`` compared (what ``compare`` of
    the pair reports), or None when it compared no tensors."""
    found = [
        t.rel_l2
        for x in cmp.artifacts
        if x.tensors is not None
        for t in x.tensors.tensors
        if isinstance(t.rel_l2, int | float)
    ]
    return max(found) if found else None


def distance(a: RunManifest, b: RunManifest, objects: ObjectStore | None) -> Distance:
    return Distance(metric_gap(a, b), weight_rel_l2(a, b, objects))


@dataclass(frozen=True)
class NoiseFloor:
    """The spread of GOOD over its recorded run and its replays (the answer keeps
    ``runs``, ``floor`` and ``identical``: ``verdict.FloorSummary``)."""

    runs: int
    floor: Distance
    identical: bool  # every replay bit-identical to GOOD as recorded
    replay_runs: tuple[str, ...] = ()
    near_good: RuleFloor | None = None
    """GOOD's runs as the noise rule's floor (``compare.noise_rule``): a probe within it
    behaves like GOOD.  None when every run was bit-identical (then only the exact
    distances speak)."""
    near_bad: RuleFloor | None = None
    """The same spread centred on BAD (each of GOOD's runs moved by BAD - GOOD, metric by
    metric and step by step): a probe within it behaves like BAD."""


def noise_floor(
    good: RunManifest,
    replicas: list[RunManifest],
    objects: ObjectStore | None,
    bad: RunManifest | None = None,
) -> NoiseFloor:
    runs = [good, *replicas]
    gap, l2 = 0.0, 0.0
    for a, b in itertools.combinations(runs, 2):
        d = distance(a, b, objects)
        gap, l2 = max(gap, d.metric_gap), max(l2, d.weight_rel_l2)
    key = {tuple(sorted((x.path, x.sha256) for x in good.outputs.artifacts))}
    same = all(
        tuple(sorted((x.path, x.sha256) for x in r.outputs.artifacts)) in key for r in replicas
    )
    identical = same and gap == 0.0
    return NoiseFloor(
        len(runs),
        Distance(gap, l2),
        identical,
        tuple(r.run_id for r in replicas),
        near_good=None if identical else _rule_floor(runs),
        near_bad=None if identical or bad is None else _rule_floor(runs, good, bad),
    )


def _rule_floor(
    runs: list[RunManifest], good: RunManifest | None = None, bad: RunManifest | None = None
) -> RuleFloor | None:
    """The noise rule's floor of ``runs``; moved by BAD - GOOD when both are given."""
    hist: list[dict[str, list[tuple[int, float]]]] = [
        {k: [(int(st), float(v)) for st, v in pts] for k, pts in r.outputs.metric_history.items()}
        for r in runs
    ]
    fin = [dict(r.outputs.metrics) for r in runs]
    if good is not None and bad is not None:
        shift_f = {
            k: bad.outputs.metrics[k] - v
            for k, v in good.outputs.metrics.items()
            if k in bad.outputs.metrics
        }
        shift_h: dict[str, dict[int, float]] = {}
        for k, pts in good.outputs.metric_history.items():
            at_bad = {int(st): v for st, v in bad.outputs.metric_history.get(k, [])}
            shift_h[k] = {int(st): at_bad[int(st)] - v for st, v in pts if int(st) in at_bad}
        hist = [
            {
                k: [(st, v + shift_h[k][st]) for st, v in pts if st in shift_h.get(k, {})]
                for k, pts in h.items()
            }
            for h in hist
        ]
        fin = [{k: v + shift_f[k] for k, v in f.items() if k in shift_f} for f in fin]
    try:
        return RuleFloor.from_replicas(hist, fin)
    except ValueError:  # nothing the rule can judge: the distances speak alone
        return None


def first_divergent_step(cmp: Comparison) -> int | None:
    steps = [
        m.first_step_differs
        for m in cmp.metrics
        if not m.timing and m.first_step_differs is not None
    ]
    return min(steps) if steps else None


@dataclass(frozen=True)
class Judgement:
    """What a probe behaves like, and why (the answer keeps its verdicts, distances and
    first divergent step vs GOOD: ``verdict.ProbeJudgement``)."""

    behaves: Behaviour
    vs_good: str  # comparison verdict (within the fixed tolerance)
    vs_bad: str
    d_good: Distance
    d_bad: Distance
    first_divergent_step: int | None  # vs GOOD
    first_divergent_step_bad: int | None  # vs BAD
    near_good: Closeness | None = None  # how it stands against GOOD, and why
    near_bad: Closeness | None = None


def _basis(v: object, where: str) -> str:
    """What decided a closeness, as written; anything else reads as "" (a damaged body
    still opens)."""
    return str(v or "")


def _step_or_none(v: object, where: str) -> int | None:
    """A step as written; anything but a whole number reads as None (a damaged body still
    opens)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Closeness(Wire):
    """How a probe stands against one run (GOOD or BAD): near or far, what decided it
    (``basis``), and for a far one the first step where its metrics leave that run's
    (None: not known, or no metric history)."""

    near: bool
    basis: str = field(default="", metadata=wire(decode=_basis))
    step: int | None = field(default=None, metadata=wire(decode=_step_or_none))

    def label(self) -> str:
        """``near: within noise``, ``far: beyond 2x floor``: the table's cell."""
        return ("near: " if self.near else "far: ") + self.basis


_REPRODUCED_BASIS = {"IDENTICAL": "identical", "EQUIVALENT": "within tolerance"}


def conclude(succeeded: bool, good: Closeness, bad: Closeness) -> Behaviour:
    """The one rule from a probe's two closenesses to what it behaves like: BAD when near
    BAD and far from GOOD; else a probe that did not succeed is ``failed``; else GOOD when
    near GOOD (near both: nothing moved it off GOOD); else ``neither``."""
    if bad.near and not good.near:
        return "BAD"
    if not succeeded:
        return "failed"
    return "GOOD" if good.near else "neither"


def _close(
    cmp: Comparison, d: Distance, floor: Distance, rule: RuleFloor | None, probe: RunManifest
) -> Closeness:
    """Near: the comparison reproduced, or the probe lies within the run's noise by the
    noise rule (endpoints in the prediction interval of GOOD's runs, moved to the run in
    question), or, where the rule cannot judge, within ``NEAR`` times the largest
    distance among GOOD's runs."""
    step = first_divergent_step(cmp)
    if is_reproduced(cmp.verdict):
        return Closeness(True, _REPRODUCED_BASIS.get(cmp.verdict, "within noise"))
    if rule is not None:
        j = rule_judge(rule, dict(probe.outputs.metric_history), dict(probe.outputs.metrics))
        if j.status in ("WITHIN_NOISE", "OUTSIDE_NOISE"):
            if j.within:
                return Closeness(True, "within noise")
            exits = [b.leaves_band_at for b in j.bands if b.leaves_band_at is not None]
            return Closeness(False, "outside noise", min(exits) if exits else step)
    if floor == ZERO:  # GOOD's runs were bit-identical: any distance is far
        if d.within(ZERO):
            return Closeness(True, "no distance")
        return Closeness(False, "not identical", step)
    near = Distance(NEAR * floor.metric_gap, NEAR * floor.weight_rel_l2)
    if d.within(near):
        return Closeness(True, f"within {NEAR:g}x floor")
    return Closeness(False, f"beyond {NEAR:g}x floor", step)


def _by_status(probe: RunManifest, run: RunManifest, cmp: Comparison) -> Closeness:
    """A probe that did not succeed against one run: near when that run ended the same."""
    if run.status == probe.status:
        return Closeness(True, f"{probe.status} too")
    return Closeness(False, f"{probe.status}, not {run.status}", first_divergent_step(cmp))


def judge(
    probe: RunManifest,
    good: RunManifest,
    bad: RunManifest,
    floor: NoiseFloor,
    objects: ObjectStore | None,
    *,
    rtol: float,
    atol: float,
) -> Judgement:
    """What ``probe`` (a replay manifest) behaves like: GOOD, BAD, neither, or failed."""
    cg = compare_runs(good, probe, objects=objects, rtol=rtol, atol=atol)
    cb = compare_runs(bad, probe, objects=objects, rtol=rtol, atol=atol)
    dg, db = distance(good, probe, objects), distance(bad, probe, objects)
    succeeded = probe.status == "succeeded"
    if succeeded:
        near_good = _close(cg, dg, floor.floor, floor.near_good, probe)
        near_bad = _close(cb, db, floor.floor, floor.near_bad, probe)
    else:
        near_good, near_bad = _by_status(probe, good, cg), _by_status(probe, bad, cb)
    return Judgement(
        conclude(succeeded, near_good, near_bad),
        cg.verdict,
        cb.verdict,
        dg,
        db,
        first_divergent_step(cg),
        first_divergent_step(cb),
        near_good,
        near_bad,
    )
