"""The TUI run headless by Textual's pilot, for the tests that drive its screens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from replay_tui.tui.app import ReplayApp
from tests.support.app import settle


@asynccontextmanager
async def settled_app(
    store: Path, size: tuple[int, int]
) -> AsyncIterator[tuple[ReplayApp, Pilot[Any]]]:
    """The app on ``store``, run at ``size`` with its pilot, once its first screen has
    settled (every worker done, every table measured)."""
    app = ReplayApp(store)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        yield app, pilot
