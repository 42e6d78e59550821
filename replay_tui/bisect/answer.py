"""The answer of a bisect: a sentence, the evidence table, the blamed factor's
environment diff, and the same as strict JSON (``to_dict``; a stored one reads back
into the same :class:`BisectResult` with ``from_dict``).

Every row of the answer is a small frozen dataclass (:class:`DifferingFactor`,
:class:`Untestable`, :class:`EnvChange`, :class:`FloorSummary`, :class:`GoodVsBad`,
:class:`ProbeJudgement`) on ``storage.wire``: it writes the row as the JSON has always
held it and reads it back.  A stored answer is read leniently, as it always was: what a
body lacks or holds in another shape reads as the default (an older or damaged body
still opens), so every field here names the lenient reading it takes (``decode=``).

Exit codes: 0 a cause was found, 1 unexplained, 2 bad input, 3 infrastructure failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from replay_tui.bisect.noise import Closeness, Distance
from storage.manifest import JSONValue
from storage.wire import Wire, wire

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


# -- reading a stored answer leniently ---------------------------------------------------
# Each is a ``decode=`` (``storage.wire``): the value as stored, and where it was.  None
# of them refuses a value (an odd one reads as the default): a body stored by an older
# version, or damaged, still opens.

W = TypeVar("W", bound=Wire)


def _text(v: Any, where: str) -> str | None:
    """Text, any other value as its text; None stays None."""
    return None if v is None else str(v)


def _str(v: Any, where: str) -> str:
    """Text, any other value as its text; nothing (None, "", 0) reads as ""."""
    return str(v or "")


def _strs(v: Any, where: str) -> list[str]:
    """The strings of a list (what is no string is left out); anything else reads as []."""
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _strs_tuple(v: Any, where: str) -> tuple[str, ...]:
    return tuple(_strs(v, where))


def _whole(v: Any, where: str) -> int | None:
    """A whole number (a bool is none); anything else reads as None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _count(v: Any, where: str) -> int:
    """A whole number; anything else (and 0) reads as 0."""
    return _whole(v, where) or 0


def _true(v: Any, where: str) -> bool:
    """True only when stored as true."""
    return v is True


def _bool_or_none(v: Any, where: str) -> bool | None:
    return v if isinstance(v, bool) else None


def _seconds_or_none(v: Any, where: str) -> float | None:
    """A duration as stored (a number as it is); anything else reads as None."""
    return v if isinstance(v, int | float) else None


def _seconds(v: Any, where: str) -> float:
    """A duration as a float; anything but a number reads as 0.0."""
    return float(v) if isinstance(v, int | float) else 0.0


def _sha(v: Any, where: str = "") -> str | None:
    """A blob's name as a body holds it: 64 lowercase hex digits, else None."""
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return v
    return None


def _shas(v: Any, where: str) -> list[str]:
    """The blob names of a list (what is none is left out)."""
    return [x for x in (_sha(s) for s in v) if x] if isinstance(v, list) else []


def _maybe(cls: type[W], absent: Mapping[str, Any] | None = None) -> Callable[[Any, str], W | None]:
    """A row of ``cls``, or None when it is none (not an object, or what it needs
    unreadable); the keys in ``absent`` read through the row's own lenient readings when
    a body lacks them."""

    def read(v: Any, where: str) -> W | None:
        if not isinstance(v, Mapping):
            return None
        try:
            return cls.from_dict({**(absent or {}), **v}, where)
        except ValueError:
            return None

    return read


def _rows(cls: type[W]) -> Callable[[Any, str], list[W]]:
    """The rows of a list that are rows of ``cls``; the others are left out."""
    one = _maybe(cls)

    def read(v: Any, where: str) -> list[W]:
        rows = (one(x, f"{where}[{i}]") for i, x in enumerate(v)) if isinstance(v, list) else ()
        return [r for r in rows if r is not None]

    return read


def _any(v: Any, where: str) -> Any:
    return v


# -- the rows of the answer --------------------------------------------------------------


@dataclass(frozen=True)
class DifferingFactor(Wire):
    """A factor that differs between GOOD and BAD (``factors.FactorDiff`` as the answer
    keeps it): how, and whether it could be tested here.  A stored row that names no
    factor is none."""

    factor: str
    detail: tuple[str, ...] = field(default=(), metadata=wire(decode=_strs_tuple))
    testable: bool = field(default=False, metadata=wire(decode=_true))
    reason: str | None = field(default=None, metadata=wire(decode=_text))  # why untestable


@dataclass(frozen=True)
class Untestable(Wire):
    """A factor that differs but could not be tested here, and why.  A stored row that
    names no factor is none."""

    factor: str
    reason: str | None = field(default=None, metadata=wire(decode=_text))


