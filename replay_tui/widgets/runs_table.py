"""The runs table: a DataTable that shows a few hundred rows of the store at a time.

The screen that owns it asks the store for pages (LIMIT/OFFSET on the started_at
index) and hands them to ``show_page``; this widget only turns records into cells and
remembers which runs it holds.  Adding 100,000 rows would block the event loop for
tens of seconds (every cell is measured), so it never holds more than was paged in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from rich.text import Text
from textual.widgets import DataTable

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
    RunColumn("started", "STARTED", 16, "started_at"),
    RunColumn("verdict", "VERDICT", 12, "last_verdict"),
    RunColumn("gaps", "GAPS", 10, None),
    RunColumn("status", "STATUS", 11, "status"),
    RunColumn("duration", "DUR", 7, "duration_s"),
    RunColumn("kind", "KIND", 8, "kind"),
    RunColumn("commit", "COMMIT", 8, None),
    RunColumn("image", "IMAGE", 13, None),
)
SORTABLE: tuple[Order, ...] = tuple(c.order for c in COLUMNS if c.order is not None)


def image_short(ref: str | None, digest: str | None) -> str:
    if digest:
        return "@" + short(digest, 12)
    if ref:
        return ref.rsplit("/", 1)[-1][:13]
    return "-"


class RunsTable(DataTable[Text]):
    """Runs, one row each, keyed by run id."""

    DEFAULT_CSS = """
    RunsTable {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(
            id=id, classes=classes, cursor_type="row", zebra_stripes=True, cell_padding=1
        )
        self._records: dict[str, RunRecord] = {}

    def set_columns(self, order: Order, descending: bool, *, width: int = 0) -> None:
        """(Re)build the columns, marking the one the rows are sorted by.

        The name column takes what a ``width``-cell wide terminal leaves over (26 to 60).
        """
        self.clear(columns=True)
        self._records.clear()
        fixed = sum(c.width + 2 for c in COLUMNS if c.key != "name") + 4
        for col in COLUMNS:
            label = col.label
            if col.order == order:
                label += " ▼" if descending else " ▲"
            size = col.width
            if col.key == "name" and width:
                size = max(col.width, min(60, width - fixed))
            self.add_column(label, width=size, key=col.key)

    def record(self, run_id: str) -> RunRecord | None:
        """The record of a run the table holds."""
        return self._records.get(run_id)

    def show_page(self, records: Sequence[RunRecord], *, replace: bool) -> int:
        """Add a page of runs (replacing what is shown when ``replace``); returns rows added."""
        if replace:
            self.clear()
            self._records.clear()
        palette = Palette.of(self.app)
        muted = palette.muted
        verdicts: dict[str | None, Text] = {}
        statuses: dict[str, Text] = {}
        added = 0
        for r in records:
            if r.id in self._records:
                continue  # a run inserted while paging shifts OFFSET: never show it twice
            self._records[r.id] = r
            verdict = verdicts.get(r.last_verdict)
            if verdict is None:
                verdict = verdicts[r.last_verdict] = palette.verdict(r.last_verdict)
            status = statuses.get(r.status)
            if status is None:
                status = statuses[r.status] = palette.status(r.status)
            gaps = r.gaps
            self.add_row(
                Text(short(r.id, 13)),
                Text(r.name or "-", no_wrap=True, overflow="ellipsis"),
                Text(r.started_at[:16].replace("T", " ")),
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
                key=r.id,
            )
            added += 1
        return added

    @property
    def selected_run(self) -> str | None:
        """The run id under the cursor, if any."""
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:
            return None
        return None if key.value is None else str(key.value)
