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

from replay_tui.errors import BadInput, ReplayTuiError
from replay_tui.safety import escape_control
from replay_tui.storepath import default_store_path as default_store_path
from replay_tui.storepath import may_be_missing, named_as

if TYPE_CHECKING:
    from replay_tui.compare.tolerance import Tolerance
    from replay_tui.replay.backends import BackendOption
    from replay_tui.replay.context import ReplayEvent
    from storage.store import RunStore

# The store and the manifest's models (pydantic) are imported where they are used, not
# here: ``record`` starts the training command before it needs either.

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

    from storage.store import RunStore

    check_store_path(path)
    named = named_as(path)
    try:
        return RunStore(path)
    except sqlite3.DatabaseError as e:
        raise BadInput(f"{named}: not a replay-tui store ({e})") from None


def check_store_path(path: Path, *, database: bool = False) -> None:
    """The checks of :func:`open_store_checked` that need no store opened: BadInput
    (exit 2) for a folder, or, for a command that only reads, a store (or its folder)
    that does not exist.  ``database``: also a file that is not an SQLite database,
    read-only and without the store's modules (what ``record`` checks before it starts
    the command, and opens the store only once it has ended)."""
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
    if database and path.is_file():
        _check_is_database(path, named)


def _check_is_database(path: Path, named: str) -> None:
    """BadInput where ``path`` is no SQLite database, from its header (as the TUI checks
    it before it starts, ``storepath.tui_store_problem``); read through the door."""
    from replay_tui.door import Refused, head_named
    from replay_tui.storepath import SQLITE_HEADER

    try:  # a regular file only: a FIFO or a device there is refused, never waited on
        head = head_named(path, "store file", len(SQLITE_HEADER))
    except Refused as e:
        raise BadInput(f"{named}: cannot be read ({e.message})") from None
    if head and head != SQLITE_HEADER:
        raise BadInput(f"{named}: not a replay-tui store (not an SQLite database)")


def fail(message: str, code: int, hint: str | None = None, as_json: bool = False) -> NoReturn:
    """Print MESSAGE (and HINT) as text or JSON and exit with CODE: the one way a
    command's error reaches the terminal.  Both may quote what came from outside (a
    manifest's key, a run's output, an argument), so the text is escaped
    (``escape_control``); JSON escapes every control character itself."""
    if as_json:
        click.echo(json.dumps({"error": message, "hint": hint, "exit_code": code}))
    else:
        echo_error(message, hint)
    sys.exit(code)


def echo_error(message: str, hint: str | None = None) -> None:
    """``error: MESSAGE`` (and ``  hint: HINT``) on stderr, escaped for the terminal."""
    click.echo(f"error: {escape_control(message)}", err=True)
    if hint:
        click.echo(f"  hint: {escape_control(hint)}", err=True)


