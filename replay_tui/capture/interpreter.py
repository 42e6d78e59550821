"""The interpreter a recorded command ran: its path as the command found it, its
version, and the virtual environment it belongs to (the folder holding the
``pyvenv.cfg`` beside its ``bin/``), so a replay can say which Python it should run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def interpreter_info(exe: str | None, version: str | None) -> dict[str, Any] | None:
    """``environment.interpreter`` for the Python at ``exe`` (None when none is known).
    The path is not resolved: a virtual environment's ``python`` is a link to the base
    interpreter, and resolving it would lose the environment."""
    if not exe or not os.path.isabs(exe):
        return None
    from replay_tui.door import exists_under

    prefix = Path(exe).parent.parent
    venv = str(prefix) if exists_under(prefix, "pyvenv.cfg") else None
    return {"path": exe, "version": version, "virtual_env": venv}
