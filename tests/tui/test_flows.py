"""The TUI's flows, driven with Pilot over real stores (and, for replays, real runs).

Open the store, search, filter, sort, page, open a run, read the comparison, compare two
runs, the dashboard, the key map, the palette, the error modal; and with a run recorded
by the real launcher: start a replay on the local backend, watch it finish on the
comparison, and cancel one.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.command import CommandList, CommandPalette
from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DataTable, Log, Static, TabbedContent

from replay_tui.gaps import gap_counts
from replay_tui.replay.plan import ReplayOptions
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.messages import OpenComparison, OpenReplay
from replay_tui.tui.queries import RunDetail
from replay_tui.tui.screens.comparison import ComparisonScreen
from replay_tui.tui.screens.dashboard import DashboardScreen
from replay_tui.tui.screens.modals import KEYMAP, ErrorModal, HelpScreen
from replay_tui.tui.screens.picker import PickRunScreen
from replay_tui.tui.screens.replay import ReplayScreen
from replay_tui.tui.screens.run_detail import RunDetailScreen
from replay_tui.tui.screens.runs import FIRST_PAGE, RunsScreen
from replay_tui.tui.widgets.plot import LinePlot
from replay_tui.tui.widgets.status import StatusLine
from storage.manifest import manifest_from_data
from storage.store import RunQuery, RunStore
from tests.helpers.tui import settled_app
from tests.support.app import (
    FixedStore,
    ask_to_quit,
    comparison_shown,
    footer_keys,
    local_app,
    record_real_run,
    runs_screen,
    settle,
    sync,
    ungated_app,
    until_logged,
    wait_until,
)
from tests.support.factories import realistic_manifest

SIZE = (120, 36)


def status_text(screen: RunsScreen) -> str:
    return screen.query_one("#status", StatusLine).text


# -- runs browser ----------------------------------------------------------------------


@sync
async def test_open_store_shows_runs_newest_first(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, _pilot):
        screen = runs_screen(app)
        with RunStore(fixed.path) as store:
            total = store.count_runs()
            originals = store.count_runs(RunQuery(kind="original"))
            newest = store.list_runs(RunQuery(kind="original", limit=3))
        table = screen.table
        # the two replays sit under their originals: every original is a row
        assert total == 44
        assert table.row_count == originals == 42
        assert [table.row_key(i) for i in range(3)] == [r.id for r in newest]
        assert f"{originals} of {originals} runs" in status_text(screen)
        assert table.has_focus


@sync
async def test_search_filters_the_table_from_the_fts_index(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        await pilot.press("slash")
        assert screen.search_box.has_focus
        await pilot.press(*"whisper")
        with RunStore(fixed.path) as store:
            expected = store.list_runs(RunQuery(search="whisper", limit=500))
        assert expected and len(expected) < 44
        table = screen.table

        def shown() -> list[str]:
            return [table.row_key(i) for i in range(table.row_count)]

        await wait_until(pilot, lambda: shown() == [r.id for r in expected])
        await settle(pilot)
        assert shown() == [r.id for r in expected]
        assert all("whisper" in (r.name + r.command) for r in expected)
        assert f"{len(expected)} of {len(expected)} runs" in status_text(screen)
        # enter leaves the box for the table at once: a key that came in with it (a quick
        # hand, a loaded terminal) is the table's (here: down moves its cursor)
        for key, char in (("enter", "\r"), ("down", None)):
            app.post_message(events.Key(key, char))
        await wait_until(pilot, lambda: table.has_focus and table.cursor_row == 1)
        await pilot.press("escape")  # clears the search
        await settle(pilot)
        assert table.row_count == 42


@pytest.mark.parametrize("size", [(200, 60), (80, 24)])
@sync
async def test_the_filters_come_after_the_first_page_in_the_place_kept_for_them(
    fixed: FixedStore, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    """The kind and verdict selects and the critical-gaps box are mounted once the first
    page is painted (the table is what the start is for); until then their place is
    kept, so the search box does not move when they come."""
    first: list[tuple[Region, Region, int]] = []
    mount = RunsScreen._mount_filters

    def watched(screen: RunsScreen) -> None:
        if not first:
            pending = screen.query_one("#filters-pending").region
            first.append((screen.search_box.region, pending, screen.table.row_count))
        mount(screen)

    monkeypatch.setattr(RunsScreen, "_mount_filters", watched)
    async with settled_app(fixed.path, size) as (app, pilot):
        screen = runs_screen(app)
        search, pending, rows = first[0]
        assert rows == 42  # painted before the filters came
        await wait_until(
            pilot,
            lambda: (
                not screen.query("#filters-pending")
                and bool(screen.query("#critical"))
                and screen.query_one("#critical").region.width > 0
            ),
        )
        assert screen.search_box.region == search  # nothing moved
        kind = screen.query_one("#kind").region
        critical = screen.query_one("#critical").region
        assert kind.x == pending.x and critical.right == pending.right
        await pilot.press("escape")  # clears the filters, now there
        await settle(pilot)
        assert screen.table.row_count == 42


@sync
async def test_filters_and_sorting(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        screen.query_one("#kind").value = "replay"  # type: ignore[attr-defined]
        await settle(pilot)
        assert screen.table.row_count == 2
        assert screen.query_state.kind == "replay"
        screen.query_one("#kind").value = ""  # type: ignore[attr-defined]
        await settle(pilot)
        await pilot.click("#critical")
        await settle(pilot)
        with RunStore(fixed.path) as store:
            critical = store.count_runs(RunQuery(has_critical=True))
        assert 0 < critical == screen.table.row_count
        await pilot.click("#critical")
        await settle(pilot)
        screen.query_one("#verdict").value = "DIVERGED"  # type: ignore[attr-defined]
        await settle(pilot)
        # the badge is on both; the replay sits under its original
        assert [screen.table.row_key(i) for i in range(screen.table.row_count)] == [
            fixed.original_id
        ]
        await pilot.press("g")  # replays in the list: both
        await settle(pilot)
        shown = {screen.table.row_key(i) for i in range(screen.table.row_count)}
        assert shown == {fixed.original_id, fixed.replay_id}
        await pilot.press("g")
        await settle(pilot)
        screen.query_one("#verdict").value = ""  # type: ignore[attr-defined]
        await settle(pilot)
        # sort: "s" moves to the next column, "S" reverses
        await pilot.press("s")
        await settle(pilot)
        assert screen.sort_key == "severity"
        await pilot.click("#runs", offset=(20, 0))  # the NAME header
        await settle(pilot)
        assert screen.sort_key == "name"
        if screen.query_state.descending:
            await pilot.click("#runs", offset=(20, 0))  # again: the other way
            await settle(pilot)
        assert not screen.query_state.descending
        table = screen.table
        names = [table.record(table.row_key(i)).name for i in range(table.row_count)]  # type: ignore[union-attr]
        assert names == sorted(names)
        await pilot.press("S")
        await settle(pilot)
        assert screen.query_state.descending


@sync
async def test_pages_load_lazily_as_the_cursor_nears_the_end(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with RunStore(path) as store:
        ms = [manifest_from_data(realistic_manifest(i, history_steps=2)) for i in range(700)]
        store.ingest_many([(m, gap_counts(m), (), {}) for m in ms])
    async with settled_app(path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        assert screen.table.row_count == FIRST_PAGE
        assert screen.total == 700
        assert f"{FIRST_PAGE} of 700 runs" in status_text(screen)
        await pilot.press("ctrl+end")
        await settle(pilot)
        assert screen.table.row_count > FIRST_PAGE
        while screen.table.row_count < 700:
            before = screen.table.row_count
            await pilot.press("ctrl+end")
            await settle(pilot)
            assert screen.table.row_count > before
        assert "700 of 700 runs" in status_text(screen)
        ids = [screen.table.row_key(i) for i in range(screen.table.row_count)]
        assert len(set(ids)) == 700


# -- one run, its comparison -----------------------------------------------------------


async def press_on_row(pilot: Pilot[None], run_id: str, key: str) -> Screen[Any]:
    """The screen ``key`` pressed on run ``run_id``'s row of the runs screen leads to,
    once settled."""
    await settle(pilot)
    screen = runs_screen(pilot.app)
    screen.table.move_cursor(row=screen.table.get_row_index(run_id))
    await pilot.press(key)
    await settle(pilot)
    return pilot.app.screen


async def open_detail(pilot: Pilot[None], run_id: str) -> tuple[RunDetailScreen, RunDetail]:
    """Run ``run_id``'s detail screen, opened with enter on its row of the runs screen,
    and the detail it shows."""
    detail = await press_on_row(pilot, run_id, "enter")
    assert isinstance(detail, RunDetailScreen) and detail.detail is not None
    return detail, detail.detail


@sync
async def test_open_a_run_then_its_replay_comparison(fixed: FixedStore) -> None:
    app = ReplayApp(fixed.path)
    async with app.run_test(size=SIZE) as pilot:
        detail, shown_run = await open_detail(pilot, fixed.original_id)
        assert shown_run.record.id == fixed.original_id
        titles = sorted(str(w.border_title) for w in detail.query(".section"))
        assert titles == sorted(
            [
                "code",
                "image",
                "data",
                "config",
                "randomness",
                "determinism",
                "environment",
                "hardware",
                "outputs",
            ]
        )
        assert len(detail.query(LinePlot)) == 5  # one small plot per metric
        tabs = detail.query_one(TabbedContent)
        tabs.active = "tab-replays"
        await pilot.pause()
        replays = detail.query_one("#replays", DataTable)
        assert replays.row_count == 1
        replays.focus()
        await pilot.press("enter")
        await settle(pilot)
        cmp = app.screen
        assert isinstance(cmp, ComparisonScreen)
        assert cmp.verdict == "DIVERGED"
        assert cmp.labels == ("original", "replay")
        metrics = cmp.query_one("#metrics", DataTable)
        assert metrics.get_row("loss")[6].plain == "1250"  # first step that differs
        plot = cmp.query_one("#plot", LinePlot)
        assert plot._marker == 1250.0
        tensor_rows = [str(t.get_cell_at((0, 1))) for t in cmp.query(".tensor-table")]
        assert tensor_rows == ["head.weight"]  # the tensor outside tolerance comes first
        await pilot.press("f")  # only differing fields
        fields = cmp.query_one("#fields", DataTable)
        shown = {str(fields.get_cell_at((i, 1))).lstrip("● ") for i in range(fields.row_count)}
        assert "hardware.driver_version" in shown
        assert "code.commit" not in shown
        await pilot.press("escape")
        assert isinstance(app.screen, RunDetailScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)


@sync
async def test_gaps_panel_lists_every_gap(fixed: FixedStore) -> None:
    app = ReplayApp(fixed.path)
    async with app.run_test(size=SIZE) as pilot:
        detail, shown_run = await open_detail(pilot, fixed.critical_id)
        gaps = shown_run.gaps
        critical = [g for g in gaps if g.severity == "critical"]
        assert critical
        tabs = detail.query_one(TabbedContent)
        assert f"{len(critical)} critical" in str(tabs.get_tab("tab-gaps").label)
        assert detail.query(".section.-critical")  # the section of the field is marked
        gaps_text = detail.query_one("#gaps-body", Static)
        assert gaps_text.visual is not None


async def picker_from(pilot: Pilot[None], run_id: str) -> PickRunScreen:
    """The compare picker, opened with "c" on run ``run_id``'s row of the runs screen,
    once its first runs (no search typed yet) are shown."""
    app = pilot.app
    screen = runs_screen(app)
    screen.table.move_cursor(row=screen.table.get_row_index(run_id))
    await pilot.press("c")
    await wait_until(pilot, lambda: isinstance(app.screen, PickRunScreen))
    picker = app.screen
    assert isinstance(picker, PickRunScreen)
    await wait_until(pilot, lambda: picker._shown == picker._generation)
    return picker


def gate_picker_search(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Hold the picker's searches (the real one, run once the gate opens) until the test
    sets the gate it returns (closed at first): a key then surely comes first."""
    from replay_tui.tui.screens import picker as picker_module

    gate = threading.Event()
    real = picker_module.find_runs

    def gated(*args: Any, **kwargs: Any) -> Any:
        assert gate.wait(60), "the test never opened the gate"
        return real(*args, **kwargs)

    monkeypatch.setattr(picker_module, "find_runs", gated)
    return gate


