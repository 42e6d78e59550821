"""The auditor's investigation in the TUI, second pass, driven with Pilot over real stores.

A run found by the id a ticket quotes; an image pinned by digest shown (and copied) as
one valid reference; a finished bisect found again on both its runs, in ``show`` and
reopened as the same answer; the verdict sort ranking unverified runs above reproduced
ones; a replay told from an original at every width; tags as an object in
``runs --json``; every key of every screen in the key map.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets import DataTable, Log, Static, TabbedContent

from replay_tui.bisect.answer import (
    BisectResult,
    DifferingFactor,
    EnvChange,
    GoodVsBad,
    ProbeJudgement,
    ProbeRecord,
)
from replay_tui.bisect.noise import Distance
from replay_tui.gaps import gap_counts
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.messages import OpenRun, PickAndCompare
from replay_tui.tui.queries import verdict_rank
from replay_tui.tui.screens.bisect import BisectScreen
from replay_tui.tui.screens.modals import KEYMAP, HelpScreen
from replay_tui.tui.screens.picker import PickRunScreen
from replay_tui.tui.screens.run_detail import RunDetailScreen
from replay_tui.tui.screens.runs import RunsScreen
from replay_tui.tui.widgets.fullrow import FullRow
from replay_tui.tui.widgets.runs_table import CHILD, REPLAY_MARK
from replay_tui.tui.widgets.status import StatusLine
from storage.manifest import _check_image_ref, manifest_from_data
from storage.store import RunStore
from tests.conftest import RunCli
from tests.helpers.tui import settled_app
from tests.support.app import FixedStore, settle, sync, wait_until
from tests.support.bundles import replay_of
from tests.support.factories import apply_overrides, realistic_manifest

SIZE = (120, 36)
DIGEST = "sha256:f248" + "0123456789abcdef" * 3 + "0123456789ab"
REPO = "registry.example.com/research/train"
UUID_ORIGINAL = "01a217f8-b6f5-4c2e-9d3a-5b7e8f901234"
UUID_REPLAY = "7c0ffee0-1d2e-4f5a-8b9c-0d1e2f3a4b5c"


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose original names its image by tag (and the digest it resolved to) and
    whose replay, as the replay pipeline writes it, names the image by that digest; ids
    are UUIDs, as in tickets.  A bisect of the two, as ``bisect`` stores it."""
    path = tmp_path_factory.mktemp("pinned") / "store.db"
    orig = apply_overrides(
        realistic_manifest(3),
        {
            "run_id": UUID_ORIGINAL,
            "image__reference": f"{REPO}:2025.11",
            "image__digest": DIGEST,
        },
    )
    rep = replay_of(orig, UUID_REPLAY, started_at="2025-06-01T10:00:00.000Z")
    rep["image"]["reference"] = f"{REPO}@{DIGEST}"  # replay/plan.image_reference
    other = apply_overrides(realistic_manifest(4), {"randomness__seed": 2})
    ms = [manifest_from_data(d) for d in (orig, rep, other)]
    with RunStore(path) as store:
        store.ingest_many([(m, gap_counts(m), (), {}) for m in ms])
        res = bisect_result(UUID_ORIGINAL, ms[2].run_id)
        store.add_bisect(res.good, res.bad, res.outcome, res.causes, res.to_dict())
    return path


def bisect_result(good: str, bad: str) -> BisectResult:
    """The answer of a bisect that blamed the seed after two probes (``run_bisect``'s)."""
    return BisectResult(
        good=good,
        bad=bad,
        backend="docker",
        outcome="cause",
        causes=["seed"],
        cleared=["config"],
        factors=[
            DifferingFactor("seed", ("seed 1 -> 2",), testable=True),
            DifferingFactor("config", ("lr 0.1 -> 0.2",), testable=True),
        ],
        probes=[
            ProbeRecord(
                1,
                "good",
                ["seed"],
                "one factor at a time",
                behaves="BAD",
                judgement=ProbeJudgement("DIVERGED", "IDENTICAL", 40, None, None),
                status="completed",
            ),
            ProbeRecord(
                2,
                "good",
                ["config"],
                "one factor at a time",
                behaves="GOOD",
                judgement=ProbeJudgement("IDENTICAL", "DIVERGED", None, None, None),
                status="completed",
            ),
        ],
        good_bad=GoodVsBad("DIVERGED", Distance(0.2, 0.01), 40, "loss"),
        env_diff=[EnvChange("seed", "randomness.seed", "1", "2")],
        times=1,
        budget=16,
    )


