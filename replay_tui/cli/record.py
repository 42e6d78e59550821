"""``record``: run a command (locally or in an image) and record its provenance."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from replay_tui.cli.common import Ctx, check_store_path, echo_json, handled, json_option
from replay_tui.cli.root import Finished
from replay_tui.errors import BadInput
from replay_tui.safety import escape_control

F = TypeVar("F", bound=Callable[..., Any])


def _parse_tags(tags: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for t in tags:
        k, sep, v = t.partition("=")
        if not sep or not k:
            raise BadInput(f"--tag {t!r} must be KEY=VALUE")
        out[k] = v
    return out


def _collector_off(fn: F) -> F:
    """``fn`` with Python's cyclic garbage collector off: its imports and probes before
    the launch make nothing worth collecting (its collections cost ~15 ms there), the
    command's output is pumped without cycles while it runs, and the recording ends the
    process soon after (``Finished``).  What it made is frozen before the collector is
    turned back on (as it was): else the first collection after would go through all of
    it (~25 ms) on the way out."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        was_on = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_on:
                gc.freeze()
                gc.enable()

    return cast(F, wrapper)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--name", default="", help="A name for the run.")
@click.option("--tag", "tags", multiple=True, help="KEY=VALUE (repeatable).")
@click.option(
    "--seed",
    type=click.IntRange(0, 2**32 - 1),
    default=None,
    help="Seed handed to the SDK (REPLAY_TUI_SEED) and recorded.",
)
@click.option(
    "--deterministic/--no-deterministic",
    default=None,
    help="Force the SDK's deterministic mode on or off.",
)
@click.option("--data", multiple=True, help="PATH or NAME=PATH of a data input (repeatable).")
@click.option(
    "--artifact",
    "artifacts",
    multiple=True,
    help="Glob of outputs to hash and keep, relative to the working folder (repeatable):"
    " * within one name, ** any number of folders (out/** is every file under out/). A glob"
    " that matches no file is said, and is a gap.",
)
@click.option(
    "--volatile",
    "volatile",
    multiple=True,
    metavar="GLOB",
    help="Glob of outputs that may differ from run to run (a timing file, a log with"
    " dates; repeatable, matched as --artifact is): a comparison lists them and does not"
    " judge their bytes. Every other declared output that differs makes a replay DIVERGED.",
)
@click.option(
    "--output-budget",
    "output_budget",
    metavar="SIZE",
    default=None,
    help="The most bytes of this run's outputs hashed and kept in objects/, all its files"
    " together (default 64 GiB, or REPLAY_TUI_OUTPUT_BUDGET). Files past it are listed"
    " unhashed, a gap, and never copied; a sparse file is refused whatever the budget."
    " SIZE: bytes, or with a unit: 500MiB, 8GiB, 1TiB.",
)
@click.option("--metrics-file", default=None, help="JSON or JSONL metrics the command writes.")
@click.option(
    "--metric-regex",
    multiple=True,
    help="Regex with (?P<step>) and (?P<value>), plus (?P<name>) or --metric-name.",
)
@click.option("--metric-name", default=None, help="Metric name for --metric-regex.")
@click.option("--env", "env_names", multiple=True, help="Another environment variable to record.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None, help="Seconds.")
@click.option("--image", default=None, help="Run inside this container image (Docker).")
@click.option("--quiet", is_flag=True, help="Do not echo the command's output.")
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
@handled
@_collector_off
def record(
    obj: Ctx,
    name: str,
    tags: tuple[str, ...],
    seed: int | None,
    deterministic: bool | None,
    data: tuple[str, ...],
    artifacts: tuple[str, ...],
    metrics_file: str | None,
    metric_regex: tuple[str, ...],
    metric_name: str | None,
    env_names: tuple[str, ...],
    timeout: float | None,
    image: str | None,
    output_budget: str | None,
    volatile: tuple[str, ...],
    quiet: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (after --) and record its full provenance; exit with its exit code."""
    from replay_tui.capture.options import RecordOptions
    from replay_tui.capture.outputs import parse_size

    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    opts = RecordOptions(
        argv=argv,
        cwd=Path.cwd(),
        name=name,
        tags=_parse_tags(tags),
        seed=seed,
        deterministic=deterministic,
        data=list(data),
        artifacts=list(artifacts),
        metrics_file=metrics_file,
        metric_regex=list(metric_regex),
        metric_name=metric_name,
        env_names=list(env_names),
        timeout_s=timeout,
        image=image,
        output_budget=None
        if output_budget is None
        else parse_size(output_budget, "--output-budget"),
        volatile=_volatile_globs(volatile),
    )
    echo = (lambda line: None) if (quiet or as_json) else (lambda line: click.echo(line, err=True))
    # the store is opened once the command has ended (its modules load while it runs);
    # what would refuse it is checked now, before the command starts
    check_store_path(obj.store_path, database=True)
    from replay_tui.ops.record import record_run

    done = record_run(opts, obj.store_path, lambda: obj.store, on_line=echo)
    m = done.manifest
    for why in done.refused:  # always said (also under --json and --quiet): each is a gap
        # a stale file was not refused: it is listed, as not written by this run
        word = "not an output of this run" if ": stale: " in why else "refused"
        click.echo(f"replay-tui: {word}: {why}", err=True)
    for glob in done.unmatched:  # said whatever the mode: each is a gap
        click.echo(
            f"replay-tui: --artifact {escape_control(glob)!r} matched no file: nothing it"
            " names was recorded",
            err=True,
        )
    if as_json:
        echo_json(
            {
                "run_id": m.run_id,
                "status": m.status,
                "exit_code": done.exit_code,
                "manifest_sha256": m.integrity.manifest_sha256,
                "log": str(done.log_path),
                "refused": list(done.refused),
                "unmatched": list(done.unmatched),
            }
        )
    else:
        click.echo(
            f"recorded run {m.run_id} ({m.status}, exit {done.exit_code}) in {obj.store_path}"
        )
        stale = sum(1 for a in m.outputs.artifacts if a.stale is not None)
        click.echo(
            f"  {len(m.outputs.artifacts) - stale} artifact(s)"
            + (f" (+{stale} stale, not written by it)" if stale else "")
            + f", {len(m.outputs.metrics)} metric(s), log kept at {done.log_path}"
        )
    obj.store.close()  # committed already; this copies the WAL into the file and syncs it
    raise Finished(done.exit_code)


def register(main: click.Group) -> None:
    main.add_command(record)


def _volatile_globs(globs: tuple[str, ...]) -> list[str]:
    """``--volatile`` globs, each one the artifact matcher takes (else exit 2)."""
    from replay_tui.door import glob_parts
    from replay_tui.errors import BadInput
    from replay_tui.safety import escape_control

    for g in globs:
        if glob_parts(g) is None:
            raise BadInput(
                f"--volatile {escape_control(g)!r} is not a glob under the working folder"
                " (no absolute path, no '..')"
            )
    return list(dict.fromkeys(globs))
