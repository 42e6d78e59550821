"""Where the store is when no ``--store`` is given (shared by the CLI and the program).

Standard library only: the ``replay-tui`` program reads it before deciding whether to
load the command line at all (the TUI opens without it).
"""

from __future__ import annotations

import os
from pathlib import Path


def default_store_path() -> Path:
    """``$REPLAY_TUI_STORE``, else ``store.db`` in the user data directory."""
    env = os.environ.get("REPLAY_TUI_STORE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("replay-tui")) / "store.db"