@sync
async def test_compare_with_another_run_computes_the_comparison(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (_app, pilot):
        with RunStore(fixed.path) as store:
            a, b = store.list_runs(RunQuery(kind="original", limit=50))[10:12]
        picker = await picker_from(pilot, a.id)
        await pilot.press(*b.id[:12])
        await settle(pilot)
        assert picker.table.row_count == 1
        await pilot.press("down", "enter")
        cmp = await comparison_shown(pilot)
        assert cmp.view.computed
        assert cmp.labels == ("A", "B")
        # A is the run the compare started from (the picker's title said so), though it
        # started after B
        assert cmp.view.a.started_at > cmp.view.b.started_at
        assert (cmp.view.a.run_id, cmp.view.b.run_id) == (a.id, b.id)
        assert cmp.verdict in ("DIVERGED", "INCOMPLETE")


@sync
async def test_enter_in_the_pickers_search_box_compares_with_the_first_match(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, SIZE) as (_app, pilot):
        with RunStore(fixed.path) as store:
            a, b = store.list_runs(RunQuery(kind="original", limit=50))[12:14]
        picker = await picker_from(pilot, a.id)
        await pilot.press(*b.id[:12])
        await wait_until(pilot, lambda: picker.table.selected_run == b.id)
        await pilot.press("enter")  # the search box still has the focus
        cmp = await comparison_shown(pilot)
        assert (cmp.view.a.run_id, cmp.view.b.run_id) == (a.id, b.id)
        # two originals: bisect is offered (it is not where either run is a replay)
        assert cmp.active_bindings["b"].binding.action == "bisect"


@sync
async def test_keys_typed_right_after_down_in_the_picker_go_to_its_runs(
    fixed: FixedStore,
) -> None:
    """Down, down, enter arriving together (a quick hand, or a loaded machine's terminal
    delivering them at once): the focus moves at the first down, so the second moves the
    cursor and enter picks the second run (a focus that waited a turn had left both to
    the search box)."""
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        with RunStore(fixed.path) as store:
            a = store.list_runs(RunQuery(kind="original", limit=50))[3]
        picker = await picker_from(pilot, a.id)
        assert picker.table.row_count >= 2
        second = picker.table.row_key(1)
        for key, char in (("down", None), ("down", None), ("enter", "\r")):
            app.post_message(events.Key(key, char))  # queued together, handled in order
        cmp = await comparison_shown(pilot)
        assert (cmp.view.a.run_id, cmp.view.b.run_id) == (a.id, second)


@sync
async def test_enter_before_the_pickers_search_is_shown_picks_once_it_is(
    fixed: FixedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search runs beside the app; enter typed before its runs are shown picks the
    first of them when they are, and typing on after enter cancels that pick.  The
    search is held back (the real one, gated) so that enter surely comes first."""
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        with RunStore(fixed.path) as store:
            a, b, c = store.list_runs(RunQuery(kind="original", limit=50))[12:15]
        picker = await picker_from(pilot, a.id)
        assert picker.table.row_count >= 2
        gate = gate_picker_search(monkeypatch)

        # enter, then more typed: the pick is cancelled, the later search only shown
        await pilot.press(*c.id[:12], "enter", "backspace")
        gate.set()
        await wait_until(pilot, lambda: picker._shown == picker._generation)
        await settle(pilot)
        assert app.screen is picker
        assert picker.table.get_row_index(c.id) >= 0  # the search after enter is shown

        # enter before the search is shown: it picks the first run once shown
        gate.clear()
        await pilot.press("ctrl+u", *b.id[:12], "enter")
        assert app.screen is picker and picker._shown != picker._generation
        gate.set()
        cmp = await comparison_shown(pilot)
        assert (cmp.view.a.run_id, cmp.view.b.run_id) == (a.id, b.id)


@sync
async def test_enter_on_the_pickers_runs_before_the_search_typed_is_shown_picks_from_it(
    fixed: FixedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Down then enter while the table still shows an older search's rows (the search
    typed is held back, gated): enter picks the first run of the search typed once it is
    shown, never the older row under the cursor.  Where the older search matched no run
    (three characters of an id: too short to be read as one, and no word's start), enter
    is not lost."""
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        with RunStore(fixed.path) as store:
            runs = store.list_runs(RunQuery(kind="original", limit=50))
        a, b = runs[5], runs[20]
        picker = await picker_from(pilot, a.id)
        assert picker.table.row_key(0) != b.id  # the row enter would have picked
        gate = gate_picker_search(monkeypatch)

        # the rows shown are the empty search's, the first of them another run's
        await pilot.press(*b.id[:12], "down", "enter")
        assert app.screen is picker and picker._shown != picker._generation
        assert app.focused is picker.table
        gate.set()
        cmp = await comparison_shown(pilot)
        assert (cmp.view.a.run_id, cmp.view.b.run_id) == (a.id, b.id)

        # the rows shown are those of a search that matched none
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is runs_screen(app))
        picker = await picker_from(pilot, a.id)
        await pilot.press(*b.id[:3])
        await wait_until(pilot, lambda: picker._shown == picker._generation)
        assert picker.table.row_count == 0
        gate.clear()
        await pilot.press(*b.id[3:12], "down", "enter")
        assert app.screen is picker and picker._shown != picker._generation
        assert app.focused is picker.table
        gate.set()
        cmp = await comparison_shown(pilot)
        assert (cmp.view.a.run_id, cmp.view.b.run_id) == (a.id, b.id)


# -- dashboard, help, palette, errors ---------------------------------------------------


@sync
async def test_dashboard_rates(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        await pilot.press("d")
        await settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen) and dash.stats is not None
        s = dash.stats
        # judged originals: DIVERGED, IDENTICAL, IDENTICAL, EQUIVALENT, INCOMPLETE
        assert (s.reproducible.part, s.reproducible.whole) == (3, 5)
        # (replay, checkpoint of its original) pairs: the diverged replay's checkpoint differs
        assert (s.artifact_match.part, s.artifact_match.whole) == (3, 4)
        # the dashboard shows the SLIs exactly as `replay-tui stats` computes them
        from replay_tui.evidence.stats import compute_stats

        with RunStore(fixed.path) as store:
            sli = compute_stats(store)
        assert (s.reproducible.part, s.reproducible.whole) == (
            sli.reproducible.numerator,
            sli.reproducible.denominator,
        )
        assert (s.artifact_match.part, s.artifact_match.whole) == (
            sli.checkpoint_match.numerator,
            sli.checkpoint_match.denominator,
        )
        assert (s.aborted.part, s.aborted.whole) == (sli.aborted.numerator, sli.aborted.denominator)
        assert s.drills.whole == 1 and s.drills.part == 0
        assert s.critical_total == len(s.critical_runs) > 0
        # the cancelled attempt after an IDENTICAL replay: counted apart, never a verdict
        assert (s.aborted.part, s.aborted.whole) == (1, 6)
        recent = dash.query_one("#recent", DataTable)
        assert recent.row_count == 6
        assert "CANCELLED" in str(recent.get_row_at(0)[3])
        critical = dash.query_one("#critical", DataTable)
        critical.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RunDetailScreen)
        await pilot.press("escape", "escape")
        assert isinstance(app.screen, RunsScreen)


