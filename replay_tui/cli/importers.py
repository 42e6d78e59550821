"""``import mlflow`` and ``import wandb``: runs from experiment trackers into the store."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from replay_tui.cli.common import Ctx, echo_json, handled, json_option
from replay_tui.safety import escape_control

if TYPE_CHECKING:
    from replay_tui.ops.importing import ImportDone


def _report(done: ImportDone, as_json: bool) -> None:
    if as_json:
        echo_json(
            {
                "tracker": done.tracker,
                "source": done.source,
                "imported": done.imported,
                "already": done.already,
                "skipped": done.skipped,
                "runs": [o.to_dict() for o in done.outcomes],
            }
        )
        return
    for o in done.outcomes:
        if o.status == "imported":
            g = o.gaps or {}
            click.echo(
                f"imported {o.source_run_id} -> {o.run_id}  {o.name}  gaps:"
                f" {g.get('critical', 0)} critical, {g.get('warning', 0)} warning"
            )
            for why in o.refused:
                click.echo(f"  refused: {escape_control(why)}")
        elif o.status == "already":
            click.echo(f"already  {o.source_run_id} -> {o.run_id} (imported before: kept as is)")
        else:
            click.echo(f"skipped  {o.source_run_id}: {o.reason}")
    click.echo(
        f"{done.imported} imported, {done.already} already in the store, {done.skipped} skipped"
    )


F = TypeVar("F", bound=Callable[..., Any])

BUDGET_HELP = (
    "The most bytes this import may read or keep, all its files together (logs, metric"
    " files, saved files, artifacts): a number of bytes or e.g. 512MiB, 16GiB."
    " Default: REPLAY_TUI_IMPORT_MAX_BYTES, else 4 GiB."
)
POINTS_HELP = (
    "The most metric points this import may hold, all its histories together."
    " Default: REPLAY_TUI_IMPORT_MAX_POINTS, else 1000000.  One history holds at most"
    " 200000 points, one run at most 1000 metrics."
)


def _budget_options(fn: F) -> F:
    fn = click.option("--max-points", type=click.IntRange(min=1), help=POINTS_HELP)(fn)
    fn = click.option("--max-bytes", "max_bytes", metavar="SIZE", help=BUDGET_HELP)(fn)
    return fn


@click.group("import")
def import_group() -> None:
    """Import runs from experiment trackers (MLflow, W&B) as manifests with their gaps.

    An import is bounded in total (--max-bytes, --max-points) and follows links and
    artifact locations only into the tracker's own artifact folder or a folder named
    with --trust-root; past a bound nothing is stored (exit 2)."""


@import_group.command("mlflow")
@click.argument("tracking_uri")
@click.option("--experiment", "experiments", multiple=True, help="Experiment name (repeatable).")
@click.option("--run-id", "run_ids", multiple=True, help="One MLflow run id (repeatable).")
@click.option(
    "--trust-root",
    "--artifact-root",
    "trust_roots",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A folder a run's local artifacts may lie in, besides the store's own artifact"
    " folders (an mlruns/ folder named and the mlruns/ and mlartifacts/ folders beside it"
    " or beside a sqlite database; never the folder that holds the database) (repeatable).",
)
@_budget_options
@json_option
@click.pass_obj
@handled
def import_mlflow(
    obj: Ctx,
    tracking_uri: str,
    experiments: tuple[str, ...],
    run_ids: tuple[str, ...],
    trust_roots: tuple[str, ...],
    max_bytes: str | None,
    max_points: int | None,
    as_json: bool,
) -> None:
    """Import MLflow runs from TRACKING_URI (sqlite:///mlflow.db, mlruns/, http://...)."""
    from replay_tui.ops.importing import import_tracker_runs

    done = import_tracker_runs(
        obj.store,
        "mlflow",
        tracking_uri,
        max_bytes=max_bytes,
        max_points=max_points,
        experiments=experiments,
        run_ids=run_ids,
        trust_roots=trust_roots,
    )
    _report(done, as_json)


@import_group.command("wandb")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option(
    "--trust-root",
    "--files-root",
    "trust_roots",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A folder saved files' links may lead into, besides the run folder's own files/"
    " (e.g. the project folder that holds the wandb/ folder; repeatable).  Without it a"
    " saved file linked elsewhere is refused.",
)
@_budget_options
@json_option
@click.pass_obj
@handled
def import_wandb(
    obj: Ctx,
    run_dirs: tuple[str, ...],
    trust_roots: tuple[str, ...],
    max_bytes: str | None,
    max_points: int | None,
    as_json: bool,
) -> None:
    """Import W&B run folders (wandb/offline-run-*, wandb/run-*)."""
    from replay_tui.ops.importing import import_tracker_runs

    done = import_tracker_runs(
        obj.store,
        "wandb",
        run_dirs[0],
        max_bytes=max_bytes,
        max_points=max_points,
        said_as=" ".join(run_dirs),
        folders=run_dirs[1:],
        trust_roots=trust_roots,
    )
    _report(done, as_json)


def register(main: click.Group) -> None:
    main.add_command(import_group)
