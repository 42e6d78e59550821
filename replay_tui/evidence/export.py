"""Write a run's evidence bundle: a folder that proves, offline, what the store knows.

Layout::

    manifest.json                  the original run's manifest
    replays/<run>.json             every replay manifest of it
    comparison.json                each replay's comparison; the verdict and its replay
    gaps.json                      gaps of the run, of each replay, and of each pair
    bisects.json                   every bisect with the run as GOOD or BAD (when any)
    noise_floor.json               the run's noise floor and the rule's parameters (when
                                   measured: what a WITHIN_NOISE verdict was judged by)
    logs/<run>.log                 captured output of the run and of each replay
    report.md, report.html         the human report (the page is standalone)
    signer.pub                     the public key (when signed)
    provenance.slsa.intoto.jsonl   DSSE envelope of the SLSA v1 provenance (``slsa.py``)
    model.sig                      OpenSSF model signature of the run's model files
                                   (``modelsig.py``; when signed with an ECDSA key)
    bom.cdx.json                   CycloneDX 1.6 ML-BOM: model, datasets, packages, verdict
    annex_iv.json                  the EU AI Act Annex IV map (``annex.py``)
    SHA256SUMS                     sha256 of every file above (``sha256sum -c``)
    provenance.intoto.jsonl        DSSE envelope of an in-toto Statement v1

The folder is written under a temporary name beside ``out`` and renamed into place, so a
crash never leaves a half-written bundle under the name asked for.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from replay_tui.errors import BadInput
from replay_tui.evidence import annex, checksums, keys, mlbom, modelsig, report, slsa
from replay_tui.evidence.gather import Evidence, gather, log_bytes
from replay_tui.evidence.statement import (
    ENVELOPE_NAME,
    PREDICATE_TYPE,
    envelope,
    envelope_bytes,
    make_statement,
)
from storage import integrity, ledger
from storage.manifest import RunManifest, sha256_hex
from storage.store import RunStore
from storage.wire import Wire, wire

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class ExportResult(Wire):
    """What an export wrote (the verdict as printed is not written)."""

    WIRE_ORDER = (
        "run_id",
        "path",
        "files",
        "signed",
        "key_id",
        "verdict",
        "statement_sha256",
        "sha256sums_sha256",
        "ledger_head",
        "bundle_id",
    )

    run_id: str
    path: Path
    files: int
    signed: bool
    key_id: str | None
    verdict: str | None
    statement_sha256: str
    sums_sha256: str = field(metadata=wire(key="sha256sums_sha256"))
    bundle_id: int
    ledger_head: str | None = None  # the store's ledger head when exported (an anchor)
    verdict_text: str = field(default="", metadata=wire(omit="always"))
    """The verdict as printed (``Evidence.verdict_text``): says why there is none."""
    model_signed: bool = False
    """The bundle holds an OpenSSF model signature (``model.sig``) of the model files."""


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _tool_version() -> str:
    try:
        return version("replay-tui")
    except PackageNotFoundError:
        return "unknown"


def _check_out(out: Path) -> None:
    if out.is_symlink():
        raise BadInput(f"{out} is a symlink; give a new folder for the bundle")
    if out.exists():
        if not out.is_dir():
            raise BadInput(f"{out} exists and is not a folder")
        if any(out.iterdir()):
            raise BadInput(
                f"{out} is not empty", "give a new or empty folder: a bundle holds only its files"
            )
    if not out.parent.is_dir():
        raise BadInput(f"folder {out.parent} does not exist")


def subjects(m: RunManifest) -> list[dict[str, Any]]:
    """The Statement's subjects: the run's hashed artifacts (else the manifest itself)."""
    subs = [
        {"name": a.path, "digest": {"sha256": a.sha256}} for a in m.outputs.artifacts if a.sha256
    ]
    if not subs:
        assert m.integrity.manifest_sha256 is not None
        subs = [
            {
                "name": f"run-manifest:{m.run_id}",
                "digest": {"sha256": m.integrity.manifest_sha256},
            }
        ]
    return subs


def _gaps_doc(ev: Evidence) -> dict[str, Any]:
    return {
        "run_id": ev.original.run_id,
        "run": [g.to_dict() for g in ev.gaps],
        "replays": {
            r.run_id: {
                "gaps": [g.to_dict() for g in r.gaps],
                "pair_gaps": [g.to_dict() for g in r.pair_gaps],
            }
            for r in ev.replays
            if r.run_id is not None
        },
    }


def _comparison_doc(ev: Evidence) -> dict[str, Any]:
    latest = ev.latest
    return {
        "run_id": ev.original.run_id,
        "verdict": ev.verdict,
        "replay_run": latest.run_id if latest else None,
        "comparisons": [
            {"replay_run": r.run_id, "verdict": r.verdict, "comparison": r.comparison_body}
            for r in ev.replays
            if r.run_id is not None
        ],
    }


def _predicate(ev: Evidence, sums_sha: str, exported_at: str) -> dict[str, Any]:
    m = ev.original
    latest = ev.latest
    return {
        "run_id": m.run_id,
        "manifest": m.model_dump(mode="json"),
        "replay": {
            "verdict": ev.verdict,
            "replay_run": latest.run_id if latest else None,
            "replays": [
                {
                    "replay_run": r.run_id,
                    "verdict": r.verdict,
                    "status": (r.fact.status if r.fact else None)
                    or (r.manifest and r.manifest.status),
                    "manifest_sha256": r.manifest.integrity.manifest_sha256 if r.manifest else None,
                    "determinism": "off" if r.determinism_off else "recorded",
                }
                for r in ev.replays
            ],
        },
        "gaps": {
            "run": [g.to_dict() for g in ev.gaps],
            "latest_replay_pair": [g.to_dict() for g in latest.pair_gaps] if latest else [],
        },
        "bundle": {"checksums": {"name": checksums.SUMS_NAME, "sha256": sums_sha}},
        "exporter": {"name": "replay-tui", "version": _tool_version()},
        "exported_at": exported_at,
    }


def _write(root: Path, name: str, data: bytes) -> None:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def export_bundle(
    store: RunStore,
    run_ref: str,
    out: Path,
    *,
    key_path: Path | None = None,
    now: Callable[[], str] = ledger.utc_now,
    replay: str | None = None,
) -> ExportResult:
    """Write the bundle of ``run_ref`` to ``out`` (new or empty) and record it in the store.

    The bundle's verdict is the latest *completed* replay's (a cancelled or interrupted
    attempt never overrides it), or that of ``replay`` (a replay run id or prefix)."""
    ev = gather(store, run_ref, replay=replay)
    private_key = keys.load_private_key(key_path) if key_path is not None else None
    out = Path(os.path.abspath(out))
    _check_out(out)
    exported_at = now()
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as e:  # a read-only or special folder (/proc): say so, no traceback
        raise BadInput(
            f"cannot write a bundle in {out.parent}: {e.strerror or e}",
            "give a new folder in a place you can write",
        ) from None
    try:
        m = ev.original
        _write(tmp, MANIFEST_NAME, _json(m.model_dump(mode="json")))
        for r in ev.replays:
            if r.manifest is not None:
                _write(
                    tmp,
                    f"replays/{r.manifest.run_id}.json",
                    _json(r.manifest.model_dump(mode="json")),
                )
        written = {"comparison.json": _json(_comparison_doc(ev))}  # the SLSA byproducts
        _write(tmp, "comparison.json", written["comparison.json"])
        _write(tmp, "gaps.json", _json(_gaps_doc(ev)))
        bisects = store.bisects_of(m.run_id)
        if bisects:  # bisects with this run as GOOD or BAD (replay-tui bisect)
            _write(tmp, "bisects.json", _json({"run_id": m.run_id, "bisects": bisects}))
        if ev.floor is not None:  # what WITHIN_NOISE was judged against, and how
            written["noise_floor.json"] = _json({"run_id": m.run_id, **ev.floor.to_row()})
            _write(tmp, "noise_floor.json", written["noise_floor.json"])
        for lm in [m, *(r.manifest for r in ev.replays if r.manifest is not None)]:
            data = log_bytes(store, lm)
            if data is not None:
                _write(tmp, f"logs/{lm.run_id}.log", data)
        model_signed = isinstance(private_key, ec.EllipticCurvePrivateKey) and bool(
            modelsig.model_files(m)
        )
        so_far, _ = checksums.bundle_files(tmp)
        held = {  # every member the bundle will hold, for the Annex IV map
            *so_far,
            *(n.split("/", 1)[0] + "/" for n in so_far if "/" in n),
            "report.md",
            "report.html",
            mlbom.BOM_NAME,
            slsa.SLSA_NAME,
            annex.ANNEX_NAME,
            checksums.SUMS_NAME,
            ENVELOPE_NAME,
            *([keys.BUNDLE_KEY_NAME] if private_key is not None else []),
            *([modelsig.MODEL_SIG_NAME] if model_signed else []),
        }
        sections = [annex.section(ev, held)]
        audit = report.Audit(  # what an auditor reads first: the signer, the anchor
            keys.key_id(private_key.public_key()) if private_key is not None else None,
            integrity.ledger_head(store.conn),
            bisects,
        )
        _write(tmp, "report.md", report.markdown(ev, exported_at, audit, sections).encode())
        _write(tmp, "report.html", report.html_page(ev, exported_at, audit, sections).encode())
        _write(tmp, mlbom.BOM_NAME, _json(mlbom.ml_bom(ev, exported_at, _tool_version())))
        kid = None
        if private_key is not None:
            kid = keys.key_id(private_key.public_key())
            _write(tmp, keys.BUNDLE_KEY_NAME, keys.public_pem(private_key.public_key()))
        slsa_statement = make_statement(
            subjects(m),
            slsa.slsa_predicate(ev, slsa.member_digests(written), _tool_version()),
            slsa.SLSA_PREDICATE_TYPE,
        )
        _write(tmp, slsa.SLSA_NAME, envelope_bytes(envelope(slsa_statement, private_key)))
        model_sig = None
        if isinstance(private_key, ec.EllipticCurvePrivateKey):  # model_signing: ECDSA only
            model_sig = modelsig.sign_model(m, private_key)
            if model_sig is not None:
                _write(tmp, modelsig.MODEL_SIG_NAME, model_sig)
        _write(tmp, annex.ANNEX_NAME, _json(annex.annex_map(ev, held)))
        names, _ = checksums.bundle_files(tmp)
        sums = checksums.render(checksums.hash_files(tmp, names))
        _write(tmp, checksums.SUMS_NAME, sums)
        sums_sha = sha256_hex(sums)
        predicate = _predicate(ev, sums_sha, exported_at)
        head = integrity.ledger_head(store.conn)
        predicate["store"] = {"ledger_head": head}  # verify-store --anchor, signed
        statement = make_statement(subjects(m), predicate)
        env = envelope(statement, private_key)
        _write(tmp, ENVELOPE_NAME, envelope_bytes(env))
        for p in [tmp, *tmp.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        if out.exists():
            out.rmdir()  # checked empty above
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    stmt_sha = sha256_hex(env.payload)
    body = {
        "path": str(out),
        "exported_at": exported_at,
        "files": len(names) + 2,
        "predicate_type": PREDICATE_TYPE,
        "statement_sha256": stmt_sha,
        "sha256sums_sha256": sums_sha,
        "subjects": len(statement["subject"]),
        "verdict": ev.verdict,
        "key_id": kid,
    }
    bid = store.add_bundle(m.run_id, str(out), kid is not None, kid, body)
    return ExportResult(
        m.run_id,
        out,
        len(names) + 2,
        kid is not None,
        kid,
        ev.verdict,
        stmt_sha,
        sums_sha,
        bid,
        ledger_head=head,
        verdict_text=ev.verdict_text(),
        model_signed=model_sig is not None,
    )
