"""The TUI's workbench tools, driven with Pilot over real stores: the metric plot's keys
(log y, zoom to the divergence), told-apart series, verifying a bundle and running a
drill from the command palette, and the full value of a cut cell."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.style import Style
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import (
    DataTable,
    Input,
    Log,
    ProgressBar,
    Select,
    Static,
    TabbedContent,
)

from replay_tui.replay.backends import backend_choices
from replay_tui.replay.plan import ReplayOptions
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.messages import OpenComparison
from replay_tui.tui.screens.drill import DrillScreen
from replay_tui.tui.screens.modals import ErrorModal
from replay_tui.tui.screens.verify import VerifyBundleScreen
from replay_tui.tui.widgets.plot import LinePlot, Series, render_plot, zoom_window
from storage.store import RunStore
from tests.helpers.tui import replay_app, settled_app
from tests.support.app import (
    ORIGINAL_ID,
    SIZES,
    FixedStore,
    SnapCompare,
    ask_to_quit,
    cli_env,
    comparison_shown,
    fixed_drill,
    footer_keys,
    local_app,
    opened,
    palette,
    settle,
    snap_app,
    sync,
    ungated_app,
    until_logged,
    wait_until,
)
from tests.support.training import replay_tui

A_STYLE, B_STYLE, BOTH = Style(color="blue"), Style(color="yellow"), Style(color="green")
KW: dict[str, Any] = dict(
    styles=(A_STYLE, B_STYLE), both=BOTH, marker_style=Style(color="red"), axis=Style()
)


def _dots(text: str) -> int:
    """How many braille dots the plot draws."""
    return sum(bin(ord(ch) - 0x2800).count("1") for ch in text if 0x2800 < ord(ch) <= 0x28FF)


# -- the plot ---------------------------------------------------------------------------


def test_b_is_dashed_a_is_solid_and_both_is_solid_where_they_agree() -> None:
    rising = [(float(s), float(s)) for s in range(100)]
    falling = [(float(s), float(100 - s)) for s in range(100)]
    alone_a = render_plot([Series("A", rising)], 60, 8, **KW)
    alone_b = render_plot([Series("A", []), Series("B", rising)], 60, 8, **KW)
    assert _dots(alone_b.plain) < _dots(alone_a.plain)  # the same line, dashed: gaps
    assert {s.style for s in alone_b.spans} >= {B_STYLE}
    same = render_plot([Series("A", rising), Series("B", rising)], 60, 8, **KW)
    assert same.plain == alone_a.plain  # agreeing series: one solid line...
    assert BOTH in {s.style for s in same.spans} and B_STYLE not in {s.style for s in same.spans}
    crossing = render_plot([Series("A", rising), Series("B", falling)], 60, 8, **KW)
    styles = [s.style for s in crossing.spans]
    assert A_STYLE in styles and B_STYLE in styles  # ...differing ones keep their colours


def test_log_y_ticks_read_values_and_the_axis_says_log() -> None:
    decaying = [(float(s), 10.0 ** (-s / 10)) for s in range(41)]  # 1 down to 1e-4
    linear = render_plot([Series("A", decaying)], 60, 9, **KW).plain.splitlines()
    log = render_plot([Series("A", decaying)], 60, 9, log_y=True, **KW).plain.splitlines()
    assert log[0].split()[0] == "1" and log[-2].split()[0] == "0.0001"
    assert log[len(log) // 2 - 1].split()[0] == "0.01"  # the middle tick: the geometric mean
    assert "log y" in log[-1] and "log y" not in linear[-1]
    # linear: the curve hugs the bottom after a few steps; log: a straight diagonal
    assert sum(line.count("⣀") for line in linear) > sum(line.count("⣀") for line in log)


def test_zoom_window_is_the_steps_around_the_marker() -> None:
    series = [Series("A", [(float(s), float(s)) for s in range(0, 2000, 10)])]
    lo, hi = zoom_window(series, 1250.0) or (math.nan, math.nan)
    assert lo < 1250 < hi and hi - lo == 2 * 20 * 10  # a tenth of 200 steps either side
    assert zoom_window(series, None) is None
    short = [Series("A", [(float(s), float(s)) for s in range(6)])]
    assert zoom_window(short, 3.0) is None  # the whole history: nothing to zoom into
    text = render_plot(series, 60, 6, marker=1250.0, x_range=(lo, hi), **KW).plain
    axis = text.splitlines()[-1].split()
    assert axis[0] == f"{lo:g}" and axis[-1] == f"{hi:g}" and "▲1250" in axis
    assert "zoom" in text.splitlines()[-1]


@sync
async def test_plot_keys_log_and_zoom_show_in_the_footer_only_while_it_has_focus(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, (120, 40)) as (app, pilot):
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        await settle(pilot)
        await pilot.press("3")  # the Metrics tab: the diverged loss is plotted
        await settle(pilot)
        plot = app.screen.query_one("#plot", LinePlot)
        assert plot._marker == 1250.0
        assert "Log y" not in footer_keys(app)
        plot.focus()
        await wait_until(pilot, lambda: {"Log y", "Zoom to divergence"} <= footer_keys(app))
        await pilot.press("z")
        await wait_until(pilot, lambda: plot.zoomed)
        lo, hi = plot.x_range or (math.nan, math.nan)
        assert lo < 1250 < hi and (hi - lo) < 1000  # 40 steps of 50: a tenth either side
        assert "zoom" in str(plot.render()).splitlines()[-1]
        await pilot.press("z")
        await wait_until(pilot, lambda: not plot.zoomed)
        await pilot.press("l")
        await wait_until(pilot, lambda: plot.showing_log)
        assert "log y" in str(plot.render()).splitlines()[-1]
        await pilot.press("l")
        await wait_until(pilot, lambda: not plot.showing_log)
        app.screen.focus_next()  # away from the plot: its keys leave the footer
        await wait_until(pilot, lambda: not plot.has_focus and "Log y" not in footer_keys(app))


@sync
async def test_number_keys_switch_tabs_from_the_metrics_table_and_its_plot(
    fixed: FixedStore,
) -> None:
    """The hidden table would hand the focus to its plot, which switched back to
    Metrics: the tab asked for is the one shown, whatever has the focus."""
    async with settled_app(fixed.path, (120, 40)) as (app, pilot):
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        cmp = await comparison_shown(pilot)
        tabs = cmp.query_one(TabbedContent)
        for widget_id, key, pane in (
            ("#metrics", "1", "tab-fields"),
            ("#plot", "2", "tab-artifacts"),
            ("#plot", "4", "tab-gaps"),
        ):
            await pilot.press("3")
            await wait_until(pilot, lambda: tabs.active == "tab-metrics")
            widget = cmp.query_one(widget_id)
            widget.focus()
            await wait_until(pilot, lambda w=widget: app.focused is w)
            await pilot.press(key)
            await wait_until(pilot, lambda p=pane: tabs.active == p)
            await settle(pilot)
            assert tabs.active == pane, (widget_id, key)


@sync
async def test_bisect_is_not_offered_when_a_run_is_a_replay(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, (200, 60)) as (app, pilot):
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        cmp = await comparison_shown(pilot)
        assert cmp.view.b.kind == "replay"
        await wait_until(pilot, lambda: "Only differences" in footer_keys(app))
        assert "Bisect (A good, B bad)" not in footer_keys(app)
        await pilot.press("b")
        await settle(pilot)
        assert app.screen is cmp  # no bisect screen


def test_the_key_map_lists_every_plot_key() -> None:
    from textual.binding import Binding

    from replay_tui.tui.screens.modals import KEYMAP

    (plot_keys,) = [keys for section, keys in KEYMAP if section.startswith("plot")]
    bound = {b.key for b in LinePlot.BINDINGS if isinstance(b, Binding)}
    assert {key for key, _ in plot_keys} == bound == {"l", "w", "z"}


# -- verify a bundle ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def signed_bundle(fixed: FixedStore, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real signed bundle of the diverged run, exported into ``bundles/`` beside the
    store (where the TUI exports), and the signer's public key."""
    from replay_tui.evidence.export import export_bundle
    from replay_tui.evidence.keys import generate

    keys = tmp_path_factory.mktemp("keys")
    pair = generate(keys / "signer.key", keys / "signer.pub")
    out = fixed.path.parent / "bundles" / "diverged"
    out.parent.mkdir(exist_ok=True)
    with RunStore(fixed.path) as store:
        export_bundle(store, fixed.original_id, out, key_path=pair.private_path)
    return out, pair.public_path


