"""The auditor's workbench, second pass (issue #28), driven with Pilot over real stores:
export and check the store from the palette in the CLI's words, comparisons stored as
the CLI stores them, each run's own gaps beside the pair's, a drill's rows open their
comparison, number keys move into their tab, j/k/g/G wherever a list or a text scrolls,
and marks a newcomer can read (legends, state by shape, no ✓ on a cancelled stage)."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, DataTable, Input, Select, Static, TabbedContent

from replay_tui.replay.drill import DrillItem, DrillReport
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import ReplayEvent
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.messages import (
    OpenComparison,
    OpenReplay,
    OpenRun,
    PickAndCompare,
    ReplayFinished,
    ReplayProgress,
)
from replay_tui.tui.queries import ReplayResult, ReplaySummary
from replay_tui.tui.screens.comparison import ComparisonScreen
from replay_tui.tui.screens.export import ExportBundleScreen, in_form_terms
from replay_tui.tui.screens.modals import KEYMAP, HelpScreen
from replay_tui.tui.screens.picker import PickRunScreen
from replay_tui.tui.screens.replay import ReplayScreen
from replay_tui.tui.screens.run_detail import RunDetailScreen
from replay_tui.tui.screens.storecheck import StoreCheckScreen
from storage.store import RunQuery, RunStore
from tests.helpers.tui import replay_app, settled_app
from tests.support.app import (
    ORIGINAL_ID,
    REPLAY_ID,
    SAME_ORIGINAL_ID,
    SAME_REPLAY_ID,
    SIZES,
    FixedStore,
    SnapCompare,
    build_fixed_store,
    comparison_shown,
    finished_drill,
    fixed_drill,
    local_app,
    opened,
    palette,
    runs_screen,
    settle,
    snap_app,
    sync,
    then,
    wait_until,
)
from tests.support.training import replay_tui

HEAD = re.compile(r"\b\d+:[0-9a-f]{64}\b")


@pytest.fixture
def own(tmp_path: Path) -> FixedStore:
    """A store of the test's own (it writes to it)."""
    return build_fixed_store(tmp_path / "own")


# -- 1. export and check the store from the palette, in the CLI's words --------------------