@dataclass(frozen=True)
class EnvChange(Wire):
    """One thing that differs inside a blamed factor, GOOD -> BAD.  ``good`` and ``bad``
    are the values as recorded (a manifest field's JSON: text, a number, a list...)."""

    factor: str = field(default="", metadata=wire(decode=_str))
    what: str = field(default="", metadata=wire(decode=_str))
    good: JSONValue = field(default=None, metadata=wire(decode=_any))
    bad: JSONValue = field(default=None, metadata=wire(decode=_any))


@dataclass(frozen=True)
class FloorSummary(Wire):
    """GOOD's noise floor as the answer keeps it (``noise.NoiseFloor`` without its
    replays' ids and the noise rule's floors): over how many runs, the largest distance
    among them (its two numbers beside the others), and whether every replay was
    bit-identical.  A stored one that holds no distance is none."""

    WIRE_EXTRA = ("replays",)
    WIRE_ORDER = ("runs", "replays")

    runs: int = field(metadata=wire(decode=_count))  # GOOD as recorded and its replays
    floor: Distance = field(metadata=wire(inline=True))
    identical: bool = field(metadata=wire(decode=_true))

    @property
    def replays(self) -> int:
        return self.runs - 1


_FLOOR_ABSENT = {"runs": None, "identical": None}
"""What a stored floor lacks reads as (through its lenient readings: 0 runs, not
identical)."""


@dataclass(frozen=True)
class GoodVsBad(Wire):
    """GOOD against BAD as recorded: the comparison's verdict, their distance (its two
    numbers beside the others), the first step where they part, and the metric that
    parts there.  A stored one that holds no distance is none."""

    verdict: str | None = field(metadata=wire(decode=_text))
    distance: Distance = field(metadata=wire(inline=True))
    first_divergent_step: int | None = field(metadata=wire(decode=_whole))
    metric: str | None = field(metadata=wire(decode=_text))


_GOOD_BAD_ABSENT = {"verdict": None, "first_divergent_step": None, "metric": None}
"""What a stored GOOD vs BAD lacks reads as (None)."""


@dataclass(frozen=True)
class ProbeJudgement(Wire):
    """What a probe's JSON keeps of its judgement (``noise.judge``): the verdicts of the
    probe compared with GOOD and with BAD within the fixed tolerance, the first step where
    its metrics leave GOOD's, its distances to both, and how it stands against each
    (``closeness``: near or far and what decided it, from which ``noise.conclude`` says
    what it behaves like; bodies stored before it have none).  Its keys sit in the probe's
    row (:class:`ProbeRecord`), which writes and reads the two closenesses together."""

    vs_good: str | None = field(default=None, metadata=wire(decode=_text))
    vs_bad: str | None = field(default=None, metadata=wire(decode=_text))
    first_divergent_step: int | None = field(default=None, metadata=wire(decode=_whole))
    """vs GOOD (None: none)."""
    distance_to_good: Distance | None = field(default=None, metadata=wire(decode=_maybe(Distance)))
    distance_to_bad: Distance | None = field(default=None, metadata=wire(decode=_maybe(Distance)))
    near_good: Closeness | None = field(default=None, metadata=wire(omit="always"))
    near_bad: Closeness | None = field(default=None, metadata=wire(omit="always"))


_NOT_JUDGED = ProbeJudgement()
_closeness = _maybe(Closeness)


def _write_judgement(j: ProbeJudgement | None) -> dict[str, Any]:
    """A probe's judgement as its row holds it: every key (None when not judged), and
    ``closeness`` only when both closenesses are known."""
    out = (j or _NOT_JUDGED).to_dict()
    if j is not None and j.near_good is not None and j.near_bad is not None:
        out["closeness"] = {"good": j.near_good.to_dict(), "bad": j.near_bad.to_dict()}
    return out


def _read_judgement(d: Mapping[str, Any], where: str) -> ProbeJudgement | None:
    """The judgement in a probe's row; None when the row holds nothing of one.  The
    closenesses are kept only when both read."""
    j = ProbeJudgement.from_dict(d, where)
    near = d.get("closeness")
    near = near if isinstance(near, Mapping) else {}
    good, bad = _closeness(near.get("good"), where), _closeness(near.get("bad"), where)
    if good is not None and bad is not None:
        j = replace(j, near_good=good, near_bad=bad)
    return None if j == _NOT_JUDGED else j


def _base(v: Any, where: str) -> str:
    return "good" if v == "good" else "bad"


def _outcome(v: Any, where: str) -> Outcome:
    return "cause" if v == "cause" else "unexplained"


