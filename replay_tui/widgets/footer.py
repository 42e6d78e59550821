"""A footer that recomposes only when the keys it shows change.

Textual's ``Footer`` removes and mounts all its keys on every bindings update (the
screen shown, each focus change, each ``refresh_bindings``), several times while an app
starts: about a third of the runs browser's first frame.  This one coalesces the updates
of a frame into one and skips it when the keys, their descriptions and their enabled
state are what it already shows.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


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
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        self._pending = False
        if not self.is_attached:
            return
        shown = self._keys_shown()
        if shown != self._shown:
            self._shown = shown
            await self.recompose()
