"""The TUI as an auditor's workbench, driven with Pilot over real stores: the runs list
shows what all of a run's replays add up to, and its columns re-fit to the terminal."""

from __future__ import annotations

import pytest

from replay_tui.app import ReplayApp
from replay_tui.screens.runs import RunsScreen
from storage.store import RunStore
from tests.test_app_flows import runs_screen, settle, sync
from tests.test_app_support import FixedStore, build_fixed_store


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> FixedStore:
    return build_fixed_store(tmp_path_factory.mktemp("fixed"))


def _shown(screen: RunsScreen) -> dict[str, int]:
    return {c.key: c.width for c in screen.table.columns if c.width > 0}


@sync
async def test_columns_refit_on_resize_and_80x24_keeps_verdict_gaps_status(
    fixed: FixedStore,
) -> None:
    app = ReplayApp(fixed.path)
    async with app.run_test(size=(200, 60)) as pilot:
        await settle(pilot)
        screen = runs_screen(app)
        wide = _shown(screen)
        assert set(wide) >= {"id", "name", "started", "verdict", "gaps", "status", "image"}
        assert screen.table.row_width <= 200
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        narrow = _shown(screen)
        assert {"id", "name", "verdict", "gaps", "status"} <= set(narrow)
        assert "image" not in narrow and narrow["name"] < wide["name"]
        assert screen.table.row_width <= 80  # no sideways scrolling to see a verdict
        await pilot.resize_terminal(200, 60)
        await settle(pilot)
        assert _shown(screen) == wide


@sync
async def test_runs_list_shows_every_replay_of_a_run(fixed: FixedStore) -> None:
    """The run whose IDENTICAL replay was followed by a cancelled attempt reads
    ``IDENTICAL 1/1 +1``: still IDENTICAL, the cancel shown apart."""
    with RunStore(fixed.path) as s:
        facts = {r.id: [f["status"] for f in s.replays_of(r.id)] for r in s.list_runs()}
    run_id = next(rid for rid, statuses in facts.items() if statuses[-1:] == ["cancelled"])
    app = ReplayApp(fixed.path)
    async with app.run_test(size=(200, 60)) as pilot:
        await settle(pilot)
        screen = runs_screen(app)
        row = screen.table.get_row_index(run_id)
        cell = screen.table.cell(row, "verdict").plain
        assert cell.split() == ["IDENTICAL", "1/1", "+1"]
        rep = screen.table.reproduction(run_id)
        assert rep is not None and rep.text() == "IDENTICAL 1/1, 1 cancelled"
        assert screen.table.record(run_id).last_verdict == "IDENTICAL"  # type: ignore[union-attr]