def runs_screen(app: ReplayApp) -> RunsScreen:
    screen = app.screen
    assert isinstance(screen, RunsScreen), type(screen).__name__
    return screen


def shown(screen: RunsScreen) -> list[str]:
    return [screen.table.row_key(i) for i in range(screen.table.row_count)]


async def search(pilot: Pilot[None], screen: RunsScreen, text: str) -> None:
    """Type ``text`` into a cleared search box and wait for its first page and count."""
    await pilot.press("slash")
    screen.search_box.value = ""
    await pilot.press(*text)
    await wait_until(pilot, lambda: screen.query_state.search == text)
    await settle(pilot)
    await wait_until(pilot, lambda: screen.total is not None)


# -- 1. ids and any part of them are searched --------------------------------------------


@sync
async def test_search_finds_runs_by_their_id_or_any_part_of_it_as_runs_search_does(
    fixed: FixedStore, pinned: Path
) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        status = screen.query_one("#status", StatusLine)
        await search(pilot, screen, fixed.original_id[:13])
        assert shown(screen) == [fixed.original_id]
        assert status.text.startswith("1 of 1 runs")
        await search(pilot, screen, fixed.original_id)  # the whole id
        assert shown(screen) == [fixed.original_id]
        # a replay's id: the replay itself, a row of its own (not folded under its original)
        await search(pilot, screen, fixed.replay_id)
        assert shown(screen) == [fixed.replay_id]
        assert screen.table.cell(0, "name").plain.startswith(REPLAY_MARK)
        # what `runs --search` and the `c` picker find is what the list shows
        with RunStore(fixed.path) as store:
            found = {r.id for r in store.find_runs("01JR", 100)}
        await search(pilot, screen, "01JR")
        assert set(shown(screen)) == found and len(found) == 4
        # words still search the full-text index; no match says what clears it
        await search(pilot, screen, "zzqx")
        assert shown(screen) == []
        assert "0 of 0 runs" in status.text and "escape clears" in status.text
        await pilot.press("enter", "escape")  # out of the box, then clear
        await settle(pilot)
        assert screen.table.row_count == 42

    app = ReplayApp(pinned)  # UUIDs, as tickets and bundles quote them
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = runs_screen(app)
        await search(pilot, screen, "01a217f8-b6f5")
        assert shown(screen) == [UUID_ORIGINAL]
        await search(pilot, screen, UUID_REPLAY)
        assert shown(screen) == [UUID_REPLAY]
        # the part a person remembers: the end of the id, not its time-ordered start
        await search(pilot, screen, UUID_ORIGINAL[-12:].upper())
        assert shown(screen) == [UUID_ORIGINAL]
        with RunStore(pinned) as store:
            assert [r.id for r in store.find_runs(UUID_ORIGINAL[-12:], 10)] == [UUID_ORIGINAL]


# -- 2. an image pinned by digest: one valid reference ------------------------------------


