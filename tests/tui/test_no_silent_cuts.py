"""No value cut silently: a cell narrower than its value ends in an ellipsis and the
whole value is on the line under the table; every column an 80x24 terminal hides is
reachable; tab labels and footer keys show whole; the drill's log folds its long lines
and keeps to its end; the verify dialog speaks of its own fields, not the CLI's flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.widgets import Footer, Input, Static, TabbedContent

from replay_tui.gaps import gap_counts
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import ReplayEvent
from replay_tui.textfmt import cut
from replay_tui.tui.messages import OpenComparison, OpenRun, PickAndCompare
from replay_tui.tui.screens.comparison import ComparisonScreen
from replay_tui.tui.screens.drill import DrillScreen, FoldingLog, fold
from replay_tui.tui.screens.picker import PickRunScreen
from replay_tui.tui.screens.run_detail import RunDetailScreen
from replay_tui.tui.screens.verify import VerifyBundleScreen, in_dialog_terms
from replay_tui.tui.widgets.fullrow import FullRow
from replay_tui.tui.widgets.style import fit
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.helpers.tui import settled_app
from tests.support.app import (
    FixedStore,
    local_app,
    opened,
    runs_screen,
    settle,
    sync,
    wait_until,
)
from tests.support.factories import apply_overrides, realistic_manifest

LONG_IMAGE = "registry.example.com/research/vision-team/pytorch-training-base-cuda12:2025.11-rc3"
LONG_DIGEST = "sha256:" + "ab" * 32
LONG_ID_RUN = 7


@pytest.fixture(scope="module")
def long_image_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store of a few runs, one of them with a long image reference."""
    path = tmp_path_factory.mktemp("long-image") / "store.db"
    manifests = []
    for i in range(5):
        data = realistic_manifest(i)
        if i == LONG_ID_RUN % 5:
            data = apply_overrides(
                data, {"image__reference": LONG_IMAGE, "image__digest": LONG_DIGEST}
            )
        manifests.append(manifest_from_data(data))
    with RunStore(path) as store:
        store.ingest_many([(m, gap_counts(m), (), {}) for m in manifests])
    return path, manifests[LONG_ID_RUN % 5].run_id


def test_cut_ends_in_an_ellipsis() -> None:
    assert cut("abcdef", 6) == "abcdef"
    assert cut("abcdefgh", 6) == "abcde…"
    assert cut("abc", None) == "abc"
    assert fit(Text("abcdefgh", style="bold"), 6).plain == "abcde…"
    assert fit(Text("abcdefgh", style="bold"), 6).style == "bold"


# -- the runs table ----------------------------------------------------------------------


@sync
async def test_a_long_image_is_cut_with_an_ellipsis_and_shown_whole_under_the_table(
    long_image_store: tuple[Path, str],
) -> None:
    """At 200 columns IMAGE has the width NAME does not need, still too little for this
    image: its cell ends in an ellipsis and the whole-value line has it all."""
    path, run_id = long_image_store
    async with settled_app(path, (200, 60)) as (app, pilot):
        screen = runs_screen(app)
        table = screen.table
        full = screen.query_one("#full-row", FullRow)
        table.move_cursor(row=table.get_row_index(run_id))
        await wait_until(pilot, lambda: "IMAGE" in dict(full.parts))
        columns = {c.key: c.width for c in table.columns}
        names = [table.cell(n, "name").cell_len for n in range(table.row_count)]
        assert columns["name"] < 60 and columns["name"] >= max(names)  # no more than it needs
        assert columns["image"] > 13  # given what the name does not need
        strip = table._row_strip(table.get_row_index(run_id))
        line = "".join(seg.text for seg in strip)
        assert "…" in line and "pytorch-training-base-cuda12:2025.11-rc3@abababab"[:8] in line
        assert dict(full.parts)["IMAGE"] == f"{LONG_IMAGE}@{LONG_DIGEST}"
        shown = str(full.render())
        assert LONG_IMAGE in shown.replace("\n", "")