def _cli_verify(fixed: FixedStore, *args: str | Path, env: dict[str, str] | None = None) -> str:
    return replay_tui(fixed.path, "verify", *args, env=env, timeout=120).stdout


async def _verify(pilot: Pilot[Any], screen: VerifyBundleScreen, bundle: Path, key: str) -> None:
    screen.query_one("#bundle", Input).value = str(bundle)
    screen.query_one("#key", Input).value = key
    screen.check = None
    await pilot.click("#verify")
    await wait_until(pilot, lambda: screen.check is not None, 120)


@sync
async def test_verify_from_the_palette_says_what_the_cli_says(
    fixed: FixedStore, signed_bundle: tuple[Path, Path], tmp_path: Path
) -> None:
    """Intact with the signer's key, and a flipped byte named, in the CLI's words."""
    bundle, public = signed_bundle
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle, tampered)
    with (tampered / "report.md").open("ab") as f:
        f.write(b" ")
    async with settled_app(fixed.path, (120, 40)) as (app, pilot):
        await palette(pilot, "Verify bundle")
        await wait_until(pilot, lambda: isinstance(app.screen, VerifyBundleScreen))
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, VerifyBundleScreen)
        # the bundle the TUI would have exported last is offered
        assert screen.query_one("#bundle", Input).value == str(bundle)
        await _verify(pilot, screen, bundle, str(public))
        assert screen.check is not None and screen.check.ok and screen.check.trusted
        intact = [line.text for line in screen.lines]
        assert intact == _cli_verify(fixed, bundle, "--key", public).splitlines()
        assert intact[0].startswith("bundle intact: ") and fixed.original_id in intact[0]
        shown = str(screen.query_one("#result", Static).render())
        assert shown.splitlines()[0] == intact[0]
        await _verify(pilot, screen, tampered, str(public))
        assert screen.check is not None and not screen.check.ok
        failed = [line.text for line in screen.lines]
        assert failed == _cli_verify(fixed, tampered, "--key", public).splitlines()
        assert failed[0].startswith("BUNDLE FAILED VERIFICATION: changed: report.md: ")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, VerifyBundleScreen))


