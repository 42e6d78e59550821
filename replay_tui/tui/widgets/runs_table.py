"""The runs table: a grid that shows a few hundred rows of the store at a time.

The screen that owns it asks the store for pages (LIMIT/OFFSET on the started_at
index) and hands them to ``show_page``; this widget only turns records into cells and
remembers which runs it holds.  Adding 100,000 rows to a DataTable would block the
event loop for tens of seconds (every cell is measured), so it never holds more than
was paged in, and it draws with ``Grid``, which renders each row once.  A run shown
again (the next keystroke of a search) reuses the cells made for it last time.

Grouped, an original run that has replay runs is a group: ``▸`` closed, ``▾`` open with
its replays under it (``└``), oldest first.  The table only shows groups; the screen
loads the replays of the groups it opens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from rich.text import Text
from textual.binding import Binding, BindingType

from replay_tui.tui.widgets.grid import Grid, GridColumn, GridMessage
from replay_tui.tui.widgets.style import Palette, duration, safe, short, when
from replay_tui.verdicts import Reproduction
from storage.records import RunRecord

if TYPE_CHECKING:
    from replay_tui.tui.queries import SortKey


class RunColumn(NamedTuple):
    key: str
    label: str
    width: int
    order: SortKey | None


COLUMNS: tuple[RunColumn, ...] = (
    RunColumn("id", "ID", 13, None),
    RunColumn("name", "NAME", 26, "name"),
    RunColumn("started", "STARTED", 19, "started_at"),
    RunColumn("verdict", "VERDICT", 18, "severity"),  # " IDENTICAL  3/3 +1"
    RunColumn("gaps", "GAPS", 10, "gaps"),
    RunColumn("status", "STATUS", 11, "status"),
    RunColumn("duration", "DUR", 7, "duration_s"),
    RunColumn("kind", "KIND", 8, "kind"),
    RunColumn("commit", "COMMIT", 8, None),
    RunColumn("image", "IMAGE", 13, None),
)
NAME_MIN = 12
NAME_MAX = 60
IMAGE_MAX = 60
DROP_ORDER = ("image", "commit", "kind", "duration", "started")
"""Columns a narrow terminal hides, first to last."""
SORTABLE: tuple[SortKey, ...] = tuple(c.order for c in COLUMNS if c.order is not None)
CLOSED, OPEN, CHILD, LEAF = "▸ ", "▾ ", "  └ ", "  "
"""The name's prefix when grouped: a closed group, an open one, a replay in an open
group, an original with no replay runs."""
REPLAY_MARK = "↻ "
"""The name's prefix of a replay run that is a row of its own (in the list, not under
its original): its kind shows at every width, the KIND column being the first a narrow
terminal hides but one."""
CELL_CACHE = 4096


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
    """``train:2025.11@16d1a9b9d4ca``: the reference's last part and the digest's first 12
    hex digits (the registry path and the rest of the digest are on the whole-value
    line).  Never cut here: a column narrower than it cuts it with an ellipsis.  A
    reference pinned by digest (a replay's ``train@sha256:...``) shows it once."""
    tail = ref.rsplit("/", 1)[-1] if ref else ""
    name, _, pinned = tail.partition("@")
    digest = digest or pinned or None
    if digest:
        return f"{name}@{short(digest, 12)}"
    return tail or "-"


def image_whole(ref: str | None, digest: str | None) -> str:
    """The image as one reference to copy: ``registry/train:tag@sha256:...``.  A reference
    that already names a digest (a replay pins its image by digest) is whole as it is;
    one without gets the recorded digest; with no reference, the digest alone."""
    if ref and digest and "@" not in ref:
        return f"{ref}@{digest}"
    return ref or digest or "-"


class RunsTable(Grid):
    """Runs, one row each, keyed by run id; grouped, replays under their originals."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right,plus", "open_group", "Open group", show=False),
        Binding("left,minus", "close_group", "Close group", show=False),
        Binding("space", "toggle_group", "Open/close group", show=False),
    ]

    @dataclass
    class GroupToggled(GridMessage):
        """Open (``open``) or close the group of original run ``run_id``."""

        run_id: str
        open: bool

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._records: dict[str, RunRecord] = {}
        self._reproduction: dict[str, Reproduction] = {}
        self._replay_runs: dict[str, int] = {}
        self._children: dict[str, list[str]] = {}
        self._group_of: dict[str, str] = {}
        self._grouped = False
        self._made: dict[str, tuple[RunRecord, Reproduction | None, str, tuple[Text, ...]]] = {}
        self._palette: Palette | None = None
        self._sort: tuple[SortKey, bool] = ("started_at", True)
        self._width = 0
        self._need = (0, 0)
        """The cells the longest NAME and IMAGE of the rows shown since the last new page
        need (what the spare width is shared by)."""

    def reproduction(self, run_id: str) -> Reproduction | None:
        """What the replays of a shown original run add up to (None: never replayed)."""
        return self._reproduction.get(run_id)

    def set_sort_columns(self, order: SortKey, descending: bool, *, width: int = 0) -> None:
        """(Re)build the columns for a ``width``-cell wide terminal, marking the sort column.

        Every column fits when the terminal is wide enough.  A narrower one drops the
        least needed columns first (IMAGE, COMMIT, KIND, DUR, STARTED) so ID, NAME,
        VERDICT, GAPS and STATUS stay in view at 80 columns, the name narrowed to no less
        than 12.  The width the fixed columns leave is shared by NAME and IMAGE as the
        rows held need it: the name gets what its longest value needs (26 to 60), the
        image the rest (up to 60), then the name what the image does not need; the cells
        still wider end in an ellipsis.  Call it again on resize (``refit``); new rows
        re-share the width (``show_page``).
        """
        self._sort = (order, descending)
        self._width = width
        self._fit_columns(force=True)

    def _fit_columns(self, *, force: bool = False) -> None:
        order, descending = self._sort
        width = self._width
        shown = {c.key for c in COLUMNS}
        sizes = {c.key: c.width for c in COLUMNS}
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
            fixed = sum(
                c.width + 2 for c in COLUMNS if c.key in shown and c.key not in ("name", "image")
            )
            name_min = COLUMNS[1].width if "started" in shown else NAME_MIN
            image_min = sizes["image"] if "image" in shown else 0
            spare = budget - fixed - (image_min + 2 if image_min else 0)
            name_need, image_need = self._need
            name = max(name_min, min(NAME_MAX, name_need, spare))
            spare -= name
            if image_min:
                grow = max(0, min(spare, min(IMAGE_MAX, image_need) - image_min))
                sizes["image"] = image_min + grow
                spare -= grow
            if spare > 0 and name < NAME_MAX:  # what the image leaves: the name
                name = min(NAME_MAX, name + spare)
            sizes["name"] = max(NAME_MIN, name)
        columns = []
        for col in COLUMNS:
            label = col.label
            if col.order == order:
                label += " ▼" if descending else " ▲"
            columns.append(GridColumn(col.key, label, sizes[col.key] if col.key in shown else 0))
        if force or columns != self._columns:
            self.set_columns(columns)

    def refit(self, width: int) -> None:
        """Re-fit the columns to a new terminal width (the sort is kept)."""
        if width != self._width:
            self._width = width
            self._fit_columns(force=True)
            self._lines.clear()

    def record(self, run_id: str) -> RunRecord | None:
        """The record of a run the table holds."""
        return self._records.get(run_id)

    def whole_values(self, run_id: str) -> dict[str, str]:
        """The values a row shortens, whole (the id, name, commit and image): what a
        ``FullRow`` under the table shows where a cell is not the whole value."""
        r = self._records.get(run_id)
        if r is None:
            return {}
        image = image_whole(r.image_ref, r.image_digest)
        return {"id": r.id, "name": r.name or "-", "commit": r.commit or "-", "image": image}

    @property
    def top_level_count(self) -> int:
        """Rows that are not replays shown under their original."""
        return self.row_count - len(self._group_of)

    def clear(self) -> None:
        self._records.clear()
        self._reproduction.clear()
        self._replay_runs.clear()
        self._children.clear()
        self._group_of.clear()
        super().clear()

    # -- groups ------------------------------------------------------------------------

    def is_group(self, run_id: str) -> bool:
        """Is ``run_id`` a shown original with replay runs to show under it?"""
        if not self._grouped or run_id in self._group_of:
            return False
        return self._replay_runs.get(run_id, 0) > 0

    def is_open(self, run_id: str) -> bool:
        return run_id in self._children

    def parent_of(self, run_id: str) -> str | None:
        """The original a shown replay sits under (None: a top-level row)."""
        return self._group_of.get(run_id)

    def children_of(self, run_id: str) -> list[str]:
        """The replays shown under an open group, in order."""
        return list(self._children.get(run_id, ()))

    def open_group(self, run_id: str, records: Sequence[RunRecord]) -> None:
        """Show ``records`` (the replay runs of ``run_id``) under it."""
        if run_id not in self._records or run_id in self._group_of:
            return
        if run_id in self._children:
            self.close_group(run_id)
        palette = Palette.of(self.app)
        rows: list[tuple[str, list[Text]]] = []
        kids: list[str] = []
        for r in records:
            if r.id in self._records:
                continue  # shown already (a flat page held it): never twice
            self._records[r.id] = r
            self._group_of[r.id] = run_id
            kids.append(r.id)
            rows.append((r.id, list(self._cells(palette, r, CHILD))))
        self._children[run_id] = kids
        self._replay_runs[run_id] = max(self._replay_runs.get(run_id, 0), len(kids))
        self.update_row(run_id, self._cells(palette, self._records[run_id], OPEN))
        self.insert_rows(self.get_row_index(run_id) + 1, rows)
        self._fit_columns()

    def close_group(self, run_id: str) -> None:
        """Take the replays shown under ``run_id`` away (the cursor on one goes to it)."""
        kids = self._children.pop(run_id, None)
        if kids is None:
            return
        on_child = self.cursor_key in kids
        for kid in kids:
            self._records.pop(kid, None)
            self._group_of.pop(kid, None)
        self.remove_rows(kids)
        if run_id in self._records:
            prefix = CLOSED if self.is_group(run_id) else LEAF
            self.update_row(
                run_id, self._cells(Palette.of(self.app), self._records[run_id], prefix)
            )
            if on_child:
                self.move_cursor(row=self.get_row_index(run_id))

    def action_open_group(self) -> None:
        run = self.cursor_key
        if run is not None and self.is_group(run) and not self.is_open(run):
            self.post_message(self.GroupToggled(self, run, True))
        elif run is None or not (self.is_group(run) or run in self._group_of):
            self.action_scroll_right()

    def _close_parent_of(self, run: str) -> bool:
        """On a replay inside a group: close the group and move to its original."""
        parent = self._group_of.get(run)
        if parent is None:
            return False
        self.move_cursor(row=self.get_row_index(parent))
        self.post_message(self.GroupToggled(self, parent, False))
        return True

    def action_close_group(self) -> None:
        run = self.cursor_key
        if run is None or self._close_parent_of(run):
            return
        if self.is_open(run):
            self.post_message(self.GroupToggled(self, run, False))
        elif not self.is_group(run):
            self.action_scroll_left()

    def action_toggle_group(self) -> None:
        run = self.cursor_key
        if run is None or self._close_parent_of(run):
            return
        if self.is_group(run):
            self.post_message(self.GroupToggled(self, run, not self.is_open(run)))

    # -- rows --------------------------------------------------------------------------

    def show_page(
        self,
        records: Sequence[RunRecord],
        *,
        replace: bool,
        reproduction: Mapping[str, Reproduction] | None = None,
        replay_runs: Mapping[str, int] | None = None,
        children: Mapping[str, Sequence[RunRecord]] | None = None,
        grouped: bool = False,
    ) -> int:
        """Add a page of runs (replacing what is shown when ``replace``); returns the
        top-level rows added.

        ``reproduction``: per original run, what all its replays add up to; its cell reads
        ``IDENTICAL 3/3 +1`` (3 of 3 completed replays reproduced, 1 more was aborted).
        ``grouped``: originals with replay runs (``replay_runs``) are groups; those in
        ``children`` are shown open, their replays under them."""
        if replace:
            self._records.clear()
            self._reproduction.clear()
            self._replay_runs.clear()
            self._children.clear()
            self._group_of.clear()
            self._grouped = grouped
            self._need = (0, 0)
        self._reproduction.update(reproduction or {})
        self._replay_runs.update(replay_runs or {})
        opened = children or {}
        palette = Palette.of(self.app)
        rows: list[tuple[str, Sequence[Text]]] = []
        added = 0
        for r in records:
            if r.id in self._records:
                continue  # a run inserted while paging shifts OFFSET: never show it twice
            self._records[r.id] = r
            added += 1
            kids = [c for c in opened.get(r.id, ()) if c.id not in self._records]
            if not self._grouped:
                prefix = ""
            elif r.id in opened:
                prefix = OPEN
            else:
                prefix = CLOSED if self._replay_runs.get(r.id, 0) > 0 else LEAF
            rows.append((r.id, self._cells(palette, r, prefix)))
            if self._grouped and r.id in opened:
                self._children[r.id] = [c.id for c in kids]
                for c in kids:
                    self._records[c.id] = c
                    self._group_of[c.id] = r.id
                    rows.append((c.id, self._cells(palette, c, CHILD)))
        self._fit_columns()  # the new rows' names and images share the spare width
        if replace:
            self.replace_rows(rows)
        else:
            self.add_rows(rows)
        if len(self._made) > CELL_CACHE:
            self._made.clear()
        return added

    def _cells(self, palette: Palette, r: RunRecord, prefix: str) -> tuple[Text, ...]:
        """The row of ``r``: made once, then reused while the run and its replays are
        the same (cells are never changed in place)."""
        if palette is not self._palette:  # another theme: other colours
            self._made.clear()
            self._palette = palette
        if r.kind == "replay" and prefix != CHILD:
            prefix = REPLAY_MARK  # a replay on a row of its own: marked as one
        rep = self._reproduction.get(r.id)
        made = self._made.get(r.id)
        if made is not None and made[0] == r and made[1] == rep and made[2] == prefix:
            self._needed(made[3])
            return made[3]
        if rep is not None:
            verdict = reproduction_cell(palette, rep)
        else:
            verdict = palette.verdict(r.last_verdict)
        gaps = r.gaps
        name = r.name or "-"
        cells = (  # the name, kind, commit and image are the manifest's: escaped
            Text(short(r.id, 13)),
            safe(prefix + name),
            Text(when(r.started_at)),
            verdict,
            palette.gap_counts(
                gaps.critical if gaps else None,
                gaps.warning if gaps else None,
                gaps.info if gaps else None,
            ),
            palette.status(r.status),
            Text(duration(r.duration_s)),
            safe(r.kind, style=palette.muted if r.kind == "original" else ""),
            Text(short(r.commit, 8)),
            safe(image_short(r.image_ref, r.image_digest)),
        )
        self._made[r.id] = (r, rep, prefix, cells)
        self._needed(cells)
        return cells

    def _needed(self, cells: Sequence[Text]) -> None:
        name, image = self._need
        self._need = (max(name, cells[1].cell_len), max(image, cells[9].cell_len))

    @property
    def selected_run(self) -> str | None:
        """The run id under the cursor, if any."""
        return self.cursor_key