@sync
async def test_help_and_command_palette(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"dashboard")
        await wait_until(  # the palette has found the command (its search runs in a worker)
            pilot,
            lambda: any(
                "Dashboard" in str(o.prompt) for o in app.screen.query_one(CommandList).options
            ),
        )
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DashboardScreen)
        # one "Keys" only: Textual's (the focused widget's help); ours is the key map
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles.count("Keys") <= 1 and "Key map" in titles
        assert len(titles) == len(set(titles))
        quit_line = dict(dict(KEYMAP)["everywhere"])["q / ctrl+c"]
        assert "drill" in quit_line and "replay" in quit_line


@sync
async def test_a_failing_worker_shows_the_error_modal(fixed: FixedStore) -> None:
    """The docker backend refuses a run recorded without an image: the modal says so."""
    with RunStore(fixed.path) as store:
        no_image = next(
            r.id for r in store.list_runs(RunQuery(limit=100)) if r.image_digest is None
        )
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        app.post_message(OpenReplay(no_image))
        await settle(pilot)
        replay = app.screen
        assert isinstance(replay, ReplayScreen)
        await pilot.press("enter")  # Start
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorModal))
        modal = app.screen
        assert isinstance(modal, ErrorModal)
        assert "no image digest" in str(modal.query_one("#message", Static).render())
        assert "local" in str(modal.query_one("#hint", Static).render())
        await pilot.press("escape")
        assert app.screen is replay
        assert replay.phase == "failed"
        assert replay.board.states["plan"] == "failed"
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)


