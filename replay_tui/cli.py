"""The command line: a thin face over the store and the domain functions.

Exit codes (DESIGN.md): 0 success / reproduced, 1 not reproduced or integrity failure,
2 bad input or usage, 3 infrastructure failure.  ``--json`` gives machine output.
Heavy modules (textual, torch, docker) are imported inside the commands that need them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from replay_tui.errors import BadInput, ReplayTuiError
from storage.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    RunManifest,
    json_schema,
    parse_manifest,
)
from storage.store import RunQuery, RunStore, StoreError

F = TypeVar("F", bound=Callable[..., Any])


def default_store_path() -> Path:
    env = os.environ.get("REPLAY_TUI_STORE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("replay-tui")) / "store.db"


class Ctx:
    """What every command gets: where the store is, opened on first use."""

    def __init__(self, store_path: Path) -> None:
        self.store_path = store_path
        self._store: RunStore | None = None

    @property
    def store(self) -> RunStore:
        if self._store is None:
            self._store = RunStore(self.store_path)
        return self._store


def fail(message: str, code: int, hint: str | None = None, as_json: bool = False) -> None:
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

    return wrapper  # type: ignore[return-value]


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
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
        from replay_tui.app import run_app

        run_app(ctx.obj.store_path)


# -- storage commands ---------------------------------------------------------------


@main.command()
def schema() -> None:
    """Print the JSON Schema of the run manifest."""
    echo_json(json_schema())


def compute_gaps(m: RunManifest) -> Any:
    from replay_tui.gaps import gap_counts

    return gap_counts(m)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@json_option
@click.pass_obj
@handled
def ingest(obj: Ctx, files: tuple[Path, ...], as_json: bool) -> None:
    """Validate and import manifest JSON files.

    Every file is checked before anything is written: if any is invalid, nothing is
    stored and the command exits 2 naming the file, the field and the reason.
    """
    manifests: list[RunManifest] = []
    errors: list[str] = []
    for f in files:
        try:
            with f.open("rb") as fh:  # bounded: never read a huge file or /dev/zero whole
                raw = fh.read(MAX_MANIFEST_BYTES + 1)
        except OSError as e:
            errors.append(f"{f}: cannot read: {e.strerror}")
            continue
        if len(raw) > MAX_MANIFEST_BYTES:
            errors.append(
                f"{f}: manifest is more than {MAX_MANIFEST_BYTES} bytes;"
                f" the limit is {MAX_MANIFEST_BYTES}"
            )
            continue
        try:
            manifests.append(parse_manifest(raw, source=str(f)))
        except ManifestError as e:
            errors.append(str(e))
    if errors:
        if as_json:
            echo_json({"ingested": [], "errors": errors})
        else:
            for problem in errors:
                click.echo(f"error: {problem}", err=True)
            click.echo("nothing was stored", err=True)
        sys.exit(2)
    items: list[Any] = [(m, compute_gaps(m), (), {}) for m in manifests]
    results = obj.store.ingest_many(items)
    if as_json:
        echo_json(
            {
                "ingested": [
                    {"run_id": r.run_id, "manifest_sha256": r.manifest_sha256, "new": r.created}
                    for r in results
                ],
                "errors": [],
            }
        )
        return
    for f, r in zip(files, results, strict=True):
        state = "stored" if r.created else "already stored (unchanged)"
        click.echo(f"{r.run_id}  {state}  {r.manifest_sha256[:12]}  {f}")


@main.command()
@click.option(
    "--search", default=None, help="Full-text search: name, command, commit, image, tags."
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--kind", type=click.Choice(["original", "replay"]), default=None)
@click.option("--verdict", default=None, help="IDENTICAL, EQUIVALENT, DIVERGED, INCOMPLETE, none")
@json_option
@click.pass_obj
@handled
def runs(
    obj: Ctx, search: str | None, limit: int, kind: str | None, verdict: str | None, as_json: bool
) -> None:
    """List runs, newest first."""
    from replay_tui import render

    q = RunQuery(search=search, limit=limit, kind=kind, verdict=verdict)
    records = obj.store.list_runs(q)
    if as_json:
        echo_json([r.to_dict() for r in records])
    else:
        click.echo(render.runs_table(records))


@main.command()
@click.argument("run")
@json_option
@click.pass_obj
@handled
def show(obj: Ctx, run: str, as_json: bool) -> None:
    """Show one run's manifest, gaps and replays."""
    from replay_tui import render
    from replay_tui.gaps import evaluate

    rec = obj.store.get_run(run)
    m = obj.store.manifest(rec.id)
    gaps = evaluate(m)
    replays = obj.store.replays_of(rec.id)
    if as_json:
        echo_json(
            {
                "run": rec.to_dict(),
                "manifest": m.model_dump(mode="json"),
                "gaps": [g.to_dict() for g in gaps],
                "replays": replays,
                "locations": [loc.__dict__ for loc in obj.store.locations(rec.id)],
            }
        )
    else:
        click.echo(render.manifest_text(rec, m, gaps, replays))