@sync
async def test_verify_with_no_key_uses_the_trusted_keys_file_like_the_cli(
    fixed: FixedStore,
    signed_bundle: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle, public = signed_bundle
    trusted = tmp_path / "trusted-keys.pem"
    monkeypatch.setenv("REPLAY_TUI_TRUSTED_KEYS", str(trusted))
    async with settled_app(fixed.path, (120, 40)) as (app, pilot):
        screen = await opened(pilot, app.action_verify_bundle, VerifyBundleScreen)
        assert str(trusted) in str(screen.query_one("#key", Input).placeholder)
        # no trusted key yet: not checked against one, exactly as the CLI says
        await _verify(pilot, screen, bundle, "")
        assert screen.check is not None and not screen.check.ok
        env = {**cli_env(), "REPLAY_TUI_TRUSTED_KEYS": str(trusted)}
        untrusted = [line.text for line in screen.lines]
        assert untrusted == _cli_verify(fixed, bundle, env=env).splitlines()
        assert "signature not checked against a trusted key" in untrusted[0]
        trusted.write_bytes(public.read_bytes())  # now the signer's key is trusted
        await _verify(pilot, screen, bundle, "")
        assert screen.check is not None and screen.check.ok and screen.check.trusted
        assert [line.text for line in screen.lines] == _cli_verify(
            fixed, bundle, env=env
        ).splitlines()


@sync
async def test_verify_of_a_missing_folder_shows_the_error(
    fixed: FixedStore, tmp_path: Path
) -> None:
    async with settled_app(fixed.path, (120, 40)) as (app, pilot):
        screen = await opened(pilot, app.action_verify_bundle, VerifyBundleScreen)
        screen.query_one("#bundle", Input).value = str(tmp_path / "nope")
        await pilot.click("#verify")
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorModal))
        modal = app.screen
        assert isinstance(modal, ErrorModal) and modal.context == "Verifying the bundle failed"
        assert "is not a bundle folder" in str(modal.query_one("#message", Static).render())
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)
        result = str(screen.query_one("#result", Static).render())
        assert result.startswith("could not verify: ") and "not a bundle folder" in result
        assert screen.check is None and not screen.running


# -- a drill -----------------------------------------------------------------------------