def handled(fn: F) -> F:
    """Turn domain errors into the documented exit codes and messages."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except ReplayTuiError as e:
            fail(e.message, e.exit_code, e.hint, as_json=as_json)
        except PermissionError as e:
            fail(f"permission denied: {e.filename}", 3, as_json=as_json)
        except KeyboardInterrupt:  # what was started is stopped and recorded by then
            if as_json:  # --json promises JSON on stdout, an interrupt included
                click.echo(json.dumps({"error": "interrupted (Ctrl-C)", "exit_code": 130}))
            click.echo("interrupted (Ctrl-C)", err=True)
            sys.exit(130)
        except Exception as e:
            if _is_storage_error(e):  # exit 2; an altered store (StoreAltered) says 1
                fail(str(e), int(getattr(e, "exit_code", 2)), as_json=as_json)
            raise

    return wrapper  # type: ignore[return-value]


def _is_storage_error(e: Exception) -> bool:
    """A manifest's ``ManifestError`` or the store's ``StoreError`` (exit 2).  Neither
    module is imported for this (a command that needs neither loads neither): one that
    was never imported raised nothing."""
    for module, name in (("storage.manifest", "ManifestError"), ("storage.store", "StoreError")):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(e, getattr(loaded, name)):
            return True
    return False


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


def replay_options(
    *, allow_cpu: str, timeout: str, repo: str | None = None, own: tuple[str, ...] = ()
) -> Callable[[F], F]:
    """The options of a command that replays (``replay``, ``drill``, ``bisect``):
    ``--backend`` (its choices from the backend registry), every registered backend's own
    flags (the ``BackendOption`` each declares), ``--allow-cpu``, ``--timeout``, ``--repo``
    (when ``repo`` gives its help) and the tolerance flags (:func:`tolerance_options`).

    The command receives one ``options``: a ``ReplayOptions`` made of them and of the
    command's own options named in ``own`` (each a ``ReplayOptions`` field: ``gpus``,
    ``network``...).  A backend's flag given with another backend, or a value its backend
    refuses (``check_options``, flags and environment), is exit 2 naming the flag before
    anything runs.  ``allow_cpu``, ``timeout``, ``repo``: their help (what the command's
    runs are: a replay, each run of a drill, a probe).
    """

    def decorate(fn: F) -> F:
        from replay_tui.replay.backends import DEFAULT_BACKEND, backend_names, declared_options

        owners: dict[str, list[tuple[str, BackendOption]]] = {}  # flag -> its backends
        for name, declared in declared_options().items():
            for option in declared:
                owners.setdefault(option.flag, []).append((name, option))

        @functools.wraps(fn)
        def wrapper(*args: Any, backend: str, tolerance: Tolerance, **kwargs: Any) -> Any:
            from replay_tui.replay.backends import get_backend
            from replay_tui.replay.plan import ReplayOptions

            values: list[tuple[str, str]] = []
            try:
                for flag, backends in owners.items():
                    value = kwargs.pop(_param_name(flag), None)
                    if value is None:
                        continue
                    mine = [option for name, option in backends if name == backend]
                    if not mine:
                        which = " or ".join(f"--backend {name}" for name, _ in backends)
                        raise BadInput(f"{flag} applies to {which} only (got --backend {backend})")
                    values.append((mine[0].name, str(value)))
                get_backend(backend).check_options(values)
            except BadInput as e:
                fail(e.message, e.exit_code, e.hint, as_json=bool(kwargs.get("as_json")))
            options = ReplayOptions(
                backend=backend,
                backend_options=tuple(values),
                allow_cpu=kwargs.pop("allow_cpu"),
                timeout_s=kwargs.pop("timeout_s"),
                repo=kwargs.pop("repo", None),
                tolerance=tolerance,
                **{name: kwargs.pop(name) for name in own},
            )
            return fn(*args, options=options, **kwargs)

        decorated: Any = tolerance_options(wrapper)
        if repo is not None:
            decorated = click.option(
                "--repo",
                type=click.Path(file_okay=False, path_type=Path),
                default=None,
                help=repo,
            )(decorated)
        decorated = click.option(
            "--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=None, help=timeout
        )(decorated)
        decorated = click.option("--allow-cpu", is_flag=True, help=allow_cpu)(decorated)
        for flag, backends in reversed(owners.items()):
            option = backends[0][1]
            decorated = click.option(
                flag,
                _param_name(flag),
                type=click.Choice(option.choices) if option.choices else option.type,
                default=None,
                help=option.help_text,
            )(decorated)
        decorated = click.option(
            "--backend",
            type=click.Choice(backend_names()),
            default=DEFAULT_BACKEND,
            show_default=True,
            help="Where the replay runs (see the backends in the README).",
        )(decorated)
        return cast(F, decorated)

    return decorate


def _param_name(flag: str) -> str:
    """The parameter a backend's flag arrives as (``--slurm-time``: ``backend_slurm_time``;
    never one of the command's own)."""
    return "backend_" + flag.lstrip("-").replace("-", "_")


def tolerance_options(fn: F) -> F:
    """``--rtol``, ``--atol``, ``--alpha``, ``--margin`` (``compare.tolerance``: one set of
    defaults, help and validation for every command that judges); the command receives
    one ``tolerance`` (a ``Tolerance``), a bad value is exit 2 naming the flag."""
    from replay_tui.compare.tolerance import HELP, Tolerance, ToleranceError, parse_margin

    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        rtol: float | None,
        atol: float | None,
        alpha: float | None,
        margin: str | None,
        **kwargs: Any,
    ) -> Any:
        try:
            rel, amount = parse_margin(margin) if margin is not None else (None, None)
            tol = Tolerance.of(rtol, atol, alpha, rel, amount)
        except ToleranceError as e:
            raise click.BadParameter(str(e)) from None
        return fn(*args, tolerance=tol, **kwargs)

    wrapper = click.option("--margin", metavar="PCT%|AMOUNT", default=None, help=HELP["margin"])(
        wrapper
    )
    for name in ("alpha", "atol", "rtol"):
        wrapper = click.option(f"--{name}", type=float, default=None, help=HELP[name])(wrapper)
    return cast(F, wrapper)


def print_event(ev: ReplayEvent, *, as_json: bool, logs: bool) -> None:
    """One replay stage event on stderr, as ``replay`` and ``drill`` print them.

    Stage lines always; the run's own output lines only when ``logs``; nothing under
    ``--json`` (stdout carries the JSON, stderr stays quiet).
    """
    if as_json or (ev.state == "log" and not logs):
        return
    if ev.state == "log":  # the run's output and argv: untrusted, escaped
        click.echo(f"  | {escape_control(ev.message)}", err=True)
    else:
        click.echo(f"[{ev.stage:>8}] {ev.state:<6} {escape_control(ev.message)}".rstrip(), err=True)
