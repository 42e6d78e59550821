"""A finished run kept: its artifacts' bytes in the object store, the manifest with its
gap counts and blobs in the run store, and the log file beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from replay_tui.capture.artifacts import unsafe_member
from replay_tui.capture.collect import Collected

if TYPE_CHECKING:
    from storage.manifest import RunManifest
    from storage.store import Location, RunStore


def keep_artifacts(store: RunStore, base: Path, manifest: RunManifest) -> list[str]:
    """Copy hashed artifacts into the object store beside the run store.

    Each file is walked and opened like ``artifact_entries`` did (no links, regular files
    only) and kept only if its bytes still hash to the recorded sha256.  Returns what was
    not kept, and why.
    """
    from storage.objects import ObjectStore

    objects = ObjectStore.beside(store.path)
    base = base.resolve()
    skipped: list[str] = []
    for a in manifest.outputs.artifacts:
        if a.sha256 is None:
            continue
        why = unsafe_member(base, a.path)
        if why is not None:
            skipped.append(why)
            continue
        try:  # no more than the size recorded (and budgeted) is ever copied
            objects.put(base / a.path, a.sha256, max_bytes=a.size_bytes)
        except (OSError, ValueError) as e:
            skipped.append(f"{a.path}: not kept ({e})")
    return skipped


def keep_log(store: RunStore, run_id: str, data: bytes) -> Path:
    """The run's full output beside the store (the store keeps it as a blob too)."""
    path = store.path.parent / "logs" / f"{run_id}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def keep_run(
    store: RunStore,
    manifest: RunManifest,
    cwd: Path,
    collected: Collected,
    *,
    locations: Sequence[Location] = (),
    blobs: Mapping[str, tuple[str, bytes]] | None = None,
) -> Path:
    """Store a finished run: its artifacts' bytes, the manifest with its gap counts and
    blobs (the log and whatever else is given), and the log file beside the store."""
    from replay_tui.gaps import gap_counts

    keep_artifacts(store, cwd, manifest)
    all_blobs = {collected.log_sha256: ("log", collected.log_bytes), **(blobs or {})}
    store.ingest(manifest, gaps=gap_counts(manifest), locations=list(locations), blobs=all_blobs)
    return keep_log(store, manifest.run_id, collected.log_bytes)