@main.command("verify-store")
@click.option(
    "--anchor",
    "anchors",
    multiple=True,
    help="SEQ:HASH of the ledger head as noted down earlier (printed by this command).",
)
@json_option
@click.pass_obj
@handled
def verify_store(obj: Ctx, anchors: tuple[str, ...], as_json: bool) -> None:
    """Walk the ledger and re-hash every stored fact; exit 1 if anything was altered.

    It prints the ledger head (SEQ:HASH).  Keep it outside the store (a ticket, a signed
    bundle, a log) and pass it back with --anchor: a store rewritten consistently after
    that point then fails too.
    """
    if not obj.store_path.exists():
        raise BadInput(f"no store at {obj.store_path}")
    for a in anchors:
        seq, sep, h = a.partition(":")
        if not (seq.isdigit() and sep and len(h) == 64):
            raise BadInput(f"--anchor {a!r} must be SEQ:HASH as verify-store prints it")
    import sqlite3

    try:
        rep = obj.store.verify(anchors)
    except sqlite3.DatabaseError as e:  # not a database, or pages corrupted
        fail(f"STORE UNREADABLE: {obj.store_path}: {e}", 1, as_json=as_json)
    if as_json:
        echo_json(
            {
                "ok": rep.ok,
                "events": rep.events,
                "manifests": rep.manifests,
                "blobs": rep.blobs,
                "facts": rep.facts,
                "head": rep.head,
                "problems": rep.problems,
            }
        )
    else:
        click.echo(
            f"checked {rep.events} events, {rep.manifests} manifests, {rep.blobs} blobs,"
            f" {rep.facts} other facts"
        )
        click.echo(f"ledger head: {rep.head or '(empty)'}")
        if rep.ok:
            click.echo("store intact: every link and every hash matches")
        else:
            click.echo(f"STORE ALTERED: first problem: {rep.problems[0]}")
            for p in rep.problems[1:20]:
                click.echo(f"  also: {p}")
    if not rep.ok:
        sys.exit(1)


