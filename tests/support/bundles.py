"""Helpers for evidence-bundle tests: a replay manifest of an original, a bundle's copy."""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any


def replay_of(orig: dict[str, Any], run_id: str, **fields: Any) -> dict[str, Any]:
    """A copy of ``orig`` as its replay ``run_id``, by default a pinned docker one;
    ``fields`` (top-level manifest fields: ``started_at``, ``replay``, …) set last."""
    rep = copy.deepcopy(orig)
    rep.update(
        run_id=run_id,
        kind="replay",
        replay_of=orig["run_id"],
        replay={"backend": "docker", "environment_pinned": True},
    )
    rep.update(fields)
    return rep


def copy_bundle(bundle: Path, tmp_path: Path) -> Path:
    dst = Path(tempfile.mkdtemp(dir=tmp_path)) / "b"
    shutil.copytree(bundle, dst)
    return dst