@sync
async def test_at_80x24_the_whole_value_line_shows_the_hidden_columns(
    fixed: FixedStore,
) -> None:
    """KIND, COMMIT and IMAGE are hidden at 80 columns: the line under the table shows
    them (a page at a time when they need more lines than it has)."""
    with RunStore(fixed.path) as s:
        record = s.get_run(fixed.original_id)
    assert record is not None
    image = f"{record.image_ref}@{record.image_digest}"
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        screen = runs_screen(app)
        full = screen.query_one("#full-row", FullRow)
        hidden = {c.key for c in screen.table.columns if c.width == 0}
        assert {"kind", "commit", "image"} <= hidden
        screen.table.move_cursor(row=screen.table.get_row_index(fixed.original_id))
        await wait_until(pilot, lambda: ("ID", fixed.original_id) in full.parts)
        parts = dict(full.parts)
        assert parts["KIND"] == "original" and parts["COMMIT"] == record.commit
        assert parts["IMAGE"] == image
        assert full.size.height > 1  # it wraps
        pages = full._pages()
        lines = []
        for k, page in enumerate(pages, 1):
            texts = [line.plain for line in page]
            if len(pages) > 1:  # the pages are marked k/n
                assert texts[-1].endswith(f"  {k}/{len(pages)}")
                texts[-1] = texts[-1].removesuffix(f"  {k}/{len(pages)}")
            assert all(len(t) <= full.content_size.width for t in texts)
            lines += texts
        every = "".join(lines)  # folded pieces: each value whole once put back together
        for value in ("KIND original", f"COMMIT {record.commit}", f"IMAGE {image}"):
            assert value in every
        shown = [str(full.render())]
        full.next_page()  # the next page (a click, or every few seconds)
        shown.append(str(full.render()))
        assert shown[0] != shown[1] and ("1/" in shown[0]) and ("2/" in shown[1])


@sync
async def test_the_whole_value_line_keeps_the_height_it_grew_to_until_the_width_changes(
    tmp_path: Path,
) -> None:
    """A run whose long name needs three lines grows the line under the table; a row
    that needs fewer leaves it at three (the table above does not jump from row to row,
    and the move costs a repaint, not a layout of the screen).  A new terminal width
    starts again from what the row under the cursor needs."""
    path = tmp_path / "store.db"
    manifests = [manifest_from_data(realistic_manifest(i)) for i in range(4)]
    long_name = manifest_from_data(
        apply_overrides(realistic_manifest(4), {"name": "resnet-" + "very-long-sweep-" * 15})
    )
    with RunStore(path) as store:
        store.ingest_many([(m, gap_counts(m), (), {}) for m in [*manifests, long_name]])
    async with settled_app(path, (200, 60)) as (app, pilot):
        screen = runs_screen(app)
        table = screen.table
        full = screen.query_one("#full-row", FullRow)
        other = next(n for n in range(table.row_count) if table.row_key(n) != long_name.run_id)
        table.move_cursor(row=other)
        await wait_until(pilot, lambda: ("ID", table.row_key(other)) in full.parts)
        await pilot.resize_terminal(199, 60)  # whichever row the cursor was on first
        await wait_until(pilot, lambda: full.size.height == full._needed())
        short = full._needed()
        table.move_cursor(row=table.get_row_index(long_name.run_id))
        await wait_until(pilot, lambda: full.size.height == 3)
        assert full._needed() == 3 > short
        table.move_cursor(row=other)
        await wait_until(pilot, lambda: ("ID", table.row_key(other)) in full.parts)
        await settle(pilot)  # the move's refresh and layout are done: the height is final
        assert full._needed() == short and full.size.height == 3  # kept
        assert len(str(full.render()).split("\n")) == 3
        await pilot.resize_terminal(200, 60)
        await wait_until(pilot, lambda: full.size.height == short)  # a new width


# -- the compare picker ------------------------------------------------------------------


