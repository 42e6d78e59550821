"""``import mlflow`` and ``import wandb``: runs from experiment trackers into the store."""

from __future__ import annotations

from typing import Any

import click

from replay_tui.cli.common import Ctx, echo_json, handled, json_option
from replay_tui.safety import escape_control


def _report(tracker: str, source: str, outcomes: list[Any], as_json: bool) -> None:
    imported = sum(o.status == "imported" for o in outcomes)
    already = sum(o.status == "already" for o in outcomes)
    skipped = sum(o.status == "skipped" for o in outcomes)
    if as_json:
        echo_json(
            {
                "tracker": tracker,
                "source": source,
                "imported": imported,
                "already": already,
                "skipped": skipped,
                "runs": [o.to_dict() for o in outcomes],
            }
        )
        return
    for o in outcomes:
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
    click.echo(f"{imported} imported, {already} already in the store, {skipped} skipped")


@click.group("import")
def import_group() -> None:
    """Import runs from experiment trackers (MLflow, W&B) as manifests with their gaps."""


@import_group.command("mlflow")
@click.argument("tracking_uri")
@click.option("--experiment", "experiments", multiple=True, help="Experiment name (repeatable).")
@click.option("--run-id", "run_ids", multiple=True, help="One MLflow run id (repeatable).")
@click.option(
    "--artifact-root",
    "artifact_roots",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A folder a run's local artifacts may lie in, besides the store's own artifact root"
    " (repeatable).",
)
@json_option
@click.pass_obj
@handled
def import_mlflow(
    obj: Ctx,
    tracking_uri: str,
    experiments: tuple[str, ...],
    run_ids: tuple[str, ...],
    artifact_roots: tuple[str, ...],
    as_json: bool,
) -> None:
    """Import MLflow runs from TRACKING_URI (sqlite:///mlflow.db, mlruns/, http://...)."""
    from replay_tui.importers import import_runs, load_importer

    importer = load_importer("mlflow")
    outcomes = import_runs(
        obj.store,
        importer,
        tracking_uri,
        experiments=experiments,
        run_ids=run_ids,
        artifact_roots=artifact_roots,
    )
    _report("mlflow", tracking_uri, outcomes, as_json)


@import_group.command("wandb")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option(
    "--files-root",
    type=click.Path(file_okay=False),
    help="Saved files may be links only to files under this folder (default: the project"
    " folder that holds the wandb/ folder).",
)
@json_option
@click.pass_obj
@handled
def import_wandb(
    obj: Ctx, run_dirs: tuple[str, ...], files_root: str | None, as_json: bool
) -> None:
    """Import W&B run folders (wandb/offline-run-*, wandb/run-*)."""
    from replay_tui.importers import import_runs, load_importer

    importer = load_importer("wandb")
    outcomes = import_runs(
        obj.store, importer, run_dirs[0], folders=run_dirs[1:], files_root=files_root
    )
    _report("wandb", " ".join(run_dirs), outcomes, as_json)


def register(main: click.Group) -> None:
    main.add_command(import_group)
