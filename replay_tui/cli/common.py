"""What every command shares: the store context, errors to exit codes, JSON output,
reusable options and the stage-event printer.

Exit codes: 0 success / reproduced, 1 not reproduced or integrity failure, 2 bad input
or usage, 3 infrastructure failure.  ``--json`` gives machine output everywhere.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import click

from replay_tui.errors import ReplayTuiError
from replay_tui.storepath import default_store_path as default_store_path
from replay_tui.storepath import may_be_missing, named_as
from storage.manifest import ManifestError
from storage.store import RunStore, StoreError

if TYPE_CHECKING:
    from replay_tui.replay.runner import ReplayEvent

F = TypeVar("F", bound=Callable[..., Any])


class Ctx:
    """What every command gets: where the store is, opened on first use."""

    def __init__(self, store_path: Path) -> None:
        self.store_path = store_path
        self._store: RunStore | None = None

    @property
    def store(self) -> RunStore:
        if self._store is None:
            self._store = open_store_checked(self.store_path)
        return self._store


CREATES_STORE = frozenset({"record", "ingest", "demo", "mlflow", "wandb"})  # import mlflow|wandb
"""Commands that may make a new store (and its folder); the others only read one."""


def open_store_checked(path: Path) -> RunStore:
    """The store at ``path``, or a clear BadInput (exit 2): a file that is not a store, or,
    for a command that only reads, a store (or its folder) that does not exist: never
    made silently.  The default store (no --store) may be missing: it reads as empty."""
    import sqlite3

    from replay_tui.errors import BadInput

    ctx = click.get_current_context(silent=True)
    command = ctx.info_name if ctx is not None else None
    named = named_as(path)
    if not path.parent.exists() and command not in CREATES_STORE:
        raise BadInput(
            f"{named}: no store there (the folder {path.parent} does not exist)",
            "record or ingest a run to make a store, or pass the path of an existing one",
        )
    if path.is_dir():
        raise BadInput(f"{named}: is a folder; give the store file (store.db)")
    if not path.exists() and command not in CREATES_STORE and not may_be_missing(path):
        # a mistyped --store would otherwise read as an empty store (and make one)
        raise BadInput(
            f"{named}: no store there (no such file)",
            "record or ingest a run to make a store, or pass the path of an existing one",
        )
    try:
        return RunStore(path)
    except sqlite3.DatabaseError as e:
        raise BadInput(f"{named}: not a replay-tui store ({e})") from None


def fail(message: str, code: int, hint: str | None = None, as_json: bool = False) -> NoReturn:
    """Print MESSAGE (and HINT) as text or JSON and exit with CODE."""
    if as_json:
        click.echo(json.dumps({"error": message, "hint": hint, "exit_code": code}))
    else:
        click.echo(f"error: {message}", err=True)
        if hint:
            click.echo(f"  hint: {hint}", err=True)
    sys.exit(code)


def handled(fn: F) -> F:
    """Turn domain errors into the documented exit codes and messages."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except ManifestError as e:
            fail(str(e), 2, as_json=as_json)
        except StoreError as e:
            fail(str(e), 2, as_json=as_json)
        except ReplayTuiError as e:
            fail(e.message, e.exit_code, e.hint, as_json=as_json)
        except PermissionError as e:
            fail(f"permission denied: {e.filename}", 3, as_json=as_json)
        except KeyboardInterrupt:  # what was started is stopped and recorded by then
            if as_json:  # --json promises JSON on stdout, an interrupt included
                click.echo(json.dumps({"error": "interrupted (Ctrl-C)", "exit_code": 130}))
            click.echo("interrupted (Ctrl-C)", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


# The interface that opens when no command is given.  The command line never imports the
# TUI (they are siblings over the domain): the program that puts them together
# (``replay_tui.program``) hands the opener in.
TuiOpener = Callable[[Path, "str | None"], None]
_tui_opener: TuiOpener | None = None


def set_tui_opener(opener: TuiOpener) -> None:
    global _tui_opener
    _tui_opener = opener


def open_tui(store_path: Path, notice: str | None = None) -> None:
    if _tui_opener is None:
        fail("this entry point has no terminal interface; run `replay-tui` instead", 2)
    _tui_opener(store_path, notice)


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def backend_option(fn: F) -> F:
    """``--backend``, its choices taken from the backend registry."""
    from replay_tui.replay.backends import DEFAULT_BACKEND, backend_names

    return click.option(
        "--backend",
        type=click.Choice(backend_names()),
        default=DEFAULT_BACKEND,
        show_default=True,
        help="Where the replay runs (see the backends in the README).",
    )(fn)


def tolerance_options(fn: F) -> F:
    """``--rtol``, ``--atol``, ``--alpha``, ``--margin`` (``compare.tolerance``: one set of
    defaults, help and validation for every command that judges); the command receives
    one ``tolerance`` (a ``Tolerance``), a bad value is exit 2 naming the flag."""
    from replay_tui.compare.tolerance import HELP, Tolerance, ToleranceError

    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        rtol: float | None,
        atol: float | None,
        alpha: float | None,
        margin: float | None,
        **kwargs: Any,
    ) -> Any:
        try:
            tol = Tolerance.of(rtol, atol, alpha, margin)
        except ToleranceError as e:
            raise click.BadParameter(str(e)) from None
        return fn(*args, tolerance=tol, **kwargs)

    for name in ("margin", "alpha", "atol", "rtol"):
        wrapper = click.option(f"--{name}", type=float, default=None, help=HELP[name])(wrapper)
    return cast(F, wrapper)


def print_event(ev: ReplayEvent, *, as_json: bool, logs: bool) -> None:
    """One replay stage event on stderr, as ``replay`` and ``drill`` print them.

    Stage lines always; the run's own output lines only when ``logs``; nothing under
    ``--json`` (stdout carries the JSON, stderr stays quiet).
    """
    if as_json or (ev.state == "log" and not logs):
        return
    from replay_tui.safety import escape_control  # the run's output and argv: untrusted

    if ev.state == "log":
        click.echo(f"  | {escape_control(ev.message)}", err=True)
    else:
        click.echo(f"[{ev.stage:>8}] {ev.state:<6} {escape_control(ev.message)}".rstrip(), err=True)
