"""Where the store is when no ``--store`` is given (shared by the CLI and the program).

Standard library only: the ``replay-tui`` program reads it before deciding whether to
load the command line at all (the TUI opens without it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal


def default_store_path() -> Path:
    """``$REPLAY_TUI_STORE``, else ``store.db`` in the user data directory."""
    env = os.environ.get("REPLAY_TUI_STORE")
    if env:
        return Path(env)
    return builtin_store_path()


def builtin_store_path() -> Path:
    """``store.db`` in the user data directory: the one store that may be missing when
    read (it reads as empty); a store named by ``--store`` or ``$REPLAY_TUI_STORE``
    must exist unless the command makes one."""
    import platformdirs

    return Path(platformdirs.user_data_dir("replay-tui")) / "store.db"


Origin = Literal["--store", "$REPLAY_TUI_STORE", "default"]


def store_origin(path: Path) -> Origin:
    """Where the store path ``path`` came from: ``--store``, ``$REPLAY_TUI_STORE`` or,
    with neither, the default (:func:`builtin_store_path`).

    While a command runs, the command line says whether ``--store`` was given (click's
    context, when click is loaded: this module imports nothing beyond the standard
    library); otherwise (the program deciding whether to open the TUI) the path is
    matched against ``$REPLAY_TUI_STORE`` and the default."""
    env = os.environ.get("REPLAY_TUI_STORE")
    given = _given_on_command_line()
    if given is not _UNKNOWN:
        if given is not None:
            return "--store"
        return "$REPLAY_TUI_STORE" if env else "default"
    if env:
        return "$REPLAY_TUI_STORE" if Path(env) == path else "--store"
    return "default" if path == builtin_store_path() else "--store"


_UNKNOWN = object()


def _given_on_command_line() -> object:
    """The root command's ``--store`` value (None: not given), or ``_UNKNOWN`` when no
    command is running."""
    click = sys.modules.get("click")
    ctx = click.get_current_context(silent=True) if click is not None else None
    if ctx is None:
        return _UNKNOWN
    return ctx.find_root().params.get("store_path", _UNKNOWN)


def may_be_missing(path: Path) -> bool:
    """Whether reading the store at ``path`` may find no file (only the default one)."""
    return store_origin(path) == "default"


def named_as(path: Path) -> str:
    """How the user named ``path``, for a message that starts with it: ``--store X``,
    ``$REPLAY_TUI_STORE=X`` or, when neither was given, ``default store X (...)``."""
    origin = store_origin(path)
    if origin == "$REPLAY_TUI_STORE":
        return f"$REPLAY_TUI_STORE={path}"
    if origin == "default":
        return f"default store {path} (no --store or $REPLAY_TUI_STORE given)"
    return f"--store {path}"


SQLITE_HEADER = b"SQLite format 3\x00"


def tui_store_problem(path: Path) -> tuple[str, str] | None:
    """Why the TUI cannot open the store at ``path`` (a message and a hint), or None: a
    folder, a named store that does not exist (it would be made empty), a file that is
    not an SQLite database.  Checked before the TUI starts, as a command checks it."""
    named = named_as(path)
    if path.is_dir():
        return f"{named}: is a folder; give the store file (store.db)", ""
    if not path.exists():
        if may_be_missing(path):
            return None
        return (
            f"{named}: no store there (no such file)",
            f"pass the path of an existing store, or make one there with"
            f" `replay-tui --store {path} demo` or `record`",
        )
    from replay_tui.door import Refused, head_named  # standard library only, too

    try:  # a regular file only: a FIFO or a device there is refused, never waited on
        head = head_named(path, "store file", len(SQLITE_HEADER))
    except Refused as e:
        return f"{named}: cannot be read ({e.message})", ""
    if head and head != SQLITE_HEADER:
        return f"{named}: not a replay-tui store (not an SQLite database)", ""
    return None
