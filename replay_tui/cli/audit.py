"""Audit commands: ``export``, ``keygen``, ``verify``, ``drill``, ``stats``."""

from __future__ import annotations

import sys
from pathlib import Path
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

if TYPE_CHECKING:
    from replay_tui.replay.context import ReplayEvent
    from replay_tui.replay.plan import ReplayOptions


# -- evidence -----------------------------------------------------------------------------


@click.command()
@click.argument("run")
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="A new (or empty) folder for the bundle.",
)
@click.option(
    "--sign",
    "key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Private key (from `replay-tui keygen`: ECDSA P-256 or Ed25519) to sign with.",
)
@click.option(
    "--replay",
    "replay_ref",
    default=None,
    metavar="ID",
    help="The replay whose verdict the bundle carries (default: the latest completed one).",
)
@click.option(
    "--model-files",
    "model_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Also write the run's model files (its artifacts, from the store's copies) into"
    " the new folder DIR, for `model_signing verify key` against the bundle's model.sig.",
)
@json_option
@click.pass_obj
@handled
def export(
    obj: Ctx,
    run: str,
    out: Path,
    key: Path | None,
    replay_ref: str | None,
    model_dir: Path | None,
    as_json: bool,
) -> None:
    """Write RUN's evidence bundle: manifests, comparison, gaps, logs, report, signatures
    (the bundle's own statement, SLSA provenance, a model signature), ML-BOM."""
    from replay_tui.evidence.words import describe_export, public_half
    from replay_tui.ops.evidence import export_evidence

    done = export_evidence(obj.store, run, out, key=key, replay=replay_ref, model_dir=model_dir)
    res, folder = done.result, done.model_files
    if as_json:
        body = res.to_dict()
        if folder is not None:
            body["model_files"] = {"path": str(folder.path), "files": folder.files}
        echo_json(body)
        return
    for line in describe_export(res, key):  # the TUI's export says the same
        click.echo(line)
    if folder is not None:
        click.echo(f"  model files: {folder.files} written to {folder.path}")
        if res.model_signed:
            pub = public_half(key) if key is not None else Path("KEY.pub")
            click.echo(
                f"  check them with: model_signing verify key --signature"
                f" {res.path}/model.sig --public_key {pub} {folder.path}"
            )


@click.command()
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("replay-tui.key"),
    show_default=True,
    help="Private key file (written 0600); the public key goes beside it: KEY.key gives"
    " KEY.pub, any other name NAME.pub.",
)
@click.option(
    "--type",
    "kind",
    type=click.Choice(["ecdsa-p256", "ed25519"]),
    default="ecdsa-p256",
    show_default=True,
    help="The key's kind: ECDSA P-256 is what model_signing and cosign both verify;"
    " Ed25519 bundles (model signature left out) verify as well.",
)
@click.option("--force", is_flag=True, help="Replace existing key files.")
@json_option
@handled
def keygen(out: Path, kind: str, force: bool, as_json: bool) -> None:
    """Make a key pair (ECDSA P-256 by default, or Ed25519) for signing evidence bundles."""
    from replay_tui.evidence.keys import generate
    from replay_tui.evidence.words import public_half

    public = public_half(out)
    pair = generate(out, public, force=force, kind=kind)  # type: ignore[arg-type]
    if as_json:
        echo_json(
            {
                "private_key": str(pair.private_path),
                "public_key": str(pair.public_path),
                "key_id": pair.key_id,
                "type": kind,
            }
        )
        return
    click.echo(f"private key {pair.private_path} (mode 0600: keep it secret)")
    click.echo(f"public key  {pair.public_path} (hand it to whoever verifies)")
    click.echo(f"key id      {pair.key_id} ({kind})")


