"""A lean table for many rows: each row is rendered to one Strip once, then only cropped.

DataTable renders every visible cell through Rich's full pipeline on each repaint
(about 0.3 ms a cell); a 200x60 runs browser repaints ~500 cells when a search lands.
This grid keeps the header fixed, renders a row's cells into one line of segments the
first time it is shown (and again only when the cursor or focus changes its look), and
lets the Line API crop that line to the viewport: the way Toolong draws its log lines.

A line is cached by its row's key, not its position, so a new page that shares runs
with the last one (the next keystroke of a search) re-renders only the rows it has not
drawn before, and the screen repaints only the lines whose row changed.  A new row
count changes no layout unless the scrollbar appears or goes: the compositor does not
re-render the whole screen for a new page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip


class GridColumn(NamedTuple):
    key: str
    label: str
    width: int


@dataclass
class GridMessage(Message):
    """A message of a :class:`Grid`: its ``control`` is the grid, so ``@on(..., "#id")``
    picks one grid's."""

    grid: Grid

    @property
    def control(self) -> Grid:
        return self.grid


class Grid(ScrollView, can_focus=True):
    """Rows of Rich ``Text`` cells under a fixed header, with a row cursor."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "grid--header",
        "grid--cursor",
        "grid--cursor-blurred",
        "grid--stripe",
    }
    DEFAULT_CSS = """
    Grid {
        background: $surface;
        color: $foreground;
        height: 1fr;
    }
    Grid > .grid--header { background: $panel; color: $foreground; text-style: bold; }
    Grid > .grid--cursor { background: $block-cursor-background; text-style: bold; }
    Grid > .grid--cursor-blurred { background: $block-cursor-blurred-background; }
    Grid > .grid--stripe { background: $surface-lighten-1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select", "Open", show=False),
        Binding("up,k", "cursor_up", show=False),
        Binding("down,j", "cursor_down", show=False),
        Binding("pageup", "page_up", show=False),
        Binding("pagedown", "page_down", show=False),
        Binding("home,ctrl+home", "first", show=False),
        Binding("end,ctrl+end", "last", show=False),
        Binding("left", "scroll_left", show=False),
        Binding("right", "scroll_right", show=False),
    ]

    cursor_row: reactive[int] = reactive(0, always_update=True, init=False)

    @dataclass
    class RowHighlighted(GridMessage):
        cursor_row: int
        row_key: str | None

    @dataclass
    class RowSelected(GridMessage):
        cursor_row: int
        row_key: str

    @dataclass
    class HeaderSelected(GridMessage):
        column_key: str

    def __init__(
        self,
        columns: Sequence[GridColumn] = (),
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._columns: list[GridColumn] = list(columns)
        self._keys: list[str] = []
        self._rows: list[tuple[Text, ...]] = []
        self._index: dict[str, int] = {}
        self._lines: LRUCache[tuple[str, int, bool], Strip] = LRUCache(1024)
        self._header: Strip | None = None
        self._bases: dict[str, Style] = {}
        self._old_cursor = 0
        self._unpainted = False
        self._paint_waiters: list[Callable[[], object]] = []

    # -- data ------------------------------------------------------------------------

    @property
    def columns(self) -> list[GridColumn]:
        return list(self._columns)

    def call_after_paint(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` after the refresh that draws the rows of the last
        ``replace_rows``.  (``call_after_refresh`` alone may run first: the screen runs
        its callbacks when idle, which it can be before this grid, idle in turn, asks
        for its refresh.)"""
        if self._unpainted:
            self._paint_waiters.append(callback)
        else:
            self.call_after_refresh(callback)

    @property
    def row_count(self) -> int:
        return len(self._rows)

    @property
    def row_width(self) -> int:
        return sum(c.width + 2 for c in self._columns if c.width > 0)

    def set_columns(self, columns: Iterable[GridColumn]) -> None:
        self._columns = list(columns)
        self._header = None
        self._lines.clear()
        self._resize()

    def clear(self) -> None:
        self.replace_rows([])

    def replace_rows(self, rows: Iterable[tuple[str, Sequence[Text]]]) -> None:
        """Show ``rows`` instead of the current ones, cursor and scroll back at the top.

        Only the lines that show another row (or the same row with other cells) are
        repainted, and the row count changes no layout unless the scrollbar comes or
        goes: a page as long as the last one costs the lines that differ.
        """
        old_keys = self._keys
        old_cells = dict(zip(old_keys, self._rows, strict=True))
        scrolled = bool(self.scroll_offset.x or self.scroll_offset.y)
        self._keys = []
        self._rows = []
        self._index = {}
        if scrolled:
            self.scroll_to(0, 0, animate=False, immediate=True)
        self._append(rows)
        for key, cells in zip(self._keys, self._rows, strict=True):
            before = old_cells.get(key)
            if before is not None and before != cells:
                self._forget(key)  # same run, new content (a new verdict): draw it again
        self.set_reactive(Grid.cursor_row, 0)
        self._unpainted = True
        if scrolled:
            self.refresh()
        else:
            visible = self._visible_rows()
            changed = [
                n
                for n in range(visible)
                if (old_keys[n] if n < len(old_keys) else None)
                != (self._keys[n] if n < len(self._keys) else None)
                or n in (0, self._old_cursor)
                or (n < len(self._keys) and old_cells.get(self._keys[n]) != self._rows[n])
            ]
            self._refresh_rows(changed)
        self._old_cursor = 0
        self._resize(repaint=False)
        self.post_message(self.RowHighlighted(self, 0, self.cursor_key))

    def add_rows(self, rows: Iterable[tuple[str, Sequence[Text]]]) -> None:
        """Append rows as ``(key, cells)``; keys must be new."""
        start = len(self._keys)
        self._append(rows)
        self._refresh_rows(range(start, len(self._keys)), absolute=True)
        self._resize(repaint=False)

    def insert_rows(self, at: int, rows: Iterable[tuple[str, Sequence[Text]]]) -> None:
        """Insert rows as ``(key, cells)`` before row ``at``; keys must be new."""
        new = list(rows)
        for key, _ in new:
            if key in self._index:
                raise ValueError(f"row key {key!r} is already in the grid")
        self._keys[at:at] = [k for k, _ in new]
        self._rows[at:at] = [tuple(c) for _, c in new]
        self._reindex(at)
        if self.cursor_row >= at and new:
            self.set_reactive(Grid.cursor_row, self.cursor_row + len(new))
            self._old_cursor = self.cursor_row
        self._refresh_rows(range(at, len(self._keys)), absolute=True)
        self._resize(repaint=False)

    def remove_rows(self, keys: Iterable[str]) -> None:
        """Remove the rows of ``keys`` (those the grid holds); the cursor stays on its
        row, or moves to the row before the removed ones when it was on one of them."""
        gone = {k for k in keys if k in self._index}
        if not gone:
            return
        first = min(self._index[k] for k in gone)
        cursor = self.cursor_key
        before = len(self._keys)
        kept = [(k, c) for k, c in zip(self._keys, self._rows, strict=True) if k not in gone]
        self._keys = [k for k, _ in kept]
        self._rows = [c for _, c in kept]
        for key in gone:
            self._index.pop(key, None)
            self._forget(key)
        self._reindex(first)
        if cursor is not None and cursor in self._index:
            row = self._index[cursor]
        else:
            row = max(0, first - 1)
        self.set_reactive(Grid.cursor_row, self.validate_cursor_row(row))
        self._old_cursor = self.cursor_row
        self._refresh_rows(range(first, before), absolute=True)
        self._resize(repaint=False)

    def update_row(self, key: str, cells: Sequence[Text]) -> None:
        """Show ``cells`` in the row of ``key``."""
        n = self._index[key]
        self._rows[n] = tuple(cells)
        self._forget(key)
        self._refresh_rows([n], absolute=True)

    def _append(self, rows: Iterable[tuple[str, Sequence[Text]]]) -> None:
        for key, cells in rows:
            if key in self._index:
                raise ValueError(f"row key {key!r} is already in the grid")
            self._index[key] = len(self._keys)
            self._keys.append(key)
            self._rows.append(tuple(cells))

    def _reindex(self, start: int) -> None:
        for n in range(start, len(self._keys)):
            self._index[self._keys[n]] = n

    def _forget(self, key: str) -> None:
        for state in (0, 1, 2):
            for focused in (False, True):
                self._lines.discard((key, state, focused))

    def row_key(self, row: int) -> str:
        return self._keys[row]

    def get_row_index(self, key: str) -> int:
        return self._index[key]

    def cell(self, row: int, column_key: str) -> Text:
        i = next(n for n, c in enumerate(self._columns) if c.key == column_key)
        return self._rows[row][i]

    @property
    def cursor_key(self) -> str | None:
        return self._keys[self.cursor_row] if 0 <= self.cursor_row < len(self._keys) else None

    def move_cursor(self, *, row: int) -> None:
        self.cursor_row = row

    def _visible_rows(self) -> int:
        return max(0, self.scrollable_content_region.height - 1)

    def _refresh_rows(self, rows: Iterable[int], *, absolute: bool = False) -> None:
        """Repaint the lines of ``rows`` (viewport positions, or row indexes when
        ``absolute``) that are in view."""
        if not self.is_mounted:
            return
        top = round(self.scroll_offset.y) if absolute else 0
        visible = self._visible_rows()
        width = self.scrollable_content_region.width
        regions = [Region(0, n - top + 1, width, 1) for n in rows if 0 <= n - top < visible]
        if regions:
            self.refresh(*regions)

    def _resize(self, *, repaint: bool = True) -> None:
        """Set the virtual size for the rows held.  A layout (which makes the compositor
        render every widget of the screen) only when the scrollbars come or go."""
        size = Size(self.row_width, len(self._rows) + 1)
        if size != self.virtual_size:
            shown = self._scrollbars_for(size) if self.is_mounted else None
            if shown is not None and shown == (
                self.show_horizontal_scrollbar,
                self.show_vertical_scrollbar,
            ):
                self.set_reactive(Grid.virtual_size, size)
                self._scroll_update(size)
            else:
                if shown is not None:
                    # Shown now, so the layout the new size asks for places them; left to
                    # the layout, their coming asks for a second layout of the screen.
                    self.show_horizontal_scrollbar, self.show_vertical_scrollbar = shown
                self.virtual_size = size
        if repaint:
            self.refresh()

    def _scrollbars_for(self, size: Size) -> tuple[bool, bool] | None:
        """The scrollbars (horizontal, vertical) ``size`` would show: Textual's rule for
        overflow auto, in ``Widget._refresh_scrollbars``; None for another overflow or
        before the grid has a size (the layout decides then)."""
        styles = self.styles
        if styles.overflow_x != "auto" or styles.overflow_y != "auto":
            return None
        width, height = self.container_size
        if not width or not height:
            return None
        horizontal = size.width > width
        vertical = size.height > height
        if vertical and not horizontal:
            horizontal = size.width > width - styles.scrollbar_size_vertical
        if horizontal and not vertical:
            vertical = size.height > height - styles.scrollbar_size_horizontal
        return horizontal, vertical

    # -- cursor ----------------------------------------------------------------------

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._rows) - 1)) if self._rows else 0

    def watch_cursor_row(self, old: int, new: int) -> None:
        visible = max(1, self._visible_rows())
        top = round(self.scroll_offset.y)
        if new < top:
            self.scroll_to(y=new, animate=False, immediate=True)
            self.refresh()
        elif new >= top + visible:
            self.scroll_to(y=new - visible + 1, animate=False, immediate=True)
            self.refresh()
        else:
            self._refresh_rows({self._old_cursor, old, new}, absolute=True)
        self._old_cursor = new
        self.post_message(self.RowHighlighted(self, new, self.cursor_key))

    def action_cursor_up(self) -> None:
        self.cursor_row -= 1

    def action_cursor_down(self) -> None:
        self.cursor_row += 1

    def action_page_up(self) -> None:
        self.cursor_row -= max(1, self.scrollable_content_region.height - 2)

    def action_page_down(self) -> None:
        self.cursor_row += max(1, self.scrollable_content_region.height - 2)

    def action_first(self) -> None:
        self.cursor_row = 0

    def action_last(self) -> None:
        self.cursor_row = len(self._rows) - 1

    def action_select(self) -> None:
        key = self.cursor_key
        if key is not None:
            self.post_message(self.RowSelected(self, self.cursor_row, key))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        x, y = offset.x + round(self.scroll_offset.x), offset.y
        if y == 0:
            edge = 0
            for col in self._columns:
                if col.width <= 0:
                    continue
                edge += col.width + 2
                if x < edge:
                    self.post_message(self.HeaderSelected(self, col.key))
                    break
            return
        row = round(self.scroll_offset.y) + y - 1
        if 0 <= row < len(self._rows):
            if row == self.cursor_row:
                self.action_select()
            else:
                self.cursor_row = row

    def on_focus(self, event: events.Focus) -> None:
        self.refresh()

    def on_blur(self, event: events.Blur) -> None:
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()
        self._header = None
        self._bases.clear()

    def _base(self, state: str) -> Style:
        """The style under a line: ``""`` (the grid's own), or the grid's with a component
        class over it.  Kept until the styles change, as the lines drawn with it are
        (``rich_style`` walks every ancestor: a cost per line of a first paint)."""
        base = self._bases.get(state)
        if base is None:
            base = self.rich_style
            if state:
                base += self.get_component_rich_style(state, partial=True)
            self._bases[state] = base
        return base

    # -- rendering -------------------------------------------------------------------

    def _render_cells(self, cells: Sequence[Text | str], base: Style) -> Strip:
        """One line of segments: each cell padded by a space each side, cut to its width.

        A cell of one style (most are) becomes one segment directly; only cells with
        spans go through Rich's renderer.
        """
        console = self.app.console
        segments: list[Segment] = []
        add = segments.append
        pad = Segment(" ", base)
        for col, cell in zip(self._columns, cells, strict=False):
            if col.width <= 0:
                continue  # a hidden column (too narrow a terminal): its cells stay in the row
            text = cell if isinstance(cell, Text) else Text(str(cell))
            add(pad)
            if text.spans:
                fitted = text.copy()
                fitted.no_wrap = True
                fitted.truncate(col.width, overflow="ellipsis", pad=True)
                segments.extend(
                    Segment(seg.text, base + seg.style if seg.style else base)
                    for seg in fitted.render(console, end="")
                )
            else:
                plain = text.plain
                if cell_len(plain) > col.width:
                    plain = set_cell_size(plain, col.width - 1) + "…"
                else:
                    plain = set_cell_size(plain, col.width)
                own = text.style
                if isinstance(own, str):
                    own = Style.parse(own) if own else Style()
                add(Segment(plain, base + own))
            add(pad)
        return Strip(segments, self.row_width)

    def _row_strip(self, row: int) -> Strip:
        focused = self.has_focus
        state = 2 if row == self.cursor_row else row % 2
        key = (self._keys[row], state, focused if state == 2 else False)
        strip = self._lines.get(key)
        if strip is None:
            if state == 2:
                base = self._base("grid--cursor" if focused else "grid--cursor-blurred")
            else:
                base = self._base("grid--stripe" if state == 1 else "")
            strip = self._render_cells(self._rows[row], base)
            self._lines[key] = strip
        return strip

    def render_line(self, y: int) -> Strip:
        if self._unpainted:
            self._unpainted = False
            waiters, self._paint_waiters = self._paint_waiters, []
            for callback in waiters:
                self.call_after_refresh(callback)  # after the frame being drawn
        scroll_x, scroll_y = (round(v) for v in self.scroll_offset)
        width = self.scrollable_content_region.width
        if y == 0:
            style = self._header_fill()
            if self._header is None:
                self._header = self._render_cells([Text(c.label) for c in self._columns], style)
            strip = self._header
        else:
            row = scroll_y + y - 1
            style = self._base("")
            if row >= len(self._rows):
                return Strip.blank(width, style)
            strip = self._row_strip(row)
        if scroll_x == 0 and strip.cell_length <= width:  # the common case: pad, no crop
            if strip.cell_length == width:
                return strip
            fill = Segment(" " * (width - strip.cell_length), style)
            return Strip([*strip, fill], width)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _header_fill(self) -> Style:
        return self._base("grid--header")