@sync
async def test_an_image_pinned_by_digest_shows_it_once_and_copies_as_a_valid_reference(
    pinned: Path,
) -> None:
    async with settled_app(pinned, (80, 24)) as (app, pilot):
        screen = runs_screen(app)
        await pilot.press("g")  # the replay on a row of its own
        await settle(pilot)
        table = screen.table
        full = screen.query_one("#full-row", FullRow)
        for run, whole in (
            (UUID_REPLAY, f"{REPO}@{DIGEST}"),
            (UUID_ORIGINAL, f"{REPO}:2025.11@{DIGEST}"),
        ):
            row = table.get_row_index(run)
            table.move_cursor(row=row)
            await wait_until(pilot, lambda run=run: ("ID", run) in full.parts)  # type: ignore[misc]
            image = dict(full.parts)["IMAGE"]  # the column 80 columns hide, whole
            assert image == whole == table.whole_values(run)["image"]
            assert image.count("@") == 1 and _check_image_ref(image) == image
            cell = table.cell(row, "image").plain
            assert cell.count("@") == 1 and cell.count("f2480123") == 1, cell
        # the compare picker shows and gives the same
        app.post_message(PickAndCompare(UUID_ORIGINAL))
        await wait_until(pilot, lambda: isinstance(app.screen, PickRunScreen))
        picker = app.screen
        assert isinstance(picker, PickRunScreen)
        await wait_until(pilot, lambda: picker.table.row_count > 0)
        await settle(pilot)
        row = picker.table.get_row_index(UUID_REPLAY)
        picker.table.move_cursor(row=row)
        pick_full = picker.query_one("#pick-full", FullRow)
        await wait_until(pilot, lambda: "IMAGE" in dict(pick_full.parts))
        image = dict(pick_full.parts)["IMAGE"]
        assert image == f"{REPO}@{DIGEST}" and _check_image_ref(image) == image
        assert picker.table.cell(row, "image").plain.count("@") == 1


# -- 3. a stored bisect found again ------------------------------------------------------


async def open_bisects_tab(pilot: Pilot[None], app: ReplayApp, run: str) -> RunDetailScreen:
    app.post_message(OpenRun(run))
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, RunDetailScreen) and app.screen.detail is not None,
    )
    await settle(pilot)
    detail = app.screen
    assert isinstance(detail, RunDetailScreen)
    await pilot.press("7")  # the seventh tab
    tabs = detail.query_one(TabbedContent)
    await wait_until(pilot, lambda: tabs.active == "tab-bisects")
    return detail


@sync
async def test_a_stored_bisect_is_listed_on_both_runs_and_reopens_as_its_answer(
    pinned: Path,
) -> None:
    with RunStore(pinned) as store:
        (fact,) = store.bisects_of(UUID_ORIGINAL)
    bad = fact["bad_run"]
    expected = bisect_result(UUID_ORIGINAL, bad)
    async with settled_app(pinned, SIZE) as (app, pilot):
        for run, role, other in ((bad, "BAD", UUID_ORIGINAL), (UUID_ORIGINAL, "GOOD", bad)):
            detail = await open_bisects_tab(pilot, app, run)
            tabs = detail.query_one(TabbedContent)
            assert str(tabs.get_tab("tab-bisects").label) == "Bisects (1)"
            table = detail.query_one("#bisects", DataTable)
            assert table.row_count == 1
            cells = [str(c) for c in table.get_row_at(0)]
            assert cells[2:] == [role, other[:13], "CAUSE FOUND", "seed", "2"]
            under = str(detail.query_one("#bisect-full", Static).render())
            assert expected.verdict_line() in under and other in under
            table.focus()
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, BisectScreen))
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, BisectScreen)
            assert screen.phase == "done" and screen.stored is not None
            assert (screen.good, screen.bad) == (UUID_ORIGINAL, bad)
            status = str(screen.query_one("#bisect-status", Static).render())
            assert status == "CAUSE FOUND after 2 probe(s)"  # as when it finished
            answer = str(screen.query_one("#bisect-answer", Static).render())
            assert answer.splitlines()[0] == expected.verdict_line()
            assert "randomness.seed: 1 -> 2" in answer
            probes = screen.query_one("#bisect-probes", DataTable)
            assert [str(c) for c in probes.get_row_at(0)] == [
                "1",
                "GOOD",
                "seed",
                "DIVERGED (tolerance)",  # a body stored before closenesses were kept
                "IDENTICAL (tolerance)",
                "BAD",
                "40",
            ]
            assert probes.row_count == 2
            assert f"bisect #{fact['id']}" in screen.query_one("#bisect-log", Log).lines[0]
            assert screen.check_action("cancel", ()) is False  # nothing runs: no x
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen))
        # a run in no bisect says how to make one
        detail = await open_bisects_tab(pilot, app, UUID_REPLAY)
        assert detail.query_one("#bisects", DataTable).row_count == 0
        assert "b bisects" in str(detail.query_one("#bisects-help", Static).render())


