"""``replay`` and ``compare``: replay a run, compare any two runs."""

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
    tolerance_options,
)
from replay_tui.compare.tolerance import Tolerance
from replay_tui.ops.judgement import margin_not_tested
from replay_tui.safety import escape_control, memory_limit_arg

if TYPE_CHECKING:
    from replay_tui.replay.plan import ReplayOptions


def _size_arg(value: str | None) -> str | None:
    if value is None:
        return None
    from replay_tui.replay.backends.docker.walls import size_bytes

    try:
        n = size_bytes(value)
    except ValueError:
        raise click.BadParameter(
            f"{escape_control(value)!r} is not a size: a whole number with b, k, m or g"
        ) from None
    if n < 1 << 20:
        raise click.BadParameter(f"{value} is below 1m")
    return value.strip().lower()


def _budget_arg(value: str | None) -> int | None:
    """``--output-budget``'s size in bytes (``capture.outputs.parse_size``)."""
    if value is None:
        return None
    from replay_tui.capture.outputs import parse_size
    from replay_tui.errors import BadInput

    try:
        return parse_size(value, "--output-budget")
    except BadInput as e:
        raise click.BadParameter(e.message) from None


def _user_arg(value: str | None) -> str | None:
    if value is None:
        return None
    from replay_tui.replay.backends.docker.walls import parse_user

    if parse_user(value) is None:
        raise click.BadParameter(f"{escape_control(value)!r} is not UID, UID:GID or root")
    return value.strip()


def _allow_env_arg(values: tuple[str, ...]) -> tuple[str, ...]:
    """Each ``--allow-env`` name checked at once: a loader variable is exit 2 here."""
    from replay_tui.errors import BadInput
    from replay_tui.replay.envpolicy import check_extra

    try:
        return tuple(check_extra(values))
    except BadInput as e:
        raise click.BadParameter(e.message + (f" ({e.hint})" if e.hint else "")) from None


