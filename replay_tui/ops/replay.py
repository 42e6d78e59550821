"""Replay a run (``replay-tui replay RUN``, the TUI's replay screen).

One rule set for both faces: ``replay.series.replay_many`` runs the replays (once, or a
series and its noise floor: its adaptive rule), and the outcome says what they amount to
by :mod:`replay_tui.ops.judgement`: a replay that did not complete is NOT JUDGED, exit
130 when it was stopped and 3 when it could not run, whatever its partial outputs
compared; one replay of a noisy run with no floor is NOT JUDGED, exit 4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replay_tui.ops.judgement import Judgement, NotJudged, judgement_of
from replay_tui.verdicts import CANCELLED, COMPLETED, INTERRUPTED, ReplayStatus, Verdict

if TYPE_CHECKING:
    from replay_tui.replay.context import ReplayEvent
    from replay_tui.replay.plan import ReplayOptions
    from replay_tui.replay.runner import ReplayOutcome
    from replay_tui.replay.series import ReplayReport
    from storage.store import RunStore


@dataclass(frozen=True, kw_only=True)
class ReplayAttempt:
    """One replay of the run: how far it got, and its verdict when it completed."""

    replay_run: str | None
    """The replay's own run (None: it stopped before it had one)."""
    status: ReplayStatus
    verdict: Verdict | None
    """What its outputs compared (an aborted replay's partial outputs: not counted)."""
    reason: str | None
    comparison_id: int | None
    exit_code: int

    @property
    def counted(self) -> bool:
        """Its verdict counts: it completed and was judged."""
        return self.status == COMPLETED and self.verdict is not None


@dataclass(frozen=True, kw_only=True)
class ReplayDone:
    """What replaying a run did and amounts to."""

    original_id: str
    attempts: tuple[ReplayAttempt, ...]
    judgement: Judgement
    not_judged: NotJudged | None
    """Why it is NOT_JUDGED: ``aborted`` (exit 130 or 3) or ``no_floor`` (exit 4)."""
    stopped: bool
    """A replay was stopped (cancelled or interrupted), or a cancel came before all the
    replays asked for ran (one that finished while the cancel arrived was not stopped)."""
    exit_code: int
    report: ReplayReport
    """The replays as ``replay.series`` reports them, for a face that prints them whole
    (the CLI's lines and ``--json``); the fields above are what they amount to."""

    @property
    def last_comparison(self) -> int | None:
        """The latest stored comparison of the original and a replay."""
        for a in reversed(self.attempts):
            if a.comparison_id is not None:
                return a.comparison_id
        return None


def _attempt(o: ReplayOutcome) -> ReplayAttempt:
    return ReplayAttempt(
        replay_run=o.replay.run_id if o.replay else None,
        status=o.status,
        verdict=o.verdict,
        reason=o.reason,
        comparison_id=o.comparison_id,  # carried by the outcome: no re-query
        exit_code=o.exit_code,
    )


def replay_and_judge(
    store: RunStore,
    run_ref: str,
    options: ReplayOptions,
    *,
    times: int | None = None,
    determinism: str = "recorded",
    on_event: Callable[[ReplayEvent], None] | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
) -> ReplayDone:
    """Replay ``run_ref`` (``times`` replicas; None: ``replay_many``'s adaptive rule;
    ``determinism="off"``: one more replay with deterministic mode off, for its cost),
    store every replay, comparison and floor, and say what they amount to."""
    from replay_tui.replay.series import replay_many

    report = replay_many(
        store,
        run_ref,
        options,
        times=times,
        determinism=determinism,
        on_event=on_event,
        should_cancel=should_cancel,
    )
    attempts = tuple(_attempt(o) for o in report.outcomes)
    code = report.exit_code
    judgement, why = judgement_of(code)
    stopped = any(a.status in (CANCELLED, INTERRUPTED) for a in attempts) or (
        should_cancel() and len(attempts) < (times or 1)
    )
    return ReplayDone(
        original_id=report.original_id,
        attempts=attempts,
        judgement=judgement,
        not_judged=why,
        stopped=stopped,
        exit_code=code,
        report=report,
    )
