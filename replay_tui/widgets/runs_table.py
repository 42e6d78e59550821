"""The runs table: a grid that shows a few hundred rows of the store at a time.

The screen that owns it asks the store for pages (LIMIT/OFFSET on the started_at
index) and hands them to ``show_page``; this widget only turns records into cells and
remembers which runs it holds.  Adding 100,000 rows to a DataTable would block the
event loop for tens of seconds (every cell is measured), so it never holds more than
was paged in, and it draws with ``Grid``, which renders each row once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from rich.text import Text

from replay_tui.verdicts import Reproduction
from replay_tui.widgets.grid import Grid, GridColumn
from replay_tui.widgets.style import Palette, duration, short
from storage.records import RunRecord
from storage.store import Order


class RunColumn(NamedTuple):
    key: str
    label: str
    width: int
    order: Order | None


COLUMNS: tuple[RunColumn, ...] = (
    RunColumn("id", "ID", 13, None),
    RunColumn("name", "NAME", 26, "name"),
    RunColumn("started", "STARTED", 19, "started_at"),
    RunColumn("verdict", "VERDICT", 16, "last_verdict"),
    RunColumn("gaps", "GAPS", 10, None),
    RunColumn("status", "STATUS", 11, "status"),
    RunColumn("duration", "DUR", 7, "duration_s"),
    RunColumn("kind", "KIND", 8, "kind"),
    RunColumn("commit", "COMMIT", 8, None),
    RunColumn("image", "IMAGE", 13, None),
)
NAME_MIN = 12
DROP_ORDER = ("image", "commit", "kind", "duration", "started")
"""Columns a narrow terminal hides, first to last."""
SORTABLE: tuple[Order, ...] = tuple(c.order for c in COLUMNS if c.order is not None)


def reproduction_cell(palette: Palette, rep: Reproduction) -> Text:
    """``IDENTICAL 3/3 +1``: the latest completed verdict, reproduced of completed, and
    how many more replays were aborted (cancelled, interrupted, timed out, infra)."""
    cell = palette.verdict(rep.verdict) if rep.verdict else Text("-", style=palette.muted)
    if rep.completed:
        cell.append(f" {rep.reproduced}/{rep.completed}")
    aborted = sum(rep.aborted.values())
    if aborted:
        cell.append(f" +{aborted}", style=palette.muted)
    return cell


def image_short(ref: str | None, digest: str | None) -> str:
    if digest:
        return "@" + short(digest, 12)
    if ref:
        return ref.rsplit("/", 1)[-1][:13]
    return "-"


class RunsTable(Grid):
    """Runs, one row each, keyed by run id."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._records: dict[str, RunRecord] = {}
        self._reproduction: dict[str, Reproduction] = {}
        self._sort: tuple[Order, bool] = ("started_at", True)
        self._width = 0

    def reproduction(self, run_id: str) -> Reproduction | None:
        """What the replays of a shown original run add up to (None: never replayed)."""
        return self._reproduction.get(run_id)

    def set_sort_columns(self, order: Order, descending: bool, *, width: int = 0) -> None:
        """(Re)build the columns for a ``width``-cell wide terminal, marking the sort column.

        Every column fits when the terminal is wide enough, and the name takes what is
        left (26 to 60).  A narrower one drops the least needed columns first (IMAGE,
        COMMIT, KIND, DUR, STARTED) so ID, NAME, VERDICT, GAPS and STATUS stay in view at
        80 columns, the name narrowed to no less than 12.  Call it again on resize.
        """
        self._sort = (order, descending)
        self._width = width
        shown = {c.key for c in COLUMNS}
        if width:
            budget = width - 4

            def need(keys: set[str]) -> int:
                name = COLUMNS[1].width if "started" in keys else NAME_MIN
                return sum(
                    (name if c.key == "name" else c.width) + 2 for c in COLUMNS if c.key in keys
                )

            for key in DROP_ORDER:
                if need(shown) <= budget:
                    break
                shown.discard(key)
        fixed = sum(c.width + 2 for c in COLUMNS if c.key != "name" and c.key in shown) + 4
        columns = []
        for col in COLUMNS:
            label = col.label
            if col.order == order:
                label += " ▼" if descending else " ▲"
            size = col.width if col.key in shown else 0
            if col.key == "name" and width:
                size = max(NAME_MIN, min(60, width - fixed))
                if "started" in shown:
                    size = max(col.width, size)
            columns.append(GridColumn(col.key, label, size))
        self.set_columns(columns)

    def refit(self, width: int) -> None:
        """Re-fit the columns to a new terminal width (the sort is kept)."""
        if width != self._width:
            self.set_sort_columns(*self._sort, width=width)
            self._lines.clear()

    def record(self, run_id: str) -> RunRecord | None:
        """The record of a run the table holds."""
        return self._records.get(run_id)

    def clear(self) -> None:
        self._records.clear()
        self._reproduction.clear()
        super().clear()

    def show_page(
        self,
        records: Sequence[RunRecord],
        *,
        replace: bool,
        reproduction: Mapping[str, Reproduction] | None = None,
    ) -> int:
        """Add a page of runs (replacing what is shown when ``replace``); returns rows added.

        ``reproduction``: per original run, what all its replays add up to; its cell reads
        ``IDENTICAL 3/3 +1`` (3 of 3 completed replays reproduced, 1 more was aborted)."""
        if replace:
            self._records.clear()
            self._reproduction.clear()
        self._reproduction.update(reproduction or {})
        palette = Palette.of(self.app)
        muted = palette.muted
        verdicts: dict[str | None, Text] = {}
        statuses: dict[str, Text] = {}
        rows: list[tuple[str, list[Text]]] = []
        for r in records:
            if r.id in self._records:
                continue  # a run inserted while paging shifts OFFSET: never show it twice
            self._records[r.id] = r
            rep = self._reproduction.get(r.id)
            cached = verdicts.get(r.last_verdict)
            if rep is not None:
                verdict = reproduction_cell(palette, rep)
            elif cached is not None:
                verdict = cached
            else:
                verdict = verdicts[r.last_verdict] = palette.verdict(r.last_verdict)
            status = statuses.get(r.status)
            if status is None:
                status = statuses[r.status] = palette.status(r.status)
            gaps = r.gaps
            rows.append(
                (
                    r.id,
                    [
                        Text(short(r.id, 13)),
                        Text(r.name or "-"),
                        Text(r.started_at[:19].replace("T", " ")),
                        verdict,
                        palette.gap_counts(
                            gaps.critical if gaps else None,
                            gaps.warning if gaps else None,
                            gaps.info if gaps else None,
                        ),
                        status,
                        Text(duration(r.duration_s)),
                        Text(r.kind, style=muted if r.kind == "original" else ""),
                        Text(short(r.commit, 8)),
                        Text(image_short(r.image_ref, r.image_digest)),
                    ],
                )
            )
        if replace:
            self.replace_rows(rows)
        else:
            self.add_rows(rows)
        return len(rows)

    @property
    def selected_run(self) -> str | None:
        """The run id under the cursor, if any."""
        return self.cursor_key
