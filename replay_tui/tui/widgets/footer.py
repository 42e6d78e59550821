"""A footer that recomposes only when the keys it shows change.

Textual's ``Footer`` removes and mounts all its keys on every bindings update (the
screen shown, each focus change, each ``refresh_bindings``), several times while an app
starts: about a third of the runs browser's first frame.  This one coalesces the updates
of a frame into one and skips it when the keys, their descriptions and their enabled
state are what it already shows.

It also fits its width: where the keys would not all show (Textual's footer crops the
last ones silently), it turns compact (a cell less a key) and, if that is still too
wide, leaves out the palette key on the right (ctrl+p still opens the palette).
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual import events
from textual.screen import Screen
from textual.widgets import Footer

PALETTE_KEY = 12
"""The cells the palette key on the right takes (``▏^p palette``, padded)."""


class LeanFooter(Footer):
    _shown: tuple[Any, ...] | None = None
    _pending = False

    def _keys_shown(self) -> tuple[Any, ...]:
        active = self.screen.active_bindings
        keys = tuple(
            (b.key, b.action, b.description, b.group, enabled, tooltip)
            for (_, b, enabled, tooltip) in active.values()
            if b.show
        )
        palette = self.app.COMMAND_PALETTE_BINDING
        return (*keys, self.show_command_palette, palette in active, self.compact)

    def bindings_changed(self, screen: Screen[Any]) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._pending:
            self._pending = True
            self.call_after_refresh(self._recompose_soon)

    def _fit(self) -> None:
        """Compact, and without the palette key, as the width needs (see the module)."""
        width = self.size.width or self.app.size.width
        seen: set[str] = set()
        need = 0
        keys = 0
        for _, b, _enabled, _tooltip in self.screen.active_bindings.values():
            if not b.show or b.action in seen or b.key == self.app.COMMAND_PALETTE_BINDING:
                continue
            seen.add(b.action)
            keys += 1
            need += cell_len(self.app.get_key_display(b)) + cell_len(b.description) + 3
        compact = need + PALETTE_KEY > width
        if compact:
            need -= keys
        self.set_reactive(Footer.compact, compact)
        self.set_class(compact, "-compact")
        self.set_reactive(Footer.show_command_palette, need + PALETTE_KEY <= width)

    def on_resize(self, event: events.Resize) -> None:
        if self.is_attached and not self._pending:
            self._pending = True
            self.call_after_refresh(self._recompose_soon)

    def _recompose_soon(self) -> None:
        """Recompose in this footer's own message queue, not in the screen's: the screen
        awaits its after-refresh callbacks, so a recompose there (mounting every key)
        would hold back what the screen has queued, such as the first page of runs."""
        self.call_next(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        self._pending = False
        if not self.is_attached:
            return
        self._fit()
        shown = self._keys_shown()
        if shown != self._shown:
            self._shown = shown
            await self.recompose()