@sync
async def test_a_missing_run_shows_the_error_modal(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        app.post_message(OpenReplay("0000000000nope"))
        await settle(pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorModal))


# -- real replays (the local backend, a run recorded by the real launcher) --------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return record_real_run(tmp_path_factory.mktemp("recorded"))


async def start_replay(pilot: Pilot[None], app: ReplayApp, run_id: str) -> ReplayScreen:
    replay = await press_on_row(pilot, run_id, "r")
    assert isinstance(replay, ReplayScreen)
    assert replay.chosen_options()[0].backend == "local"
    await pilot.press("enter")  # the Start button has the focus
    assert replay.phase != "options"  # started (it may already have finished: no race)
    return replay


async def open_replay_screen(pilot: Pilot[None], app: ReplayApp, run_id: str) -> ReplayScreen:
    """The replay screen of ``run_id``, its form shown (nothing started)."""
    await settle(pilot)
    app.post_message(OpenReplay(run_id))
    await wait_until(pilot, lambda: isinstance(app.screen, ReplayScreen))
    replay = app.screen
    assert isinstance(replay, ReplayScreen)
    return replay


@pytest.mark.parametrize("answer", ["y", "n"])
@sync
async def test_the_quit_question_stays_when_a_replay_ends_under_it(
    fixed: FixedStore, answer: str
) -> None:
    """A replay that ends while "quit?" is asked opens its comparison only after the
    answer: y quits (nothing is left to cancel), n shows the comparison."""
    app = local_app(fixed.path)
    async with app.run_test(size=(200, 60)) as pilot:
        replay = await open_replay_screen(pilot, app, fixed.original_id)
        replay._set_phase("running")  # as a started replay is (no worker: the test ends it)
        question = await ask_to_quit(pilot)
        # the replay ends under the question and opens its comparison, as it does
        replay._set_phase("done")
        replay.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        await wait_until(pilot, lambda: app._held_comparison is not None)
        assert app.screen is question
        await pilot.press(answer)
        if answer == "y":
            await wait_until(pilot, lambda: not app.is_running)
        else:
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ComparisonScreen) and app.screen.view is not None,
            )
            cmp = app.screen
            assert isinstance(cmp, ComparisonScreen)
            assert cmp.comparison_id == fixed.diverged_comparison and app.is_running


