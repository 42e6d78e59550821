"""The TUI as an auditor's workbench, driven with Pilot over real stores: the runs list
shows what all of a run's replays add up to, and its columns re-fit to the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.syntax import Syntax
from textual.widgets import Static, TabbedContent

from replay_tui.tui.app import ReplayApp
from replay_tui.tui.messages import OpenRun
from replay_tui.tui.screens.run_detail import RunDetailScreen
from replay_tui.tui.screens.runs import RunsScreen
from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.helpers.tui import settled_app
from tests.support.app import (
    FixedStore,
    opened,
    runs_screen,
    settle,
    sync,
    wait_until,
)
from tests.support.training import replay_tui


def _shown(screen: RunsScreen) -> dict[str, int]:
    return {c.key: c.width for c in screen.table.columns if c.width > 0}


@sync
async def test_columns_refit_on_resize_and_80x24_keeps_verdict_gaps_status(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, (200, 60)) as (app, pilot):
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
        facts = {r.id: [f.status for f in s.replays_of(r.id)] for r in s.list_runs()}
    run_id = next(rid for rid, statuses in facts.items() if statuses[-1:] == ["cancelled"])
    async with settled_app(fixed.path, (200, 60)) as (app, _pilot):
        screen = runs_screen(app)
        row = screen.table.get_row_index(run_id)
        cell = screen.table.cell(row, "verdict").plain
        assert cell.split() == ["IDENTICAL", "1/1", "+1"]
        rep = screen.table.reproduction(run_id)
        assert rep is not None and rep.text() == "IDENTICAL 1/1, 1 cancelled"
        assert screen.table.record(run_id).last_verdict == "IDENTICAL"  # type: ignore[union-attr]


CRASHING = """\
import sys
for step in range(8):
    print(f"step {step} loss {1.0 / (step + 1)}", flush=True)
    if step == 5:
        raise RuntimeError("loss is nan at step 5")
"""


@pytest.fixture(scope="module")
def crashed_dirty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run recorded by the real launcher from a checkout with an uncommitted change,
    which crashes with a traceback."""
    root = tmp_path_factory.mktemp("crashed")
    repo = commit_repo(root / "repo", {"train.py": "print('committed version')\n"}, "train")
    (repo / "train.py").write_text(CRASHING)  # the uncommitted change that crashes
    store = root / "store.db"
    done = replay_tui(store, "record", "--json", "--", "python3", "train.py", cwd=repo)
    assert done.returncode == 1, done.stderr[-2000:]
    return store, str(json.loads(done.stdout)["run_id"])


@sync
async def test_run_detail_shows_the_log_tail_and_the_stored_diff(
    crashed_dirty: tuple[Path, str],
) -> None:
    store, run_id = crashed_dirty
    async with settled_app(store, (120, 36)) as (app, pilot):
        detail = await opened(pilot, OpenRun(run_id), RunDetailScreen)
        await pilot.press("l")  # the log tail: a failed run's traceback
        tabs = detail.query_one(TabbedContent)
        assert tabs.active == "tab-log"
        log = str(detail.query_one("#log-body", Static).render())
        assert "Traceback (most recent call last)" in log
        assert "RuntimeError: loss is nan at step 5" in log
        assert "stored log" in str(detail.query_one("#log-source", Static).render())
        await pilot.press("6")  # number keys pick tabs: the sixth is the diff
        assert tabs.active == "tab-diff"
        diff = detail.query_one("#diff-body", Static).content
        assert isinstance(diff, Syntax) and diff.lexer is not None
        assert "+    if step == 5:" in diff.code and "-print('committed version')" in diff.code
        await pilot.press("1")
        assert tabs.active == "tab-manifest"
        await pilot.press("y")  # copy the run id
        assert app.clipboard == run_id


@sync
async def test_j_k_move_the_runs_cursor_and_y_copies_the_selected_id(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, (120, 36)) as (app, pilot):
        table = runs_screen(app).table
        assert table.has_focus and table.cursor_row == 0
        await pilot.press("j", "j", "k")
        assert table.cursor_row == 1
        await pilot.press("y")
        assert app.clipboard == table.row_key(1)


@sync
async def test_fields_tab_count_agrees_with_the_rows_only_differences_shows(
    fixed: FixedStore,
) -> None:
    from textual.widgets import DataTable

    from replay_tui.tui.messages import OpenComparison
    from replay_tui.tui.screens.comparison import ComparisonScreen

    with RunStore(fixed.path) as s:
        fact = next(f for f in s.facts("replays") if f.get("comparison_id"))
    async with settled_app(fixed.path, (200, 60)) as (_app, pilot):
        cmp = await opened(
            pilot, OpenComparison(comparison_id=int(fact["comparison_id"])), ComparisonScreen
        )
        await pilot.press("f")  # only differences
        await settle(pilot)
        label = str(cmp.query_one(TabbedContent).get_tab("tab-fields").label)
        shown = cmp.query_one("#fields", DataTable).row_count
        assert label.startswith(f"Fields ({shown} ≠"), (label, shown)


@sync
async def test_screenshot_saves_beside_the_store_and_says_where(tmp_path: Path) -> None:
    from tests.support.app import build_fixed_store as build

    fixed = build(tmp_path / "shots")
    app = ReplayApp(fixed.path)
    folder = fixed.path.parent / "screenshots"
    assert not folder.exists()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.deliver_screenshot()
        await wait_until(pilot, lambda: folder.is_dir() and any(folder.glob("*.svg")), 60)
        await wait_until(
            pilot, lambda: any(str(folder) in n.message for n in app._notifications), 60
        )
    (shot,) = folder.glob("*.svg")
    assert shot.read_text().startswith("<svg")


