"""The ``replay-tui`` group: global options, and the TUI when no command is given."""

from __future__ import annotations

from pathlib import Path

import click

from replay_tui.cli.common import Ctx, default_store_path, fail, open_tui
from replay_tui.storepath import tui_store_problem


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Store file (default: $REPLAY_TUI_STORE, else the user data directory).",
)
@click.version_option(package_name="replay-tui")
@click.pass_context
def main(ctx: click.Context, store_path: Path | None) -> None:
    """Record, replay and audit ML training runs.  With no command, open the TUI."""
    ctx.obj = Ctx(store_path or default_store_path())
    if ctx.invoked_subcommand is None:
        given = ctx.obj.store_path
        problem = tui_store_problem(given)
        if problem is not None:  # a mistyped store would open empty (and be made)
            fail(problem[0], 2, problem[1] or None)
        open_tui(given)
