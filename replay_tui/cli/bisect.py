"""``bisect GOOD BAD``: which recorded difference makes BAD diverge from GOOD;
``bisect-show ID``: a stored bisect again, and with ``--logs`` its probes' output.

The probes' output is not printed while a bisect runs (only its stages and each probe's
answer); it goes to the store with the answer, and ``--logs`` streams it as well."""

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
    help="Comma-separated factors to test (code,image,data,config,topology,seed,"
    "determinism,environment); the others are held at GOOD's value.",
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
@click.option(
    "--logs",
    is_flag=True,
    help="Stream the probes' output as they run (it is kept in the store either way:"
    " bisect-show ID --logs).",
)
@click.option("--quiet", is_flag=True, help="Only the answer: no stage lines.")
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
    logs: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Replay GOOD with BAD's factors swapped in, one at a time, then the smallest set, and
    say which difference makes BAD diverge.  Exit 0 cause found, 1 unexplained, 2 bad
    input, 3 infrastructure failure."""
    from replay_tui.bisect.options import BisectOptions, check_factor_names
    from replay_tui.ops.bisect import bisect_runs
    from replay_tui.replay.context import ReplayEvent

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
        if quiet and not (logs and ev.state == "log"):
            return
        if ev.stage == "bisect" and not as_json:
            click.echo(f"[  bisect] {escape_control(ev.message)}", err=True)
            return
        print_event(ev, as_json=as_json, logs=logs)

    done = bisect_runs(obj.store, good, bad, opts, on_event=on_event)
    if as_json:
        echo_json(done.result.to_dict())
    else:
        click.echo(escape_control(done.result.text(), keep_newlines=True))  # the manifests' words
    sys.exit(done.exit_code)


@click.command("bisect-show")
@click.argument("bisect_id", type=click.IntRange(1))
@click.option("--logs", is_flag=True, help="Also print the output the store kept of each probe.")
@click.option(
    "--probe",
    "probe",
    type=int,
    default=None,
    help="Only this probe's output (its number in the table; -N: GOOD's noise-floor replay N).",
)
@json_option
@click.pass_obj
@handled
def bisect_show(obj: Ctx, bisect_id: int, logs: bool, probe: int | None, as_json: bool) -> None:
    """A stored bisect's answer (as `bisect` printed it), and with --logs the output its
    probes printed, read back from the store."""
    from replay_tui.ops.bisect import show_bisect

    shown = show_bisect(obj.store, bisect_id, logs=logs, probe=probe)
    res = shown.done.result
    if as_json:
        body = res.to_dict()
        if shown.logs is not None:
            body["logs"] = [{"probe": p.probe, "what": p.what, "log": p.text} for p in shown.logs]
        echo_json(body)
        return
    click.echo(escape_control(res.text(), keep_newlines=True))  # the manifests' words
    for p in shown.logs or ():
        click.echo(f"── output of {escape_control(p.what)}")
        if p.text is None:
            click.echo("  (not kept: this bisect was stored before the probes' output was)")
            continue
        for line in p.text.splitlines():  # the program's output: untrusted
            click.echo(f"  | {escape_control(line)}")


def register(main: click.Group) -> None:
    main.add_command(bisect_cmd)
    main.add_command(bisect_show)
