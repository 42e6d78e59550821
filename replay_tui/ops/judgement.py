"""What a command's outcome amounts to, the same for every face and every use case.

A comparison or a replay is REPRODUCED (exit 0), NOT_REPRODUCED (exit 1) or NOT_JUDGED:
a replay that did not complete (its outputs are partial: exit 130 when it was stopped,
3 when it could not run) or one replay of a noisy run with no noise floor (exit 4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

from replay_tui.verdicts import CANCELLED, INTERRUPTED, aborted_label
from storage.vocabulary import (
    EXIT_CANCELLED,
    EXIT_INFRA,
    EXIT_NOT_JUDGED,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
)

if TYPE_CHECKING:
    from replay_tui.compare.tolerance import Tolerance

Judgement = Literal["REPRODUCED", "NOT_REPRODUCED", "NOT_JUDGED"]
"""What a command's outcome amounts to (its exit code says the same)."""

NotJudged = Literal["aborted", "no_floor"]
"""Why an outcome is NOT_JUDGED: a replay that did not complete, or one replay of a run
whose determinism was not fully on with no noise floor to judge it against."""

STOPPED_LABELS: Final[frozenset[str]] = frozenset(
    label for s in (CANCELLED, INTERRUPTED) if (label := aborted_label(s)) is not None
)
"""The :func:`~replay_tui.verdicts.aborted_label` words of a replay someone or something
stopped (exit 130); any other aborted replay could not run (exit 3)."""


def aborted_exit(label: str) -> int:
    """The exit code of a comparison or replay that an aborted replay makes NOT JUDGED:
    130 stopped (cancelled, interrupted), 3 it could not run (timed out, infra-error)."""
    return EXIT_CANCELLED if label in STOPPED_LABELS else EXIT_INFRA


def judgement_of(exit_code: int) -> tuple[Judgement, NotJudged | None]:
    """What an exit code made of replay outcomes (``combine_exits``) amounts to, and why
    it is not judged when it is not."""
    if exit_code == EXIT_OK:
        return "REPRODUCED", None
    if exit_code == EXIT_NOT_REPRODUCED:
        return "NOT_REPRODUCED", None
    if exit_code == EXIT_NOT_JUDGED:
        return "NOT_JUDGED", "no_floor"
    return "NOT_JUDGED", "aborted"


def margin_not_tested(tol: Tolerance, verdict: str, floored: bool) -> dict[str, object] | None:
    """With ``--margin`` and no noise judgement, why equivalence was not tested (None:
    no margin declared).  The claim needs the replicas' spread: it is made only where the
    noise rule judged the pair."""
    if tol.margin is None and tol.margin_abs is None:
        return None
    rel = tol.margin or 0.0
    shown = f"±{tol.margin_abs:g}" if tol.margin_abs is not None else f"±{100 * rel:.3g} %"
    if verdict in ("IDENTICAL", "EQUIVALENT"):
        why = "the pair is within the fixed tolerance, so the noise rule did not judge it"
    elif not floored:
        why = "no noise floor speaks for the pair (replay --times 3 measures one)"
    else:
        why = "the noise rule did not judge the pair"
    return {
        "tested": False,
        "margin": tol.margin_abs if tol.margin_abs is not None else tol.margin,
        "relative": tol.margin_abs is None,
        "text": f"equivalence within {shown} not tested: {why}",
    }
