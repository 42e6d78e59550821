"""Command lines the tests give the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.training import replay_tui

RECORD_OUTPUTS = ("record", "--json", "--artifact", "out/*")
"""The start of a ``record`` whose outputs are ``out/*`` and whose summary is JSON (flags
and ``-- COMMAND`` follow)."""

RECORD_DEEP_OUTPUTS = ("record", "--json", "--artifact", "out/**")
""":data:`RECORD_OUTPUTS` with every file below ``out/``, at any depth."""


def cli_json(store: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``replay-tui --store STORE ARGS`` (ARGS asking for ``--json``): its exit code, the
    JSON it printed ({} when it printed none) and all it said (stderr, then stdout)."""
    proc = replay_tui(store, *args)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stderr + proc.stdout
