"""A lean table for many rows: each row is rendered to one Strip once, then only cropped.

DataTable renders every visible cell through Rich's full pipeline on each repaint
(about 0.3 ms a cell); a 200x60 runs browser repaints ~500 cells when a search lands.
This grid keeps the header fixed, renders a row's cells into one line of segments the
first time it is shown (and again only when the cursor or focus changes its look), and
lets the Line API crop that line to the viewport: the way Toolong draws its log lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar, NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip


class GridColumn(NamedTuple):
    key: str
    label: str
    width: int


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

    class RowHighlighted(Message):
        def __init__(self, grid: Grid, cursor_row: int, row_key: str | None) -> None:
            super().__init__()
            self.grid = grid
            self.cursor_row = cursor_row
            self.row_key = row_key

        @property
        def control(self) -> Grid:
            return self.grid

    class RowSelected(Message):
        def __init__(self, grid: Grid, cursor_row: int, row_key: str) -> None:
            super().__init__()
            self.grid = grid
            self.cursor_row = cursor_row
            self.row_key = row_key

        @property
        def control(self) -> Grid:
            return self.grid

    class HeaderSelected(Message):
        def __init__(self, grid: Grid, column_key: str) -> None:
            super().__init__()
            self.grid = grid
            self.column_key = column_key

        @property
        def control(self) -> Grid:
            return self.grid

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
        self._lines: LRUCache[tuple[int, int, bool], Strip] = LRUCache(1024)
        self._header: Strip | None = None

    # -- data ------------------------------------------------------------------------

    @property
    def columns(self) -> list[GridColumn]:
        return list(self._columns)

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

        One resize at the end: a page as long as the last one changes no layout, so
        the screen repaints only the grid's lines.
        """
        self._keys.clear()
        self._rows.clear()
        self._index.clear()
        self._lines.clear()
        if self.scroll_offset.x or self.scroll_offset.y:
            self.scroll_to(0, 0, animate=False, immediate=True)
        self.add_rows(rows)
        self.cursor_row = 0

    def add_rows(self, rows: Iterable[tuple[str, Sequence[Text]]]) -> None:
        """Append rows as ``(key, cells)``; keys must be new."""
        for key, cells in rows:
            if key in self._index:
                raise ValueError(f"row key {key!r} is already in the grid")
            self._index[key] = len(self._keys)
            self._keys.append(key)
            self._rows.append(tuple(cells))
        self._resize()

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

    def _resize(self) -> None:
        size = Size(self.row_width, len(self._rows) + 1)
        if size != self.virtual_size:
            self.virtual_size = size
        self.refresh()

    # -- cursor ----------------------------------------------------------------------

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._rows) - 1)) if self._rows else 0

    def watch_cursor_row(self, old: int, new: int) -> None:
        visible = max(1, self.scrollable_content_region.height - 1)
        top = round(self.scroll_offset.y)
        if new < top:
            self.scroll_to(y=new, animate=False, immediate=True)
        elif new >= top + visible:
            self.scroll_to(y=new - visible + 1, animate=False, immediate=True)
        self.refresh()
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
        key = (row, state, focused if state == 2 else False)
        strip = self._lines.get(key)
        if strip is None:
            base = self.rich_style
            if state == 2:
                name = "grid--cursor" if focused else "grid--cursor-blurred"
                base += self.get_component_rich_style(name, partial=True)
            elif state == 1:
                base += self.get_component_rich_style("grid--stripe", partial=True)
            strip = self._render_cells(self._rows[row], base)
            self._lines[key] = strip
        return strip

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = (round(v) for v in self.scroll_offset)
        width = self.scrollable_content_region.width
        if y == 0:
            if self._header is None:
                style = self.rich_style + self.get_component_rich_style(
                    "grid--header", partial=True
                )
                self._header = self._render_cells([Text(c.label) for c in self._columns], style)
            strip = self._header
            style = self._header_fill()
        else:
            row = scroll_y + y - 1
            if row >= len(self._rows):
                return Strip.blank(width, self.rich_style)
            strip = self._row_strip(row)
            style = self.rich_style
        if scroll_x == 0 and strip.cell_length <= width:  # the common case: pad, no crop
            if strip.cell_length == width:
                return strip
            fill = Segment(" " * (width - strip.cell_length), style)
            return Strip([*strip, fill], width)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _header_fill(self) -> Style:
        return self.rich_style + self.get_component_rich_style("grid--header", partial=True)