@sync
async def test_the_picker_fits_its_columns_and_shows_cut_values_whole(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, (80, 24)) as (_app, pilot):
        picker = await opened(pilot, PickAndCompare(fixed.original_id), PickRunScreen)
        table = picker.table
        assert table.row_width <= table.scrollable_content_region.width  # nothing cropped
        assert not table.show_horizontal_scrollbar
        full = picker.query_one("#pick-full", FullRow)
        await wait_until(pilot, lambda: ("ID", fixed.replay_id) in full.parts)
        assert dict(full.parts)["NAME"] == "resnet50-imagenet-audit-2025q2"
        table.focus()
        await pilot.press("down")  # the line follows the cursor
        second = table.row_key(1)
        await wait_until(pilot, lambda: ("ID", second) in full.parts)


# -- comparison and run detail -----------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
@sync
async def test_comparison_fields_cut_with_an_ellipsis_and_a_hash_whole_when_wide(
    fixed: FixedStore, size: tuple[int, int]
) -> None:
    from textual.widgets import DataTable

    async with settled_app(fixed.path, size) as (_app, pilot):
        screen = await opened(
            pilot, OpenComparison(comparison_id=fixed.diverged_comparison), ComparisonScreen
        )
        table = screen.query_one("#fields", DataTable)
        for key in ("field", "a", "b"):
            width = table.columns[key].width  # type: ignore[index]
            for row in range(table.row_count):
                cell = table.get_row_at(row)[list(table.columns).index(key)]  # type: ignore[arg-type]
                text = cell.plain if isinstance(cell, Text) else str(cell)
                assert len(text) <= width, (key, text)
        row = table.get_row("config_hash")
        if size[0] >= 200:  # 64 hex digits whole
            assert len(row[2].plain) == 64 and "…" not in row[2].plain
        else:
            assert row[2].plain.endswith("…")
        assert not table.show_horizontal_scrollbar


def _tab_labels_fit(screen: Any) -> bool:
    tabs = screen.query_one(TabbedContent)
    total = sum(len(str(t.label)) + 2 for t in tabs.query("Tab"))
    return total <= screen.app.size.width


@sync
async def test_tab_labels_show_whole_at_80_columns(fixed: FixedStore) -> None:
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        await opened(
            pilot, OpenComparison(comparison_id=fixed.diverged_comparison), ComparisonScreen
        )
        tabs = app.screen.query_one(TabbedContent)
        assert str(tabs.get_tab("tab-fields").label) == "Fields (4 ≠)"
        assert _tab_labels_fit(app.screen)
        await pilot.resize_terminal(200, 60)
        await wait_until(pilot, lambda: "expected" in str(tabs.get_tab("tab-fields").label))
        await pilot.press("escape")
        await settle(pilot)
        await pilot.resize_terminal(80, 24)
        await opened(pilot, OpenRun(fixed.critical_id), RunDetailScreen)
        assert _tab_labels_fit(app.screen)
        assert str(app.screen.query_one(TabbedContent).get_tab("tab-gaps").label).endswith("c)")


@sync
async def test_the_footer_shows_every_key_at_80_columns(fixed: FixedStore) -> None:
    """A replay's detail has more keys than fit: the footer turns compact and leaves the
    palette key out, so that Dashboard (its last key) still shows."""
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        await opened(pilot, OpenRun(fixed.replay_id), RunDetailScreen)
        footer = app.screen.query_one(Footer)
        await wait_until(pilot, lambda: footer.compact)
        keys = list(footer.query("FooterKey"))
        assert keys and all(k.region.right <= 80 for k in keys)
        assert any("Dashboard" in str(k.description) for k in keys)
        await pilot.resize_terminal(200, 60)
        await wait_until(pilot, lambda: not footer.compact and footer.show_command_palette)


# -- the drill ---------------------------------------------------------------------------


def test_fold_keeps_every_character() -> None:
    line = "[run] log " + "x" * 150
    pieces = fold(line, 40, "    ")
    assert all(len(p) <= 40 for p in pieces)
    assert "".join(p.removeprefix("    ") if i else p for i, p in enumerate(pieces)) == line


