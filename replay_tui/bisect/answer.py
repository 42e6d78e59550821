"""The answer of a bisect: a sentence, the evidence table, the blamed factor's
environment diff, and the same as strict JSON (``to_dict``; a stored one reads back
into the same :class:`BisectResult` with ``from_json``).

Every row of the answer is a small frozen dataclass (:class:`DifferingFactor`,
:class:`Untestable`, :class:`EnvChange`, :class:`FloorSummary`, :class:`GoodVsBad`,
:class:`ProbeJudgement`) whose ``to_dict`` writes the row as the JSON has always held it
and whose ``from_json`` reads it back (what is missing or of another type reads as the
default).

Exit codes: 0 a cause was found, 1 unexplained, 2 bad input, 3 infrastructure failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from replay_tui.bisect.noise import Closeness, Distance
from storage.manifest import JSONValue

BISECT_VERSION = 1

Outcome = Literal["cause", "unexplained"]

_NOUN = {
    "code": "code",
    "image": "image",
    "data": "data",
    "config": "config (command line)",
    "topology": "launch topology",
    "seed": "seed",
    "determinism": "determinism settings",
    "environment": "environment variables",
}
_HARMLESS = {
    "code": "the code change between the two commits",
    "image": "the image change",
    "data": "the data change",
    "config": "the config change",
    "topology": "the topology change",
    "seed": "the seed change",
    "determinism": "the determinism settings change",
    "environment": "the environment variables change",
}


def noun(factor: str) -> str:
    return _NOUN.get(factor, factor)


def _join(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


# -- reading JSON back -----------------------------------------------------------------


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _strs(v: Any) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _rows_of(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def _rows(v: Any) -> list[Mapping[str, Any]]:
    return [x for x in v if isinstance(x, Mapping)] if isinstance(v, list) else []


def _whole(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    """A number as ``to_dict`` wrote it: as it is (an int stays an int, so it writes back
    the same), or a non-finite one as ``json_safe`` spells it ("nan", "inf", "-inf")."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    return None


def _distance(d: Mapping[str, Any]) -> Distance | None:
    """``metric_gap`` and ``weight_rel_l2`` of ``d`` (``Distance.to_dict``); None when
    either is not a number."""
    gap, l2 = _num(d.get("metric_gap")), _num(d.get("weight_rel_l2"))
    return None if gap is None or l2 is None else Distance(gap, l2)


def _distance_at(v: Any) -> Distance | None:
    return _distance(v) if isinstance(v, Mapping) else None


def _sha(v: Any) -> str | None:
    """A blob's name as a body holds it: 64 lowercase hex digits, else None."""
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return v
    return None


# -- the rows of the answer --------------------------------------------------------------


@dataclass(frozen=True)
class DifferingFactor:
    """A factor that differs between GOOD and BAD (``factors.FactorDiff`` as the answer
    keeps it): how, and whether it could be tested here."""

    factor: str
    detail: tuple[str, ...]
    testable: bool
    reason: str | None = None  # why it is untestable

    def to_dict(self) -> dict[str, Any]:
        return {
            "factor": self.factor,
            "detail": list(self.detail),
            "testable": self.testable,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DifferingFactor | None:
        """None when ``d`` names no factor."""
        factor = d.get("factor")
        if not isinstance(factor, str):
            return None
        testable = d.get("testable")
        return cls(factor, tuple(_strs(d.get("detail"))), testable is True, _text(d.get("reason")))


@dataclass(frozen=True)
class Untestable:
    """A factor that differs but could not be tested here, and why."""

    factor: str
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "reason": self.reason}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Untestable | None:
        """None when ``d`` names no factor."""
        factor = d.get("factor")
        return cls(factor, _text(d.get("reason"))) if isinstance(factor, str) else None


@dataclass(frozen=True)
class EnvChange:
    """One thing that differs inside a blamed factor, GOOD -> BAD.  ``good`` and ``bad``
    are the values as recorded (a manifest field's JSON: text, a number, a list...)."""

    factor: str
    what: str
    good: JSONValue
    bad: JSONValue

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "what": self.what, "good": self.good, "bad": self.bad}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EnvChange:
        return cls(
            str(d.get("factor") or ""), str(d.get("what") or ""), d.get("good"), d.get("bad")
        )


