"""Store commands: ``schema``, ``ingest``, ``runs``, ``show``, ``gaps``, ``verify-store``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from replay_tui.cli.common import Ctx, echo_error, echo_json, fail, handled, json_option
from replay_tui.door import Refused, read_named
from replay_tui.errors import BadInput
from replay_tui.textfmt import fit_text, output_width
from replay_tui.verdicts import NO_VERDICT_QUERY, NOT_REPLAYED, VERDICTS
from storage.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    RunManifest,
    json_schema,
    parse_manifest,
)
from storage.store import IngestResult, RunQuery, RunStore, collector_paused


@click.command()
def schema() -> None:
    """Print the JSON Schema of the run manifest."""
    echo_json(json_schema())


def ingest_files(store: RunStore, files: Sequence[Path]) -> tuple[list[IngestResult], list[str]]:
    """What ``ingest`` does: every file read and validated, whatever fails (so that every
    problem is named), then, only if none failed, all stored in one transaction.
    Returns what was stored (in the order of ``files``) and the problems, one line each.

    The manifests are all kept until stored, so the cyclic collector is paused
    throughout (``collector_paused``): with it on, each collection while reading walked
    every manifest read so far.  They are freed (by reference counting) before it comes
    back on, so that nothing is walked then either.
    """
    with collector_paused(len(files)):
        return _ingest_files(store, files)


def _ingest_files(store: RunStore, files: Sequence[Path]) -> tuple[list[IngestResult], list[str]]:
    manifests: list[RunManifest] = []
    errors: list[str] = []
    for f in files:
        try:  # through the door: a regular file only (never /dev/zero or a FIFO), bounded
            raw = read_named(f, "manifest file", limit=MAX_MANIFEST_BYTES)
        except Refused as e:
            errors.append(_unreadable(f, e.message))
            continue
        try:
            manifests.append(parse_manifest(raw, source=str(f)))
        except ManifestError as e:
            errors.append(str(e))
    if errors:
        return [], errors
    from replay_tui.gaps import gap_counts

    no_blobs: dict[str, tuple[str, bytes]] = {}
    items = [(m, gap_counts(m), (), no_blobs) for m in manifests]
    return store.ingest_many(items, origin="ingest"), []  # foreign: never runs unasked


def _unreadable(f: Path, why: str) -> str:
    """``ingest``'s line for a manifest file the door refused: ``FILE: cannot read: ...``
    when it cannot be opened, ``FILE: manifest ...`` when it is not one to read (a
    folder, a device or FIFO, over the limit)."""
    reason = why.removeprefix(f"manifest file {f}").lstrip(": ")
    if reason.startswith("does not exist"):
        return f"{f}: cannot read: it does not exist"
    if reason.startswith("cannot open it"):
        return f"{f}: cannot read: {reason.removeprefix('cannot open it').strip(' ()')}"
    if "the limit for a manifest file" in reason:
        return (
            f"{f}: manifest is more than {MAX_MANIFEST_BYTES} bytes;"
            f" the limit is {MAX_MANIFEST_BYTES}"
        )
    return f"{f}: manifest {reason}"


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@json_option
@click.pass_obj
@handled
def ingest(obj: Ctx, files: tuple[Path, ...], as_json: bool) -> None:
    """Validate and import manifest JSON files.

    Every file is checked before anything is written: if any is invalid, nothing is
    stored and the command exits 2 naming the file, the field and the reason.
    """
    results, errors = ingest_files(obj.store, files)
    if errors:
        if as_json:
            echo_json({"ingested": [], "errors": errors})
        else:
            for problem in errors:  # a problem quotes the file's keys and values: escaped
                echo_error(problem)
            click.echo("nothing was stored", err=True)
        sys.exit(2)
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


class VerdictChoice(click.Choice[str]):
    """A verdict, or ``not-replayed``; ``none`` (the older spelling) is still accepted,
    unlisted."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == "none":
            value = NOT_REPLAYED
        return super().convert(value, param, ctx)


