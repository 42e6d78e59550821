"""``bisect GOOD BAD``: which recorded difference makes BAD diverge from GOOD."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from replay_tui.cli.common import (
    Ctx,
    echo_json,
    handled,
    json_option,
    print_event,
    replay_options,
)
from replay_tui.safety import escape_control

if TYPE_CHECKING:
    from replay_tui.replay.plan import ReplayOptions


@click.command("bisect")
@click.argument("good")
@click.argument("bad")
@replay_options(
    allow_cpu="Run GPU-recorded runs on CPU (a gap).",
    timeout="Seconds a probe.",
    repo="A clone that has both commits.",
)
@click.option(
    "--times",
    type=click.IntRange(1, 20),
    default=None,
    help="Replays of GOOD for its noise floor (default: 1 for a seeded deterministic run, else 3).",
)
@click.option(
    "--factors",
    default=None,
    help="Comma-separated factors to test (code,image,data,config,seed,determinism,"
    "environment); the others are held at GOOD's value.",
)
@click.option(
    "--budget",
    type=click.IntRange(1, 1000),
    default=16,
    show_default=True,
    help="Most probes to run (the noise-floor replays do not count).",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Probes at a time: the one-factor probes run concurrently (Slurm jobs, containers).",
)
@click.option("--quiet", is_flag=True, help="Do not stream the probes' output.")
@json_option
@click.pass_obj
@handled
def bisect_cmd(
    obj: Ctx,
    good: str,
    bad: str,
    options: ReplayOptions,
    times: int | None,
    factors: str | None,
    budget: int,
    parallel: int,
    quiet: bool,
    as_json: bool,
) -> None:
    """Replay GOOD with BAD's factors swapped in, one at a time, then the smallest set, and
    say which difference makes BAD diverge.  Exit 0 cause found, 1 unexplained, 2 bad
    input, 3 infrastructure failure."""
    from replay_tui.bisect.run import BisectOptions, check_factor_names, run_bisect
    from replay_tui.replay.runner import ReplayEvent

    names = None
    if factors is not None:
        names = check_factor_names([f.strip() for f in factors.split(",") if f.strip()])
    opts = BisectOptions(
        replay=options,
        times=times,
        factors=names,
        budget=budget,
        parallel=parallel,
        rtol=options.tolerance.rtol,
        atol=options.tolerance.atol,
    )

    def on_event(ev: ReplayEvent) -> None:
        if ev.stage == "bisect" and not as_json:
            click.echo(f"[  bisect] {escape_control(ev.message)}", err=True)
            return
        print_event(ev, as_json=as_json, logs=not quiet)

    result = run_bisect(obj.store, good, bad, opts, on_event=on_event)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(escape_control(result.text(), keep_newlines=True))  # the manifests' words
    sys.exit(result.exit_code)


def register(main: click.Group) -> None:
    main.add_command(bisect_cmd)
