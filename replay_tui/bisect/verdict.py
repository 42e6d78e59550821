"""The answer of a bisect: a sentence, the evidence table, the blamed factor's
environment diff, and the same as strict JSON.

Exit codes: 0 a cause was found, 1 unexplained, 2 bad input, 3 infrastructure failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

BISECT_VERSION = 1

Outcome = Literal["cause", "unexplained"]

_NOUN = {
    "code": "code",
    "image": "image",
    "data": "data",
    "config": "config (command line)",
    "seed": "seed",
    "determinism": "determinism settings",
    "environment": "environment variables",
}
_HARMLESS = {
    "code": "the code change between the two commits",
    "image": "the image change",
    "data": "the data change",
    "config": "the config change",
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


@dataclass
class ProbeRecord:
    """One probe as run: what was swapped into which run, why, and what it did."""

    index: int
    base: str  # "good" or "bad"
    swapped: list[str]
    why: str
    behaves: str | None = None  # BAD / GOOD / neither / failed / error
    judgement: dict[str, Any] | None = None
    replay_run: str | None = None
    status: str | None = None
    error: str | None = None
    duration_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        j = self.judgement or {}
        return {
            "probe": self.index,
            "base": self.base,
            "swapped": self.swapped,
            "why": self.why,
            "behaves_like": self.behaves,
            "vs_good": j.get("vs_good"),
            "vs_bad": j.get("vs_bad"),
            "first_divergent_step": j.get("first_divergent_step"),
            "distance_to_good": j.get("distance_to_good"),
            "distance_to_bad": j.get("distance_to_bad"),
            "replay_run": self.replay_run,
            "status": self.status,
            "error": self.error,
            "duration_s": self.duration_s,
        }


@dataclass
class BisectResult:
    good: str
    bad: str
    backend: str
    outcome: Outcome = "unexplained"
    causes: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    untestable: list[dict[str, Any]] = field(default_factory=list)
    factors: list[dict[str, Any]] = field(default_factory=list)
    probes: list[ProbeRecord] = field(default_factory=list)
    noise_floor: dict[str, Any] | None = None
    good_bad: dict[str, Any] | None = None  # distance and comparison of GOOD and BAD
    reason: str | None = None  # why it is unexplained
    confirmed: bool | None = None
    interaction: bool = False
    budget: int = 0
    budget_exhausted: bool = False
    times: int = 0
    env_diff: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    bisect_id: int | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.outcome == "cause" else 1

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
        gb = self.good_bad or {}
        step = gb.get("first_divergent_step")
        rest = [noun(f["factor"]) for f in self.factors if f["factor"] not in self.causes]
        swapped = _join([f"BAD's {c}" for c in causes])
        what = f"BAD's {gb['metric']} curve" if gb.get("metric") else "BAD's outputs"
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
        from replay_tui.compare.verdict import json_safe

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
            "untestable": self.untestable,
            "factors": self.factors,
            "probes": [p.to_dict() for p in self.probes],
            "probes_run": len(self.probes),
            "budget": self.budget,
            "budget_exhausted": self.budget_exhausted,
            "times": self.times,
            "noise_floor": self.noise_floor,
            "good_vs_bad": self.good_bad,
            "reason": self.reason,
            "confirmed": self.confirmed,
            "interaction": self.interaction,
            "env_diff": self.env_diff,
            "notes": self.notes,
            "duration_s": self.duration_s,
        }
        if self.bisect_id is not None:
            body["bisect_id"] = self.bisect_id
        out: dict[str, Any] = json_safe(body)
        return out

    def text(self) -> str:
        lines = [f"bisect GOOD {self.good}  BAD {self.bad}  ({self.backend} backend)"]
        lines.append("=> " + self.verdict_line())
        if self.factors:
            lines.append("factors that differ:")
            for f in self.factors:
                state = "testable" if f["testable"] else f"UNTESTABLE: {f['reason']}"
                lines.append(f"  {f['factor']:<12} {state}")
                for d in f["detail"][:4]:
                    lines.append(f"      {d}")
        if self.noise_floor:
            nf = self.noise_floor
            lines.append(
                f"noise floor of GOOD over {nf['runs']} run(s) (recorded + {nf['replays']}"
                f" replay(s)): metric gap {nf['metric_gap']:.3g},"
                f" weight rel L2 {nf['weight_rel_l2']:.3g}"
                + (" (bit-identical)" if nf.get("identical") else "")
            )
        if self.good_bad:
            gb = self.good_bad
            lines.append(
                f"GOOD vs BAD: {gb.get('verdict')}, metric gap {gb['metric_gap']:.3g},"
                f" weight rel L2 {gb['weight_rel_l2']:.3g}, first divergent step"
                f" {_step(gb.get('first_divergent_step'))}"
            )
        if self.probes:
            lines.append("probes:")
            lines.append(
                f"  {'#':>2}  {'run':<4} {'factors swapped':<26} {'behaves':<8}"
                f" {'vs GOOD':<11} {'vs BAD':<11} {'1st div step':<12} why"
            )
            for p in self.probes:
                j = p.judgement or {}
                side = "GOOD" if p.base == "good" else "BAD"
                lines.append(
                    f"  {p.index:>2}  {side:<4} {'+'.join(p.swapped) or '-':<26}"
                    f" {p.behaves or '-':<8} {j.get('vs_good') or '-':<11}"
                    f" {j.get('vs_bad') or '-':<11} {_step(j.get('first_divergent_step')):<12}"
                    f" {p.why}" + (f" [{p.error}]" if p.error else "")
                )
        if self.env_diff:
            lines.append("what differs in the blamed factor:")
            for row in self.env_diff[:30]:
                lines.append(f"  {row['what']}: {row['good']} -> {row['bad']}")
        for n in self.notes:
            lines.append(f"note: {n}")
        return "\n".join(lines)


def _step(s: Any) -> str:
    return "-" if s is None else str(s)