@sync
async def test_run_detail_overlays_the_histories_of_all_completed_replays(
    fixed: FixedStore,
) -> None:
    """The N-run overlay: an original's metric plots carry its own history and every
    completed replay's, and say how far they spread (the noise floor made visible)."""
    from replay_tui.tui.widgets.plot import LinePlot

    with RunStore(fixed.path) as s:
        fact = next(
            f
            for f in s.facts("replays")
            if f["replay_run"] and s.manifest(f["replay_run"]).outputs.metric_history
        )
        run_id, names = (
            fact["original_run"],
            sorted(s.manifest(fact["replay_run"]).outputs.metric_history),
        )
    async with settled_app(fixed.path, (200, 60)) as (app, pilot):
        app.post_message(OpenRun(run_id))
        await settle(pilot)
        detail = app.screen
        assert isinstance(detail, RunDetailScreen) and detail.detail is not None
        assert set(detail.detail.replay_histories) == set(names)
        plots = list(detail.query("#metrics LinePlot").results(LinePlot))
        overlaid = [p for p in plots if len(p._series) == 2]  # the run + its 1 replay
        assert len(overlaid) == len(names)
        labels = " ".join(str(w.render()) for w in detail.query("#metrics .metric-label"))
        assert "+1 replays" in labels and "spread" in labels


def test_plot_axes_and_the_both_colour_only_where_series_agree() -> None:
    from rich.style import Style

    from replay_tui.tui.widgets.plot import Series, render_plot

    a_style, b_style, both = Style(color="blue"), Style(color="yellow"), Style(color="green")
    kw = dict(styles=(a_style, b_style), both=both, marker_style=Style(), axis=Style())
    same = [(float(s), float(s * s)) for s in range(50)]
    other = [(float(s), float(2500 - s * s)) for s in range(50)]
    text = render_plot([Series("A", same), Series("B", same)], 60, 8, **kw)  # type: ignore[arg-type]
    styles = {span.style for span in text.spans}
    assert both in styles and a_style not in styles  # identical histories: all "both"
    text = render_plot([Series("A", same), Series("B", other)], 60, 8, **kw)  # type: ignore[arg-type]
    lines = text.plain.splitlines()
    assert lines[0].lstrip().startswith("2500") and lines[-2].lstrip().startswith("0")
    assert any(line.lstrip().startswith("1250") for line in lines[1:-2])  # a middle tick
    assert " step " in lines[-1] and lines[-1].rstrip().endswith("49")
    crossing = [s.style for s in text.spans]
    assert a_style in crossing and b_style in crossing


@sync
async def test_escape_clears_search_and_filters(fixed: FixedStore) -> None:
    from textual.widgets import Checkbox, Select

    async with settled_app(fixed.path, (200, 60)) as (app, pilot):
        screen = runs_screen(app)
        screen.query_one("#kind", Select).value = "replay"
        screen.query_one("#critical", Checkbox).value = True
        await settle(pilot)
        assert screen.query_state.kind == "replay" and screen.query_state.has_critical
        screen.table.focus()
        await pilot.press("escape")
        await settle(pilot)
        q = screen.query_state
        assert (q.search, q.kind, q.verdict, q.has_critical) == (None, None, None, False)
        assert screen.table.row_count == 42  # 44 runs, the 2 replays under their originals


@sync
async def test_runs_list_refreshes_when_another_process_writes(
    fixed: FixedStore, tmp_path: Path
) -> None:
    """Another process (a real CLI `ingest`) adds a run: the open list shows it."""
    import shutil

    from tests.support.factories import realistic_manifest

    store = tmp_path / "live" / "store.db"
    store.parent.mkdir()
    with RunStore(fixed.path) as s:
        s.conn.execute(f"VACUUM INTO '{store}'")
    m = realistic_manifest(900)
    m["name"] = "written-by-another-process"
    (tmp_path / "m.json").write_text(json.dumps(m))
    async with settled_app(store, (200, 60)) as (app, pilot):
        screen = runs_screen(app)
        assert screen.table.row_count == 42  # 44 runs, the 2 replays under their originals
        done = replay_tui(store, "ingest", tmp_path / "m.json", timeout=120)
        assert done.returncode == 0, done.stderr
        await wait_until(pilot, lambda: screen.table.record(m["run_id"]) is not None, 60)
        assert screen.table.row_count == 43
    shutil.rmtree(store.parent)


@sync
async def test_export_from_the_palette_writes_a_bundle_and_says_where(tmp_path: Path) -> None:
    from replay_tui.evidence.verify import verify_bundle
    from tests.support.app import build_fixed_store as build

    fixed = build(tmp_path / "export")
    app = ReplayApp(fixed.path)
    bundles = fixed.path.parent / "bundles"
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.export_run(fixed.replay_id)  # a replay: its original's evidence is exported
        await wait_until(
            pilot, lambda: any("exported" in n.message for n in app._notifications), 120
        )
        note = next(n.message for n in app._notifications if "exported" in n.message)
    (bundle,) = bundles.iterdir()
    assert str(bundle) in note and "verdict: DIVERGED" in note and "not signed" in note
    assert bundle.name.startswith(fixed.original_id[:13])
    check = verify_bundle(bundle, public_key=None, allow_embedded_key=True, allow_unsigned=True)
    assert check.ok and check.run_id == fixed.original_id
