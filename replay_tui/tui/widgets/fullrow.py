"""A line under a grid with the whole of what the row under the cursor shows cut.

A grid cuts a value wider than its column with an ellipsis, and a narrow terminal hides
whole columns.  This line follows the grid's cursor (it watches ``cursor_row``; the
grid's owner calls ``follow`` when rows or columns change in place) and names each cut
or hidden cell of that row with its value in full; it is blank when the row shows
whole.  The grid's owner may give the whole values (``whole``: a row key to
``{column key: text}``) where its cells were shortened on purpose (a run id to 13
characters).

The line wraps (up to ``MAX_LINES``) so that a narrow terminal shows every hidden
column's value too: at 80 columns the id, name, start, kind, commit and image of the run
under the cursor.  What needs more lines than that is shown a page at a time, the pages
in turn (a click shows the next): no value is cut.  The line keeps the height it grew
to until the terminal's width changes: the grid above does not jump from row to row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from replay_tui.safety import escape_control
from replay_tui.tui.widgets.grid import Grid, GridColumn

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

    MAX_LINES = 3
    CYCLE_S = 5.0
    DEFAULT_CSS = """
    FullRow {
        height: auto;
        max-height: 3;
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
        self.page = 0
        self._page_count = 0
        self._held = 0
        """The lines the last layout gave this line."""
        self._held_width = -1

    def on_mount(self) -> None:
        self.watch(self.grid, "cursor_row", self.follow, init=False)
        self.follow()
        if not self.app.is_headless:  # a test's screenshot never catches a page turning
            self.set_interval(self.CYCLE_S, self.next_page)

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
            self.page = 0
            # a layout (every widget of the screen drawn again) only to grow
            self.refresh(layout=self._needed() > self._held)

    def _pack(self, parts: Sequence[tuple[str, str]], width: int) -> list[Text]:
        """The parts two spaces apart in lines of ``width``: a part that does not fit the
        rest of a line starts the next one when it fits a line (a label stays with its
        value); a longer one is folded."""
        label = self.get_component_rich_style("fullrow--label")
        t = Text(end="")
        used = 0
        for i, (name, raw) in enumerate(parts):
            value = escape_control(raw)
            size = cell_len(name) + 1 + cell_len(value)
            if i:
                rest = width - used - 2
                if size > rest and (size <= width or cell_len(name) + 12 > rest):
                    t.append("\n")
                    used = 0
                else:
                    t.append("  ")
                    used += 2
            t.append(f"{name} ", style=label)
            t.append(value)
            used = (used + size) % width if used + size > width else used + size
        lines: list[Text] = []
        for line in t.split("\n"):
            n = len(line.plain)
            lines.extend(line.divide(range(width, n, width)) if n > width else [line])
        return lines

    def _pages(self, width: int = 0) -> list[list[Text]]:
        """The lines of the parts, ``MAX_LINES`` a page; pages after the first are shown
        in turn (every ``CYCLE_S`` seconds, or on a click), each marked ``k/n``."""
        if not self.parts:
            return []
        width = max(8, width or self.content_size.width or self.app.size.width - 2)
        lines = self._pack(self.parts, width)
        if len(lines) <= self.MAX_LINES:
            return [lines]
        lines = self._pack(self.parts, width - 6)
        pages = [lines[i : i + self.MAX_LINES] for i in range(0, len(lines), self.MAX_LINES)]
        muted = self.get_component_rich_style("fullrow--label")
        for k, page in enumerate(pages, 1):
            page[-1] = page[-1].copy()
            page[-1].append(f"  {k}/{len(pages)}", style=muted)
        return pages

    def _needed(self, width: int = 0) -> int:
        """The lines the row under the cursor needs (1 to ``MAX_LINES``)."""
        return max(1, max((len(p) for p in self._pages(width)), default=1))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The most lines a row has needed at this width: the line keeps the height it
        grew to, so the grid above it does not jump as the cursor moves or a search
        brings other rows (and a row that needs fewer lines costs a repaint, not a
        layout of the screen); a new width starts again from what this row needs."""
        needed = self._needed(width)
        if width != self._held_width:
            self._held_width = width
            self._held = needed
        else:
            self._held = max(self._held, needed)
        return self._held

    def next_page(self) -> None:
        """Show the next page of a row whose whole values need more than one."""
        if self._page_count > 1:
            self.page = (self.page + 1) % self._page_count
            self.refresh()

    def on_click(self) -> None:
        self.next_page()

    def render(self) -> Text:
        pages = self._pages()
        self._page_count = len(pages)
        if not pages:
            return Text("")
        page = pages[min(self.page, len(pages) - 1)]
        height = max(self._held, *(len(p) for p in pages))
        return Text("\n", end="").join([*page, *[Text()] * (height - len(page))])