def test_show_lists_the_bisects_of_a_run_in_text_and_json(pinned: Path, cli: RunCli) -> None:
    with RunStore(pinned) as store:
        (fact,) = store.bisects_of(UUID_ORIGINAL)
    bad = fact["bad_run"]
    expected = bisect_result(UUID_ORIGINAL, bad)
    for run, role in ((UUID_ORIGINAL, "GOOD"), (bad, "BAD")):
        done = cli("show", run[:13], "--json", store=pinned)
        assert done.returncode == 0, done.stderr
        (b,) = json.loads(done.stdout)["bisects"]
        assert b["id"] == fact["id"] and b["role"] == role
        assert (b["good_run"], b["bad_run"], b["outcome"]) == (UUID_ORIGINAL, bad, "cause")
        assert b["causes"] == ["seed"] and b["probes_run"] == 2
        assert b["verdict"] == expected.verdict_line() and b["body"]["probes"]
        text = cli("show", run, store=pinned).stdout
        section = text[text.index("── bisects") :]
        assert f"#{fact['id']}" in section and "CAUSE FOUND after 2 probe(s)" in section
        assert expected.verdict_line() in section
    text = cli("show", UUID_REPLAY, store=pinned).stdout
    assert "── bisects\n  (none: `replay-tui bisect GOOD BAD`)" in text


# -- 4. the verdict sort: unverified above reproduced --------------------------------------


