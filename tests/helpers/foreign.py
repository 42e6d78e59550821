"""Foreign runs: manifests as someone else would send them, ingested through the real CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from replay_tui.sdk import uuid7
from tests.support.training import git, replay_tui

STARTED_AT = "2026-11-20T10:00:00.000Z"
"""When every foreign run of the tests claims to have started."""

REAL_TXT = {"path": "out/real.txt", "sha256": hashlib.sha256(b"ok").hexdigest(), "size_bytes": 2}
"""The output a foreign run claims: ``out/real.txt`` holding ``ok``."""


def pinned(image: str) -> dict[str, str]:
    """A manifest's ``image`` for ``image``, a reference by digest (``name@sha256:...``)."""
    return {"reference": image, "digest": image.split("@", 1)[1]}


def head(repo: Path) -> str:
    """The commit ``repo``'s HEAD names."""
    return git(repo, "rev-parse", "HEAD").strip()


def foreign_manifest(commit: str, argv: list[str], **fields: Any) -> dict[str, Any]:
    """A succeeded run's manifest (a fresh run id) of ``argv`` at the clean ``commit``,
    with ``fields`` added or replacing the defaults."""
    return {
        "schema_version": 1,
        "run_id": uuid7(),
        "status": "succeeded",
        "exit_code": 0,
        "started_at": STARTED_AT,
        "argv": argv,
        "code": {"commit": commit, "dirty": False},
        **fields,
    }


def ingested(store: Path, folder: Path, data: dict[str, Any]) -> str:
    """``ingest`` of ``data`` (written to ``folder/RUN_ID.json``) into ``store``, which must
    succeed; the run id."""
    f = folder / f"{data['run_id']}.json"
    f.write_text(json.dumps(data))
    proc = replay_tui(store, "ingest", str(f))
    assert proc.returncode == 0, proc.stderr
    return str(data["run_id"])


def host_claim(repo: Path, argv: list[str], **fields: Any) -> dict[str, Any]:
    """A foreign manifest of ``argv`` at ``repo``'s HEAD that claims this host (and, being
    named like a baseline, looks harmless)."""
    return foreign_manifest(
        head(repo),
        argv,
        name="harmless-baseline",
        workdir=".",
        environment={"hostname": "this-host"},
        **fields,
    )


def seeded_store(tmp_path: Path, manifest: dict[str, Any]) -> Path:
    """A store (``tmp_path/store/runs.db``) holding one ingested run, ``manifest``, so
    that "nothing stored" is a ledger head."""
    store = tmp_path / "store" / "runs.db"
    ingested(store, tmp_path, manifest)
    return store