async def _start_drill(pilot: Pilot[Any], app: ReplayApp, count: int) -> DrillScreen:
    await settle(pilot)
    await palette(pilot, "Start drill")
    await wait_until(pilot, lambda: isinstance(app.screen, DrillScreen))
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, DrillScreen)
    assert [
        (str(label), name) for label, name in screen.query_one("#backend", Select)._options
    ] == [(label, name) for label, name in backend_choices()]  # the registry's backends
    screen.query_one("#count", Input).value = str(count)
    screen.query_one("#pick", Select).value = "oldest"
    _, pick, _, options = screen.chosen()
    assert (pick, options.backend) == ("oldest", "local")
    assert app.focused is screen.query_one("#count", Input)  # the first field
    await pilot.press("enter")  # enter in a field starts the drill, as Start does
    assert screen.phase != "options"  # started (it may already have finished: no race)
    return screen


@pytest.mark.slow
@pytest.mark.usefixtures("python_with_torch")
@sync
async def test_drill_from_the_palette_replays_and_shows_each_run(
    gated: tuple[Path, str, Path],
) -> None:
    store, run_id, _ = gated
    app = local_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _start_drill(pilot, app, 2)  # one candidate: one run
        await wait_until(pilot, lambda: screen.phase == "done", 300)
        await settle(pilot)
        report = screen.report
        assert report is not None and report.passed and report.drill_id is not None
        table = screen.query_one("#results", DataTable)
        assert table.row_count == 1
        row = [str(c) for c in table.get_row(run_id)]
        assert row[0] == run_id[:13] and row[1] == "reproduced" and row[2].strip() == "IDENTICAL"
        outcome = str(screen.query_one("#outcome", Static).render())
        assert outcome.startswith(" PASSED  drill #") and "1 of 1 reproduced" in outcome
        bar = screen.query_one("#bar", ProgressBar)
        assert (bar.total, bar.progress) == (1, 1)
        log = screen.query_one("#log", Log)
        assert any("run 1 of 1: " + run_id in line for line in log.lines)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DrillScreen))
    with RunStore(store) as s:
        (drill,) = s.facts("drills")
        assert drill["id"] == report.drill_id and drill["passed"] == 1
        assert [r["run_id"] for r in drill["body"]["runs"]] == [run_id]
        assert s.get_run(run_id).last_verdict == "IDENTICAL"


@pytest.mark.slow
@pytest.mark.usefixtures("python_with_torch")
@sync
async def test_cancel_a_running_drill(gated: tuple[Path, str, Path]) -> None:
    """x stops the replay under way; the drill is stored, the replay as cancelled (not
    a failed reproduction: the run's verdict stays unset)."""
    store, run_id, app = ungated_app(gated)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _start_drill(pilot, app, 1)
        await until_logged(pilot, screen, lambda line: "| step " in line)
        await pilot.press("x")
        await wait_until(pilot, lambda: not screen.drill_running, 300)
        await settle(pilot)
        assert screen.phase == "cancelled"
        report = screen.report
        assert report is not None and not report.passed
        (item,) = report.items
        assert item.status == "error" and (item.reason or "").startswith("cancelled")
        table = screen.query_one("#results", DataTable)
        assert [str(c) for c in table.get_row(run_id)][1] == "error"
        outcome = str(screen.query_one("#outcome", Static).render())
        assert outcome.startswith(" CANCELLED  drill #")
    with RunStore(store) as s:
        (drill,) = s.facts("drills")
        assert drill["passed"] == 0 and drill["body"]["runs"][0]["status"] == "error"
        assert drill["body"]["cancelled"] is True  # the cancel landed during the last run
        assert [f.status for f in s.replays_of(run_id)] == ["cancelled"]
        assert s.get_run(run_id).last_verdict is None