def _parse_tags(tags: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for t in tags:
        k, sep, v = t.partition("=")
        if not sep or not k:
            raise BadInput(f"--tag {t!r} must be KEY=VALUE")
        out[k] = v
    return out


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
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
@click.option("--artifact", "artifacts", multiple=True, help="Glob of outputs to hash.")
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
    quiet: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (after --) and record its full provenance; exit with its exit code."""
    from replay_tui.capture.launcher import RecordOptions
    from replay_tui.capture.launcher import record as do_record

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
    )
    echo = (lambda line: None) if (quiet or as_json) else (lambda line: click.echo(line, err=True))
    executor = None
    image_info = None
    if image:
        from replay_tui.replay.docker import container_recorder

        executor, image_info = container_recorder(image, opts)
    res = do_record(opts, obj.store, executor=executor, on_line=echo, image_info=image_info)
    m = res.manifest
    if as_json:
        echo_json(
            {
                "run_id": m.run_id,
                "status": m.status,
                "exit_code": res.exit.exit_code,
                "manifest_sha256": m.integrity.manifest_sha256,
                "log": str(res.log_path),
            }
        )
    else:
        click.echo(
            f"recorded run {m.run_id} ({m.status}, exit {res.exit.exit_code}) in {obj.store_path}"
        )
        click.echo(
            f"  {len(m.outputs.artifacts)} artifact(s), {len(m.outputs.metrics)} metric(s),"
            f" log kept at {res.log_path}"
        )
    sys.exit(res.exit.exit_code)


@main.command()
@click.argument("run")
@click.option(
    "--backend", type=click.Choice(["docker", "local"]), default="docker", show_default=True
)
@click.option(
    "--gpus", type=click.Choice(["auto", "all", "none"]), default="auto", show_default=True
)
@click.option("--allow-cpu", is_flag=True, help="Run a GPU-recorded run on CPU (a gap).")
@click.option("--network", type=click.Choice(["none", "bridge"]), default="none", show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None, help="Seconds.")
@click.option("--keep-workdir", is_flag=True, help="Keep the checkout for inspection.")
@click.option("--force-data", is_flag=True, help="Go on when data hashes differ (a gap).")
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A clone that has the recorded commit.",
)
@click.option("--memory", "memory_limit", default=None, help="Container memory limit, e.g. 2g.")
@click.option(
    "--times",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="Replay N times and report the noise floor.",
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
    backend: str,
    gpus: str,
    allow_cpu: bool,
    network: str,
    timeout: float | None,
    keep_workdir: bool,
    force_data: bool,
    repo: Path | None,
    memory_limit: str | None,
    times: int,
    determinism: str,
    quiet: bool,
    as_json: bool,
) -> None:
    """Replay RUN from its image digest and git commit; exit 0 if reproduced, else 1."""
    from replay_tui.replay.plan import ReplayOptions
    from replay_tui.replay.runner import ReplayEvent
    from replay_tui.replay.series import replay_many

    opts = ReplayOptions(
        backend=backend,  # type: ignore[arg-type]
        gpus=gpus,  # type: ignore[arg-type]
        allow_cpu=allow_cpu,
        network=network,  # type: ignore[arg-type]
        timeout_s=timeout,
        keep_workdir=keep_workdir,
        force_data=force_data,
        repo=repo,
        memory_limit=memory_limit,
    )

    def on_event(ev: ReplayEvent) -> None:
        if as_json:
            return
        if ev.state == "log":
            if not quiet:
                click.echo(f"  | {ev.message}", err=True)
        else:
            click.echo(f"[{ev.stage:>8}] {ev.state:<6} {ev.message}".rstrip(), err=True)

    report = replay_many(
        obj.store, run, opts, times=times, determinism=determinism, on_event=on_event
    )
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.text())
    sys.exit(report.exit_code)


# -- compare and gaps -----------------------------------------------------------------


def _tolerance(name: str, value: float | None, default: float) -> float:
    import math

    if value is None:
        return default
    if not math.isfinite(value) or value < 0:
        raise BadInput(f"--{name} must be a finite number >= 0 (got {value})")
    return value


@main.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--rtol", type=float, default=None, help="Relative tolerance (default 1e-5).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default 1e-8).")
@click.option("--no-store", is_flag=True, help="Do not record the comparison in the store.")
@json_option
@click.pass_obj
@handled
def compare_cmd(
    obj: Ctx,
    run_a: str,
    run_b: str,
    rtol: float | None,
    atol: float | None,
    no_store: bool,
    as_json: bool,
) -> None:
    """Compare any two runs: artifacts, checkpoints, metrics, environment; exit 0 if reproduced."""
    from replay_tui.compare.render import comparison_text
    from replay_tui.compare.verdict import DEFAULT_ATOL, DEFAULT_RTOL, compare_runs
    from storage.objects import ObjectStore

    rtol_v = _tolerance("rtol", rtol, DEFAULT_RTOL)
    atol_v = _tolerance("atol", atol, DEFAULT_ATOL)
    a, b = obj.store.resolve(run_a), obj.store.resolve(run_b)
    ma, mb = obj.store.manifest(a), obj.store.manifest(b)
    result = compare_runs(
        ma, mb, objects=ObjectStore.beside(obj.store_path), rtol=rtol_v, atol=atol_v
    )
    body = result.to_dict()
    if not no_store:
        body["comparison_id"] = obj.store.add_comparison(
            a,
            b,
            result.verdict,
            result.to_dict(),
            rtol=rtol_v,
            atol=atol_v,
            set_verdict_on=b if mb.replay_of == a else None,
        )
    if as_json:
        echo_json(body)
    else:
        click.echo(comparison_text(result))
    sys.exit(result.exit_code)


@main.command("gaps")
@click.argument("run")
@json_option
@click.pass_obj
@handled
def gaps_cmd(obj: Ctx, run: str, as_json: bool) -> None:
    """List one run's provenance gaps, most severe first."""
    from replay_tui import render
    from replay_tui.gaps import evaluate

    found = evaluate(obj.store.manifest(run))
    if as_json:
        echo_json([g.to_dict() for g in found])
    else:
        click.echo(render.gaps_text(found))


@main.command()
@click.option("--no-open", is_flag=True, help="Build the demo store but do not open the TUI.")
@click.option("--no-docker", is_flag=True, help="Use the local backend even if Docker works.")
@click.pass_context
@handled
def demo(ctx: click.Context, no_open: bool, no_docker: bool) -> None:
    """Build a demo store from real tiny training runs, then open the TUI on it."""
    from replay_tui.demo import build_demo

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
    click.echo(f"demo store ready: {path} ({len(result.run_ids)} runs, {result.backend} backend)")
    if not no_open:
        from replay_tui.app import run_app

        run_app(path, notice=result.notice)


from replay_tui import cli_audit  # noqa: E402

cli_audit.register(main)


if __name__ == "__main__":
    main()
