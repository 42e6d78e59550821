"""A line under a grid with the whole of what the row under the cursor shows cut.

A grid cuts a value wider than its column with an ellipsis, and a narrow terminal hides
whole columns.  This line follows the grid's cursor (it watches ``cursor_row``; the
grid's owner calls ``follow`` when rows or columns change in place) and names each cut
or hidden cell of that row with its value in full; it is blank when the row shows
whole.  The grid's owner may give the whole values (``whole``: a row key to
``{column key: text}``) where its cells were shortened on purpose (a run id to 13
characters).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget

from replay_tui.safety import escape_control
from replay_tui.widgets.grid import Grid, GridColumn

Whole = Callable[[str], Mapping[str, str]]


def cut_cells(
    columns: Sequence[GridColumn],
    cells: Sequence[Text],
    whole: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """``(column label, whole value)`` of each cell its column cuts or hides, in column
    order; ``whole`` gives a column's whole value where the cell itself is shortened."""
    out = []
    for col, cell in zip(columns, cells, strict=False):
        shown = cell.plain
        full = (whole or {}).get(col.key, shown)
        # hidden, wider than its column, or shortened before (a decoration is no cut)
        cut = col.width <= 0 or cell_len(shown) > col.width or full not in shown
        if cut and full.strip() and full != "-":
            out.append((col.label.rstrip(" ▲▼"), full))
    return out


class FullRow(Widget):
    """The whole values of the grid row under the cursor, where the grid cuts them."""

    DEFAULT_CSS = """
    FullRow {
        height: 1;
        width: 1fr;
        padding: 0 1;
        color: $text-muted;
    }
    FullRow > .fullrow--label { color: $text-accent; }
    """
    COMPONENT_CLASSES = {"fullrow--label"}  # noqa: RUF012

    def __init__(
        self,
        grid: Grid,
        *,
        whole: Whole | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.grid = grid
        self.whole = whole
        self.parts: list[tuple[str, str]] = []

    def on_mount(self) -> None:
        self.watch(self.grid, "cursor_row", self.follow, init=False)
        self.follow()

    def follow(self, row: int | None = None) -> None:
        """Show the cut cells of ``row`` (default: the grid's cursor row); the grid's
        owner calls it when rows or columns change in place (a new page, a refit)."""
        grid = self.grid
        row = grid.cursor_row if row is None else row
        if not 0 <= row < grid.row_count:
            parts: list[tuple[str, str]] = []
        else:
            key = grid.row_key(row)
            cells = [grid.cell(row, c.key) for c in grid.columns]
            parts = cut_cells(grid.columns, cells, self.whole(key) if self.whole else None)
        if parts != self.parts:
            self.parts = parts
            self.refresh()

    def render(self) -> Text:
        label = self.get_component_rich_style("fullrow--label")
        t = Text(no_wrap=True, overflow="ellipsis", end="")
        for i, (name, value) in enumerate(self.parts):
            if i:
                t.append("  ")
            t.append(f"{name} ", style=label)
            t.append(escape_control(value))
        t.truncate(max(1, self.content_size.width), overflow="ellipsis")  # a long image too
        return t