@click.command()
@click.option(
    "--search", default=None, help="Full-text search: name, command, commit, image, tags."
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--kind", type=click.Choice(["original", "replay"]), default=None)
@click.option(
    "--verdict",
    type=VerdictChoice([*VERDICTS, NOT_REPLAYED], case_sensitive=False),
    default=None,
    help=f"The run's verdict (its latest completed replay's); {NOT_REPLAYED}: none yet"
    " (never replayed, or no replay completed).",
)
@click.option("--wide", is_flag=True, help="Show every value whole (full ids, digests, names).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout (every value whole).")
@json_option
@click.pass_obj
@handled
def runs(
    obj: Ctx,
    search: str | None,
    limit: int,
    kind: str | None,
    verdict: str | None,
    wide: bool,
    as_csv: bool,
    as_json: bool,
) -> None:
    """List runs, newest first.  --search also matches run ids and their prefixes.

    VERDICT of an original run sums up all its replays: IDENTICAL 3/3, 1 cancelled is
    the latest completed replay's verdict, 3 of 3 completed replays reproduced, and one
    more was cancelled (cancelled, interrupted, timed-out and infra-error replays never
    count as not reproduced).  A replay run that did not complete shows how it ended:
    CANCELLED, INTERRUPTED, TIMED OUT or INFRA-ERROR."""
    from replay_tui.cli import render
    from replay_tui.verdicts import aborted_replays, summarize

    if verdict is not None:
        verdict = NO_VERDICT_QUERY if verdict.lower() == NOT_REPLAYED else verdict.upper()
    q = RunQuery(search=search, limit=limit, kind=kind, verdict=verdict)
    records = _with_id_prefix(obj.store.list_runs(q), q, obj)
    originals = {r.id for r in records if r.kind == "original"}
    facts = obj.store.replay_outcomes(
        [*originals, *{r.replay_of for r in records if r.kind == "replay" and r.replay_of}]
    )
    reproduction = {rid: summarize(f) for rid, f in facts.items() if rid in originals}
    aborted = aborted_replays(facts)  # a cancelled replay's row says CANCELLED
    if as_json:
        from storage.readmodel import tags_of_runs

        tags = tags_of_runs(obj.store, [r.id for r in records])

        def row(r: Any) -> dict[str, Any]:
            d = {**r.to_dict(), "tags": tags.get(r.id, {})}  # an object, as the manifest's
            if r.id in reproduction:
                d["reproduction"] = reproduction[r.id].to_dict()
            elif r.id in aborted:
                d["replay_aborted"] = aborted[r.id]
            return d

        echo_json([row(r) for r in records])
    elif as_csv:
        import csv

        from replay_tui.safety import escape_control

        # CSV quotes, it does not escape: a name's ESC or U+202E would reach the terminal
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(render.RUN_COLUMNS_ALL)
        rows = render.run_rows(records, reproduction, wide=True, aborted=aborted)
        out.writerows([escape_control(cell) for cell in row] for row in rows)
    else:
        filtered = bool(search or kind or verdict)
        click.echo(
            render.runs_table(
                records,
                reproduction,
                wide=wide,
                filtered=filtered,
                aborted=aborted,
                width=None if wide else output_width(),
            )
        )


def _with_id_prefix(found: list[Any], q: RunQuery, obj: Ctx) -> list[Any]:
    """Runs whose id holds the search text first, then the full-text matches."""
    import re

    text = (q.search or "").strip()
    if not re.fullmatch(r"[0-9A-Za-z_-]{4,64}", text):
        return found
    by_id = [
        r
        for r in obj.store.find_runs(text, q.limit)
        if text.lower() in r.id.lower()
        and (q.kind is None or r.kind == q.kind)
        and (
            q.verdict is None
            or (
                r.last_verdict is None
                if q.verdict == NO_VERDICT_QUERY
                else r.last_verdict == q.verdict
            )
        )
    ]
    seen = {r.id for r in by_id}
    return (by_id + [r for r in found if r.id not in seen])[: q.limit]


@click.command()
@click.argument("run")
@click.option("--wide", is_flag=True, help="Every line whole (not cut to the terminal's width).")
@json_option
@click.pass_obj
@handled
def show(obj: Ctx, run: str, wide: bool, as_json: bool) -> None:
    """Show one run's manifest, gaps, replays, bisects and whether its noise floor is
    measured."""
    from replay_tui.cli import render
    from replay_tui.compare.floor import floor_line, stored_floor
    from replay_tui.gaps import evaluate

    rec = obj.store.get_run(run)
    m = obj.store.manifest(rec.id)
    gaps = evaluate(m)
    replays = obj.store.replays_of(rec.id)
    bisects = obj.store.bisects_of(rec.id)
    floor = stored_floor(obj.store, rec.id)
    if as_json:
        echo_json(
            {
                "run": {**rec.to_dict(), "tags": dict(m.tags)},
                "manifest": m.model_dump(mode="json"),
                "gaps": [g.to_dict() for g in gaps],
                "replays": [f.to_dict() for f in replays],
                "locations": [loc.__dict__ for loc in obj.store.locations(rec.id)],
                "noise_floor": floor.to_ref() if floor is not None else None,
                "bisects": [render.bisect_summary(rec.id, b) for b in bisects],
            }
        )
    else:
        width = None if wide else output_width()
        click.echo(render.manifest_text(rec, m, gaps, replays, bisects, width))
        click.echo(fit_text(floor_line(floor), width))


@click.command("verify-store")
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
        from replay_tui.storepath import named_as

        raise BadInput(
            f"{named_as(obj.store_path)}: no store there",
            "pass the path of an existing store with --store (or $REPLAY_TUI_STORE)",
        )
    for a in anchors:
        seq, sep, h = a.partition(":")
        if not (seq.isdigit() and sep and len(h) == 64):
            raise BadInput(f"--anchor {a!r} must be SEQ:HASH as verify-store prints it")
    from replay_tui.ops.evidence import verify_store as check_store

    # opened by the check, not through --store's: an unreadable store is a failed
    # verification (exit 1), not a usage error
    done = check_store(obj.store_path, anchors)
    rep = done.check.report
    if rep is None:  # not a database, or pages corrupted
        fail(done.check.lines[0], done.exit_code, as_json=as_json)
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
        for line in done.check.lines:  # the TUI's "Check store" says the same
            click.echo(line)
    if done.exit_code:
        sys.exit(done.exit_code)


@click.command("gaps")
@click.argument("run")
@json_option
@click.pass_obj
@handled
def gaps_cmd(obj: Ctx, run: str, as_json: bool) -> None:
    """List one run's provenance gaps, most severe first."""
    from replay_tui.cli import render
    from replay_tui.gaps import evaluate

    found = evaluate(obj.store.manifest(run))
    if as_json:
        echo_json([g.to_dict() for g in found])
    else:
        click.echo(render.gaps_text(found, output_width()))


def register(main: click.Group) -> None:
    for cmd in (schema, ingest, runs, show, gaps_cmd, verify_store):
        main.add_command(cmd)
