"""Messages that workers post to their screens (and the one the runs screen posts itself).

Workers never touch widgets: they read the store, run the replay or the comparison,
and post one of these.  Each carries plain data from ``replay_tui.tui.queries``
or the domain layers, never a live connection.  A message is a dataclass where its
fields are all it holds (Textual's ``Message.__post_init__`` sets it up).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from replay_tui.replay.context import ReplayEvent
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


@dataclass
class RunsGroup(Message):
    """The replay runs of one original, to show under it (a group opened)."""

    generation: int
    run_id: str
    records: list[RunRecord]


class RunsCounted(Message):
    """How many rows the current query has (groups, when replays sit under their
    originals), and how many runs it matches in all (``everything``)."""

    def __init__(self, generation: int, total: int, everything: int | None = None) -> None:
        super().__init__()
        self.generation = generation
        self.total = total
        self.everything = total if everything is None else everything


@dataclass
class RunsPageShown(Message):
    """Posted by the runs screen once a query's first page has been painted."""

    generation: int
    rows: int
    total: int | None
    painted_at: float = field(init=False, default_factory=time.perf_counter)


@dataclass
class PickerRuns(Message):
    """Runs for the run picker (compare with another run)."""

    generation: int
    records: list[RunRecord]


@dataclass
class RunDetailLoaded(Message):
    detail: RunDetail


@dataclass
class ComparisonLoaded(Message):
    view: ComparisonView


@dataclass
class DashboardLoaded(Message):
    stats: DashboardStats


@dataclass
class ReplayProgress(Message):
    """One event of a replay in progress (a stage change or a line of the run's output)."""

    event: ReplayEvent


@dataclass
class ReplayFinished(Message):
    summary: ReplaySummary


# -- navigation: screens ask the app, which owns the dependencies, to open a screen ---


@dataclass
class OpenRun(Message):
    run_id: str


@dataclass
class OpenReplay(Message):
    run_id: str


@dataclass(kw_only=True)
class OpenComparison(Message):
    """A stored comparison by id, or runs A and B (latest stored, else computed)."""

    comparison_id: int | None = None
    a_run: str | None = None
    b_run: str | None = None


@dataclass
class OpenBisect(Message):
    """A stored bisect's answer, on the screen that showed it when it finished."""

    bisect: StoredBisect


@dataclass
class PickAndCompare(Message):
    """Choose another run and compare it with ``run_id``."""

    run_id: str


@dataclass
class WorkerFailed(Message):
    """A screen's worker raised; the app shows the error modal.

    ``Worker.StateChanged`` does not bubble, so each screen forwards its failures with
    this message (see ``replay_tui.tui.screens.base``).
    """

    error: BaseException
    group: str
