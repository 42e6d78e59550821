"""The record format and the store: no Textual, no Docker, no torch."""

import sys as _sys


def _import_sqlite_utils() -> None:
    """Import ``sqlite_utils`` without its optional pandas and numpy support.

    ``sqlite_utils.db`` imports pandas and numpy when they are installed (more than half
    of the TUI's start-up time); the store uses only its migrations, which need neither.
    They are hidden for the duration of that one import and nothing else: a later
    ``import pandas`` or ``import numpy`` works as usual.  Called where sqlite_utils is
    needed (``storage.migrations.database``): opening an up-to-date store never is.
    """
    if "sqlite_utils" in _sys.modules:
        return
    hidden = [name for name in ("pandas", "numpy") if name not in _sys.modules]
    for name in hidden:
        _sys.modules[name] = None  # type: ignore[assignment]  # "import name" raises ImportError
    try:
        import sqlite_utils  # noqa: F401
    finally:
        for name in hidden:
            if _sys.modules.get(name, False) is None:
                del _sys.modules[name]