@sync
async def test_escape_on_the_replay_screen_says_back_unless_a_replay_runs(
    fixed: FixedStore,
) -> None:
    app = local_app(fixed.path)
    async with app.run_test(size=SIZE) as pilot:
        replay = await open_replay_screen(pilot, app, fixed.original_id)
        await wait_until(pilot, lambda: "Back" in footer_keys(app))
        assert "Back / cancel" not in footer_keys(app)
        replay._set_phase("running")  # as a started replay is (no worker)
        # the footer is empty while it recomposes: wait for the new key, not the old's going
        await wait_until(pilot, lambda: "Cancel replay" in footer_keys(app))
        assert "Back" not in footer_keys(app)
        await pilot.press("escape")  # cancels; the screen stays
        await wait_until(pilot, lambda: replay.phase == "cancelling")
        assert app.screen is replay
        replay._set_phase("cancelled")
        await wait_until(pilot, lambda: "Back" in footer_keys(app))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen))


@pytest.mark.slow
@pytest.mark.usefixtures("python_with_torch")
@sync
async def test_replay_streams_stages_and_ends_on_the_comparison(
    recorded: tuple[Path, str],
) -> None:
    store, run_id = recorded
    app = local_app(store)
    async with app.run_test(size=SIZE) as pilot:
        replay = await start_replay(pilot, app, run_id)
        await wait_until(pilot, lambda: isinstance(app.screen, ComparisonScreen), timeout=600)
        cmp = app.screen
        assert isinstance(cmp, ComparisonScreen)
        await settle(pilot)
        assert cmp.verdict == "IDENTICAL"
        assert replay.phase == "done"
        assert all(state == "done" for state in replay.board.states.values())
        log = replay.query_one("#log", Log)
        assert any(line.startswith("step ") for line in log.lines)
        assert replay.summary is not None and replay.summary.results[0].verdict == "IDENTICAL"
        await pilot.press("escape")  # back to the finished replay, then the runs
        assert app.screen is replay
        await pilot.press("escape")
        await settle(pilot)
        runs = runs_screen(app)  # shown again: the new verdict, the cursor where it was
        record = runs.table.record(run_id)
        assert record is not None and record.last_verdict == "IDENTICAL"
        assert runs.table.selected_run == run_id
    with RunStore(store) as s:
        facts = s.replays_of(run_id)
        assert facts[-1].verdict == "IDENTICAL"
        assert s.get_run(run_id).last_verdict == "IDENTICAL"


