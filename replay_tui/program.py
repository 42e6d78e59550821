"""The ``replay-tui`` program: the command line, with the TUI when no command is given.

The CLI (``replay_tui.cli``) and the TUI (``replay_tui.tui.app``) are siblings over the
domain and never import each other; this module is the one place that joins them.
Each is imported only when it is used: a command starts without Textual, and the plain
``replay-tui [--store PATH]`` opens the TUI without loading the command line (click,
every command module and what they import), so the first frame comes sooner.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import NoReturn


def import_tui() -> ModuleType:
    """The TUI's module (``replay_tui.tui.app``), imported with Python's cyclic collector
    off for the start: the app turns it back on once its first page is painted
    (``replay_tui.tui.start_heap``)."""
    from replay_tui.tui import start_heap

    start_heap.pause_for_start()
    import replay_tui.tui.app

    return replay_tui.tui.app


def _open_tui(store_path: Path, notice: str | None) -> None:
    import_tui().run_app(store_path, notice=notice)


def tui_store(argv: Sequence[str]) -> Path | None:
    """The store to open the TUI on when ``argv`` (without the program name) names no
    command: nothing, or only ``--store PATH``; None for anything else (a command, a
    help or version flag, a path that is a folder or names no file, a typo), which the
    CLI handles and reports as it always has."""
    from replay_tui.storepath import default_store_path

    args = list(argv)
    if not args:
        return _openable(default_store_path())
    if len(args) == 2 and args[0] == "--store":
        value = args[1]
    elif len(args) == 1 and args[0].startswith("--store="):
        value = args[0].removeprefix("--store=")
    else:
        return None
    if not value or value.startswith("-"):
        return None  # the CLI says what is wrong with it
    return _openable(Path(value))


def _openable(path: Path) -> Path | None:
    """``path``, or None when the TUI cannot open it (a folder, a mistyped store that
    would be made empty, a file that is not a database): the CLI refuses it then."""
    from replay_tui.storepath import tui_store_problem

    return None if tui_store_problem(path) else path


def main() -> None:
    store = tui_store(sys.argv[1:])
    if store is not None:
        _open_tui(store, None)
        return
    import gc

    gc.disable()  # the command line's imports make no garbage worth a collection
    try:
        from replay_tui.cli import main as cli_main
        from replay_tui.cli.common import set_tui_opener
        from replay_tui.cli.root import Finished
    finally:
        gc.enable()
    set_tui_opener(_open_tui)
    sys.excepthook = print_escaped_traceback  # a crash may quote what came from outside
    try:
        cli_main()
    except Finished as done:
        end_now(done.code)


def print_escaped_traceback(
    kind: type[BaseException], error: BaseException, tb: TracebackType | None
) -> None:
    """What Python prints for an error nothing handled, escaped for the terminal
    (``escape_control``): its message may quote a manifest's value or a run's output."""
    import traceback

    from replay_tui.safety import escape_control

    text = "".join(traceback.format_exception(kind, error, tb))
    sys.stderr.write(escape_control(text, keep_newlines=True))


def end_now(code: object) -> NoReturn:
    """End the process with ``code`` (as ``sys.exit`` would read it) after flushing
    stdout and stderr, without the interpreter's teardown: for a command that has
    finished all its work (``cli.root.Finished``)."""
    status = code if isinstance(code, int) else 0 if code is None else 1
    if not isinstance(code, int | None):
        from replay_tui.safety import escape_control

        print(escape_control(str(code)), file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to say there
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
