"""The TUI run headless by Textual's pilot, for the tests that drive its screens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from replay_tui.tui.app import ReplayApp
from replay_tui.tui.messages import OpenComparison
from replay_tui.tui.screens.comparison import ComparisonScreen
from tests.support.app import comparison_shown, settle


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


@asynccontextmanager
async def comparison_app(
    store: Path, size: tuple[int, int], comparison_id: int
) -> AsyncIterator[tuple[ReplayApp, Pilot[Any], ComparisonScreen]]:
    """:func:`settled_app` with stored comparison ``comparison_id`` opened, shown and
    settled."""
    async with settled_app(store, size) as (app, pilot):
        app.post_message(OpenComparison(comparison_id=comparison_id))
        screen = await comparison_shown(pilot)
        await settle(pilot)
        yield app, pilot, screen


def replay_app(pilot: Pilot[Any]) -> ReplayApp:
    """The app ``pilot`` drives: replay-tui's own."""
    app = pilot.app
    assert isinstance(app, ReplayApp)
    return app