@sync
async def test_verdict_sort_puts_never_replayed_runs_above_reproduced_ones(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        screen = runs_screen(app)
        await pilot.press("s")  # verdict, worst first
        await settle(pilot)
        assert screen.sort_key == "severity" and screen.query_state.descending
        verdicts = [screen.table.record(k).last_verdict for k in shown(screen)]  # type: ignore[union-attr]
        ranks = [verdict_rank(v) for v in verdicts]
        assert ranks == sorted(ranks, reverse=True)
        first_unverified = verdicts.index(None)
        assert verdicts[0] == "DIVERGED"
        assert "INCOMPLETE" in verdicts[:first_unverified]
        reproduced = [i for i, v in enumerate(verdicts) if v in ("IDENTICAL", "EQUIVALENT")]
        assert reproduced and min(reproduced) > max(i for i, v in enumerate(verdicts) if v is None)


# -- 5. the kind at every width --------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
@sync
async def test_a_replay_is_marked_at_every_width(fixed: FixedStore, size: tuple[int, int]) -> None:
    async with settled_app(fixed.path, size) as (app, pilot):
        screen = runs_screen(app)
        await pilot.press("g")  # replays in the list
        await settle(pilot)
        table = screen.table
        kind_width = next(c.width for c in table.columns if c.key == "kind")
        assert (kind_width == 0) == (size[0] == 80)  # 80 columns hide KIND
        for run in shown(screen):
            record = table.record(run)
            assert record is not None
            name = table.cell(table.get_row_index(run), "name").plain
            assert name.startswith(REPLAY_MARK) == (record.kind == "replay"), name
        assert {fixed.replay_id} <= set(shown(screen))
        await pilot.press("g")  # grouped again: a replay under its original keeps └
        await settle(pilot)
        table.move_cursor(row=table.get_row_index(fixed.original_id))
        await pilot.press("right")
        await wait_until(pilot, lambda: table.record(fixed.replay_id) is not None)
        name = table.cell(table.get_row_index(fixed.replay_id), "name").plain
        assert name.startswith(CHILD) and REPLAY_MARK not in name


# -- 6. runs --json: tags are an object --------------------------------------------------


def test_runs_json_gives_tags_as_an_object(fixed: FixedStore, cli: RunCli) -> None:
    done = cli("runs", "--json", "--limit", "50", store=fixed.path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    with RunStore(fixed.path) as store:
        for row in rows:
            assert isinstance(row["tags"], dict), row["tags"]
            assert row["tags"] == dict(store.manifest(row["id"]).tags)
    assert any(row["tags"] for row in rows)
    shown_run = json.loads(cli("show", fixed.original_id, "--json", store=fixed.path).stdout)
    assert isinstance(shown_run["run"]["tags"], dict)


# -- 7. every key in the key map ---------------------------------------------------------

KEY_WORDS = {
    "slash": "/",
    "question_mark": "?",
    "plus": "+",
    "minus": "-",
    "pagedown": "pgdn",
    "pageup": "pgup",
}


def listed_keys(*sections: str) -> set[str]:
    """The keys the key map names in the sections whose titles start with ``sections``."""
    out: set[str] = set()
    for title, keys in KEYMAP:
        if not title.startswith(sections):
            continue
        for key, _ in keys:
            for token in key.replace(" / ", " ").split():
                out |= {str(n) for n in range(1, 10)} if token == "1-9" else {token}
    return out


def bound_keys(cls: type) -> set[str]:
    keys: set[str] = set()
    for b in cls.BINDINGS:  # type: ignore[attr-defined]
        if isinstance(b, Binding):
            keys |= {KEY_WORDS.get(k.strip(), k.strip()) for k in b.key.split(",")}
    return keys


def test_the_key_map_names_every_binding_of_every_screen() -> None:
    from replay_tui.tui.screens.bisect import BisectFormScreen
    from replay_tui.tui.screens.comparison import ComparisonScreen
    from replay_tui.tui.screens.dashboard import DashboardScreen
    from replay_tui.tui.screens.drill import DrillScreen
    from replay_tui.tui.screens.export import ExportBundleScreen
    from replay_tui.tui.screens.modals import ConfirmModal, ErrorModal
    from replay_tui.tui.screens.replay import ReplayScreen
    from replay_tui.tui.screens.storecheck import StoreCheckScreen
    from replay_tui.tui.screens.verify import VerifyBundleScreen
    from replay_tui.tui.widgets.grid import Grid
    from replay_tui.tui.widgets.plot import LinePlot
    from replay_tui.tui.widgets.runs_table import RunsTable

    where: list[tuple[type, tuple[str, ...]]] = [
        (ReplayApp, ("everywhere",)),
        (HelpScreen, ("everywhere",)),
        (RunsScreen, ("runs", "everywhere")),
        (RunsTable, ("runs",)),
        (Grid, ("lists", "everywhere")),
        (RunDetailScreen, ("run", "everywhere")),
        (ComparisonScreen, ("comparison", "everywhere")),
        (BisectScreen, ("bisect",)),
        (BisectFormScreen, ("bisect",)),
        (DashboardScreen, ("dashboard", "everywhere")),
        (ReplayScreen, ("replay",)),
        (DrillScreen, ("drill",)),
        (PickRunScreen, ("compare (pick",)),
        (VerifyBundleScreen, ("verify",)),
        (ExportBundleScreen, ("export",)),
        (StoreCheckScreen, ("export",)),
        (ConfirmModal, ("questions",)),
        (ErrorModal, ("questions",)),
        (LinePlot, ("plot",)),
    ]
    missing = {
        cls.__name__: sorted(bound_keys(cls) - listed_keys(*sections))
        for cls, sections in where
        if bound_keys(cls) - listed_keys(*sections)
    }
    assert missing == {}
    assert "b" in listed_keys("comparison") and "x" in listed_keys("bisect")
    assert "g" in listed_keys("dashboard")


@sync
async def test_help_shows_the_bisect_and_dashboard_keys(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, SIZE) as (app, pilot):
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        console = Console(width=100, record=True)
        for static in app.screen.query(Static):
            console.print(static.content)
        text = console.export_text()
        for title, keys in KEYMAP:
            assert title in text
            for _, what in keys:
                assert what in text, what
        assert "cancel a running bisect" in text and "refresh the figures" in text