def _replay_once(store: Path, run_id: str) -> None:
    from replay_tui.replay.series import replay_many

    with RunStore(store) as s:
        report = replay_many(s, run_id, ReplayOptions(backend="local"))
    assert report.exit_code == 0, report.text()


@pytest.mark.slow
@pytest.mark.usefixtures("python_with_torch")
@sync
async def test_cancel_a_running_replay(gated: tuple[Path, str, Path]) -> None:
    """Cancel → recorded as cancelled; the run's verdict, its runs-list state and the
    reproducible rate are what the completed replay made them."""
    from replay_tui.evidence.stats import compute_stats
    from replay_tui.verdicts import summarize

    store, run_id, gate = gated
    _replay_once(store, run_id)  # a completed IDENTICAL replay first
    with RunStore(store) as s:
        assert s.get_run(run_id).last_verdict == "IDENTICAL"
        rate_before = compute_stats(s).reproducible
    gate.unlink()  # from now on the program runs for minutes
    app = local_app(store)
    async with app.run_test(size=SIZE) as pilot:
        replay = await start_replay(pilot, app, run_id)
        await until_logged(pilot, replay, lambda line: line.startswith("step "))
        await pilot.press("x")
        await wait_until(pilot, lambda: not replay.replay_running, timeout=300)
        await settle(pilot)
        assert replay.phase == "cancelled"
        assert app.screen is replay  # a cancelled replay does not open the comparison
        assert replay.summary is not None and replay.summary.cancelled
        outcome = str(replay.query_one("#outcome", Static).render())
        assert "CANCELLED" in outcome and "not counted" in outcome
        await pilot.press("escape")
        await settle(pilot)
        runs = runs_screen(app)
        record = runs.table.record(run_id)
        assert record is not None and record.last_verdict == "IDENTICAL"
    with RunStore(store) as s:
        facts = s.replays_of(run_id)
        assert [f.status for f in facts] == ["completed", "cancelled"]
        assert (facts[1].reason or "").startswith("cancelled")  # not "interrupted"
        assert s.get_run(run_id).last_verdict == "IDENTICAL"
        assert compute_stats(s).reproducible == rate_before
        summary = summarize(s.replay_outcomes([run_id])[run_id])
        assert summary.text() == "IDENTICAL 1/1, 1 cancelled"


@pytest.mark.slow
@pytest.mark.usefixtures("python_with_torch")
@sync
async def test_quitting_mid_replay_asks_first_then_records_a_cancel(
    gated: tuple[Path, str, Path],
) -> None:
    store, run_id, app = ungated_app(gated)
    async with app.run_test(size=SIZE) as pilot:
        replay = await start_replay(pilot, app, run_id)
        await until_logged(pilot, replay, lambda line: line.startswith("step "))
        await ask_to_quit(pilot)
        await pilot.press("n")  # keep running
        await wait_until(pilot, lambda: app.screen is replay)
        assert replay.replay_running and app.is_running
        await ask_to_quit(pilot)
        await pilot.press("y")
        await wait_until(pilot, lambda: not app.is_running, timeout=300)
    with RunStore(store) as s:
        facts = s.replays_of(run_id)
        assert [f.status for f in facts] == ["cancelled"]
        assert s.get_run(run_id).last_verdict is None
