"""The ``replay-tui`` group: global options, and the TUI when no command is given."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from replay_tui.cli.common import Ctx, default_store_path, fail, open_tui
from replay_tui.safety import escape_control
from replay_tui.storepath import tui_store_problem


class Finished(SystemExit):
    """``sys.exit(code)`` from a command that has finished all its work: what it stored
    is committed and its store closed, every file it wrote is closed, and no thread of
    it is left running.  The program (``replay_tui.program``) then ends the process at
    once with ``code``, without the interpreter's teardown (a garbage collection over
    every imported module's objects: ~0.15 s after ``record``); whatever else runs the
    command (click's test runner, ``python -m replay_tui.cli``) sees a plain
    ``SystemExit``."""


class LazyGroup(click.Group):
    """A group whose commands' modules are imported when a command is first looked up.

    ``lazy`` maps each command's name to the module that registers it (its
    ``register(group)`` adds it, and its siblings, to the group).  Running one command
    imports its module alone: ``record`` starts the training command without the other
    commands' modules and what they import.  ``--help`` and completion look every command
    up, so they import every module and list what they always listed.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = {}

    def add_lazy(self, commands: Mapping[str, str]) -> None:
        self.lazy.update(commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self.lazy.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            importlib.import_module(module).register(self)
        return self.commands.get(cmd_name)

    # click's own errors (a bad value, an unknown option or command) quote the argument
    # as given; click prints them, so they are escaped on their way out of the group.
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with escaped_click_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with escaped_click_errors():
            return super().invoke(ctx)


@contextlib.contextmanager
def escaped_click_errors() -> Iterator[None]:
    """A ``click.ClickException`` raised inside, its message escaped for the terminal
    (``escape_control``): click prints it raw, and it may quote an argument."""
    try:
        yield
    except click.ClickException as e:
        vars(e)["message"] = escape_control(e.message)  # click types it Final: set once
        raise


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
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