@dataclass(frozen=True)
class FloorSummary:
    """GOOD's noise floor as the answer keeps it (``noise.NoiseFloor`` without its
    replays' ids and the noise rule's floors): over how many runs, the largest distance
    among them, and whether every replay was bit-identical."""

    runs: int  # GOOD as recorded and its replays
    floor: Distance
    identical: bool

    @property
    def replays(self) -> int:
        return self.runs - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "replays": self.replays,
            **self.floor.to_dict(),
            "identical": self.identical,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FloorSummary | None:
        """None when ``d`` holds no distance."""
        floor = _distance(d)
        if floor is None:
            return None
        return cls(_whole(d.get("runs")) or 0, floor, d.get("identical") is True)


@dataclass(frozen=True)
class GoodVsBad:
    """GOOD against BAD as recorded: the comparison's verdict, their distance, the first
    step where they part, and the metric that parts there."""

    verdict: str | None
    distance: Distance
    first_divergent_step: int | None
    metric: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            **self.distance.to_dict(),
            "first_divergent_step": self.first_divergent_step,
            "metric": self.metric,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GoodVsBad | None:
        """None when ``d`` holds no distance."""
        dist = _distance(d)
        if dist is None:
            return None
        return cls(
            _text(d.get("verdict")),
            dist,
            _whole(d.get("first_divergent_step")),
            _text(d.get("metric")),
        )


@dataclass(frozen=True)
class ProbeJudgement:
    """What a probe's JSON keeps of its judgement (``noise.judge``): the verdicts of the
    probe compared with GOOD and with BAD within the fixed tolerance, the first step where
    its metrics leave GOOD's, its distances to both, and how it stands against each
    (``closeness``: near or far and what decided it, from which ``noise.conclude`` says
    what it behaves like; bodies stored before it have none)."""

    vs_good: str | None
    vs_bad: str | None
    first_divergent_step: int | None  # vs GOOD (None: none)
    distance_to_good: Distance | None
    distance_to_bad: Distance | None
    near_good: Closeness | None = None
    near_bad: Closeness | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vs_good": self.vs_good,
            "vs_bad": self.vs_bad,
            "first_divergent_step": self.first_divergent_step,
            "distance_to_good": _distance_dict(self.distance_to_good),
            "distance_to_bad": _distance_dict(self.distance_to_bad),
        }
        if self.near_good is not None and self.near_bad is not None:
            out["closeness"] = {"good": self.near_good.to_dict(), "bad": self.near_bad.to_dict()}
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeJudgement | None:
        """None when ``d`` (a probe's row) holds nothing of a judgement."""
        near = d.get("closeness")
        near = near if isinstance(near, Mapping) else {}
        near_good, near_bad = (
            Closeness.from_json(near.get("good")),
            Closeness.from_json(near.get("bad")),
        )
        both = near_good is not None and near_bad is not None
        j = cls(
            _text(d.get("vs_good")),
            _text(d.get("vs_bad")),
            _whole(d.get("first_divergent_step")),
            _distance_at(d.get("distance_to_good")),
            _distance_at(d.get("distance_to_bad")),
            near_good if both else None,
            near_bad if both else None,
        )
        return None if j == _NOT_JUDGED else j


_NOT_JUDGED = ProbeJudgement(None, None, None, None, None)


def _distance_dict(d: Distance | None) -> dict[str, float] | None:
    return None if d is None else d.to_dict()


