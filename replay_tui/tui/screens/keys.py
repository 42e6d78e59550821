"""Keys people bring from vim, k9s and lazygit, wherever a list or a text scrolls.

``j`` / ``k`` move a list's cursor, or scroll a text or a log, one line; ``g`` / ``G``
go to its top / bottom.  They act on the focused widget; when that one neither moves nor
scrolls (a tab bar, a button), on the screen's :meth:`ScrollKeys.scroll_target` (the
active tab's content), which takes the focus.  A field being typed in keeps its letters.

A number key picks a tab *and* moves into it (:class:`TabKeys`): the next ``enter``,
``j`` or ``G`` acts on that tab's list or text, with no ``tab`` in between.
"""

from __future__ import annotations

from typing import Any

from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import TabbedContent

from replay_tui.tui.screens.base import WorkbenchKeys

VIM_BINDINGS: list[BindingType] = [
    Binding("j", "cursor('down')", "Down", show=False),
    Binding("k", "cursor('up')", "Up", show=False),
    Binding("g", "cursor('top')", "Top", show=False),
    Binding("G", "cursor('bottom')", "Bottom", show=False),
]
"""j / k / g / G on a screen (with :class:`ScrollKeys`)."""

TOP_BOTTOM: list[BindingType] = VIM_BINDINGS[2:]
"""g / G alone, for a screen whose j / k are bound already (``WORKBENCH_BINDINGS``)."""

CURSOR: dict[str, tuple[str, ...]] = {
    "down": ("action_cursor_down",),
    "up": ("action_cursor_up",),
    "top": ("action_scroll_top", "action_first"),  # a DataTable's, the runs grid's
    "bottom": ("action_scroll_bottom", "action_last"),
}
"""The actions that move a list's cursor ``way``."""
SCROLL = {"down": "scroll_down", "up": "scroll_up", "top": "scroll_home", "bottom": "scroll_end"}
"""The scroll of a text or a log ``way``."""


def move(widget: Widget, way: str) -> bool:
    """Move ``widget``'s cursor ``way`` (down, up, top, bottom), else scroll it; False
    when it has neither a cursor nor anything to scroll."""
    for name in CURSOR.get(way, ()):
        action = getattr(widget, name, None)
        if callable(action):
            action()
            return True
    if way in SCROLL and widget.allow_vertical_scroll:
        getattr(widget, SCROLL[way])(animate=False)
        return True
    return False


def pane_content(screen: Screen[Any]) -> Widget | None:
    """The first widget of the active tab that takes the focus (its list or its text)."""
    try:
        tabs = screen.query_one(TabbedContent)
    except NoMatches:
        return None
    pane = tabs.active_pane
    if pane is None:
        return None
    for widget in pane.query("*"):  # in the order of the page: the list, else its scroll
        if widget.can_focus and widget.display and not widget.disabled:
            return widget
    return None


class ScrollKeys:
    """The actions of :data:`VIM_BINDINGS` (mixed into a screen, before its base)."""

    def scroll_target(self) -> Widget | None:
        """What j / k / g / G act on when the focused widget cannot: the active tab's
        content by default."""
        screen = self
        assert isinstance(screen, Screen)
        return pane_content(screen)

    def action_cursor(self, way: str) -> None:
        screen = self
        assert isinstance(screen, Screen)
        focused = screen.focused
        if focused is not None and move(focused, way):
            return
        target = self.scroll_target()
        if target is not None and target is not focused and target.display:
            target.focus(scroll_visible=False)
            move(target, way)


class TabKeys(ScrollKeys, WorkbenchKeys):
    """1-9 pick a tab and move the focus into it; j / k / g / G move or scroll there."""

    def action_tab(self, n: int) -> None:
        super().action_tab(n)
        self.focus_tab_content()

    def focus_tab_content(self) -> None:
        """Put the focus in the active tab's content (its list, else its text)."""
        screen = self
        assert isinstance(screen, Screen)
        target = pane_content(screen)
        if target is not None:
            screen.set_focus(target, scroll_visible=False)
