"""The import use case (``replay-tui import mlflow|wandb``): runs from an experiment
tracker into the store as manifests with their gaps.

Thin on purpose: ``importers.import_runs`` does the work (bounded in total by an
``ImportBudget``; any error leaves the store unchanged); the outcome says what came of
each source run, with the exit code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from storage.vocabulary import EXIT_OK

if TYPE_CHECKING:
    from replay_tui.importers import Outcome
    from storage.store import RunStore

Tracker = Literal["mlflow", "wandb"]


@dataclass(frozen=True, kw_only=True)
class ImportDone:
    """What an import did with every source run it was pointed at."""

    tracker: str
    source: str
    """What it read, as the user named it (a tracking URI, the run folders)."""
    outcomes: tuple[Outcome, ...]
    """One per source run: ``imported``, ``already`` (kept as it was) or ``skipped``."""
    imported: int
    already: int
    skipped: int
    exit_code: int = EXIT_OK


def import_tracker_runs(
    store: RunStore,
    tracker: Tracker,
    source: str,
    *,
    max_bytes: str | None = None,
    max_points: int | None = None,
    said_as: str | None = None,
    **filters: Any,
) -> ImportDone:
    """Import the runs ``source`` and ``filters`` name from ``tracker`` (``mlflow``:
    ``experiments``, ``run_ids``; ``wandb``: more ``folders``; both: ``trust_roots``),
    within ``max_bytes`` (``--max-bytes``' text: ``4GiB``...) and ``max_points`` (None:
    the environment's, else the defaults).  ``said_as``: the source as the outcome
    names it (default ``source``)."""
    from replay_tui.importers import ImportBudget, import_runs, load_importer, parse_size

    size = parse_size(max_bytes, "--max-bytes") if max_bytes is not None else None
    budget = ImportBudget.from_env(size, max_points)
    importer = load_importer(tracker)
    outcomes = tuple(import_runs(store, importer, source, budget=budget, **filters))
    return ImportDone(
        tracker=tracker,
        source=source if said_as is None else said_as,
        outcomes=outcomes,
        imported=sum(o.status == "imported" for o in outcomes),
        already=sum(o.status == "already" for o in outcomes),
        skipped=sum(o.status == "skipped" for o in outcomes),
    )