@sync
async def test_export_form_from_the_palette_signs_and_says_what_the_cli_says(
    own: FixedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay_tui.evidence.keys import generate
    from replay_tui.evidence.verify import verify_bundle

    pair = generate(tmp_path / "signer.key", tmp_path / "signer.pub")
    monkeypatch.setenv("REPLAY_TUI_SIGNING_KEY", str(pair.private_path))
    out = tmp_path / "tui-bundle"
    async with settled_app(own.path, (120, 36)) as (app, pilot):
        table = runs_screen(app).table
        table.move_cursor(row=table.get_row_index(own.original_id))
        await palette(pilot, "Export evidence bundle")
        await wait_until(pilot, lambda: isinstance(app.screen, ExportBundleScreen))
        form = app.screen
        assert isinstance(form, ExportBundleScreen)
        await settle(pilot)
        folder = form.query_one("#out", Input)
        # the default: a new folder under bundles/ beside the store, named after the run
        assert Path(folder.value).parent == own.path.parent / "bundles"
        assert Path(folder.value).name.startswith(own.original_id[:13])
        assert form.query_one("#key", Input).value == str(pair.private_path)  # $REPLAY_TUI_…
        folder.value = str(out)
        await pilot.click("#start")
        await wait_until(pilot, lambda: form.phase == "done", 120)
        shown = str(form.query_one("#result", Static).render()).splitlines()
        assert form.result is not None and form.result.signed
    assert verify_bundle(out, public_key=None, allow_embedded_key=True).ok
    # the CLI's export of the same run, signed with the same key, says the same lines
    cli_out = tmp_path / "cli-bundle"
    done = replay_tui(
        own.path, "export", own.original_id, "--out", str(cli_out), "--sign", str(pair.private_path)
    )
    assert done.returncode == 0, done.stderr

    def same(lines: list[str], folder: Path) -> list[str]:
        return [HEAD.sub("HEAD", x.replace(str(folder), "OUT")) for x in lines]

    assert same(shown, out) == same(done.stdout.splitlines(), cli_out)
    assert f"signed with key {pair.key_id}" in shown[3]
    assert shown[-1].endswith(f"--key {pair.public_path}")


@sync
async def test_export_form_of_a_replay_exports_its_original_unsigned(
    own: FixedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REPLAY_TUI_SIGNING_KEY", raising=False)
    async with settled_app(own.path, (80, 24)) as (app, pilot):
        app.action_export(own.replay_id)
        await settle(pilot)
        form = app.screen
        assert isinstance(form, ExportBundleScreen)
        assert form.query_one("#key", Input).value == ""  # no key: unsigned
        folder = Path(form.query_one("#out", Input).value)
        assert folder.name.startswith(own.original_id[:13])  # the original's evidence
        assert own.original_id in str(form.query_one("#target", Static).render())
        await pilot.click("#start")
        await wait_until(pilot, lambda: form.phase == "done", 120)
        assert form.lines[0].startswith(f"exported run {own.original_id} to {folder}")
        shown = str(form.query_one("#result", Static).render())
        assert shown.splitlines() == [in_form_terms(x) for x in form.lines]
        assert "not signed (give a" in shown and "--allow-unsigned" in shown
        await pilot.press("escape")
        assert not isinstance(app.screen, ExportBundleScreen)
    assert (folder / "SHA256SUMS").is_file()


@sync
async def test_export_form_cancel_writes_nothing(own: FixedStore) -> None:
    async with settled_app(own.path, (80, 24)) as (app, pilot):
        app.action_export(own.original_id)
        await settle(pilot)
        await pilot.click("#cancel")
        await settle(pilot)
        assert not isinstance(app.screen, ExportBundleScreen)
    assert not (own.path.parent / "bundles").exists()


def _tamper(store: Path) -> None:
    conn = sqlite3.connect(store)
    try:
        conn.execute("DROP TRIGGER manifests_no_update")
        conn.execute(
            'UPDATE manifests SET body = replace(body, \'"status":"succeeded"\','
            ' \'"status":"failed"\') WHERE run_id = ?',
            (SAME_ORIGINAL_ID,),
        )
        conn.commit()
    finally:
        conn.close()


@sync
async def test_check_store_from_the_palette_says_what_verify_store_says(own: FixedStore) -> None:
    async def check(app: ReplayApp, pilot: Pilot[Any]) -> list[str]:
        await palette(pilot, "Check store")
        await wait_until(pilot, lambda: isinstance(app.screen, StoreCheckScreen))
        screen = app.screen
        assert isinstance(screen, StoreCheckScreen)
        await wait_until(pilot, lambda: screen.check is not None, 120)
        lines = str(screen.query_one("#result", Static).render()).splitlines()
        await pilot.press("escape")
        return lines

    async with settled_app(own.path, (120, 36)) as (app, pilot):
        intact = await check(app, pilot)
        done = replay_tui(own.path, "verify-store")
        assert done.returncode == 0 and intact == done.stdout.splitlines()
        assert intact[-1] == "store intact: every link and every hash matches"
        _tamper(own.path)
        altered = await check(app, pilot)
    done = replay_tui(own.path, "verify-store")
    assert done.returncode == 1 and altered == done.stdout.splitlines()
    assert altered[2].startswith("STORE ALTERED: first problem:")
    assert SAME_ORIGINAL_ID in "\n".join(altered)


# -- 2. a comparison made in the TUI is stored as the CLI stores it ------------------------


@sync
async def test_a_comparison_in_the_tui_is_stored_as_the_cli_stores_it(own: FixedStore) -> None:
    with RunStore(own.path) as s:
        a, b = s.list_runs(RunQuery(kind="original", limit=50))[10:12]
        assert s.latest_comparison(a.id, b.id) is None
    async with settled_app(own.path, (120, 36)) as (app, pilot):
        await opened(pilot, PickAndCompare(a.id), PickRunScreen)
        await pilot.press(*b.id[:12])
        await settle(pilot)
        await pilot.press("down", "enter")
        cmp = await comparison_shown(pilot)
        cid = cmp.view.comparison_id
        assert cid is not None  # stored: it has an id
        sub = str(cmp.query_one("#verdict").render())
        assert f"stored as #{cid}" in sub and "not stored" not in sub
        await pilot.press("escape")
        await settle(pilot)
        # found again: the same pair opens the stored comparison, not a new one
        app.post_message(OpenComparison(a_run=a.id, b_run=b.id))
        await wait_until(
            pilot,
            lambda: (
                isinstance(app.screen, ComparisonScreen)
                and app.screen.view is not None
                and not app.screen.view.computed
            ),
        )
        again = app.screen
        assert isinstance(again, ComparisonScreen) and again.view is not None
        assert again.view.comparison.to_dict() == cmp.view.comparison.to_dict()
    with RunStore(own.path) as s:
        tui_body = s.comparison(cid)
        assert s.latest_comparison(a.id, b.id) == tui_body
        assert len(s.facts("comparisons")) == 3  # the fixed store's two, and this one
        runs = {a.id: s.get_run(a.id).last_verdict, b.id: s.get_run(b.id).last_verdict}
    done = replay_tui(own.path, "compare", a.id, b.id, "--json")
    cli_cid = json.loads(done.stdout)["comparison_id"]
    with RunStore(own.path) as s:
        assert cli_cid != cid and s.comparison(cli_cid) == tui_body  # what the CLI stores
        # neither run is a replay of the other: no badge changed (as the CLI)
        assert {a.id: s.get_run(a.id).last_verdict, b.id: s.get_run(b.id).last_verdict} == runs


# -- 3. the Gaps tab lists each run's own gaps beside the pair's ---------------------------


@sync
async def test_comparison_gaps_tab_lists_each_runs_own_gaps(fixed: FixedStore) -> None:
    from replay_tui.gaps import evaluate

    with RunStore(fixed.path) as s:
        own_a = evaluate(s.manifest(fixed.critical_id))
        other = next(
            r.id
            for r in s.list_runs(RunQuery(kind="original", limit=50))
            if r.id != fixed.critical_id and not evaluate(s.manifest(r.id))
        )
    critical = [g for g in own_a if g.severity == "critical"]
    assert critical
    async with settled_app(fixed.path, (200, 60)) as (app, pilot):
        app.post_message(OpenComparison(a_run=fixed.critical_id, b_run=other))
        cmp = await comparison_shown(pilot)
        await settle(pilot)
        a_label = cmp.labels[0] if cmp.view.a.run_id == fixed.critical_id else cmp.labels[1]
        await pilot.press("4")
        text = str(cmp.query_one("#gaps", Static).render())
        assert "no gaps between the two runs" not in text
        assert "between the two runs (" in text
        assert f"{a_label}'s own gaps ({len(own_a)})" in text
        for g in own_a:
            assert g.code in text and g.message in text
        # the label counts them all: the pair's, A's, and B's that A has not
        shared = {(g.code, g.field) for g in evaluate(cmp.view.a)}
        every = [
            *cmp.view.comparison.gaps,
            *evaluate(cmp.view.a),
            *(g for g in evaluate(cmp.view.b) if (g.code, g.field) not in shared),
        ]
        n_critical = sum(g.severity == "critical" for g in every)
        assert n_critical >= len(critical)
        label = str(cmp.query_one(TabbedContent).get_tab("tab-gaps").label)
        assert label == f"Gaps ({len(every)} · {n_critical} critical)"


# -- 4. a finished drill's rows open their comparison ---------------------------------------


def _drill_report() -> DrillReport:
    """The fixed drill (random, 3 of the local backend's runs) of these three items."""
    return replace(
        fixed_drill(),
        seed=1,
        candidates=3,
        items=[
            DrillItem(
                ORIGINAL_ID, "resnet", "not_reproduced", "DIVERGED", REPLAY_ID, 1, "loss", 9.0
            ),
            DrillItem(
                SAME_ORIGINAL_ID, "bert", "reproduced", "IDENTICAL", SAME_REPLAY_ID, 2, None, 3.0
            ),
            DrillItem(
                "01JRDRILLNODATA00000000003", "vit", "error", None, None, None, "no data", 1.0
            ),
        ],
        ended_at="2025-06-02T10:00:00.000Z",
        ledger_head=None,
    )


@sync
async def test_enter_on_a_finished_drills_row_opens_its_comparison(fixed: FixedStore) -> None:
    app = local_app(fixed.path)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        drill = await finished_drill(pilot, _drill_report())
        results = drill.query_one("#results", DataTable)
        assert results.has_focus and results.cursor_row == 0  # the DIVERGED run
        assert "enter: open the run's comparison" in str(drill.query_one("#outcome").render())
        await pilot.press("enter")
        await comparison_shown(pilot)
        assert app.screen.view.comparison_id == fixed.diverged_comparison
        assert app.screen.verdict == "DIVERGED"
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is drill and results.has_focus
        await pilot.press("j", "enter")  # the IDENTICAL one
        await comparison_shown(pilot)
        assert app.screen.view.comparison_id == fixed.identical_comparison
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("G", "enter")  # never replayed: nothing to open, and it says why
        await settle(pilot)
        assert app.screen is drill
        assert any("was not compared: no data" in n.message for n in app._notifications)


# -- 5. number keys move into their tab -----------------------------------------------------


@sync
async def test_a_number_key_picks_the_tab_and_moves_into_it(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, (120, 36)) as (app, pilot):
        detail = await opened(pilot, OpenRun(fixed.original_id), RunDetailScreen)
        tabs = detail.query_one(TabbedContent)
        await pilot.press("4")  # replays: the table has the focus, enter opens the row
        assert tabs.active == "tab-replays"
        assert detail.focused is detail.query_one("#replays", DataTable)
        await pilot.press("enter")
        await comparison_shown(pilot)
        assert app.screen.view.comparison_id == fixed.diverged_comparison
        await pilot.press("3")  # metrics: j moves the metrics' cursor at once
        cmp = app.screen
        metrics = cmp.query_one("#metrics", DataTable)
        assert cmp.focused is metrics
        before = metrics.cursor_row
        await pilot.press("k" if before else "j")
        assert metrics.cursor_row != before
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("1")  # the manifest: j scrolls it, G to its end, g back
        sections = detail.query_one("#sections")
        assert detail.focused is sections
        await pilot.press("j")
        await wait_until(pilot, lambda: sections.scroll_y == 1)
        await pilot.press("G")
        await wait_until(pilot, lambda: sections.scroll_y == sections.max_scroll_y > 1)
        await pilot.press("g")
        await wait_until(pilot, lambda: sections.scroll_y == 0)


# -- 6. j / k / g / G wherever a list or a text scrolls -------------------------------------


@sync
async def test_j_k_g_G_scroll_the_key_map(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one("#dialog")
        assert box.max_scroll_y > 0 and box.scroll_y == 0
        await pilot.press("j", "j")
        await wait_until(pilot, lambda: box.scroll_y == 2)
        await pilot.press("k")
        await wait_until(pilot, lambda: box.scroll_y == 1)
        await pilot.press("G")
        await wait_until(pilot, lambda: box.scroll_y == box.max_scroll_y)
        await pilot.press("g")
        await wait_until(pilot, lambda: box.scroll_y == 0)
    everywhere = dict(KEYMAP[0][1])
    assert "g / G" in everywhere and "a text or a log" in everywhere["j / k"]


@sync
async def test_j_k_g_G_in_a_tables_tab_and_the_replays_log(fixed: FixedStore) -> None:
    app = local_app(fixed.path)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        cmp = await comparison_shown(pilot)
        await settle(pilot)
        fields = cmp.query_one("#fields", DataTable)
        await pilot.press("1", "G")
        assert fields.cursor_row == fields.row_count - 1 > 0
        await pilot.press("g", "j")
        assert fields.cursor_row == 1
        await pilot.press("escape")
        await settle(pilot)
        replay = await opened(pilot, OpenReplay(fixed.original_id), ReplayScreen)
        replay.show_progress(ReplayOptions(backend="local"))
        for k in range(80):
            replay.post_message(ReplayProgress(ReplayEvent("run", "log", f"step {k}")))
        await settle(pilot)
        log = replay.query_one("#log")
        assert log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y  # it follows
        await pilot.press("g")
        await wait_until(pilot, lambda: log.scroll_y == 0)
        await pilot.press("j")
        await wait_until(pilot, lambda: log.scroll_y == 1)
        await pilot.press("G")
        await wait_until(pilot, lambda: log.scroll_y == log.max_scroll_y)
        replay._set_phase("done")  # nothing runs: leaving needs no cancel


# -- 7. legends, state by shape ---------------------------------------------------------------


def test_the_key_map_has_a_legend_for_every_short_mark() -> None:
    signs = dict(next(keys for section, keys in KEYMAP if section.startswith("signs")))
    for mark in ("IDENTICAL 1/1 +1", "Outputs (2 / 3)", "● field", "≠", "~", "[x] / [ ]"):
        assert mark in signs, mark
    assert "+1 attempt not completed" in signs["IDENTICAL 1/1 +1"]
    assert "2 artifacts and 3 metrics" in signs["Outputs (2 / 3)"]


@sync
async def test_critical_gaps_box_shows_its_state_by_shape_and_the_lists_have_a_border(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        screen = runs_screen(app)
        box = screen.query_one("#critical", Checkbox)
        assert str(box.render()).startswith("[ ]")
        box.value = True
        await settle(pilot)
        assert str(box.render()).startswith("[x]") and screen.query_state.has_critical
        kind = screen.query_one("#kind", Select)
        kind.focus()
        await pilot.press("enter")
        await settle(pilot)
        overlay = kind.query_one("SelectOverlay")
        assert kind.expanded and overlay.display
        assert all(edge[0] not in ("", "none") for edge in overlay.styles.border)


@sync
async def test_a_cancelled_replays_compare_stage_has_no_tick(fixed: FixedStore) -> None:
    from replay_tui.tui.widgets.stages import ICONS

    app = local_app(fixed.path)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        screen = await opened(pilot, OpenReplay(fixed.original_id), ReplayScreen)
        screen.show_progress(ReplayOptions(backend="local"))
        for event in CANCELLED_EVENTS:
            screen.post_message(ReplayProgress(event))
        screen.post_message(ReplayFinished(CANCELLED_SUMMARY))
        await wait_until(pilot, lambda: screen.summary is not None)
        await settle(pilot)
        states = screen.board.states
        assert states["run"] == "failed" and states["hash"] == "done"
        assert states["compare"] == "cancelled" and ICONS["cancelled"] != ICONS["done"]


CANCELLED_EVENTS = [
    ReplayEvent("plan", "done", "local backend"),
    ReplayEvent("checkout", "done", "worktree"),
    ReplayEvent("verify", "done", "every data hash matches"),
    ReplayEvent("pull", "done", "local backend: no image"),
    ReplayEvent("run", "start", "python train.py"),
    ReplayEvent("run", "failed", "cancelled in 4.2s: cancelled on request"),
    ReplayEvent("hash", "start"),
    ReplayEvent("hash", "done", "2 artifact(s) hashed"),
    ReplayEvent("compare", "start"),
    ReplayEvent(
        "compare",
        "done",
        "CANCELLED: not counted as evidence (its outputs compared DIVERGED)",
    ),
]
CANCELLED_SUMMARY = ReplaySummary(
    original_id=ORIGINAL_ID,
    results=[ReplayResult("01JRCANCELLEDREPLAY0000000", "DIVERGED", "cancelled", 99, "cancelled")],
    exit_code=130,
    cancelled=True,
    text="cancelled",
)


@sync
async def test_artifact_hashes_fit_or_are_left_to_the_lines_under_the_table(
    fixed: FixedStore,
) -> None:
    """Never "sha256 origi": at 80 columns the table fits without its hash columns (the
    lines under it show the highlighted row's two hashes whole); wider, each hash column
    is as wide as its header."""
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        cmp = await comparison_shown(pilot)
        await settle(pilot)
        table = cmp.query_one("#artifacts", DataTable)
        assert [c.label.plain for c in table.columns.values()] == ["", "path", "kind", "result"]
        assert table.virtual_size.width <= 80
        first = cmp.view.comparison.artifacts[0]
        full = str(cmp.query_one("#artifact-full", Static).render())
        assert f"original: {first.sha256_a}" in full and f"replay: {first.sha256_b}" in full
        await pilot.resize_terminal(120, 36)
        await settle(pilot)
        heads = [c for c in table.columns.values() if c.label.plain.startswith("sha256")]
        assert [c.label.plain for c in heads] == ["sha256 original", "sha256 replay"]
        assert all(c.width >= len(c.label.plain) for c in heads)


# -- snapshots of what changed ----------------------------------------------------------------


@pytest.fixture(scope="module")
def snapfixed(tmp_path_factory: pytest.TempPathFactory) -> FixedStore:
    return build_fixed_store(tmp_path_factory.mktemp("auditor-workbench-snapshots"))


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_export_form(
    snap_compare: SnapCompare,
    snapfixed: FixedStore,
    size: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REPLAY_TUI_SIGNING_KEY", raising=False)

    async def form(pilot: Pilot[Any]) -> None:
        app = replay_app(pilot)
        app.action_export(snapfixed.replay_id)
        await settle(pilot)
        out = app.screen.query_one("#out", Input)
        out.value = "bundles/01JRORIGINAL0-20250602T093000"
        out.cursor_blink = False
        out.cursor_position = 0

    assert snap_compare(snap_app(snapfixed), terminal_size=size, run_before=then(form))


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_store_check(
    snap_compare: SnapCompare, snapfixed: FixedStore, size: tuple[int, int]
) -> None:
    from replay_tui.evidence.storecheck import StoreCheck

    async def checked(pilot: Pilot[Any]) -> None:
        app = replay_app(pilot)
        screen = await opened(pilot, app.action_check_store, StoreCheckScreen)
        screen.query_one("#path", Static).update("store.db")  # the path changes
        lines = [
            "checked 104 events, 44 manifests, 0 blobs, 9 other facts",
            "ledger head: 104:" + "9f" * 32,
            "STORE ALTERED: first problem: the manifest of run 01JRSAMEORIG00000000000000"
            " was altered",
            "  also: append-only triggers were removed",
        ]
        screen.post_message(StoreCheckScreen.Checked(StoreCheck(Path("store.db"), False, lines)))

    assert snap_compare(snap_app(snapfixed), terminal_size=size, run_before=then(checked))


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_comparison_gaps_with_each_runs_own(
    snap_compare: SnapCompare, snapfixed: FixedStore, size: tuple[int, int]
) -> None:
    async def gaps(pilot: Pilot[Any]) -> None:
        pilot.app.post_message(OpenComparison(comparison_id=snapfixed.diverged_comparison))
        await settle(pilot)
        await pilot.press("4")

    assert snap_compare(snap_app(snapfixed), terminal_size=size, run_before=then(gaps))


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_replay_cancelled(
    snap_compare: SnapCompare, snapfixed: FixedStore, size: tuple[int, int]
) -> None:
    async def cancelled(pilot: Pilot[Any]) -> None:
        screen = await opened(pilot, OpenReplay(snapfixed.original_id), ReplayScreen)
        screen.show_progress(ReplayOptions(backend="local"))
        for event in CANCELLED_EVENTS:
            screen.post_message(ReplayProgress(event))
        screen.post_message(ReplayFinished(CANCELLED_SUMMARY))

    assert snap_compare(snap_app(snapfixed), terminal_size=size, run_before=then(cancelled))


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_runs_filters_open(
    snap_compare: SnapCompare, snapfixed: FixedStore, size: tuple[int, int]
) -> None:
    """The critical-gaps box on ([x]) and the verdict list open, with its border."""

    async def filters(pilot: Pilot[Any]) -> None:
        screen = runs_screen(pilot.app)  # type: ignore[arg-type]
        screen.query_one("#critical", Checkbox).value = True
        await settle(pilot)
        screen.query_one("#verdict", Select).focus()
        await pilot.press("enter")

    assert snap_compare(snap_app(snapfixed), terminal_size=size, run_before=then(filters))


def test_snapshot_help_200x60(snap_compare: SnapCompare, snapfixed: FixedStore) -> None:
    async def help_key(pilot: Pilot[Any]) -> None:
        await pilot.press("?")

    assert snap_compare(snap_app(snapfixed), terminal_size=(200, 60), run_before=then(help_key))
