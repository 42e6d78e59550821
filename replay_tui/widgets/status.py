"""A one-line status that repaints without asking for a new layout (as Static.update does)."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widget import Widget


class StatusLine(Widget):
    DEFAULT_CSS = """
    StatusLine {
        height: 1;
        width: 1fr;
    }
    """

    text: reactive[str] = reactive("", layout=False)

    def __init__(self, text: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.set_reactive(StatusLine.text, text)

    def render(self) -> str:
        return self.text