# -- snapshots ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_drill_form(
    snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]
) -> None:
    async def open_drill(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = replay_app(pilot)
        app.action_drill()
        await settle(pilot)

    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=open_drill)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_drill_finished(
    snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]
) -> None:
    from replay_tui.replay.runner import ReplayEvent

    async def finished(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = replay_app(pilot)
        screen = await opened(pilot, app.action_drill, DrillScreen)
        screen.show_progress(3, ReplayOptions(backend="local"))
        report = fixed_drill()
        for n, item in enumerate(report.items, 1):
            screen.post_message(
                DrillScreen.Progress(ReplayEvent("drill", "note", f"run {n} of 3: {item.run_id}"))
            )
            screen.post_message(DrillScreen.Progress(ReplayEvent("plan", "done", "local backend")))
        screen.post_message(DrillScreen.Finished(report))
        await settle(pilot)

    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=finished)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_verify_result(
    snap_compare: SnapCompare,
    fixed: FixedStore,
    size: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from replay_tui.evidence.verify import BundleCheck, Problem
    from replay_tui.evidence.words import report_lines

    monkeypatch.setenv("REPLAY_TUI_TRUSTED_KEYS", "/etc/replay-tui/trusted-keys.pem")
    check = BundleCheck(
        Path("bundles/01JRORIGINAL0-20250602T093000"),
        files_checked=14,
        signed=True,
        key_id="5e1f" * 16,
        key_source="given",
        trusted=True,
        ledger_head="9f" * 32,
        run_id=ORIGINAL_ID,
        verdict="DIVERGED",
        problems=[
            Problem(
                "report.md", "changed", "sha256 is 1b4f0e9870cf2f53, listed as 6d0c1e2b8b7a1f3e"
            ),
            Problem("extra.txt", "added", "not listed in SHA256SUMS"),
        ],
    )

    async def verified(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = replay_app(pilot)
        screen = await opened(pilot, app.action_verify_bundle, VerifyBundleScreen)
        screen.query_one("#bundle", Input).value = str(check.path)
        screen.query_one("#key", Input).value = "keys/signer.pub"
        screen.query_one("#verify").focus()
        screen.post_message(VerifyBundleScreen.Checked(check, report_lines(check)))
        await settle(pilot)

    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=verified)


@sync
async def test_run_detail_plots_take_l_when_focused_and_the_screen_keeps_it_otherwise(
    fixed: FixedStore,
) -> None:
    """On the run's page ``l`` opens the log tab; on a focused plot it is the log y axis,
    and the overlay's label says which line is the run and which the replays."""
    from textual.widgets import TabbedContent

    from replay_tui.tui.messages import OpenRun
    from replay_tui.tui.screens.run_detail import RunDetailScreen

    async with settled_app(fixed.path, (120, 40)) as (app, pilot):
        detail = await opened(pilot, OpenRun(fixed.original_id), RunDetailScreen)
        tabs = detail.query_one(TabbedContent)
        tabs.active = "tab-outputs"
        await settle(pilot)
        labels = [str(w.render()) for w in detail.query("#metrics .metric-label")]
        assert any("━ 40 steps ╍ +1 replays" in label for label in labels)
        plot = detail.query("#metrics LinePlot").first(LinePlot)
        plot.focus()
        await wait_until(pilot, lambda: "Log y" in footer_keys(app))
        assert "Zoom to divergence" not in footer_keys(app)  # no marked step: nothing to zoom
        await pilot.press("l")
        await wait_until(pilot, lambda: plot.showing_log)
        assert tabs.active == "tab-outputs"
        detail.query_one("#artifacts").focus()
        await wait_until(pilot, lambda: "Log y" not in footer_keys(app))
        await pilot.press("l")
        await wait_until(pilot, lambda: tabs.active == "tab-log")


# -- the full value of a cut cell --------------------------------------------------------


@sync
async def test_comparison_fields_show_the_focused_rows_values_whole(fixed: FixedStore) -> None:
    """At 80 columns the fields table cuts argv; the line under it has all of it."""
    from textual.widgets import DataTable

    with RunStore(fixed.path) as s:
        argv_a = ", ".join(s.manifest(fixed.original_id).argv)
        argv_b = ", ".join(s.manifest(fixed.replay_id).argv)
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        await settle(pilot)
        table = app.screen.query_one("#fields", DataTable)
        full = app.screen.query_one("#field-full", Static)
        row = table.get_row_index("argv")
        assert len(argv_a) > table.columns["a"].width  # the cell cuts it
        table.move_cursor(row=row)
        await wait_until(pilot, lambda: str(full.render()).startswith("argv "))
        shown = str(full.render())
        assert f"original: {argv_a}" in shown and f"replay: {argv_b}" in shown
        # the package diff row: every changed package, not the first six
        table.move_cursor(row=table.get_row_index("packages (diff)"))
        await wait_until(pilot, lambda: str(full.render()).startswith("packages (diff)"))
        assert "changed: " in str(full.render())


@pytest.mark.slow
@pytest.mark.usefixtures("python_with_torch")
@sync
async def test_quitting_mid_drill_asks_first_then_stores_the_drill(
    gated: tuple[Path, str, Path],
) -> None:
    store, run_id, app = ungated_app(gated)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _start_drill(pilot, app, 1)
        await until_logged(pilot, screen, lambda line: "| step " in line)
        question = await ask_to_quit(pilot)
        assert question.question.startswith("1 drill is running. Quit and cancel it?")
        await pilot.press("y")
        await wait_until(pilot, lambda: not app.is_running, timeout=300)
    with RunStore(store) as s:
        (drill,) = s.facts("drills")
        assert drill["body"]["runs"][0]["status"] == "error"
        assert [f.status for f in s.replays_of(run_id)] == ["cancelled"]


def test_cut_cells_names_what_the_columns_cut_or_hide() -> None:
    from replay_tui.tui.widgets.fullrow import cut_cells
    from replay_tui.tui.widgets.grid import GridColumn

    columns = [
        GridColumn("id", "ID", 6),
        GridColumn("name", "NAME ▼", 10),
        GridColumn("status", "STATUS", 9),
        GridColumn("image", "IMAGE", 0),  # hidden by a narrow terminal
    ]
    cells = [Text("run-00"), Text("a-very-long-name"), Text("succeeded"), Text("img:1")]
    assert cut_cells(columns, cells, {"id": "run-000001"}) == [
        ("ID", "run-000001"),  # shortened on purpose: its whole value given
        ("NAME", "a-very-long-name"),
        ("IMAGE", "img:1"),
    ]
    assert cut_cells(columns[:3], [Text("run-00"), Text("short"), Text("failed")]) == []


@sync
async def test_full_row_follows_the_grid_cursor_and_its_pages() -> None:
    from textual.app import App, ComposeResult

    from replay_tui.tui.widgets.fullrow import FullRow
    from replay_tui.tui.widgets.grid import Grid, GridColumn

    columns = [GridColumn("id", "ID", 6), GridColumn("name", "NAME", 10)]

    class GridApp(App[None]):
        def compose(self) -> ComposeResult:
            grid = Grid(columns, id="grid")
            yield grid
            yield FullRow(grid, whole=lambda key: {"id": key}, id="full")

        def on_grid_row_highlighted(self, event: Grid.RowHighlighted) -> None:
            self.query_one(FullRow).follow()  # what the grid's owner does

    def rows(*names: str) -> list[tuple[str, list[Text]]]:
        return [
            (f"run-{n:06d}", [Text(f"run-{n:02d}"), Text(name)]) for n, name in enumerate(names)
        ]

    app = GridApp()
    async with app.run_test(size=(60, 10)) as pilot:
        grid, full = app.query_one(Grid), app.query_one(FullRow)
        grid.add_rows(rows("short", "a-very-long-name"))
        full.follow()  # rows added in place: the owner says so
        grid.focus()
        await wait_until(pilot, lambda: full.parts == [("ID", "run-000000")])
        await pilot.press("down")
        await wait_until(pilot, lambda: ("NAME", "a-very-long-name") in full.parts)
        assert "NAME a-very-long-name" in str(full.render())
        grid.replace_rows(rows("another-long-name"))  # a new page: the cursor at the top
        await wait_until(pilot, lambda: ("NAME", "another-long-name") in full.parts)


def test_a_decorated_cell_is_not_cut() -> None:
    from replay_tui.tui.widgets.fullrow import cut_cells
    from replay_tui.tui.widgets.grid import GridColumn

    columns = [GridColumn("name", "NAME", 20)]
    assert cut_cells(columns, [Text("▸ resnet")], {"name": "resnet"}) == []


@sync
async def test_runs_list_shows_the_focused_runs_cut_values_whole(fixed: FixedStore) -> None:
    """At 80 columns the name is cut and the image hidden: the line under the list has
    them whole, with the whole run id; wider, only what is still shortened."""
    from replay_tui.tui.widgets.fullrow import FullRow
    from tests.support.app import runs_screen

    with RunStore(fixed.path) as s:
        record = s.get_run(fixed.original_id)
    image = (record.image_ref or "") + (f"@{record.image_digest}" if record.image_digest else "")
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        screen = runs_screen(app)
        full = screen.query_one("#full-row", FullRow)
        screen.table.move_cursor(row=screen.table.get_row_index(fixed.original_id))
        await wait_until(pilot, lambda: ("ID", fixed.original_id) in full.parts)
        parts = dict(full.parts)
        assert parts["NAME"] == "resnet50-imagenet-audit-2025q2"  # cut at 80 columns
        assert parts["IMAGE"] == image  # a column 80 columns hide
        assert str(full.render()).startswith(f"ID {fixed.original_id}  NAME resnet50")
        await pilot.resize_terminal(200, 60)
        await wait_until(pilot, lambda: "NAME" not in dict(full.parts))  # shown whole now
        assert dict(full.parts)["ID"] == fixed.original_id
