"""``demo``: build a demo store from real tiny training runs and open the TUI."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from replay_tui.cli.common import Ctx, handled, open_tui
from replay_tui.errors import BadInput
from storage.store import RunQuery, RunStore


@click.command()
@click.option("--no-open", is_flag=True, help="Build the demo store but do not open the TUI.")
@click.option("--no-docker", is_flag=True, help="Use the local backend even if Docker works.")
@click.pass_context
@handled
def demo(ctx: click.Context, no_open: bool, no_docker: bool) -> None:
    """Build a demo store from real tiny training runs, then open the TUI on it."""
    from replay_tui.cli.demo_store import build_demo

    obj: Ctx = ctx.obj
    given = ctx.parent is not None and ctx.parent.params.get("store_path") is not None
    explicit = given or bool(os.environ.get("REPLAY_TUI_STORE"))
    if explicit:
        path = obj.store_path
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir("replay-tui")) / "demo" / "store.db"
    if path.exists():
        with RunStore(path) as s:
            n = s.count_runs()
        if n and explicit:
            raise BadInput(f"{path} already holds {n} runs; the demo needs a new store path")
        if not explicit:
            shutil.rmtree(path.parent)
    click.echo(f"building the demo store at {path}", err=True)
    result = build_demo(path, say=lambda m: click.echo(m, err=True), use_docker=not no_docker)
    with RunStore(path) as s:
        total, replays = s.count_runs(), s.count_runs(RunQuery(kind="replay"))
    click.echo(
        f"demo store ready: {path} ({total} runs: {total - replays} recorded,"
        f" {replays} replay; {result.backend} backend)"
    )
    if not no_open:
        open_tui(path, result.notice)


def register(main: click.Group) -> None:
    main.add_command(demo)