@sync
async def test_drill_form_starts_in_its_first_field_and_its_log_keeps_to_its_end(
    fixed: FixedStore,
) -> None:
    app = local_app(fixed.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = await opened(pilot, app.action_drill, DrillScreen)
        assert app.focused is screen.query_one("#count", Input)
        screen.show_progress(3, ReplayOptions(backend="local"))
        log = screen.query_one("#log", FoldingLog)

        def lines(start: int, n: int) -> None:
            for k in range(start, start + n):
                ev = ReplayEvent("run", "log", f"step {k} loss 1.0 " + "x" * 150)
                screen.post_message(DrillScreen.Progress(ev))

        lines(0, 60)
        await settle(pilot)
        await wait_until(pilot, lambda: any("step 59 " in x for x in log.lines))
        assert all(len(x) <= log.scrollable_content_region.width for x in log.lines)
        assert not log.show_horizontal_scrollbar  # folded, not cut at the edge
        await wait_until(pilot, lambda: log.is_vertical_scroll_end and log.max_scroll_y > 0)
        # the user scrolls up: new lines no longer pull the log down
        log.scroll_to(y=0, animate=False, immediate=True)
        await settle(pilot)
        assert not log.following
        lines(60, 5)
        await settle(pilot)
        await wait_until(pilot, lambda: any("step 64 " in x for x in log.lines))
        assert log.scroll_y == 0
        # back at the end: it follows again
        log.scroll_end(animate=False, immediate=True)
        await settle(pilot)
        assert log.following
        lines(65, 5)
        await settle(pilot)
        await wait_until(pilot, lambda: any("step 69 " in x for x in log.lines))
        await wait_until(pilot, lambda: log.is_vertical_scroll_end)


# -- the verify dialog -------------------------------------------------------------------


def test_verify_advice_names_the_dialogs_fields_not_the_cli_flags() -> None:
    from replay_tui.evidence import verify

    for cli, _dialog in verify_advice():
        assert "--" in cli
    untrusted = (
        f"{verify.NOT_TRUSTED}: pass --key with the signer's public key, or list it in the"
        " trusted-keys file (x); the key inside the bundle proves nothing about who made it"
        " (--allow-embedded-key to check with it anyway)"
    )
    said = in_dialog_terms(untrusted)
    assert "--" not in said
    assert '"public key (.pub)"' in said and "use the bundle's own key" in said
    said = in_dialog_terms("checksums alone catch accidents (--allow-unsigned to accept that)")
    assert "--" not in said and '"accept an unsigned bundle"' in said


def verify_advice() -> tuple[tuple[str, str], ...]:
    from replay_tui.tui.screens.verify import CLI_ADVICE

    return CLI_ADVICE


@sync
async def test_verify_dialog_says_what_to_do_in_its_own_terms(
    fixed: FixedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signed bundle with no trusted key: the CLI says "pass --key"; the dialog names
    its key field and its checkbox."""
    from replay_tui.evidence.export import export_bundle
    from replay_tui.evidence.keys import generate

    pair = generate(tmp_path / "signer.key", tmp_path / "signer.pub")
    bundle = tmp_path / "bundle"
    with RunStore(fixed.path) as store:
        export_bundle(store, fixed.original_id, bundle, key_path=pair.private_path)
    monkeypatch.setenv("REPLAY_TUI_TRUSTED_KEYS", str(tmp_path / "none.pem"))
    async with settled_app(fixed.path, (120, 40)) as (app, pilot):
        screen = await opened(pilot, app.action_verify_bundle, VerifyBundleScreen)
        screen.query_one("#bundle", Input).value = str(bundle)
        await pilot.click("#verify")
        await wait_until(pilot, lambda: screen.check is not None, 120)
        assert any("--key" in line.text for line in screen.lines)  # the CLI's words
        shown = str(screen.query_one("#result", Static).render())
        assert "--key" not in shown and "--allow-embedded-key" not in shown
        assert "public key (.pub)" in shown and "use the bundle's own key" in shown


def test_the_stage_board_wraps_a_long_message_instead_of_cutting_it() -> None:
    from rich.console import Console

    from replay_tui.tui.widgets.stages import StageBoard
    from replay_tui.tui.widgets.style import Palette

    board = StageBoard()
    message = "commit 2effd62d9f68fe0e9467873a8f59d29d7eb3bcae checked out in /tmp/wt-0123456789"
    board.apply("checkout", "done", message)
    console = Console(width=40, record=True, file=None, legacy_windows=False)
    with console.capture() as capture:
        console.print(board.render(Palette({})))
    text = capture.get()
    assert "…" not in text
    assert message.replace(" ", "") in "".join(
        line[15:].strip() for line in text.splitlines()
    ).replace(" ", "")


@sync
async def test_run_detail_shows_a_hash_and_the_command_whole_at_80_columns(
    fixed: FixedStore,
) -> None:
    with RunStore(fixed.path) as s:
        manifest = s.manifest(fixed.original_id)
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        await opened(pilot, OpenRun(fixed.original_id), RunDetailScreen)
        from rich.console import Console

        sections = {str(w.border_title): w for w in app.screen.query(".section")}

        def shown(name: str) -> str:
            widget = sections[name]
            console = Console(width=widget.content_size.width, legacy_windows=False)
            with console.capture() as capture:
                console.print(widget.content)
            return "".join(capture.get().split())

        config, code = shown("config"), shown("code")
        assert "…" not in config + code
        assert manifest.config_hash in config
        assert "".join(manifest.argv) in code


@sync
async def test_drill_results_show_the_highlighted_runs_values_whole(fixed: FixedStore) -> None:
    """At 80 columns the results cut the name and leave the reason out of view: the
    line under them has the highlighted run's values whole."""
    from textual.widgets import DataTable

    from tests.support.app import finished_drill, fixed_drill

    app = local_app(fixed.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        report = fixed_drill()
        screen = await finished_drill(pilot, report)
        full = screen.query_one("#result-full", Static)
        first = report.items[0]
        assert f"run {first.run_id}" in str(full.render())
        table = screen.query_one("#results", DataTable)
        table.move_cursor(row=1)
        second = report.items[1]
        await wait_until(pilot, lambda: f"run {second.run_id}" in str(full.render()))
        shown = " ".join(str(full.render()).split())
        assert f"reason {second.reason}" in shown
        assert f"replay run {second.replay_run}" in shown


@sync
async def test_run_detail_replays_show_the_highlighted_replay_run_whole(
    fixed: FixedStore,
) -> None:
    async with settled_app(fixed.path, (80, 24)) as (app, pilot):
        await opened(pilot, OpenRun(fixed.original_id), RunDetailScreen)
        app.screen.query_one(TabbedContent).active = "tab-replays"
        await settle(pilot)
        full = app.screen.query_one("#replay-full", Static)
        await wait_until(pilot, lambda: f"replay run {fixed.replay_id}" in str(full.render()))


@sync
async def test_comparison_artifacts_show_the_highlighted_hashes_whole(
    fixed: FixedStore,
) -> None:
    from textual.widgets import DataTable

    async with settled_app(fixed.path, (80, 24)) as (_app, pilot):
        screen = await opened(
            pilot, OpenComparison(comparison_id=fixed.diverged_comparison), ComparisonScreen
        )
        assert screen.view is not None
        screen.query_one(TabbedContent).active = "tab-artifacts"
        await settle(pilot)
        arts = screen.view.comparison.artifacts
        full = screen.query_one("#artifact-full", Static)
        table = screen.query_one("#artifacts", DataTable)
        table.move_cursor(row=2)
        x = arts[2]
        await wait_until(pilot, lambda: str(full.render()).startswith(x.path))
        shown = str(full.render())
        assert f"original: {x.sha256_a}" in shown and f"replay: {x.sha256_b}" in shown
        assert len(str(x.sha256_a)) == 64
