"""The ``replay-tui`` program: a command goes to the CLI, no command opens the TUI
without loading the command line (click and every command module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from replay_tui.program import tui_store


def test_no_command_is_the_tui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLAY_TUI_STORE", str(tmp_path / "env.db"))
    (tmp_path / "env.db").touch()  # an empty file: a store not yet written
    assert tui_store([]) == tmp_path / "env.db"
    assert tui_store(["--store", str(tmp_path / "env.db")]) == tmp_path / "env.db"
    (tmp_path / "s.db").touch()
    assert tui_store(["--store", str(tmp_path / "s.db")]) == tmp_path / "s.db"
    assert tui_store([f"--store={tmp_path / 's.db'}"]) == tmp_path / "s.db"


def test_a_mistyped_store_is_refused_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TUI on a --store that names no file would open empty and make a store there."""
    monkeypatch.setenv("REPLAY_TUI_STORE", str(tmp_path / "env.db"))
    typo = tmp_path / "stroe.db"
    assert tui_store(["--store", str(typo)]) is None  # left to the CLI, which refuses it
    exe = Path(sys.executable).parent / "replay-tui"
    done = subprocess.run([str(exe), "--store", str(typo)], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert f"--store {typo}: no store there" in done.stderr
    assert "demo" in done.stderr  # says how to make one there on purpose
    assert not typo.exists()


def test_a_mistyped_store_in_the_environment_is_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the built-in store (the user data folder) may be missing: one named by
    $REPLAY_TUI_STORE is as deliberate as --store, for the TUI and for a read command."""
    typo = tmp_path / "stroe.db"
    monkeypatch.setenv("REPLAY_TUI_STORE", str(typo))
    assert tui_store([]) is None
    exe = Path(sys.executable).parent / "replay-tui"
    for argv in ([], ["runs"], ["stats"]):
        done = subprocess.run([str(exe), *argv], capture_output=True, text=True)
        assert done.returncode == 2, (argv, done.stderr)
        assert f"$REPLAY_TUI_STORE={typo}: no store there" in done.stderr
        assert "Traceback" not in done.stderr
    assert not typo.exists()
    import json

    vs = subprocess.run([str(exe), "verify-store", "--json"], capture_output=True, text=True)
    assert vs.returncode == 2 and json.loads(vs.stdout)["hint"], vs.stdout  # says what to do

    from tests.support.factories import realistic_manifest

    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(realistic_manifest(0)))
    made = subprocess.run([str(exe), "ingest", str(manifest)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr  # a command that makes a store still may
    assert typo.exists()


def test_the_tui_refuses_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    junk = tmp_path / "notes.db"
    junk.write_text("hello\n")
    assert tui_store(["--store", str(junk)]) is None
    exe = Path(sys.executable).parent / "replay-tui"
    done = subprocess.run([str(exe), "--store", str(junk)], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert f"--store {junk}: not a replay-tui store" in done.stderr
    assert junk.read_text() == "hello\n"  # left as it was


@pytest.mark.parametrize(
    "argv",
    [["runs"], ["--store", "s.db", "runs"], ["--help"], ["--version"], ["--store"], ["--sto", "x"]],
)
def test_anything_else_is_the_cli(argv: list[str]) -> None:
    assert tui_store(argv) is None


def test_a_folder_as_store_is_left_to_the_cli(tmp_path: Path) -> None:
    assert tui_store(["--store", str(tmp_path)]) is None  # the CLI reports it (exit 2)


def test_the_tui_opens_without_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "s.db").touch()
    code = (
        "import sys, replay_tui.program as p\n"
        "assert 'click' not in sys.modules and 'replay_tui.cli' not in sys.modules\n"
        "opened = []\n"
        "p._open_tui = lambda store, notice: opened.append(store)\n"
        f"sys.argv = ['replay-tui', '--store', {str(tmp_path / 's.db')!r}]\n"
        "p.main()\n"
        "print(opened[0], 'replay_tui.cli' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(tmp_path / "s.db"), "False"]


def test_a_command_still_runs_through_the_cli(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "replay-tui"
    done = subprocess.run(
        [str(exe), "--store", str(tmp_path), "runs"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "folder" in done.stderr or "directory" in done.stderr


def test_the_start_runs_without_the_cyclic_collector_and_is_frozen_after_the_first_page(
    tmp_path: Path,
) -> None:
    """``replay-tui`` imports the TUI with the collector off; the app turns it back on
    with the start's heap frozen once its first page is painted (a full collection of
    that heap, about 50 ms, no longer lands in a keystroke), and gives the heap back to
    the collector when it exits."""
    import asyncio
    import gc

    from replay_tui import program
    from storage.manifest import manifest_from_data
    from storage.store import RunStore
    from tests.support.app import wait_until
    from tests.support.factories import realistic_manifest

    path = tmp_path / "store.db"
    with RunStore(path) as s:
        s.ingest_many([(manifest_from_data(realistic_manifest(i)), None, (), {}) for i in range(3)])
    gc.unfreeze()  # a known start, whatever ran before in this process
    gc.enable()
    seen: dict[str, object] = {}

    async def run() -> None:
        app_module = program.import_tui()
        seen["paused"] = not gc.isenabled()
        app = app_module.ReplayApp(path)
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_until(pilot, gc.isenabled)  # the first page is painted
            seen["frozen"] = gc.get_freeze_count()
            seen["rows"] = app.screen.query_one("#runs").row_count  # type: ignore[attr-defined]

    try:
        asyncio.run(run())
        assert seen["paused"] is True
        assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000  # the start's heap
        assert seen["rows"] == 3
        assert gc.isenabled() and gc.get_freeze_count() == 0  # given back at exit
    finally:
        gc.unfreeze()
        gc.enable()


def _store_of(path: Path, n: int, start: int = 0) -> None:
    from storage.manifest import manifest_from_data
    from storage.store import RunStore
    from tests.support.factories import realistic_manifest

    with RunStore(path) as s:
        s.ingest_many(
            [(manifest_from_data(realistic_manifest(i)), None, (), {}) for i in range(start, n)]
        )


@pytest.mark.parametrize("written_after", [False, True])
def test_the_first_page_is_read_while_the_app_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written_after: bool
) -> None:
    """The app reads the runs browser's first page in a thread from its construction on,
    and the screen shows it in its first frame, with no query of its own; a store
    written after that read is queried again (the page would be stale)."""
    import asyncio
    import threading

    import replay_tui.tui.screens.runs as runs_screen
    from replay_tui.tui.app import ReplayApp
    from tests.support.app import settle, wait_until

    path = tmp_path / "store.db"
    _store_of(path, 3)
    readers: list[str] = []
    load = runs_screen.load_runs_page

    def counted(*args: object, **kwargs: object) -> object:
        readers.append(threading.current_thread().name)
        return load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runs_screen, "load_runs_page", counted)
    app = ReplayApp(path)
    first = app._first_page
    assert first is not None
    assert first._done.wait(60)  # read before the screen mounts, whatever the machine
    if written_after:
        _store_of(path, 4, start=3)
    rows: list[int] = []

    async def run() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            table = app.screen.query_one("#runs")
            await wait_until(pilot, lambda: table.row_count > 0)  # type: ignore[attr-defined]
            await settle(pilot)  # every worker done, its page shown: nothing more comes
            rows.append(table.row_count)  # type: ignore[attr-defined]

    asyncio.run(run())
    if written_after:
        assert rows == [4]
        assert readers[0] == "runs-first-page" and len(readers) == 2  # read again, by a worker
    else:
        assert rows == [3]
        assert readers == ["runs-first-page"]


def test_a_write_just_after_the_first_page_is_taken_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stored right after the screen took the page read while the app started
    (the page matched the store then) is shown by the screen's watch on the store: the
    screen notes the store's state before it takes the page, not after."""
    import asyncio

    import replay_tui.tui.screens.runs as runs_screen
    from replay_tui.tui.app import ReplayApp
    from tests.support.app import wait_until

    path = tmp_path / "store.db"
    _store_of(path, 3)
    take = runs_screen.FirstPage.take
    taken: list[bool] = []

    def take_then_write(
        self: runs_screen.FirstPage, view: runs_screen.RunsView, expanded: frozenset[str]
    ) -> runs_screen.RunsPageData | None:
        page = take(self, view, expanded)
        taken.append(page is not None)
        _store_of(path, 4, start=3)  # another process stores a run
        return page

    monkeypatch.setattr(runs_screen.FirstPage, "take", take_then_write)
    app = ReplayApp(path)
    assert app._first_page is not None and app._first_page._done.wait(60)
    rows: list[int] = []

    async def run() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            table = app.screen.query_one("#runs")
            await wait_until(pilot, lambda: table.row_count == 4)  # type: ignore[attr-defined]
            rows.append(table.row_count)  # type: ignore[attr-defined]

    asyncio.run(run())
    assert taken == [True] and rows == [4]