@click.command()
@click.argument("run")
@replay_options(
    allow_cpu="Run a GPU-recorded run on CPU (a gap).",
    timeout="Seconds; then SIGTERM, and SIGKILL after a 5 s grace period.",
    repo="A clone that has the recorded commit.",
    own=(
        "gpus",
        "network",
        "keep_workdir",
        "force_data",
        "memory_limit",
        "cpus",
        "output_size",
        "output_budget",
        "container_user",
        "allow_env",
        "fetch_repo",
        "allow_foreign_on_host",
    ),
)
@click.option(
    "--gpus", type=click.Choice(["auto", "all", "none"]), default="auto", show_default=True
)
@click.option("--network", type=click.Choice(["none", "bridge"]), default="none", show_default=True)
@click.option("--keep-workdir", is_flag=True, help="Keep the checkout for inspection.")
@click.option("--force-data", is_flag=True, help="Go on when data hashes differ (a gap).")
@click.option(
    "--memory",
    "memory_limit",
    default=None,
    callback=lambda _c, _p, v: memory_limit_arg(v),
    help="Container memory limit: a number with b, k, m or g, e.g. 2g (default: half of"
    " this host's memory).",
)
@click.option(
    "--cpus",
    type=click.FloatRange(min=0.01, max=4096),
    default=None,
    help="CPUs the container may use, e.g. 1.5 (default: the recorded count, at most this host's).",
)
@click.option(
    "--output-size",
    "output_size",
    default=None,
    callback=lambda _c, _p, v: _size_arg(v),
    help="Size of each folder the container may write, e.g. 4g (default: twice what the"
    " original run wrote, at least 1g).",
)
@click.option(
    "--output-budget",
    "output_budget",
    metavar="SIZE",
    default=None,
    callback=lambda _c, _p, v: _budget_arg(v),
    help="The most bytes of the replay's outputs hashed and kept in objects/, all its files"
    " together (default 64 GiB, or REPLAY_TUI_OUTPUT_BUDGET); files past it are listed"
    " unhashed (the replay is INCOMPLETE), a sparse file is refused. SIZE: 500MiB, 8GiB.",
)
@click.option(
    "--container-user",
    "container_user",
    default=None,
    callback=lambda _c, _p, v: _user_arg(v),
    help="UID:GID (or root) the container runs as (default: never root when it can be avoided).",
)
@click.option(
    "--allow-env",
    "allow_env",
    multiple=True,
    callback=lambda _c, _p, v: _allow_env_arg(v),
    help="Pass this manifest variable on too (the default is an allow-list; never one"
    " that makes a runtime load code).",
)
@click.option(
    "--fetch-repo",
    is_flag=True,
    help="Clone or fetch the manifest's repo_url (https/ssh) when no local clone has the commit.",
)
@click.option(
    "--allow-foreign-on-host",
    is_flag=True,
    help="Let an ingested or imported run's command run unsandboxed on this host.",
)
@click.option(
    "--times",
    type=click.IntRange(1, 100),
    default=None,
    help="Replay N times (N >= 2: measure and store the run's noise floor, then judge"
    " the original against it; docs/noise.md).  Default: once, and when a run whose"
    " determinism was not fully on replays beyond the tolerance with no floor, two more"
    " replicas measure one first.  1: once only (such a replay is then not judged: exit"
    " 4).",
)
@click.option(
    "--determinism",
    type=click.Choice(["recorded", "off"]),
    default="recorded",
    show_default=True,
    help="'off' also runs a deterministic replay and reports determinism_cost_pct.",
)
@click.option("--quiet", is_flag=True, help="Do not stream the run's output.")
@json_option
@click.pass_obj
@handled
def replay(
    obj: Ctx,
    run: str,
    options: ReplayOptions,
    times: int | None,
    determinism: str,
    quiet: bool,
    as_json: bool,
) -> None:
    """Replay RUN from its image digest and git commit; exit 0 if reproduced (IDENTICAL,
    EQUIVALENT, or WITHIN_NOISE of its noise floor), 1 if not, 4 if not judged (--times 1
    of a noisy run with no floor)."""
    from replay_tui.ops.replay import replay_and_judge
    from replay_tui.replay.context import ReplayEvent

    def on_event(ev: ReplayEvent) -> None:
        print_event(ev, as_json=as_json, logs=not quiet)

    done = replay_and_judge(
        obj.store, run, options, times=times, determinism=determinism, on_event=on_event
    )
    report = done.report
    # with --margin, a replay the noise rule did not judge says why it has no claim
    notes = [
        margin_not_tested(options.tolerance, o.comparison.verdict, o.comparison.floor is not None)
        if o.comparison is not None and o.comparison.noise is None
        else None
        for o in report.outcomes
    ]
    if as_json:
        body = report.to_dict()
        for row, note in zip(body["replays"], notes, strict=True):
            if note is not None:
                row["equivalence"] = note
        echo_json(body)
    else:
        click.echo(escape_control(report.text(), keep_newlines=True))
        for i, note in enumerate(notes, report.first_number):
            if note is not None:
                click.echo(f"replay {i}: {note['text']}")
    sys.exit(done.exit_code)


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@tolerance_options
@click.option("--no-store", is_flag=True, help="Do not record the comparison in the store.")
@json_option
@click.pass_obj
@handled
def compare_cmd(
    obj: Ctx,
    run_a: str,
    run_b: str,
    tolerance: Tolerance,
    no_store: bool,
    as_json: bool,
) -> None:
    """Compare any two runs: artifacts, checkpoints, metrics, environment, against the
    noise floor that speaks for them when one is stored; exit 0 if reproduced."""
    from replay_tui.compare.render import comparison_text
    from replay_tui.ops.compare import compare_runs

    done = compare_runs(obj.store, run_a, run_b, tolerance=tolerance, keep=not no_store)
    result = done.comparison
    body = result.to_dict()
    if done.comparison_id is not None:
        body["comparison_id"] = done.comparison_id
    # a replay that did not complete has partial outputs: comparing them is no verdict
    stopped, code = done.aborted, done.exit_code
    if stopped is not None:
        body["replay_aborted"] = {"run": stopped.run_id, "ended": stopped.ended, "exit_code": code}
    note = None
    if result.noise is None:
        note = margin_not_tested(tolerance, result.verdict, result.floor is not None)
    if as_json:
        if note is not None:
            body["equivalence"] = note  # the output's, not the stored body's
        echo_json(body)
    else:
        click.echo(escape_control(comparison_text(result), keep_newlines=True))
        if note is not None:
            click.echo(f"\n{note['text']}")
        if stopped is not None:
            click.echo(
                f"\nNOT JUDGED: {stopped.run_id} is a replay that did not complete"
                f" ({stopped.ended}); its outputs are partial, so this comparison is not a"
                f" verdict on reproduction (exit {code})"
            )
    sys.exit(code)


def register(main: click.Group) -> None:
    for cmd in (replay, compare_cmd):
        main.add_command(cmd)
