"""The one definition of verdicts and replay statuses, and how they add up.

The words themselves (verdict and status sets, the legacy map, exit-code precedence) are
defined once in ``storage.vocabulary`` and re-exported here with the rules that use
them.

A **verdict** judges a comparison of two runs (``replay_tui.compare.comparison``):
IDENTICAL, EQUIVALENT, WITHIN_NOISE (all three: *reproduced*; only the first is
*bit-identical*), DIVERGED, INCOMPLETE (both: *not reproduced*).

A **replay status** says how far a replay got (the ``status`` of a replay fact):

- ``completed``: the command ran to its own end (exit 0 or not) and was compared.  Only
  a completed replay is evidence: its verdict counts towards the run's verdict and the
  reproducible rate.
- ``cancelled``: someone stopped it (``x`` in the TUI, leaving the replay screen).
- ``interrupted``: Ctrl-C, SIGTERM, quitting the app mid-replay.
- ``timed_out``: it ran past ``--timeout``.
- ``infra-error``: the machine could not run it (no Docker engine, data missing, the
  host lacks a module the run imports...).

Cancelled, interrupted, timed-out and infra-error replays are *aborted*: they are
counted apart (their own SLI) and never override a completed verdict, whatever the
comparison of their partial outputs said.  Facts written before this vocabulary carry
the command's own status (``succeeded`` / ``failed`` mean completed, ``error`` means
infra-error); :func:`normalize_status` reads both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from storage.vocabulary import (
    ABORTED,
    BIT_IDENTICAL,
    CANCELLED,
    COMPLETED,
    DIVERGED,
    DIVERGED_NO_FLOOR,
    EQUIVALENT,
    IDENTICAL,
    INCOMPLETE,
    INFRA_ERROR,
    INTERRUPTED,
    MEANING,
    NO_VERDICT_QUERY,
    NOT_REPLAYED,
    NOT_REPRODUCED,
    REPRODUCED,
    SEVERITY,
    STATUSES,
    TIMED_OUT,
    VERDICTS,
    WITHIN_NOISE,
    ReplayStatus,
    Verdict,
    combine_exits,
    is_bit_identical,
    is_reproduced,
    normalize_status,
    status_exit,
    verdict_exit,
)
from storage.wire import Wire

__all__ = [
    "ABORTED",
    "BIT_IDENTICAL",
    "CANCELLED",
    "COMPLETED",
    "DIVERGED",
    "DIVERGED_NO_FLOOR",
    "EQUIVALENT",
    "IDENTICAL",
    "INCOMPLETE",
    "INFRA_ERROR",
    "INTERRUPTED",
    "MEANING",
    "NOT_REPLAYED",
    "NOT_REPRODUCED",
    "NO_VERDICT_QUERY",
    "REPRODUCED",
    "SEVERITY",
    "STATUSES",
    "TIMED_OUT",
    "VERDICTS",
    "WITHIN_NOISE",
    "Attempt",
    "Outcome",
    "ReplayStatus",
    "Reproduction",
    "Verdict",
    "aborted_label",
    "aborted_replays",
    "combine_exits",
    "counts_as_evidence",
    "environment_failure",
    "exit_code",
    "is_bit_identical",
    "is_completed",
    "is_reproduced",
    "normalize_status",
    "outcome_word",
    "replay_status",
    "status_exit",
    "summarize",
    "verdict_exit",
]


def is_completed(status: str | None) -> bool:
    return normalize_status(status) == COMPLETED


def counts_as_evidence(
    status: str | None, verdict: str | None, determinism: str | None = None
) -> bool:
    """Does this replay's verdict count?  Completed, judged, determinism as recorded
    (a replay with determinism switched off is an experiment, never evidence)."""
    return is_completed(status) and verdict in VERDICTS and (determinism or "recorded") != "off"


def replay_status(
    exec_status: str, *, cancel_requested: bool, exit_code: int | None
) -> ReplayStatus:
    """The replay status for a command that ended with ``exec_status``.

    ``exec_status`` is the executor's (succeeded / failed / interrupted / timed_out).  A
    command that exited 0 completed even if a cancel arrived while it was exiting (the
    run finished all its steps); a stopped one was ``cancelled`` when someone asked for
    it (``should_cancel``), else ``interrupted`` (a signal).
    """
    if exec_status in ("succeeded", "failed"):
        return COMPLETED
    if exec_status == "interrupted":
        if exit_code == 0:
            return COMPLETED
        return CANCELLED if cancel_requested else INTERRUPTED
    if exec_status == "timed_out":
        return TIMED_OUT
    return INFRA_ERROR


exit_code = status_exit
"""One replay attempt's exit code (``storage.vocabulary.status_exit``)."""


def aborted_label(status: str | None) -> str | None:
    """What stands where a verdict would for a replay that did not complete: CANCELLED,
    INTERRUPTED, TIMED OUT or INFRA-ERROR (the same words everywhere: runs list, CLI,
    dashboard); None for a completed replay."""
    s = normalize_status(status)
    return None if s == COMPLETED else s.replace("_", " ").upper()


