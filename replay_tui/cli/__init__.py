"""The command line: a thin face over the store and the domain functions.

One module per group of commands, each with ``register(main)``; what they share lives
in ``replay_tui.cli.common``.  The root group imports a command's module only when that
command is used (``root.LazyGroup``): a command starts without the other commands'
modules and what they import; heavy modules (textual, torch, docker) are imported inside
the commands that need them.  A new command is a line in ``COMMANDS`` (its name and the
module that registers it).
"""

from __future__ import annotations

from replay_tui.cli.root import main

COMMANDS: dict[str, str] = {
    name: f"replay_tui.cli.{module}"
    for module, names in (
        ("runs", ("schema", "ingest", "runs", "show", "gaps", "verify-store")),
        ("record", ("record",)),
        ("replay", ("replay", "compare")),
        ("audit", ("export", "keygen", "verify", "drill", "stats")),
        ("demo", ("demo",)),
        ("bisect", ("bisect", "bisect-show")),
        ("importers", ("import",)),
    )
    for name in names
}
"""Each command's name, and the module whose ``register`` adds it."""

main.add_lazy(COMMANDS)

__all__ = ["COMMANDS", "main"]