@click.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option(
    "--key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The public key the bundle must be signed with (else the trusted-keys file).",
)
@click.option(
    "--allow-embedded-key",
    is_flag=True,
    help="Check the signature with the key inside the bundle (proves nothing about who).",
)
@click.option("--allow-unsigned", is_flag=True, help="Accept a bundle that is not signed.")
@json_option
@handled
def verify(
    bundle: Path,
    key: Path | None,
    allow_embedded_key: bool,
    allow_unsigned: bool,
    as_json: bool,
) -> None:
    """Re-hash every file of BUNDLE and check its signature against a trusted key.

    The key is --key, else the keys in the trusted-keys file ($REPLAY_TUI_TRUSTED_KEYS,
    else trusted-keys.pem in the user config folder).  Exit 1 on any difference, and when
    the signature was not checked against a trusted key.
    """
    from replay_tui.evidence.words import report_lines
    from replay_tui.ops.evidence import verify_evidence
    from replay_tui.safety import escape_control

    done = verify_evidence(
        bundle, key, allow_embedded_key=allow_embedded_key, allow_unsigned=allow_unsigned
    )
    chk = done.check
    if as_json:
        chk.run_id = escape_control(chk.run_id) if chk.run_id else chk.run_id
        chk.verdict = escape_control(chk.verdict) if chk.verdict else chk.verdict
        echo_json(chk.to_dict())
    else:
        for line in report_lines(chk):
            click.echo(click.style(line.text, fg="red") if line.alarm else line.text)
    sys.exit(done.exit_code)


# -- drills -------------------------------------------------------------------------------


@click.command()
@click.option("--count", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option(
    "--pick",
    type=click.Choice(["random", "oldest", "unverified"]),
    default="random",
    show_default=True,
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**63 - 1),
    default=None,
    help="Seed of a random pick (default: drawn, and recorded so it can be repeated).",
)
@click.option("--since", default=None, help="Only runs started on or after this date.")
@replay_options(allow_cpu="Replay GPU-recorded runs on CPU (a gap).", timeout="Seconds per run.")
@click.option(
    "--replicas",
    type=click.IntRange(2, 20),
    default=3,
    show_default=True,
    help="Replays that measure the noise floor of a run whose determinism was not fully on"
    " and that has none yet (then the original is judged against it).",
)
@click.option("--quiet", is_flag=True, help="Only the summary.")
@click.option("--wide", is_flag=True, help="The table whole: no column cut or left out.")
@click.option(
    "--junit",
    "junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Also write the drill as JUnit XML (one test case per run; aborted ones skipped).",
)
@json_option
@click.pass_obj
@handled
def drill(
    obj: Ctx,
    count: int,
    pick: str,
    seed: int | None,
    since: str | None,
    options: ReplayOptions,
    replicas: int,
    quiet: bool,
    wide: bool,
    junit: Path | None,
    as_json: bool,
) -> None:
    """Replay a pick of recorded runs and store the result; exit 1 if any did not reproduce
    (WITHIN_NOISE of the run's own noise floor counts as reproduced)."""
    from replay_tui.cli import render
    from replay_tui.ops.drill import run_drill

    def on_event(ev: ReplayEvent) -> None:
        if not quiet:
            print_event(ev, as_json=as_json, logs=False)

    done = run_drill(
        obj.store,
        count=count,
        pick=pick,  # type: ignore[arg-type]
        seed=seed,
        since=since,
        options=options,
        on_event=on_event,
        replicas=replicas,
        junit=junit,
    )
    if as_json:
        echo_json(done.report.to_dict())
    else:
        click.echo(render.drill_table(done.report, None if wide else "terminal"))
    sys.exit(done.exit_code)


# -- SLIs ---------------------------------------------------------------------------------


@click.command()
@click.option(
    "--prometheus",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the figures for node_exporter's textfile collector (e.g. replay_tui.prom).",
)
@json_option
@click.pass_obj
@handled
def stats(obj: Ctx, prometheus: Path | None, as_json: bool) -> None:
    """Reproducibility SLIs of the store: rates, variances, attestation, drills."""
    from replay_tui.ops.evidence import store_stats

    done = store_stats(obj.store, prometheus=prometheus)
    if as_json:
        echo_json(done.stats.to_dict())
    else:
        from replay_tui.textfmt import fit_text, output_width

        click.echo(fit_text(done.stats.text(), output_width()))
        if done.prometheus is not None:
            click.echo(f"wrote {done.prometheus}")


def register(main: click.Group) -> None:
    for cmd in (export, keygen, verify, drill, stats):
        main.add_command(cmd)
