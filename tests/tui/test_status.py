"""The runs screen's status line: what narrows the list comes first, and a line wider
than the screen ends in an ellipsis instead of being cut silently."""

from __future__ import annotations

import asyncio
from pathlib import Path

from replay_tui.tui.app import ReplayApp
from replay_tui.tui.screens.runs import RunsScreen
from tests.helpers.tui import settled_app
from tests.support.app import build_fixed_store, settle


def _status_row(app: ReplayApp) -> str:
    """The status line as the terminal shows it (its rendered line)."""
    status = app.screen.query_one("#status")
    return "".join(seg.text for seg in status.render_line(0)).rstrip()


def test_the_status_line_puts_filters_first_and_ends_a_cut_in_an_ellipsis(
    tmp_path: Path,
) -> None:
    fixed = build_fixed_store(tmp_path / "fixed")

    async def main() -> None:
        async with settled_app(fixed.path, (80, 24)) as (app, pilot):
            runs = app.screen
            assert isinstance(runs, RunsScreen)
            await pilot.press("slash")
            await pilot.press(*"resnet")
            await pilot.press("enter")
            await settle(pilot)
            text = runs.query_one("#status").text  # type: ignore[attr-defined]
            assert text.index("search “resnet”") < text.index("sorted by")
            assert text.endswith("replays under their originals")
            row = _status_row(app)
            assert len(text) > 78 and row.endswith("…")  # 80 columns: cut, and says so
            assert "search “resnet”" in row  # the filter stays in sight

    asyncio.run(main())


def test_the_search_hint_is_never_cut_mid_word(tmp_path: Path) -> None:
    from textual.widgets import Input

    from replay_tui.tui.screens.runs import SEARCH_HINT, SEARCH_HINT_SHORT

    fixed = build_fixed_store(tmp_path / "fixed")

    async def main() -> None:
        for size, hint in (((80, 24), SEARCH_HINT_SHORT), ((200, 40), SEARCH_HINT)):
            async with settled_app(fixed.path, size) as (app, pilot):
                search = app.screen.query_one("#search", Input)
                assert search.placeholder == hint, size
                assert len(hint) <= search.content_size.width
                if size == (200, 40):  # narrowed while running: the hint follows
                    await pilot.resize_terminal(80, 24)
                    await settle(pilot)
                    assert search.placeholder == SEARCH_HINT_SHORT

    asyncio.run(main())
