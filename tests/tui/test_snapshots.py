"""Snapshots of every screen, at 80x24 and 200x60, from a store built of fixed manifests.

Refresh them after a deliberate change of look with ``pytest --snapshot-update``; the
SVGs live in ``tests/__snapshots__/test_app_snapshots/``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, TabbedContent

from replay_tui.errors import InfraError
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import ReplayEvent
from replay_tui.tui.messages import (
    OpenComparison,
    OpenReplay,
    OpenRun,
    PickAndCompare,
    ReplayProgress,
)
from replay_tui.tui.screens.modals import ErrorModal
from replay_tui.tui.screens.replay import ReplayScreen
from tests.support.app import (
    SIZES,
    FixedStore,
    SnapCompare,
    Step,
    snap_app,
    then,
)


def post(message_factory: Callable[[], Any]) -> Step:
    async def run(pilot: Pilot[Any]) -> None:
        pilot.app.post_message(message_factory())

    return run


def press(*keys: str) -> Step:
    async def run(pilot: Pilot[Any]) -> None:
        await pilot.press(*keys)

    return run


def tab(pane: str) -> Step:
    async def run(pilot: Pilot[Any]) -> None:
        pilot.app.screen.query_one(TabbedContent).active = pane

    return run


@pytest.mark.parametrize("size", SIZES)
def test_runs(snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]) -> None:
    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=then())


@pytest.mark.parametrize("size", SIZES)
def test_runs_group_open(
    snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]
) -> None:
    """The diverged original's replay shown under it (▾, └), sorted by verdict."""

    async def open_group(pilot: Pilot[Any]) -> None:
        table = pilot.app.screen.table  # type: ignore[attr-defined]
        table.move_cursor(row=table.get_row_index(fixed.original_id))
        await pilot.press("right")

    steps = then(press("s"), open_group)
    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=steps)


def test_runs_with_notice(snap_compare: SnapCompare, fixed: FixedStore) -> None:
    app = snap_app(fixed)
    app.notice = "Docker unavailable: demo used the local backend"
    assert snap_compare(app, terminal_size=(80, 24), run_before=then())


@pytest.mark.parametrize("size", SIZES)
def test_run_detail(snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]) -> None:
    steps = then(post(lambda: OpenRun(fixed.original_id)))
    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=steps)


@pytest.mark.parametrize("pane", ["tab-gaps", "tab-outputs", "tab-replays"])
def test_run_detail_tabs(snap_compare: SnapCompare, fixed: FixedStore, pane: str) -> None:
    run = fixed.original_id if pane != "tab-gaps" else fixed.critical_id
    steps = then(post(lambda: OpenRun(run)), tab(pane))
    assert snap_compare(snap_app(fixed), terminal_size=(80, 24), run_before=steps)


@pytest.mark.parametrize("size", SIZES)
def test_replay_options(
    snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]
) -> None:
    steps = then(post(lambda: OpenReplay(fixed.original_id)))
    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=steps)


EVENTS = [
    ReplayEvent("plan", "start"),
    ReplayEvent("plan", "done", "local backend, image (host), commit 2effd62d9f68"),
    ReplayEvent("checkout", "start", "commit 2effd62d9f68fe0e9467873a8f00000000000000"),
    ReplayEvent("checkout", "done", "worktree /tmp/replay-tui-wt-snapshot"),
    ReplayEvent("verify", "start", "2 data input(s)"),
    ReplayEvent("verify", "done", "every data hash matches"),
    ReplayEvent("pull", "done", "local backend: no image (environment not pinned)"),
    ReplayEvent("run", "start", "python -m train --config configs/resnet50_imagenet.yaml"),
    *(ReplayEvent("run", "log", f"step {50 * k} loss {6.5 - 0.2 * k:.4f}") for k in range(1, 15)),
]


@pytest.mark.parametrize("size", SIZES)
def test_replay_running(
    snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]
) -> None:
    async def running(pilot: Pilot[Any]) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, ReplayScreen)
        screen.show_progress(ReplayOptions(backend="local"))
        for event in EVENTS:
            screen.post_message(ReplayProgress(event))

    steps = then(post(lambda: OpenReplay(fixed.original_id)), running)
    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=steps)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("pane", ["tab-fields", "tab-artifacts", "tab-metrics"])
def test_comparison(
    snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int], pane: str
) -> None:
    cid = fixed.diverged_comparison
    steps = then(post(lambda: OpenComparison(comparison_id=cid)), tab(pane))
    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=steps)


def test_comparison_gaps_and_identical(snap_compare: SnapCompare, fixed: FixedStore) -> None:
    cid = fixed.identical_comparison
    steps = then(post(lambda: OpenComparison(comparison_id=cid)), tab("tab-gaps"))
    assert snap_compare(snap_app(fixed), terminal_size=(200, 60), run_before=steps)


@pytest.mark.parametrize("size", SIZES)
def test_dashboard(snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]) -> None:
    """The key is pressed inside the steps, so the dashboard's worker is waited for (a key
    given as ``press=`` is pressed after them, and the screenshot could beat the worker)."""
    assert snap_compare(snap_app(fixed), terminal_size=size, run_before=then(press("d")))


def test_help(snap_compare: SnapCompare, fixed: FixedStore) -> None:
    assert snap_compare(snap_app(fixed), terminal_size=(80, 24), run_before=then(press("?")))


def test_error_modal(snap_compare: SnapCompare, fixed: FixedStore) -> None:
    async def fail(pilot: Pilot[Any]) -> None:
        error = InfraError(
            "cannot reach the Docker engine", "start Docker, or replay with the local backend"
        )
        await pilot.app.push_screen(ErrorModal(error, context="The replay failed"))

    assert snap_compare(snap_app(fixed), terminal_size=(80, 24), run_before=then(fail))


def test_picker(snap_compare: SnapCompare, fixed: FixedStore) -> None:
    async def no_blink(pilot: Pilot[Any]) -> None:
        pilot.app.screen.query_one(Input).cursor_blink = False

    steps = then(post(lambda: PickAndCompare(fixed.original_id)), no_blink)
    assert snap_compare(snap_app(fixed), terminal_size=(120, 36), run_before=steps)


def test_no_snapshot_presses_keys_after_its_settled_steps() -> None:
    """``snap_compare(press=...)`` presses its keys after ``run_before`` has settled, so
    a screen a key opens can be shot before its worker ends (CI failed so once, on the
    dashboard): keys go inside the steps (``then(press(...))``)."""
    import ast
    from pathlib import Path

    offenders = []
    for path in sorted(Path(__file__).resolve().parents[1].rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "snap_compare"
                and any(k.arg == "press" for k in node.keywords)
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
