"""Compare two runs (``replay-tui compare A B``, the TUI's comparison computed now).

One rule set for both faces: A and B in the caller's order, or the earlier run as the
reference (:func:`reference_first`); the full comparison against the noise floor that
speaks for the pair (``replay.runner.compare_pair``); stored as its ``to_dict()`` unless
the caller says not to, B's badge taking the verdict only when B is a replay of A
(:func:`badge_run`); and a pair one side of which is a replay that did not complete is
NOT JUDGED (exit 130 or 3: :mod:`replay_tui.ops.judgement`), whatever its partial
outputs compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from replay_tui.ops.judgement import Judgement, aborted_exit
from replay_tui.verdicts import Verdict, aborted_replays

if TYPE_CHECKING:
    from replay_tui.compare.comparison import Comparison
    from replay_tui.compare.tolerance import Tolerance
    from storage.manifest import RunManifest
    from storage.store import RunStore

Order = Literal["as_given", "reference_first"]
"""``as_given``: A stays A (the user chose it); ``reference_first``: the earlier run is
A, the reference (:func:`reference_first`)."""


@dataclass(frozen=True, kw_only=True)
class AbortedSide:
    """The side of a pair that is a replay which did not complete."""

    run_id: str
    ended: str
    """How it ended (``verdicts.aborted_label``): CANCELLED, INTERRUPTED, TIMED OUT..."""
    exit_code: int


@dataclass(frozen=True, kw_only=True)
class CompareOutcome:
    """Two runs compared: the comparison, where it is stored, what it amounts to."""

    a: RunManifest
    b: RunManifest
    comparison: Comparison
    comparison_id: int | None
    """The stored comparison's id (None: not stored, ``keep=False``)."""
    verdict: Verdict
    """The comparison's verdict (IDENTICAL ... INCOMPLETE)."""
    judgement: Judgement
    """REPRODUCED, NOT_REPRODUCED, or NOT_JUDGED when :attr:`aborted` is set."""
    aborted: AbortedSide | None
    """The side that is a replay which did not complete (B looked at first)."""
    badge_run: str | None
    """The run whose badge took the verdict (B, when B replays A and it was stored)."""
    exit_code: int


def badge_run(a: RunManifest, b: RunManifest) -> str | None:
    """Whose badge a comparison of A and B sets: B's when B is a replay of A, else none
    (comparing two unrelated runs says nothing about either's reproduction)."""
    return b.run_id if b.replay_of == a.run_id else None


def reference_first(a: RunManifest, b: RunManifest) -> tuple[RunManifest, RunManifest]:
    """A and B with the earlier run (then the smaller id) first: the reference."""
    if (a.started_at, a.run_id) > (b.started_at, b.run_id):
        return b, a
    return a, b


def aborted_side(store: RunStore, a: RunManifest, b: RunManifest) -> AbortedSide | None:
    """The side of the pair (B first, then A) that is a replay whose attempt did not
    complete: its outputs are partial, so comparing them is no verdict."""
    originals = [x for x in dict.fromkeys((a.replay_of, b.replay_of)) if x]
    aborted = aborted_replays(store.replay_outcomes(originals)) if originals else {}
    for run in (b.run_id, a.run_id):
        if run in aborted:
            label = aborted[run]
            return AbortedSide(run_id=run, ended=label, exit_code=aborted_exit(label))
    return None


def compare_runs(
    store: RunStore,
    a_ref: str,
    b_ref: str,
    *,
    tolerance: Tolerance | None = None,
    keep: bool = True,
    order: Order = "as_given",
) -> CompareOutcome:
    """Compare the runs ``a_ref`` and ``b_ref`` (ids or unique prefixes) and, with
    ``keep``, store the comparison (``replay-tui compare A B [--no-store]``)."""
    a_id, b_id = store.resolve(a_ref), store.resolve(b_ref)
    return compare_manifests(
        store,
        store.manifest(a_id),
        store.manifest(b_id),
        tolerance=tolerance,
        keep=keep,
        order=order,
    )


def compare_manifests(
    store: RunStore,
    a: RunManifest,
    b: RunManifest,
    *,
    tolerance: Tolerance | None = None,
    keep: bool = True,
    order: Order = "as_given",
) -> CompareOutcome:
    """:func:`compare_runs` for two manifests the caller has already read."""
    from replay_tui.compare.tolerance import Tolerance
    from replay_tui.replay.runner import compare_pair

    if order == "reference_first":
        a, b = reference_first(a, b)
    tol = tolerance or Tolerance()
    cmp = compare_pair(store, a, b, tol)
    badge = badge_run(a, b)
    cid = None
    if keep:
        cid = store.add_comparison(
            a.run_id,
            b.run_id,
            cmp.verdict,
            cmp.to_dict(),
            rtol=cmp.rtol,
            atol=cmp.atol,
            set_verdict_on=badge,
        )
    stopped = aborted_side(store, a, b)
    code = cmp.exit_code if stopped is None else stopped.exit_code
    judgement: Judgement = (
        "NOT_JUDGED" if stopped is not None else "REPRODUCED" if code == 0 else "NOT_REPRODUCED"
    )
    return CompareOutcome(
        a=a,
        b=b,
        comparison=cmp,
        comparison_id=cid,
        verdict=cmp.verdict,
        judgement=judgement,
        aborted=stopped,
        badge_run=badge if keep else None,
        exit_code=code,
    )