@dataclass
class ProbeRecord:
    """One probe as run: what was swapped into which run, why, and what it did."""

    index: int
    base: str  # "good" or "bad"
    swapped: list[str]
    why: str
    behaves: str | None = None  # BAD / GOOD / neither / failed / error
    judgement: ProbeJudgement | None = None  # None: not judged (not run, or failed)
    replay_run: str | None = None
    status: str | None = None
    error: str | None = None
    duration_s: float | None = None
    log_sha256: str | None = None
    """The probe's output as the store keeps it (a blob; None: not stored)."""
    log: str | None = field(default=None, compare=False, repr=False)
    """The probe's output as this process saw it (not written to JSON: the blob is)."""

    @property
    def vs_good(self) -> str | None:
        """The verdict of the probe compared with GOOD (None: not judged)."""
        return None if self.judgement is None else self.judgement.vs_good

    @property
    def vs_bad(self) -> str | None:
        """The verdict of the probe compared with BAD (None: not judged)."""
        return None if self.judgement is None else self.judgement.vs_bad

    @property
    def first_divergent_step(self) -> int | None:
        """The first step where the probe's metrics leave GOOD's (None: none, or not
        judged)."""
        return None if self.judgement is None else self.judgement.first_divergent_step

    def cells(self) -> tuple[str, str, str, str, str, str, str]:
        """The evidence table's row, the same in the CLI and the TUI: #, the run the probe
        is a copy of, the factors swapped in, how it stands against GOOD and against BAD
        (near or far, and what decided it), what that makes it behave like
        (``noise.conclude``), and the step where it leaves GOOD (only when far from it).
        A body stored before closenesses were kept shows its verdicts within tolerance,
        said so."""
        j = self.judgement
        if j is not None and j.near_good is not None and j.near_bad is not None:
            vs_good, vs_bad = j.near_good.label(), j.near_bad.label()
            step = None if j.near_good.near else j.near_good.step
        elif j is not None:
            vs_good = f"{j.vs_good or '-'} (tolerance)"
            vs_bad = f"{j.vs_bad or '-'} (tolerance)"
            step = j.first_divergent_step
        else:
            vs_good = vs_bad = "-"
            step = None
        side = "GOOD" if self.base == "good" else "BAD"
        return (
            str(self.index),
            side,
            "+".join(self.swapped) or "-",
            vs_good,
            vs_bad,
            self.behaves or "-",
            _step(step),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "probe": self.index,
            "base": self.base,
            "swapped": self.swapped,
            "why": self.why,
            "behaves_like": self.behaves,
            **(self.judgement or _NOT_JUDGED).to_dict(),
            "replay_run": self.replay_run,
            "status": self.status,
            "error": self.error,
            "duration_s": self.duration_s,
        }
        if self.log_sha256 is not None:
            out["log_sha256"] = self.log_sha256
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeRecord:
        """A probe as ``to_dict`` wrote it (what is missing or of another type reads as
        None)."""
        duration = d.get("duration_s")
        return cls(
            index=_whole(d.get("probe")) or 0,
            base="good" if d.get("base") == "good" else "bad",
            swapped=_strs(d.get("swapped")),
            why=str(d.get("why") or ""),
            behaves=_text(d.get("behaves_like")),
            judgement=ProbeJudgement.from_json(d),
            replay_run=_text(d.get("replay_run")),
            status=_text(d.get("status")),
            error=_text(d.get("error")),
            duration_s=duration if isinstance(duration, int | float) else None,
            log_sha256=_sha(d.get("log_sha256")),
        )


