"""Messages that workers post to their screens (and the one the runs screen posts itself).

Workers never touch widgets: they read the store, run the replay or the comparison,
and post one of these.  Each carries plain data from ``replay_tui.tui.queries``
or the domain layers, never a live connection.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from replay_tui.replay.runner import ReplayEvent
    from replay_tui.tui.queries import (
        ComparisonView,
        DashboardStats,
        ReplaySummary,
        RunDetail,
        StoredBisect,
    )
    from replay_tui.verdicts import Reproduction
    from storage.records import RunRecord
    from storage.store import SearchReach


class RunsPage(Message):
    """A page of the runs table; ``generation`` names the query it answers."""

    def __init__(
        self,
        generation: int,
        offset: int,
        records: list[RunRecord],
        reproduction: dict[str, Reproduction] | None = None,
        *,
        replay_runs: dict[str, int] | None = None,
        children: dict[str, list[RunRecord]] | None = None,
        reach: SearchReach | None = None,
    ) -> None:
        super().__init__()
        self.generation = generation
        self.offset = offset
        self.records = records
        self.reach = reach
        """What the query's search matched, as read for this page (its count reuses it)."""
        self.reproduction = reproduction or {}
        """Per original run on the page: what all its replays add up to."""
        self.replay_runs = replay_runs or {}
        """Per original run on the page: how many replay runs sit under it."""
        self.children = children or {}
        """The replay runs of the page's open groups."""


class RunsGroup(Message):
    """The replay runs of one original, to show under it (a group opened)."""

    def __init__(self, generation: int, run_id: str, records: list[RunRecord]) -> None:
        super().__init__()
        self.generation = generation
        self.run_id = run_id
        self.records = records


class RunsCounted(Message):
    """How many rows the current query has (groups, when replays sit under their
    originals), and how many runs it matches in all (``everything``)."""

    def __init__(self, generation: int, total: int, everything: int | None = None) -> None:
        super().__init__()
        self.generation = generation
        self.total = total
        self.everything = total if everything is None else everything


class RunsPageShown(Message):
    """Posted by the runs screen once a query's first page has been painted."""

    def __init__(self, generation: int, rows: int, total: int | None) -> None:
        super().__init__()
        self.generation = generation
        self.rows = rows
        self.total = total
        self.painted_at = time.perf_counter()


class PickerRuns(Message):
    """Runs for the run picker (compare with another run)."""

    def __init__(self, generation: int, records: list[RunRecord]) -> None:
        super().__init__()
        self.generation = generation
        self.records = records


class RunDetailLoaded(Message):
    def __init__(self, detail: RunDetail) -> None:
        super().__init__()
        self.detail = detail


class ComparisonLoaded(Message):
    def __init__(self, view: ComparisonView) -> None:
        super().__init__()
        self.view = view


class DashboardLoaded(Message):
    def __init__(self, stats: DashboardStats) -> None:
        super().__init__()
        self.stats = stats


class ReplayProgress(Message):
    """One event of a replay in progress (a stage change or a line of the run's output)."""

    def __init__(self, event: ReplayEvent) -> None:
        super().__init__()
        self.event = event


class ReplayFinished(Message):
    def __init__(self, summary: ReplaySummary) -> None:
        super().__init__()
        self.summary = summary


# -- navigation: screens ask the app, which owns the dependencies, to open a screen ---


class OpenRun(Message):
    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


class OpenReplay(Message):
    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


class OpenComparison(Message):
    """A stored comparison by id, or runs A and B (latest stored, else computed)."""

    def __init__(
        self,
        *,
        comparison_id: int | None = None,
        a_run: str | None = None,
        b_run: str | None = None,
    ) -> None:
        super().__init__()
        self.comparison_id = comparison_id
        self.a_run = a_run
        self.b_run = b_run


class OpenBisect(Message):
    """A stored bisect's answer, on the screen that showed it when it finished."""

    def __init__(self, bisect: StoredBisect) -> None:
        super().__init__()
        self.bisect = bisect


class PickAndCompare(Message):
    """Choose another run and compare it with ``run_id``."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


class WorkerFailed(Message):
    """A screen's worker raised; the app shows the error modal.

    ``Worker.StateChanged`` does not bubble, so each screen forwards its failures with
    this message (see ``replay_tui.tui.screens.base``).
    """

    def __init__(self, error: BaseException, group: str) -> None:
        super().__init__()
        self.error = error
        self.group = group