@dataclass
class ProbeRecord(Wire):
    """One probe as run: what was swapped into which run, why, and what it did."""

    index: int = field(default=0, metadata=wire(key="probe", decode=_count))
    base: str = field(default="bad", metadata=wire(decode=_base))  # "good" or "bad"
    swapped: list[str] = field(default_factory=list, metadata=wire(decode=_strs))
    why: str = field(default="", metadata=wire(decode=_str))
    behaves: str | None = field(default=None, metadata=wire(key="behaves_like", decode=_text))
    """BAD / GOOD / neither / failed / error."""
    judgement: ProbeJudgement | None = field(
        default=None,
        metadata=wire(inline=True, encode=_write_judgement, decode=_read_judgement),
    )
    """None: not judged (not run, or failed)."""
    replay_run: str | None = field(default=None, metadata=wire(decode=_text))
    status: str | None = field(default=None, metadata=wire(decode=_text))
    error: str | None = field(default=None, metadata=wire(decode=_text))
    duration_s: float | None = field(default=None, metadata=wire(decode=_seconds_or_none))
    log_sha256: str | None = field(default=None, metadata=wire(omit="none", decode=_sha))
    """The probe's output as the store keeps it (a blob; None: not stored)."""
    log: str | None = field(default=None, compare=False, repr=False, metadata=wire(omit="always"))
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


@dataclass
class BisectResult(Wire):
    """A bisect's answer.  Its JSON (``to_dict``) holds the verdict line, the exit code
    and the probes' count beside the fields (written, never read: :meth:`verdict_line`
    says it from the rest)."""

    WIRE_EXTRA = ("version", "verdict", "exit_code", "probes_run")
    WIRE_ORDER = (
        "version",
        "good",
        "bad",
        "backend",
        "outcome",
        "verdict",
        "exit_code",
        "causes",
        "cleared",
        "partial",
        "untestable",
        "factors",
        "probes",
        "probes_run",
        "budget",
        "budget_exhausted",
        "times",
        "noise_floor",
        "good_vs_bad",
        "reason",
        "confirmed",
        "interaction",
        "env_diff",
        "notes",
        "duration_s",
        "floor_logs",
        "bisect_id",
    )

    good: str = field(default="", metadata=wire(decode=_str))
    bad: str = field(default="", metadata=wire(decode=_str))
    backend: str = field(default="", metadata=wire(decode=_str))
    outcome: Outcome = field(default="unexplained", metadata=wire(decode=_outcome))
    causes: list[str] = field(default_factory=list, metadata=wire(decode=_strs))
    cleared: list[str] = field(default_factory=list, metadata=wire(decode=_strs))
    partial: list[str] = field(default_factory=list, metadata=wire(decode=_strs))
    untestable: list[Untestable] = field(
        default_factory=list, metadata=wire(decode=_rows(Untestable))
    )
    factors: list[DifferingFactor] = field(
        default_factory=list, metadata=wire(decode=_rows(DifferingFactor))
    )
    probes: list[ProbeRecord] = field(
        default_factory=list, metadata=wire(decode=_rows(ProbeRecord))
    )
    noise_floor: FloorSummary | None = field(
        default=None, metadata=wire(decode=_maybe(FloorSummary, _FLOOR_ABSENT))
    )
    good_bad: GoodVsBad | None = field(
        default=None,
        metadata=wire(key="good_vs_bad", decode=_maybe(GoodVsBad, _GOOD_BAD_ABSENT)),
    )
    reason: str | None = field(default=None, metadata=wire(decode=_text))  # why unexplained
    confirmed: bool | None = field(default=None, metadata=wire(decode=_bool_or_none))
    interaction: bool = field(default=False, metadata=wire(decode=_true))
    budget: int = field(default=0, metadata=wire(decode=_count))
    budget_exhausted: bool = field(default=False, metadata=wire(decode=_true))
    times: int = field(default=0, metadata=wire(decode=_count))
    env_diff: list[EnvChange] = field(default_factory=list, metadata=wire(decode=_rows(EnvChange)))
    notes: list[str] = field(default_factory=list, metadata=wire(decode=_strs))
    duration_s: float = field(default=0.0, metadata=wire(decode=_seconds))
    bisect_id: int | None = field(default=None, metadata=wire(omit="none", decode=_whole))
    floor_logs: list[str] = field(default_factory=list, metadata=wire(omit="empty", decode=_shas))
    """The output of each replay of GOOD that measured its noise floor, as stored blobs."""
    floor_log_texts: list[str] = field(
        default_factory=list, compare=False, repr=False, metadata=wire(omit="always")
    )
    """The same as this process saw it (not written to JSON: the blobs are)."""

    @property
    def version(self) -> int:
        """The answer's JSON version."""
        return BISECT_VERSION

    @property
    def verdict(self) -> str:
        """The sentence (:meth:`verdict_line`), as the JSON holds it."""
        return self.verdict_line()

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
