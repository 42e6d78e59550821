"""The command line: a thin face over the store and the domain functions.

One module per group of commands, each with ``register(main)``; what they share lives
in ``replay_tui.cli.common``.  Heavy modules (textual, torch, docker) are imported inside
the commands that need them.  A new command group is a new module here plus one line in
``COMMAND_MODULES``.
"""

from __future__ import annotations

from replay_tui.cli import audit, bisect, demo, importers, record, replay, runs
from replay_tui.cli.root import main

COMMAND_MODULES = (runs, record, replay, audit, demo, bisect, importers)

for _module in COMMAND_MODULES:
    _module.register(main)

__all__ = ["main"]