def outcome_word(status: str | None, verdict: str | None) -> str:
    """One replay attempt in one word, the same everywhere: its verdict when it completed
    and was judged, else how it ended (:func:`aborted_label`; a completed replay whose
    comparison failed is an INFRA-ERROR, as :func:`summarize` counts it)."""
    label = aborted_label(status)
    if label is None:
        return str(verdict) if verdict in VERDICTS else INFRA_ERROR.upper()
    return label


class Attempt(Protocol):
    """What :func:`aborted_replays` reads of a replay fact."""

    @property
    def replay_run(self) -> str | None: ...
    @property
    def status(self) -> str | None: ...


def aborted_replays(outcomes: Mapping[str, Sequence[Attempt]]) -> dict[str, str]:
    """Per replay run made by an attempt that did not complete, its :func:`aborted_label`
    (its own comparison's INCOMPLETE would read as a failed reproduction)."""
    out: dict[str, str] = {}
    for facts in outcomes.values():
        for f in facts:
            label = aborted_label(f.status)
            if f.replay_run and label:
                out[f.replay_run] = label
    return out


_MISSING_MODULE = re.compile(r"^(?:ModuleNotFoundError|ImportError): (.+)$", re.MULTILINE)


def environment_failure(exec_status: str, log_tail: str, original_status: str) -> str | None:
    """Why a failed replay is the host's fault rather than a failed reproduction, or None.

    A replay whose command dies importing a module the original ran with (``No module
    named 'torch'`` on a host without torch) says nothing about reproducibility: it is an
    infrastructure error (exit 3), not NOT REPRODUCED (exit 1).
    """
    if exec_status != "failed" or original_status != "succeeded":
        return None
    found = _MISSING_MODULE.findall(log_tail or "")
    if not found:
        return None
    return f"the replay environment cannot import what the run needs: {found[-1].strip()}"


# -- a run's reproduction state from all its replays ----------------------------------------


@dataclass(frozen=True)
class Reproduction(Wire):
    """What every replay of one run adds up to.

    ``verdict`` is the latest completed replay's (None when none completed);
    ``reproduced`` of ``completed`` replays reproduced; ``aborted`` counts the others
    by status.  ``text()`` is the runs list's cell: ``IDENTICAL 3/3, 1 cancelled``
    (written with the rest, never read).
    """

    WIRE_EXTRA = ("text",)

    verdict: str | None = None
    completed: int = 0
    reproduced: int = 0
    aborted: Mapping[str, int] = field(default_factory=dict)
    experiments: int = 0
    """Completed replays with determinism switched off (shown, never counted)."""

    @property
    def attempts(self) -> int:
        return self.completed + sum(self.aborted.values())

    def text(self, *, wide: bool = True) -> str:
        if self.verdict is None and not self.aborted:
            return "-"
        head = f"{self.verdict} {self.reproduced}/{self.completed}" if self.verdict else "-"
        if not wide:
            return head
        extra = [f"{n} {s.replace('_', ' ')}" for s, n in sorted(self.aborted.items()) if n]
        return ", ".join([head, *extra]) if extra else head


class Outcome(Protocol):
    """What :func:`summarize` reads of a replay fact (``storage.records.ReplayFact``)."""

    @property
    def status(self) -> str | None: ...
    @property
    def verdict(self) -> str | None: ...
    @property
    def determinism(self) -> str | None: ...


def latest_judgements(facts: Iterable[Outcome]) -> list[Outcome]:
    """``facts`` (oldest first) with each replay run's judgement once: its latest (a
    replay judged again once a noise floor exists has two facts; the older stays a fact
    but no longer counts).  Facts with no replay run (an attempt that never ran) stay."""
    kept = list(facts)
    last: dict[str, int] = {}
    for i, f in enumerate(kept):
        run = getattr(f, "replay_run", None)
        if isinstance(run, str):
            last[run] = i
    return [
        f
        for i, f in enumerate(kept)
        if not isinstance(run := getattr(f, "replay_run", None), str) or last[run] == i
    ]


def summarize(facts: Iterable[Outcome]) -> Reproduction:
    """Fold replay facts (oldest first) into a :class:`Reproduction`, each replay run's
    latest judgement only (:func:`latest_judgements`)."""
    verdict: str | None = None
    completed = reproduced = experiments = 0
    aborted: dict[str, int] = {}
    for f in latest_judgements(facts):
        status = normalize_status(f.status)
        v = f.verdict
        determinism = f.determinism
        if status != COMPLETED:
            aborted[status] = aborted.get(status, 0) + 1
            continue
        if (determinism or "recorded") == "off":
            experiments += 1
            continue
        if v not in VERDICTS:  # completed but never judged: the comparison itself failed
            aborted[INFRA_ERROR] = aborted.get(INFRA_ERROR, 0) + 1
            continue
        completed += 1
        reproduced += is_reproduced(v)
        verdict = str(v)
    return Reproduction(verdict, completed, reproduced, aborted, experiments)
