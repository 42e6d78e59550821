"""A one-line status that repaints without asking for a new layout (as Static.update does);
a status wider than the line ends in an ellipsis, never cut silently."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from replay_tui.safety import escape_control


class StatusLine(Widget):
    DEFAULT_CSS = """
    StatusLine {
        height: 1;
        width: 1fr;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    text: reactive[str] = reactive("", layout=False)

    def __init__(self, text: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.set_reactive(StatusLine.text, text)

    def render(self) -> Text:
        # a status may quote the search typed or a store's words: escaped, never markup
        return Text(escape_control(self.text), no_wrap=True, overflow="ellipsis", end="")
