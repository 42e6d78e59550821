"""The runs browser's groups and sorts, driven with Pilot over the fixed store.

Replays sit under their originals (open and close a group with right/left, +/- or
space; ``g`` puts them back in the list), and the list sorts by verdict severity and by
gaps as well as by its columns.
"""

from __future__ import annotations

from replay_tui.tui.queries import verdict_rank
from replay_tui.tui.screens.runs import RunsScreen
from replay_tui.tui.widgets.status import StatusLine
from replay_tui.verdicts import SEVERITY
from storage.records import RunRecord
from storage.store import RunQuery, RunStore
from tests.helpers.tui import settled_app
from tests.support.app import FixedStore, runs_screen, settle, sync

SIZE = (120, 36)


def keys(screen: RunsScreen) -> list[str]:
    return [screen.table.row_key(i) for i in range(screen.table.row_count)]


def name_cell(screen: RunsScreen, run_id: str) -> str:
    table = screen.table
    return table.cell(table.get_row_index(run_id), "name").plain


def every_run(fixed: FixedStore) -> list[RunRecord]:
    with RunStore(fixed.path) as store:
        return store.list_runs(RunQuery(limit=1000))


@sync
async def test_a_group_opens_and_closes_under_its_original(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        table = screen.table
        orig, rep = fixed.original_id, fixed.replay_id
        assert rep not in keys(screen)  # under its original, which is closed
        assert name_cell(screen, orig).startswith("▸ ")
        assert table.cell(table.get_row_index(orig), "verdict").plain.split() == [
            "DIVERGED",
            "0/1",
        ]
        assert "replays under their originals" in screen.query_one("#status", StatusLine).text
        closed = keys(screen)

        table.move_cursor(row=table.get_row_index(orig))
        await pilot.press("right")
        await settle(pilot)
        assert table.get_row_index(rep) == table.get_row_index(orig) + 1
        assert name_cell(screen, orig).startswith("▾ ")
        assert name_cell(screen, rep).startswith("  └ ")
        assert table.parent_of(rep) == orig and table.children_of(orig) == [rep]
        assert table.row_count == len(closed) + 1
        assert table.selected_run == orig  # the cursor stays on the group

        await pilot.press("down", "left")  # on the replay: closes its group
        await settle(pilot)
        assert keys(screen) == closed
        assert table.selected_run == orig
        assert name_cell(screen, orig).startswith("▸ ")

        await pilot.press("space")
        await settle(pilot)
        assert table.children_of(orig) == [rep]
        await pilot.press("minus")
        await settle(pilot)
        assert keys(screen) == closed
        await pilot.press("plus")
        await settle(pilot)
        assert table.children_of(orig) == [rep]

        # an open group stays open when the list is read again (a filter, a refresh)
        screen.query_one("#verdict").value = "DIVERGED"  # type: ignore[attr-defined]
        await settle(pilot)
        assert keys(screen) == [orig, rep]
        await pilot.press("escape")
        await settle(pilot)
        assert table.children_of(orig) == [rep]
        assert table.row_count == len(closed) + 1
        # enter on the replay opens the replay
        table.move_cursor(row=table.get_row_index(rep))
        await pilot.press("enter")
        await settle(pilot)
        assert getattr(app.screen, "run_id", None) == rep


@sync
async def test_a_run_without_replays_is_no_group(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        table = screen.table
        # replayed (IDENTICAL 1/1 +1), but no replay run is stored: nothing to show under it
        with RunStore(fixed.path) as store:
            lone = next(
                r.id
                for r in store.list_runs(RunQuery(kind="original", limit=1000))
                if store.replays_of(r.id)
                and all(f.replay_run is None for f in store.replays_of(r.id))
            )
        assert table.reproduction(lone) is not None
        before = keys(screen)
        table.move_cursor(row=table.get_row_index(lone))
        await pilot.press("right", "space", "plus")
        await settle(pilot)
        assert keys(screen) == before
        assert not name_cell(screen, lone).startswith(("▸", "▾"))


@sync
async def test_g_puts_replays_in_the_list(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        assert screen.grouped and screen.table.row_count == 42
        await pilot.press("g")
        await settle(pilot)
        assert not screen.grouped
        assert keys(screen) == [r.id for r in every_run(fixed)]  # newest first, all 44
        # no group mark in the list; a replay is marked as one (its kind at every width)
        assert name_cell(screen, fixed.replay_id) == "↻ resnet50-imagenet-audit-2025q2"
        assert name_cell(screen, fixed.original_id) == "resnet50-imagenet-audit-2025q2"
        assert "replays under" not in screen.query_one("#status", StatusLine).text
        await pilot.press("g")
        await settle(pilot)
        assert screen.grouped and screen.table.row_count == 42


def _top_level(fixed: FixedStore) -> list[RunRecord]:
    runs = every_run(fixed)
    ids = {r.id for r in runs}
    return [r for r in runs if not (r.kind == "replay" and r.replay_of in ids)]


@sync
async def test_sort_by_verdict_severity(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        await pilot.press("s")  # the column after STARTED: verdict severity
        await settle(pilot)
        assert screen.sort_key == "severity" and screen.query_state.descending

        def rank(r: RunRecord) -> int:
            return verdict_rank(r.last_verdict)

        worst_first = sorted(_top_level(fixed), key=lambda r: (rank(r), r.id), reverse=True)
        assert keys(screen) == [r.id for r in worst_first]
        assert screen.table.record(keys(screen)[0]).last_verdict == "DIVERGED"  # type: ignore[union-attr]
        # for an audit, a run never replayed (unverified) ranks above every reproduced one
        verdicts = [screen.table.record(k).last_verdict for k in keys(screen)]  # type: ignore[union-attr]
        unverified = verdicts.index(None)
        assert all(
            v not in SEVERITY or SEVERITY[v] > SEVERITY["WITHIN_NOISE"]
            for v in verdicts[:unverified]
        )
        assert {"IDENTICAL", "EQUIVALENT"} <= set(verdicts[unverified:])
        assert "sorted by verdict ▼" in screen.query_one("#status", StatusLine).text
        await pilot.press("S")
        await settle(pilot)
        assert keys(screen) == [r.id for r in reversed(worst_first)]


@sync
async def test_sort_by_gaps_from_its_header(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        x = 0
        for col in screen.table.columns:
            if col.key == "gaps":
                break
            x += col.width + 2 if col.width > 0 else 0
        await pilot.click("#runs", offset=(x + 2, 0))  # the GAPS header
        await settle(pilot)
        assert screen.sort_key == "gaps" and screen.query_state.descending

        def gaps(r: RunRecord) -> tuple[int, int, int, str]:
            g = r.gaps
            assert g is not None
            return (g.critical, g.warning, g.info, r.id)

        most_first = sorted(_top_level(fixed), key=gaps, reverse=True)
        assert keys(screen) == [r.id for r in most_first]
        first = screen.table.record(keys(screen)[0])
        assert first is not None and first.gaps is not None and first.gaps.critical > 0
        await pilot.click("#runs", offset=(x + 2, 0))  # again: the other way
        await settle(pilot)
        assert not screen.query_state.descending
        assert keys(screen) == [r.id for r in reversed(most_first)]