@dataclass
class BisectResult:
    good: str
    bad: str
    backend: str
    outcome: Outcome = "unexplained"
    causes: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    untestable: list[Untestable] = field(default_factory=list)
    factors: list[DifferingFactor] = field(default_factory=list)
    probes: list[ProbeRecord] = field(default_factory=list)
    noise_floor: FloorSummary | None = None
    good_bad: GoodVsBad | None = None
    reason: str | None = None  # why it is unexplained
    confirmed: bool | None = None
    interaction: bool = False
    budget: int = 0
    budget_exhausted: bool = False
    times: int = 0
    env_diff: list[EnvChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    bisect_id: int | None = None
    floor_logs: list[str] = field(default_factory=list)
    """The output of each replay of GOOD that measured its noise floor, as stored blobs."""
    floor_log_texts: list[str] = field(default_factory=list, compare=False, repr=False)
    """The same as this process saw it (not written to JSON: the blobs are)."""

    @property
    def exit_code(self) -> int:
        return 0 if self.outcome == "cause" else 1

    @property
    def probes_run(self) -> int:
        return len(self.probes)

    # -- the sentence ------------------------------------------------------------------

    def verdict_line(self) -> str:
        if self.outcome != "cause":
            return f"unexplained: {self.reason or 'no testable factor reproduces BAD'}"
        causes = [noun(c) for c in self.causes]
        if self.interaction:
            head = f"the divergence follows {_join(causes)} together"
        elif len(causes) == 1:
            head = f"the divergence follows the {causes[0]}"
        else:
            head = f"the divergence follows each of {_join(causes)} on its own"
        gb = self.good_bad
        step = gb.first_divergent_step if gb else None
        metric = gb.metric if gb else None
        rest = [noun(f.factor) for f in self.factors if f.factor not in self.causes]
        swapped = _join([f"BAD's {c}" for c in causes])
        what = f"BAD's {metric} curve" if metric else "BAD's outputs"
        subject = (
            f"GOOD's {_join(rest)} with {swapped} reproduce"
            if rest
            else (f"GOOD with {swapped} reproduces")
        )
        line = f"{head}: {subject} {what}" + (f" from step {step}" if step is not None else "")
        harmless = [_HARMLESS.get(c, c) for c in self.cleared]
        if harmless:
            line += f"; {_join(harmless)} {'is' if len(harmless) == 1 else 'are'} harmless"
        if self.confirmed is True:
            line += f" (confirmed: BAD with GOOD's {_join(causes)} behaves like GOOD)"
        elif self.confirmed is False:
            line += f" (BAD with GOOD's {_join(causes)} does not fully behave like GOOD)"
        return line

    # -- JSON and text -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        from replay_tui.compare.comparison import json_safe

        body = {
            "version": BISECT_VERSION,
            "good": self.good,
            "bad": self.bad,
            "backend": self.backend,
            "outcome": self.outcome,
            "verdict": self.verdict_line(),
            "exit_code": self.exit_code,
            "causes": self.causes,
            "cleared": self.cleared,
            "partial": self.partial,
            "untestable": [u.to_dict() for u in self.untestable],
            "factors": [f.to_dict() for f in self.factors],
            "probes": [p.to_dict() for p in self.probes],
            "probes_run": self.probes_run,
            "budget": self.budget,
            "budget_exhausted": self.budget_exhausted,
            "times": self.times,
            "noise_floor": None if self.noise_floor is None else self.noise_floor.to_dict(),
            "good_vs_bad": None if self.good_bad is None else self.good_bad.to_dict(),
            "reason": self.reason,
            "confirmed": self.confirmed,
            "interaction": self.interaction,
            "env_diff": [c.to_dict() for c in self.env_diff],
            "notes": self.notes,
            "duration_s": self.duration_s,
        }
        if self.floor_logs:
            body["floor_logs"] = self.floor_logs
        if self.bisect_id is not None:
            body["bisect_id"] = self.bisect_id
        out: dict[str, Any] = json_safe(body)
        return out

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> BisectResult:
        """A stored answer (``to_dict``) read back; what a body lacks, or holds in
        another shape, takes the default (an older or damaged body still opens).  The
        verdict line is not read: :meth:`verdict_line` says it from the rest."""
        noise, good_bad = body.get("noise_floor"), body.get("good_vs_bad")
        duration = body.get("duration_s")
        confirmed = body.get("confirmed")
        untestable = (Untestable.from_json(u) for u in _rows(body.get("untestable")))
        factors = (DifferingFactor.from_json(f) for f in _rows(body.get("factors")))
        return cls(
            good=str(body.get("good") or ""),
            bad=str(body.get("bad") or ""),
            backend=str(body.get("backend") or ""),
            outcome="cause" if body.get("outcome") == "cause" else "unexplained",
            causes=_strs(body.get("causes")),
            cleared=_strs(body.get("cleared")),
            partial=_strs(body.get("partial")),
            untestable=[u for u in untestable if u is not None],
            factors=[f for f in factors if f is not None],
            probes=[ProbeRecord.from_json(p) for p in _rows(body.get("probes"))],
            noise_floor=FloorSummary.from_json(noise) if isinstance(noise, Mapping) else None,
            good_bad=GoodVsBad.from_json(good_bad) if isinstance(good_bad, Mapping) else None,
            reason=_text(body.get("reason")),
            confirmed=confirmed if isinstance(confirmed, bool) else None,
            interaction=body.get("interaction") is True,
            budget=_whole(body.get("budget")) or 0,
            budget_exhausted=body.get("budget_exhausted") is True,
            times=_whole(body.get("times")) or 0,
            env_diff=[EnvChange.from_json(r) for r in _rows(body.get("env_diff"))],
            notes=_strs(body.get("notes")),
            duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
            bisect_id=_whole(body.get("bisect_id")),
            floor_logs=[x for x in (_sha(v) for v in _rows_of(body.get("floor_logs"))) if x],
        )

    def logs_stored(self) -> int:
        """How many outputs (probes' and GOOD's noise-floor replays') the store keeps."""
        return len(self.floor_logs) + sum(1 for p in self.probes if p.log_sha256)

    def text(self) -> str:
        lines = [f"bisect GOOD {self.good}  BAD {self.bad}  ({self.backend} backend)"]
        lines.append("=> " + self.verdict_line())
        if self.factors:
            lines.append("factors that differ:")
            for f in self.factors:
                state = "testable" if f.testable else f"UNTESTABLE: {f.reason}"
                lines.append(f"  {f.factor:<12} {state}")
                for d in f.detail[:4]:
                    lines.append(f"      {d}")
        if self.noise_floor:
            nf = self.noise_floor
            lines.append(
                f"noise floor of GOOD over {nf.runs} run(s) (recorded + {nf.replays}"
                f" replay(s)): metric gap {nf.floor.metric_gap:.3g},"
                f" weight rel L2 {nf.floor.weight_rel_l2:.3g}"
                + (" (bit-identical)" if nf.identical else "")
            )
        if self.good_bad:
            gb = self.good_bad
            lines.append(
                f"GOOD vs BAD: {gb.verdict}, metric gap {gb.distance.metric_gap:.3g},"
                f" weight rel L2 {gb.distance.weight_rel_l2:.3g}, first divergent step"
                f" {_step(gb.first_divergent_step)}"
            )
        if self.probes:
            lines.append("probes (each against GOOD and BAD: near or far, and what said so):")
            rows = [PROBE_COLUMNS, *(p.cells() for p in self.probes)]
            widths = [max(len(r[i]) for r in rows) for i in range(len(PROBE_COLUMNS))]
            for n, r in enumerate(rows):
                why = "why" if n == 0 else self.probes[n - 1].why
                error = None if n == 0 else self.probes[n - 1].error
                cells = [r[0].rjust(widths[0])] + [
                    c.ljust(w) for c, w in zip(r[1:], widths[1:], strict=True)
                ]
                lines.append(
                    "  " + "  ".join(cells) + f"  {why}" + (f" [{error}]" if error else "")
                )
        stored = self.logs_stored()
        if stored and self.bisect_id is not None:
            lines.append(
                f"the probes' output: {stored} log(s) kept in the store"
                f" (replay-tui bisect-show {self.bisect_id} --logs)"
            )
        if self.env_diff:
            lines.append("what differs in the blamed factor:")
            for c in self.env_diff[:30]:
                lines.append(f"  {c.what}: {c.good} -> {c.bad}")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


PROBE_COLUMNS = (
    "#",
    "run",
    "factors swapped",
    "vs GOOD",
    "vs BAD",
    "behaves like",
    "leaves GOOD at",
)
"""The evidence table's columns (:meth:`ProbeRecord.cells`), in the CLI and the TUI."""


def _step(s: int | None) -> str:
    return "-" if s is None else str(s)
